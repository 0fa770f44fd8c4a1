package partition

import (
	"errors"
	"math/rand/v2"
	"reflect"
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

// weightedLayers is a CPU-only layered DAG: layers of width vertices of
// weight w, each after 2 random vertices of the layer before.
func weightedLayers(t testing.TB, layers, width int, w int64, seed uint64) (*Builder, []int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 9))
	b := NewBuilder(layers * width)
	var levels []int
	for l := range layers {
		for i := range width {
			b.AddVertex(Vertex{CPU: w})
			levels = append(levels, l)
			if l > 0 {
				a := rng.IntN(width)
				b.AddEdge((l-1)*width+a, l*width+i, 1)
				b.AddEdge((l-1)*width+(a+1+rng.IntN(width-1))%width, l*width+i, 1)
			}
		}
	}
	return b, levels
}

func nodesUsed(assign []int) int {
	used := map[int]bool{}
	for _, p := range assign {
		used[p] = true
	}
	return len(used)
}

// Units of the coordinator's cost model: microseconds on one CPU; a hop of
// 100 µs, 1 µs per end of a cut edge.
var costs = Options{Hop: 100, EdgeCost: 1}

// costsSeed is costs with a seed.
func costsSeed(seed uint64) Options {
	o := costs
	o.Seed = seed
	return o
}

// TestLevelsCostModelKeepsTinyWorkOnOneNode: 1 µs tasks in layers of 300
// are not worth a hop per layer nor the edge traffic: the whole DAG stays
// on one node (no cut); without the cost model every layer is spread.
func TestLevelsCostModelKeepsTinyWorkOnOneNode(t *testing.T) {
	b, levels := weightedLayers(t, 20, 300, 1, 1)
	g := mustBuild(t, b)
	nodes := []Node{{CPU: 2}, {CPU: 2}, {CPU: 2}}
	res, err := PartitionLevels(g, nodes, levels, costsSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	if res.Cut != 0 || nodesUsed(res.Assign) != 1 || res.Spread != 0 || res.Windows != 20 {
		t.Errorf("tiny work: cut %d, %d nodes used, %d of %d windows spread; want all on one node", res.Cut, nodesUsed(res.Assign), res.Spread, res.Windows)
	}
	plain, err := PartitionLevels(g, nodes, levels, Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Spread != plain.Windows || nodesUsed(plain.Assign) != 3 {
		t.Errorf("no cost model: %d of %d windows spread over %d nodes", plain.Spread, plain.Windows, nodesUsed(plain.Assign))
	}
	// Another seed may choose another node, but one.
	other, err := PartitionLevels(g, nodes, levels, costsSeed(4))
	if err != nil {
		t.Fatal(err)
	}
	if nodesUsed(other.Assign) != 1 {
		t.Errorf("seed 4: %d nodes used", nodesUsed(other.Assign))
	}
}

// TestLevelsCostModelSpreadsHeavyWork: 10 ms tasks are worth the hops:
// every window is spread and balanced as without the cost model.
func TestLevelsCostModelSpreadsHeavyWork(t *testing.T) {
	b, levels := weightedLayers(t, 10, 30, 10_000, 2)
	g := mustBuild(t, b)
	nodes := []Node{{CPU: 2}, {CPU: 2}, {CPU: 2}}
	res, err := PartitionLevels(g, nodes, levels, costsSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Spread != res.Windows || res.WindowImbalance > 11.0/10 {
		t.Errorf("heavy work: %d of %d windows spread, window imbalance %.2f", res.Spread, res.Windows, res.WindowImbalance)
	}
	// A fan-out: one source, then 12 tasks of 1–3 s.
	fb := NewBuilder(13)
	fb.AddVertex(Vertex{CPU: 1})
	for i := range 12 {
		fb.AddEdge(0, fb.AddVertex(Vertex{CPU: int64(1+i%3) * 1_000_000}), 1)
	}
	fan, err := PartitionLevels(mustBuild(t, fb), nodes, []int{0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, costs)
	if err != nil {
		t.Fatal(err)
	}
	if nodesUsed(fan.Assign) != 3 || fan.Imbalance.CPU > 1.2 {
		t.Errorf("fan-out of 1–3 s tasks: %d nodes used, imbalance %.2f: %v", nodesUsed(fan.Assign), fan.Imbalance.CPU, fan.Assign)
	}
}

// TestLevelsCostModelKeepsPinsGPUAndGroups: a window kept on one node
// leaves its pinned vertices on their pins and its GPU vertices on the GPU
// node, and a group follows its pinned member.
func TestLevelsCostModelKeepsPinsGPUAndGroups(t *testing.T) {
	b := NewBuilder(8)
	src := b.AddVertex(Vertex{CPU: 1})
	gpu := b.AddVertex(Vertex{GPU: 1})
	pinned := b.AddVertex(Vertex{CPU: 1, Group: 7})
	mate := b.AddVertex(Vertex{CPU: 1, Group: 7})
	free := b.AddVertex(Vertex{CPU: 1})
	for _, v := range []int{gpu, pinned, mate, free} {
		b.AddEdge(src, v, 1)
	}
	b.Pin(pinned, 1)
	g := mustBuild(t, b)
	nodes := []Node{{CPU: 2}, {CPU: 2}, {CPU: 2, GPU: 1}}
	for seed := range uint64(6) {
		res, err := PartitionLevels(g, nodes, []int{0, 1, 1, 1, 1}, costsSeed(seed))
		if err != nil {
			t.Fatal(err)
		}
		a := res.Assign
		if err := Check(g, nodes, a); err != nil {
			t.Fatal(err)
		}
		if a[pinned] != 1 || a[mate] != 1 || a[gpu] != 2 || a[free] != a[src] || res.Spread != 0 {
			t.Errorf("seed %d: %v (spread %d): want the group on its pin 1, the GPU vertex on 2, the rest together", seed, a, res.Spread)
		}
	}
	if _, err := PartitionLevels(g, nodes, []int{0, 1, 1, 1, 1}, Options{Hop: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a negative hop: %v", err)
	}
}

// TestLevelsGatheredShortcut: a window placed whole on the node of its
// placed neighbours without its partition being run (costModel.gathered)
// is placed exactly as when the partition is run and the cost model
// chooses: the same assignment and result, over DAGs of tiny CPU work and
// of tiny work then heavy (which gathered must leave to the partition),
// with GPU tasks, pins and groups (which it leaves to it too), many seeds.
func TestLevelsGatheredShortcut(t *testing.T) {
	taken := 0
	gatheredHook = func() { taken++ }
	defer func() { gatheredHook, noGatherShortcut = nil, false }()
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		layers, width := 5+rng.IntN(30), 1+rng.IntN(60)
		b := NewBuilder(layers * width)
		var levels []int
		for l := range layers {
			for i := range width {
				w := int64(1 + rng.IntN(3))
				if seed%8 == 1 && l > 0 { // after a first layer of tiny work, gathered on one node
					w = int64(50 + rng.IntN(250))
				}
				if seed%3 == 0 && l >= layers/3 {
					w = int64(1000 + rng.IntN(100000)) // heavy after light layers on one node: spreading pays
				}
				v := Vertex{CPU: w}
				switch {
				case seed%5 == 0 && rng.IntN(7) == 0:
					v = Vertex{GPU: w}
				case seed%4 == 0 && rng.IntN(9) == 0:
					v.Group = 1 + rng.IntN(3)
				}
				b.AddVertex(v)
				levels = append(levels, l)
				if seed%6 == 0 && rng.IntN(11) == 0 {
					b.Pin(l*width+i, rng.IntN(3))
				}
				if l == 0 {
					continue
				}
				preds := 1 + rng.IntN(2)
				if seed%7 == 0 {
					preds = rng.IntN(3) // some tasks have no predecessor
				}
				for range preds {
					b.AddEdge((l-1)*width+rng.IntN(width), l*width+i, int64(1+rng.IntN(2)))
				}
			}
		}
		g := mustBuild(t, b)
		nodes := []Node{{CPU: 2, GPU: 1}, {CPU: 1 + int64(seed%3), GPU: 1}, {CPU: 1}}
		opt := Options{Seed: seed, Hop: int64(10 + rng.IntN(5000)), EdgeCost: int64(1 + rng.IntN(20)), WindowPerNode: 1 + rng.IntN(4)}
		if seed%8 == 1 { // more work than a Hop, cuts dearer than the work: the second bound of gathered
			opt.Hop, opt.EdgeCost = int64(1+rng.IntN(20)), int64(300+rng.IntN(2000))
		}
		noGatherShortcut = true
		want, werr := PartitionLevels(g, nodes, levels, opt)
		noGatherShortcut = false
		got, gerr := PartitionLevels(g, nodes, levels, opt)
		if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
			t.Fatalf("seed %d: error %v, without the shortcut %v", seed, gerr, werr)
		}
		if !reflectEqual(got, want) {
			t.Fatalf("seed %d: %+v\nwithout the shortcut %+v", seed, got, want)
		}
	}
	if taken < 30 {
		t.Fatalf("the shortcut placed %d windows; the test does not exercise it", taken)
	}
	t.Logf("%d windows placed by the shortcut", taken)
}

func reflectEqual(a, b *Result) bool { return reflect.DeepEqual(a, b) }
