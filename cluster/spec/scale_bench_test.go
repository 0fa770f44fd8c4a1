package spec_test

import (
	"fmt"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/flowgen"
)

// scaleSizes are the sizes of the cluster speed sweep
// (scripts/bench-sweep.sh, docs/benchmarks/cluster-speed.md).
var scaleSizes = []int{10_000, 100_000, 300_000, 1_000_000}

// layeredModules is flowgen.LayeredModules of n tasks in blocks of 10
// layers × 1,000, parsed.
func layeredModules(b *testing.B, n int) *spec.File {
	f, err := spec.Parse("m.json", flowgen.LayeredModules(n/10_000, 10, 1000, 1, true))
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkCompileScale is the expansion every process of a run makes of
// its flow (spec.File.Compile, Graph.Cycles), at the sweep's sizes: the
// ns/task metric must not grow with n.
func BenchmarkCompileScale(b *testing.B) {
	opts := spec.Options{Funcs: funcs.Default()}
	for _, n := range scaleSizes {
		f := layeredModules(b, n)
		b.Run(fmt.Sprintf("compile/%dK", n/1000), func(b *testing.B) {
			for b.Loop() {
				if _, err := f.Compile(opts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/task")
		})
		g, err := f.Compile(opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("cycles/%dK", n/1000), func(b *testing.B) {
			for b.Loop() {
				if len(g.Cycles()) != 0 {
					b.Fatal("cycles in a DAG")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/task")
		})
	}
}
