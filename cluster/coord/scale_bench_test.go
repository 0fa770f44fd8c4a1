package coord

import (
	"fmt"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/flowgen"
)

// scaleFlat is a flat layered DAG of n tasks (n/1000 layers × 1,000), as
// flowgen.Layered writes it, built in memory: over 250K tasks its file is
// over spec.MaxFileSize.
func scaleFlat(b *testing.B, n int) *spec.Graph {
	const width = 1000
	rng := uint64(1)
	next := func() int {
		rng = rng*6364136223846793005 + 1442695040888963407
		return int((rng >> 33) % width)
	}
	fb := spec.NewFlow("layered")
	prev := make([]*spec.TaskBuilder, width)
	cur := make([]*spec.TaskBuilder, width)
	for l := 0; l < n/width; l++ {
		for i := range width {
			t := fb.Task(fmt.Sprintf("L%d_%d", l, i)).Func("noop")
			if l > 0 {
				p, q := next(), next()
				for q == p {
					q = next()
				}
				t.Succeed(prev[p], prev[q])
			}
			cur[i] = t
		}
		prev, cur = cur, prev
	}
	fl, err := fb.Build()
	if err != nil {
		b.Fatal(err)
	}
	f := &spec.File{Path: "flat.json", Flows: []spec.Flow{*fl}}
	g, err := f.Compile(spec.Options{Funcs: funcs.Default()})
	if err != nil {
		b.Fatal(err)
	}
	return g
}

func scaleModules(b *testing.B, n int) *spec.Graph {
	f, err := spec.Parse("m.json", flowgen.LayeredModules(n/10_000, 10, 1000, 1, true))
	if err != nil {
		b.Fatal(err)
	}
	g, err := f.Compile(spec.Options{Funcs: funcs.Default()})
	if err != nil {
		b.Fatal(err)
	}
	return g
}

// BenchmarkPlanScale is the leader's placement of a run (PlanWith over 3
// nodes) at the sizes of the cluster speed sweep: ns/task must not grow
// with n.
func BenchmarkPlanScale(b *testing.B) {
	nodes := []Node{{ID: "n1", CPUs: 2}, {ID: "n2", CPUs: 2}, {ID: "n3", CPUs: 2}}
	for _, shape := range []string{"flat", "modules"} {
		for _, n := range []int{10_000, 100_000, 300_000, 1_000_000} {
			var g *spec.Graph
			if shape == "flat" {
				g = scaleFlat(b, n)
			} else {
				g = scaleModules(b, n)
			}
			b.Run(fmt.Sprintf("%s/%dK", shape, n/1000), func(b *testing.B) {
				for b.Loop() {
					if _, err := PlanWith(g, nodes, 1, Placement{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/task")
			})
		}
	}
}
