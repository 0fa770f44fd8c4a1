package partition

import (
	"math/rand/v2"
	"testing"
)

// go test -run XXX -bench . -benchtime 3x ./partition/
//
// The comparison with METIS is scripts/partition-bench.sh; these track our
// own time on a few shapes.

func BenchmarkGrid300x300K8(b *testing.B) {
	g := grid(b, 300, 300)
	nodes := uniformNodes(8)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Partition(g, nodes, Options{Seed: uint64(i)}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRandom100KK4GPU(b *testing.B) {
	g := randomGraph(rand.New(rand.NewPCG(1, 1)), 100_000, 6, true)
	nodes := []Node{{CPU: 16}, {CPU: 16}, {CPU: 16, GPU: 2}, {CPU: 16, GPU: 2}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Partition(g, nodes, Options{Seed: uint64(i)}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGrid100x100K1000(b *testing.B) {
	g := grid(b, 100, 100)
	nodes := uniformNodes(1000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Partition(g, nodes, Options{Seed: uint64(i)}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBuild1M(b *testing.B) {
	for i := 0; i < b.N; i++ {
		grid(b, 1000, 1000)
	}
}
