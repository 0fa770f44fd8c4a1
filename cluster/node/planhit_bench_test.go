package node

import (
	"testing"

	"github.com/hetflow/hetflow/internal/flowgen"
	"github.com/hetflow/hetflow/transport"
)

// BenchmarkAssignPlanHit100K measures what a node pays, per run again, to
// find the compiled plan of a run of the 100 × 1,000 layered no-op DAG
// placed wholly on it: decoding the Assignment message and the graph
// cache's lookup (a hit: the plan was compiled by an earlier run).
func BenchmarkAssignPlanHit100K(b *testing.B) {
	flow := flowgen.Layered(100, 1000, 1, true)
	a := planned(b, flow, &transport.Assignment{Run: "r", Gen: 1, Nodes: []string{"n0"}, Owner: make([]uint32, 100_000)}, "n0")
	msg := transport.Encode(a)
	gc := newGraphCache(maxCachedVertices)
	lim := transport.Limits{MaxBody: 1 << 30, MaxMessage: 1 << 30}
	first, err := gc.compile(a.Plan, len(a.Owner), lim, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		m, err := transport.Decode(msg, lim)
		if err != nil {
			b.Fatal(err)
		}
		got := m.(*transport.Assignment)
		pt, err := gc.compile(got.Plan, len(got.Owner), lim, nil)
		if err != nil || pt != first {
			b.Fatalf("a run again compiled its plan anew (%v)", err)
		}
	}
	b.ReportMetric(float64(len(a.Plan))/1e6, "plan-MB")
}
