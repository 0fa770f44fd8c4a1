package partition

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func uniformNodes(k int) []Node {
	nodes := make([]Node, k)
	for i := range nodes {
		nodes[i] = Node{CPU: 1}
	}
	return nodes
}

func mustBuild(t testing.TB, b *Builder) *Graph {
	t.Helper()
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func grid(t testing.TB, w, h int) *Graph {
	b := NewBuilder(w * h)
	for i := 0; i < w*h; i++ {
		b.AddVertex(Vertex{CPU: 1})
	}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			v := y*w + x
			if x+1 < w {
				b.AddEdge(v, v+1, 1)
			}
			if y+1 < h {
				b.AddEdge(v, v+w, 1)
			}
		}
	}
	return mustBuild(t, b)
}

// TestGridCut checks the cut on grids against known good values: the
// optimum where it is small, else the worst of gpmetis 5.1 with seeds 1..3
// (ufactor 30), rounded up: 32x32 in 2: 32-41, in 4: 68-74; 64x64 in 8:
// 257-277; 50x50 in 3: 86-102.
func TestGridCut(t *testing.T) {
	for _, c := range []struct {
		w, k  int
		bound int64
	}{
		{8, 2, 8},    // the optimum, a straight line
		{32, 2, 41},  // optimum 32
		{32, 4, 76},  // optimum 64
		{64, 8, 280}, // strips and blocks
		{50, 3, 105}, // optimum about 100 (a T)
	} {
		g := grid(t, c.w, c.w)
		res, err := Partition(g, uniformNodes(c.k), Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.Cut > c.bound {
			t.Errorf("%dx%d grid in %d: cut %d, want <= %d", c.w, c.w, c.k, res.Cut, c.bound)
		}
		if !res.Balanced || res.Imbalance.CPU > DefaultTolerance+1e-9 {
			t.Errorf("%dx%d grid in %d: imbalance %v", c.w, c.w, c.k, res.Imbalance)
		}
		if got, err := g.Cut(res.Assign); err != nil || got != res.Cut {
			t.Errorf("reported cut %d, Graph.Cut %d", res.Cut, got)
		}
	}
}

func TestSingleNode(t *testing.T) {
	b := NewBuilder(3)
	b.AddVertex(Vertex{CPU: 1})
	b.AddVertex(Vertex{CPU: 2, GPU: 1})
	b.AddVertex(Vertex{})
	b.Pin(2, 0)
	b.AddEdge(0, 1, 3)
	b.AddEdge(1, 2, 3)
	g := mustBuild(t, b)
	res, err := Partition(g, []Node{{CPU: 4, GPU: 1}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Assign, []int{0, 0, 0}) || res.Cut != 0 || res.Loads[0] != (Load{CPU: 3, GPU: 1}) || !res.Balanced {
		t.Errorf("got %+v", res)
	}
	// A single node without a GPU cannot hold the GPU vertex.
	if _, err := Partition(g, []Node{{CPU: 4}}, Options{}); !errors.Is(err, ErrInfeasible) {
		t.Errorf("GPU vertex on a CPU-only single node: %v", err)
	}
}

func TestEmptyGraph(t *testing.T) {
	g := mustBuild(t, NewBuilder(0))
	res, err := Partition(g, uniformNodes(3), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Assign) != 0 || res.Cut != 0 || len(res.Loads) != 3 || !res.Balanced {
		t.Errorf("got %+v", res)
	}
}

func TestEdgesMergeAndCountOnce(t *testing.T) {
	b := NewBuilder(2)
	b.AddVertex(Vertex{CPU: 1})
	b.AddVertex(Vertex{CPU: 1})
	b.Pin(0, 0)
	b.Pin(1, 1)
	b.AddEdge(0, 1, 2) // a -> b
	b.AddEdge(1, 0, 3) // b -> a: another edge
	b.AddEdge(0, 1, 4) // a repeated edge adds up
	b.AddEdge(1, 1, 9) // self-loop: never cut
	g := mustBuild(t, b)
	if g.NumEdges() != 1 {
		t.Errorf("NumEdges %d, want 1", g.NumEdges())
	}
	res, err := Partition(g, uniformNodes(2), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cut != 9 {
		t.Errorf("cut %d, want 2+3+4", res.Cut)
	}
}

func TestDeterminism(t *testing.T) {
	g := randomGraph(rand.New(rand.NewPCG(5, 5)), 3000, 4, false)
	nodes := uniformNodes(5)
	a, err := Partition(g, nodes, Options{Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Partition(g, nodes, Options{Seed: 42})
	if !slices.Equal(a.Assign, b.Assign) {
		t.Error("same seed, different assignments")
	}
	c, _ := Partition(g, nodes, Options{Rand: rand.New(rand.NewPCG(7, 8))})
	d, _ := Partition(g, nodes, Options{Rand: rand.New(rand.NewPCG(7, 8))})
	if !slices.Equal(c.Assign, d.Assign) {
		t.Error("same Rand state, different assignments")
	}
}

func TestHeterogeneousGPU(t *testing.T) {
	// 200 CPU tasks and 40 GPU tasks in chains; nodes 0 and 1 have no GPU,
	// node 2 has two, node 3 one: GPU work splits 2:1 between them.
	rng := rand.New(rand.NewPCG(1, 2))
	b := NewBuilder(240)
	for i := 0; i < 240; i++ {
		if i%6 == 0 {
			b.AddVertex(Vertex{CPU: 1, GPU: 3})
		} else {
			b.AddVertex(Vertex{CPU: 2})
		}
		if i > 0 {
			b.AddEdge(i-1, i, 1+rng.Int64N(4))
		}
	}
	g := mustBuild(t, b)
	nodes := []Node{{CPU: 8}, {CPU: 8}, {CPU: 8, GPU: 2}, {CPU: 8, GPU: 1}}
	res, err := Partition(g, nodes, Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(g, nodes, res.Assign); err != nil {
		t.Fatal(err)
	}
	if res.Loads[0].GPU != 0 || res.Loads[1].GPU != 0 {
		t.Errorf("GPU work on CPU nodes: %v", res.Loads)
	}
	if !res.Balanced {
		t.Errorf("not balanced: loads %v, imbalance %+v", res.Loads, res.Imbalance)
	}
	// Shares 80 and 40; 3% over is 82 and 41.
	if l2, l3 := res.Loads[2].GPU, res.Loads[3].GPU; l2 > 82 || l3 > 41 || l2+l3 != 120 {
		t.Errorf("GPU loads %d and %d, want about 80 and 40", l2, l3)
	}
}

func TestGroupsKeptWhenBalanceAllows(t *testing.T) {
	// Many small loops (groups of 2..6 tasks) in a random graph: all fit,
	// so none is split, and the balance still holds.
	rng := rand.New(rand.NewPCG(9, 9))
	n := 2000
	b := NewBuilder(n)
	group := 0
	for i := 0; i < n; {
		size := 2 + rng.IntN(5)
		group++
		for j := 0; j < size && i < n; j++ {
			gid := group
			if rng.IntN(3) == 0 {
				gid = 0 // some tasks belong to no loop
			}
			b.AddVertex(Vertex{CPU: 1 + rng.Int64N(3), Group: gid})
			i++
		}
	}
	for i := 0; i < 4*n; i++ {
		u := rng.IntN(n)
		v := min(n-1, max(0, u+rng.IntN(40)-20))
		b.AddEdge(u, v, 1+rng.Int64N(5))
	}
	g := mustBuild(t, b)
	for _, k := range []int{2, 3, 7} {
		res, err := Partition(g, uniformNodes(k), Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.SplitGroups) != 0 {
			t.Errorf("k=%d: groups split: %v", k, res.SplitGroups)
		}
		if !res.Balanced {
			t.Errorf("k=%d: not balanced: %+v", k, res.Imbalance)
		}
	}
}

func TestGroupSplitOnlyWhenNeeded(t *testing.T) {
	// Two groups of 10 on two nodes fit, one per node. Three groups of 10
	// on two nodes cannot all stay whole within 3%: exactly one is split.
	for _, c := range []struct {
		groups, split int
	}{{2, 0}, {3, 1}, {4, 0}} {
		b := NewBuilder(0)
		for gi := 0; gi < c.groups; gi++ {
			for j := 0; j < 10; j++ {
				v := b.AddVertex(Vertex{CPU: 1, Group: gi + 1})
				if j > 0 {
					b.AddEdge(v-1, v, 1)
				}
			}
		}
		g := mustBuild(t, b)
		res, err := Partition(g, uniformNodes(2), Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Balanced {
			t.Errorf("%d groups: not balanced: %v", c.groups, res.Loads)
		}
		if len(res.SplitGroups) != c.split {
			t.Errorf("%d groups: split %v, want %d split", c.groups, res.SplitGroups, c.split)
		}
		if c.split == 1 && res.Cut != 1 {
			t.Errorf("%d groups: cut %d, want 1 (the split group cut once)", c.groups, res.Cut)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(b *Builder)
		want  string
	}{
		{"negative cpu", func(b *Builder) { b.AddVertex(Vertex{CPU: -1}) }, "vertex 0: negative weight"},
		{"negative gpu", func(b *Builder) { b.AddVertex(Vertex{}); b.AddVertex(Vertex{GPU: -3}) }, "vertex 1: negative weight"},
		{"edge to nowhere", func(b *Builder) { b.AddVertex(Vertex{}); b.AddEdge(0, 1, 1) }, "edge 0 (0-1): endpoint 1 is not a vertex"},
		{"edge from nowhere", func(b *Builder) { b.AddVertex(Vertex{}); b.AddEdge(-1, 0, 1) }, "endpoint -1"},
		{"negative edge", func(b *Builder) { b.AddVertex(Vertex{}); b.AddVertex(Vertex{}); b.AddEdge(0, 1, -5) }, "negative weight -5"},
		{"pin of no vertex", func(b *Builder) { b.AddVertex(Vertex{}); b.Pin(4, 0) }, "vertex 4: pin of a vertex that does not exist"},
		{"weight overflow", func(b *Builder) {
			b.AddVertex(Vertex{CPU: math.MaxInt64 / 2})
			b.AddVertex(Vertex{CPU: math.MaxInt64 / 2})
		}, "overflows"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := NewBuilder(0)
			c.build(b)
			_, err := b.Build()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want ErrInvalid saying %q", err, c.want)
			}
		})
	}
}

func TestPartitionErrors(t *testing.T) {
	two := func() *Graph {
		b := NewBuilder(2)
		b.AddVertex(Vertex{CPU: 1})
		b.AddVertex(Vertex{CPU: 1})
		b.AddEdge(0, 1, 1)
		return mustBuild(t, b)
	}
	pinned := func(pins ...[2]int) *Graph {
		b := NewBuilder(2)
		b.AddVertex(Vertex{CPU: 1})
		b.AddVertex(Vertex{CPU: 1, GPU: 1})
		for _, p := range pins {
			b.Pin(p[0], p[1])
		}
		return mustBuild(t, b)
	}
	for _, c := range []struct {
		name  string
		g     *Graph
		nodes []Node
		opt   Options
		is    error
		want  string
	}{
		{"nil graph", nil, uniformNodes(2), Options{}, ErrInvalid, "nil graph"},
		{"no nodes", two(), nil, Options{}, ErrInvalid, "no nodes"},
		{"negative capacity", two(), []Node{{CPU: 1}, {CPU: -1}}, Options{}, ErrInvalid, "node 1: negative capacity"},
		{"tolerance below 1", two(), uniformNodes(2), Options{Tolerance: 0.9}, ErrInvalid, "tolerance"},
		{"tolerance NaN", two(), uniformNodes(2), Options{Tolerance: math.NaN()}, ErrInvalid, "tolerance"},
		{"negative passes", two(), uniformNodes(2), Options{Passes: -1}, ErrInvalid, "passes"},
		{"pin to missing node", pinned([2]int{0, 5}), []Node{{CPU: 1, GPU: 1}}, Options{}, ErrInvalid, "vertex 0: pinned to node 5, which does not exist"},
		{"pin to negative node", pinned([2]int{0, -1}), []Node{{CPU: 1, GPU: 1}}, Options{}, ErrInvalid, "vertex 0: pinned to node -1"},
		{"two pins", pinned([2]int{0, 0}, [2]int{0, 1}), []Node{{CPU: 1, GPU: 1}, {CPU: 1, GPU: 1}}, Options{}, ErrInvalid, "vertex 0: pinned to node 0 and to node 1"},
		{"gpu vertex, no gpu node", pinned(), []Node{{CPU: 1}, {CPU: 1}}, Options{}, ErrInfeasible, "vertex 1: GPU vertex, and no node has GPUs"},
		{"gpu pin to cpu node", pinned([2]int{1, 0}), []Node{{CPU: 1}, {CPU: 1, GPU: 1}}, Options{}, ErrInfeasible, "vertex 1: pinned to node 0, which has no GPUs"},
		{"cpu pin to gpu-only node", pinned([2]int{0, 1}), []Node{{CPU: 1, GPU: 1}, {GPU: 1}}, Options{}, ErrInfeasible, "vertex 0: pinned to node 1, which has no CPU capacity"},
		{"no node with both", pinned(), []Node{{CPU: 1}, {GPU: 1}}, Options{}, ErrInfeasible, "no node has both CPU and GPU capacity"},
		{"no cpu capacity", two(), []Node{{}, {GPU: 2}}, Options{}, ErrInfeasible, "vertex 0: vertex has CPU weight, and no node has CPU capacity"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Partition(c.g, c.nodes, c.opt)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want %v saying %q", err, c.is, c.want)
			}
		})
	}
}

func TestEvaluateAndCheck(t *testing.T) {
	g := grid(t, 4, 4)
	nodes := uniformNodes(2)
	assign := make([]int, 16)
	for v := range assign {
		if v%4 >= 2 {
			assign[v] = 1
		}
	}
	r, err := Evaluate(g, nodes, assign, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Cut != 4 || !r.Balanced || r.Imbalance.CPU != 1 || r.Loads[0].CPU != 8 {
		t.Errorf("got %+v", r)
	}
	if c, err := g.Cut(assign); err != nil || c != 4 {
		t.Errorf("Cut: %d, %v", c, err)
	}
	if _, err := g.Cut(assign[:3]); !errors.Is(err, ErrInvalid) {
		t.Errorf("Cut of a short assignment: %v", err)
	}
	if err := Check(nil, nodes, assign); !errors.Is(err, ErrInvalid) {
		t.Errorf("Check of a nil graph: %v", err)
	}
	if _, err := Evaluate(g, nodes, assign[:3], 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("short assignment: %v", err)
	}
	assign[5] = 2
	if _, err := Evaluate(g, nodes, assign, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("assignment to node 2 of 2: %v", err)
	}
	if err := Check(g, nodes, assign); !errors.Is(err, ErrInfeasible) {
		t.Errorf("Check of an assignment to node 2 of 2: %v", err)
	}
	b := NewBuilder(1)
	b.AddVertex(Vertex{GPU: 1})
	b.Pin(0, 1)
	pg := mustBuild(t, b)
	if err := Check(pg, []Node{{CPU: 1, GPU: 1}, {CPU: 1, GPU: 1}}, []int{0}); err == nil || !strings.Contains(err.Error(), "pinned to node 1") {
		t.Errorf("Check of a broken pin: %v", err)
	}
	if err := Check(pg, []Node{{CPU: 1}, {CPU: 1, GPU: 1}}, []int{1}); err != nil {
		t.Errorf("Check of a good assignment: %v", err)
	}
}

// randomGraph builds a graph of n vertices with about deg·n/2 edges, mostly
// local (so it has structure to find), with weights; gpu makes a tenth of
// the vertices GPU vertices.
func randomGraph(rng *rand.Rand, n, deg int, gpu bool) *Graph {
	b := NewBuilder(n)
	for i := 0; i < n; i++ {
		v := Vertex{CPU: 1 + rng.Int64N(4)}
		if gpu && rng.IntN(10) == 0 {
			v.GPU = 1 + rng.Int64N(3)
		}
		b.AddVertex(v)
	}
	for i := 0; i < n*deg/2; i++ {
		u := rng.IntN(n)
		v := rng.IntN(n)
		if rng.IntN(4) != 0 {
			v = min(n-1, max(0, u+rng.IntN(21)-10))
		}
		b.AddEdge(u, v, 1+rng.Int64N(9))
	}
	g, err := b.Build()
	if err != nil {
		panic(err)
	}
	return g
}

// TestPropertyRandom partitions random problems — random sizes, k, GPU
// nodes, pins, groups, tolerances — and checks what must always hold: every
// vertex on an existing node, pins honoured, GPU work only on GPU nodes, the
// reported cut and loads right, the result deterministic; and, where nothing
// stands in the way (no pins, unit weights), the balance within tolerance.
func TestPropertyRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(2024, 12))
	for it := 0; it < 60; it++ {
		n := 1 + rng.IntN(1500)
		k := 1 + rng.IntN(9)
		gpuNodes := rng.IntN(k + 1)
		free := rng.IntN(3) == 0 // unit weights, no pins, no GPU: balance must hold
		nodes := make([]Node, k)
		for i := range nodes {
			nodes[i] = Node{CPU: 1 + rng.Int64N(4)}
			if i < gpuNodes && !free {
				nodes[i].GPU = 1 + rng.Int64N(2)
			}
		}
		if free {
			for i := range nodes {
				nodes[i].CPU = 1
			}
		}
		b := NewBuilder(n)
		pins := map[int]int{}
		for i := 0; i < n; i++ {
			v := Vertex{CPU: 1}
			if !free {
				v.CPU = rng.Int64N(5)
				if gpuNodes > 0 && rng.IntN(8) == 0 {
					v.GPU = 1 + rng.Int64N(4)
				}
				if rng.IntN(5) == 0 {
					v.Group = 1 + rng.IntN(n/4+1)
				}
			}
			b.AddVertex(v)
			if !free && rng.IntN(30) == 0 {
				// Pin only where the vertex can live.
				p := rng.IntN(k)
				if v.GPU > 0 {
					p = rng.IntN(gpuNodes)
				}
				b.Pin(i, p)
				pins[i] = p
			}
		}
		for i := 0; i < n*3; i++ {
			u := rng.IntN(n)
			v := min(n-1, max(0, u+rng.IntN(31)-15))
			if rng.IntN(5) == 0 {
				v = rng.IntN(n)
			}
			b.AddEdge(u, v, rng.Int64N(10))
		}
		g, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		tol := 1 + rng.Float64()*0.2
		opt := Options{Tolerance: tol, Seed: uint64(it)}
		res, err := Partition(g, nodes, opt)
		if err != nil {
			t.Fatalf("it %d (n %d k %d): %v", it, n, k, err)
		}
		if err := Check(g, nodes, res.Assign); err != nil {
			t.Fatalf("it %d: %v", it, err)
		}
		for v, p := range pins {
			if res.Assign[v] != p {
				t.Fatalf("it %d: vertex %d pinned to %d, on %d", it, v, p, res.Assign[v])
			}
		}
		if got, err := g.Cut(res.Assign); err != nil || got != res.Cut {
			t.Fatalf("it %d: reported cut %d, real %d", it, res.Cut, got)
		}
		var tc, tg, lc, lg int64
		for v := 0; v < n; v++ {
			tc += g.Vertex(v).CPU
			tg += g.Vertex(v).GPU
		}
		for _, l := range res.Loads {
			lc += l.CPU
			lg += l.GPU
		}
		if tc != lc || tg != lg {
			t.Fatalf("it %d: loads sum to %d/%d, weights to %d/%d", it, lc, lg, tc, tg)
		}
		if free && !res.Balanced {
			t.Errorf("it %d (n %d k %d tol %.3f): unit weights not balanced: %v", it, n, k, tol, res.Loads)
		}
		again, _ := Partition(g, nodes, opt)
		if !slices.Equal(again.Assign, res.Assign) {
			t.Fatalf("it %d: not deterministic", it)
		}
	}
}
