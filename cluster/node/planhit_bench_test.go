package node

import (
	"crypto/sha256"
	"testing"

	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/internal/flowgen"
	"github.com/hetflow/hetflow/transport"
)

// BenchmarkAssignPlanHit100K measures what a node pays, per run again, to
// find the compiled plan of a run of the 100 × 1,000 layered no-op DAG
// placed wholly on it: decoding the Assignment message and the graph
// cache's lookup (a hit: the plan was compiled by an earlier run). "full":
// the Assignment carries the plan and its digest (the first copy to a node
// that never acknowledged it, and every later copy); "by-digest": it names
// the plan by digest alone (wire version 8's run again).
func BenchmarkAssignPlanHit100K(b *testing.B) {
	flow := flowgen.Layered(100, 1000, 1, true)
	a := planned(b, flow, &transport.Assignment{Run: "r", Gen: 1, Nodes: []string{"n0"}, Owner: make([]uint32, 100_000)}, "n0")
	d := sha256.Sum256(a.Plan)
	a.PlanDigest = d[:]
	gc := newGraphCache(maxCachedVertices)
	lim := transport.Limits{MaxBody: 1 << 30, MaxMessage: 1 << 30}
	first, err := gc.compile(a.Plan, a.PlanDigest, len(a.Owner), lim, nil)
	if err != nil {
		b.Fatal(err)
	}
	ref := *a
	ref.Plan = nil
	for _, c := range []struct {
		name string
		a    *transport.Assignment
	}{{"full", a}, {"by-digest", &ref}} {
		msg := transport.Encode(c.a)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				m, err := transport.Decode(msg, lim)
				if err != nil {
					b.Fatal(err)
				}
				got := m.(*transport.Assignment)
				var pt *runproto.Part
				if got.PlanRef() {
					cp, ok := gc.held(got.PlanDigest, len(got.Owner))
					if ok {
						pt = cp.pt
					}
				} else {
					pt, err = gc.compile(got.Plan, got.PlanDigest, len(got.Owner), lim, nil)
				}
				if err != nil || pt != first {
					b.Fatalf("a run again compiled its plan anew (%v)", err)
				}
			}
			b.ReportMetric(float64(len(msg))/1e6, "msg-MB")
		})
	}
}
