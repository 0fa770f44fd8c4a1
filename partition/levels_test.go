package partition

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// layeredDAG is the seed's random HTDG shape: layers of width tasks, each
// after 1 to 3 random tasks of the layer before, every other task a GPU
// task; levels are the layer numbers.
func layeredDAG(t testing.TB, layers, width int, seed uint64) (*Graph, []int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := NewBuilder(layers * width)
	levels := make([]int, 0, layers*width)
	for l := 0; l < layers; l++ {
		for i := 0; i < width; i++ {
			v := Vertex{CPU: 1}
			if (l*width+i)%2 == 1 {
				v = Vertex{GPU: 1}
			}
			b.AddVertex(v)
			levels = append(levels, l)
			if l == 0 {
				continue
			}
			for range 1 + rng.IntN(3) {
				b.AddEdge((l-1)*width+rng.IntN(width), l*width+i, 1)
			}
		}
	}
	return mustBuild(t, b), levels
}

// windowImbalance measures an assignment the way PartitionLevels reports
// it, with one window per level (for comparing with Partition's).
func windowImbalance(g *Graph, nodes []Node, levels []int, assign []int) float64 {
	byLevel := map[int][]int32{}
	for v, l := range levels {
		byLevel[l] = append(byLevel[l], int32(v))
	}
	var wins [][]int32
	for l := 0; l < len(byLevel); l++ {
		wins = append(wins, byLevel[l])
	}
	return withWindows(&Result{}, g, nodes, assign, wins).WindowImbalance
}

// TestLevelsBalanceEachLayer: on a layered DAG the plain cut puts bands of
// layers on nodes (a layer on one node: imbalance k); by level, every layer
// is spread within the tolerance and the hard constraints hold.
func TestLevelsBalanceEachLayer(t *testing.T) {
	g, levels := layeredDAG(t, 40, 30, 1)
	nodes := []Node{{CPU: 1, GPU: 1}, {CPU: 1, GPU: 1}, {CPU: 1, GPU: 1}}
	plain, err := Partition(g, nodes, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	lev, err := PartitionLevels(g, nodes, levels, Options{Seed: 1, WindowPerNode: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(g, nodes, lev.Assign); err != nil {
		t.Fatal(err)
	}
	pw := windowImbalance(g, nodes, levels, plain.Assign)
	t.Logf("plain: cut %d, per-layer imbalance %.2f; by level: cut %d, per-layer imbalance %.2f, %d windows, total balanced %v",
		plain.Cut, pw, lev.Cut, lev.WindowImbalance, lev.Windows, lev.Balanced)
	if lev.Windows != 40 {
		t.Errorf("%d windows, want one per layer (40)", lev.Windows)
	}
	// a layer of 15 CPU and 15 GPU tasks on 3 nodes: 5 each, at most
	// ceil(5 × 1.03) = 6 under the tolerance
	if lev.WindowImbalance > 6.0/5 {
		t.Errorf("per-layer imbalance %.2f, want <= 1.2", lev.WindowImbalance)
	}
	if !lev.Balanced {
		t.Errorf("totals not balanced: %v", lev.Loads)
	}
	if lev.WindowImbalance >= pw {
		t.Errorf("by level %.2f is no better per layer than the plain cut's %.2f", lev.WindowImbalance, pw)
	}
	// its cut is what following the predecessors can keep: at most the
	// share of edges a random placement would cut, (k-1)/k
	if int(lev.Cut)*3 > 2*g.NumEdges() {
		t.Errorf("cut %d of %d edges: no better than random", lev.Cut, g.NumEdges())
	}
}

func TestLevelsDeterministicAndSingleNode(t *testing.T) {
	g, levels := layeredDAG(t, 10, 12, 2)
	nodes := []Node{{CPU: 2, GPU: 1}, {CPU: 1, GPU: 1}}
	a, err := PartitionLevels(g, nodes, levels, Options{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	b, err := PartitionLevels(g, nodes, levels, Options{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Assign, b.Assign) {
		t.Errorf("same seed, different assignments")
	}
	one, err := PartitionLevels(g, nodes[:1], levels, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if one.Cut != 0 || slices.Max(one.Assign) != 0 {
		t.Errorf("one node: cut %d, assign %v", one.Cut, one.Assign)
	}
	if _, err := PartitionLevels(g, nodes, levels, Options{WindowPerNode: -1}); err == nil {
		t.Errorf("window of -1 vertices per node accepted")
	}
}

// go test -run XXX -bench Levels ./partition/: the HTDG of 100K tasks the
// coordinator places, on 10 nodes.
func BenchmarkLevelsDAG100KK10(b *testing.B) {
	g, levels := layeredDAG(b, 316, 316, 1)
	nodes := make([]Node, 10)
	for i := range nodes {
		nodes[i] = Node{CPU: 2, GPU: 1}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := PartitionLevels(g, nodes, levels, Options{Seed: uint64(i)}); err != nil {
			b.Fatal(err)
		}
	}
}
