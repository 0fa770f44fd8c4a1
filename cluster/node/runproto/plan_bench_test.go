package runproto

import (
	"testing"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/flowgen"
	"github.com/hetflow/hetflow/transport"
)

// BenchmarkPlan100K is a node's part of the 100 × 1,000 layered no-op DAG
// (all of it on one node, as coord.Plan places it), against what the node
// did with the flow before wire version 4 (the canonical JSON parsed and
// compiled, spec.File.Compile): compile (the leader's runproto.Compile and
// the encoding), open (the node's decode and OpenPlan), and flow (parse
// and compile). plan-bytes/task and flow-bytes/task are the sizes each
// node got.
func BenchmarkPlan100K(b *testing.B) {
	text := flowgen.Layered(100, 1000, 1, true)
	f, err := spec.Parse("layered.json", text)
	if err != nil {
		b.Fatal(err)
	}
	canon, err := spec.Marshal(f, spec.FormatJSON)
	if err != nil {
		b.Fatal(err)
	}
	g, err := f.Expand()
	if err != nil {
		b.Fatal(err)
	}
	loops := NewLoops(g)
	free := FreeJoinsOf(g, loops)
	owner := make([]uint32, len(g.Vertices))
	nodes := []string{"n0"}
	plans, err := Compile(g, loops, free, nodes, owner)
	if err != nil {
		b.Fatal(err)
	}
	enc := transport.Encode(plans[0])
	n := float64(len(g.Vertices))
	b.Run("compile", func(b *testing.B) {
		for b.Loop() {
			ps, err := Compile(g, loops, free, nodes, owner)
			if err != nil {
				b.Fatal(err)
			}
			_ = transport.Encode(ps[0])
		}
		b.ReportMetric(float64(len(enc))/n, "plan-bytes/task")
	})
	b.Run("open", func(b *testing.B) {
		for b.Loop() {
			p, err := transport.DecodePlan(enc, transport.Limits{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := OpenPlan(p, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("flow", func(b *testing.B) {
		for b.Loop() {
			f, err := spec.ParseJSON("run.json", canon)
			if err != nil {
				b.Fatal(err)
			}
			g, err := f.Compile(spec.Options{})
			if err != nil {
				b.Fatal(err)
			}
			_, _ = NewLoops(g), FreeJoins(g)
		}
		b.ReportMetric(float64(len(canon))/n, "flow-bytes/task")
	})
}
