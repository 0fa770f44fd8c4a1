package partition

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
)

// Node is one part of the partition: a cluster node, with its capacity on
// each resource (for instance CPU cores and GPU count, or any unit). Loads are
// balanced in proportion to capacity: a node with twice the CPU capacity
// receives twice the CPU weight. A node with GPU 0 receives no GPU vertex; a
// node with CPU 0 receives no vertex with CPU weight.
type Node struct {
	CPU int64
	GPU int64
}

// Options tune Partition. The zero value is valid.
type Options struct {
	// Tolerance is the balance tolerance: a node's load on each resource may
	// be at most Tolerance times its share (rounded up to a whole unit).
	// 0 means DefaultTolerance; otherwise it must be >= 1.
	Tolerance float64
	// Seed seeds the random choices (visit orders, seeds of graph growing).
	// The same graph, nodes and options always give the same assignment.
	Seed uint64
	// Rand, when not nil, is used instead of a generator seeded with Seed.
	Rand *rand.Rand
	// Passes bounds the refinement passes per level; 0 means DefaultPasses.
	Passes int
	// Tries is how many independent multilevel bisections are run for each
	// bisection of the initial partition (recursive bisection of the
	// coarsest graph), the best kept; 0 means DefaultTries.
	Tries int
	// WindowPerNode is for PartitionLevels only: each window of consecutive
	// levels holds at least WindowPerNode vertices per node; 0 means
	// DefaultWindowPerNode.
	WindowPerNode int
	// Hop and EdgeCost are PartitionLevels' cost model, in the units of the
	// vertex weights read as time on one unit of capacity (the coordinator
	// uses nanoseconds of one CPU): Hop is the latency a level pays when an
	// edge into it crosses nodes, EdgeCost the time a node spends on each
	// end of a cut edge, per unit of edge weight (sending or receiving it).
	// When either is > 0, PartitionLevels puts a window on one node unless
	// spreading it is estimated to finish sooner (see PartitionLevels);
	// both 0 (the default) balances every window across the nodes.
	// Partition ignores them. Neither may be negative.
	Hop, EdgeCost int64
}

const (
	DefaultTolerance = 1.03 // as METIS's ufactor 30
	DefaultPasses    = 10
	DefaultTries     = 4
)

// Load is a node's load on each resource.
type Load struct {
	CPU int64
	GPU int64
}

// Result is an assignment and its report.
type Result struct {
	// Assign maps each vertex to a node index.
	Assign []int
	// Cut is the total weight of the edges whose ends are on different nodes.
	Cut int64
	// Loads holds each node's load.
	Loads []Load
	// Imbalance is, per resource, the largest ratio of a node's load to its
	// share (1 is perfect balance; 0 when the resource carries no weight).
	Imbalance struct{ CPU, GPU float64 }
	// Balanced reports that every node's load is within the tolerance.
	Balanced bool
	// SplitGroups lists, ascending, the groups whose vertices ended up on
	// more than one node (because the balance did not allow otherwise, or
	// because their members are pinned to different nodes).
	SplitGroups []int
	// PartitionLevels only: Windows is how many windows of levels it
	// balanced, and WindowImbalance the largest ratio, over windows, nodes
	// and resources, of a node's load in a window to its share of that
	// window (Partition leaves both 0).
	Windows         int
	WindowImbalance float64
	// PartitionLevels only: Spread is how many windows were balanced across
	// the nodes; the others (Windows - Spread) the cost model kept on one
	// node, but for the vertices pinned or needing a resource elsewhere.
	Spread int
}

// Partition assigns every vertex of g to one of the nodes, minimising the cut
// weight while keeping each node's CPU and GPU loads within the tolerance of
// their shares, honouring pins and GPU affinity, and keeping groups together
// when the balance allows.
//
// Errors wrap ErrInvalid (bad options or nodes, a pin to a node that does not
// exist) or ErrInfeasible (a vertex that no node can hold: a GPU vertex and no
// GPU node, a pin to a node without the resources the vertex needs); errors
// about one vertex are *VertexError. An assignment that cannot meet the
// tolerance (a vertex heavier than a node's share, say) is not an error: the
// best one found is returned with Balanced false.
func Partition(g *Graph, nodes []Node, opt Options) (*Result, error) {
	pr, g0, err := setup(g, nodes, opt)
	if err != nil {
		return nil, err
	}
	where := make([]int32, g0.n)
	if pr.k > 1 && g0.n > 0 {
		where = pr.run(g, g0)
	}
	assign := make([]int, g0.n)
	for i, p := range where {
		assign[i] = int(p)
	}
	return evaluate(g, nodes, assign, pr.tol), nil
}

// setup validates the input and builds the problem and level-0 graph.
func setup(G *Graph, nodes []Node, opt Options) (*problem, *graph, error) {
	if G == nil {
		return nil, nil, fmt.Errorf("%w: nil graph", ErrInvalid)
	}
	tol := opt.Tolerance
	if tol == 0 {
		tol = DefaultTolerance
	}
	if math.IsNaN(tol) || math.IsInf(tol, 0) || tol < 1 {
		return nil, nil, fmt.Errorf("%w: tolerance %v, want >= 1", ErrInvalid, opt.Tolerance)
	}
	passes, tries := opt.Passes, opt.Tries
	if passes < 0 || tries < 0 {
		return nil, nil, fmt.Errorf("%w: passes %d, tries %d: want >= 0", ErrInvalid, passes, tries)
	}
	if opt.Hop < 0 || opt.EdgeCost < 0 {
		return nil, nil, fmt.Errorf("%w: hop %d, edge cost %d: want >= 0", ErrInvalid, opt.Hop, opt.EdgeCost)
	}
	if passes == 0 {
		passes = DefaultPasses
	}
	if tries == 0 {
		tries = DefaultTries
	}
	k := len(nodes)
	if k == 0 {
		return nil, nil, fmt.Errorf("%w: no nodes", ErrInvalid)
	}
	if k > math.MaxInt32/2 {
		return nil, nil, fmt.Errorf("%w: %d nodes", ErrInvalid, k)
	}
	mask := make([]uint8, k)
	var capSum [2]int64
	for i, nd := range nodes {
		if nd.CPU < 0 || nd.GPU < 0 {
			return nil, nil, fmt.Errorf("%w: node %d: negative capacity (cpu %d, gpu %d)", ErrInvalid, i, nd.CPU, nd.GPU)
		}
		if capSum[0] += nd.CPU; capSum[0] > maxWeightSum {
			return nil, nil, fmt.Errorf("%w: node %d: total CPU capacity overflows", ErrInvalid, i)
		}
		if capSum[1] += nd.GPU; capSum[1] > maxWeightSum {
			return nil, nil, fmt.Errorf("%w: node %d: total GPU capacity overflows", ErrInvalid, i)
		}
		if nd.CPU > 0 {
			mask[i] |= needCPU
		}
		if nd.GPU > 0 {
			mask[i] |= needGPU
		}
	}
	src := G.g
	n := src.n
	g0 := &graph{n: n, xadj: src.xadj, adj: src.adj, ew: src.ew, cw: src.cw, gw: src.gw,
		pin: make([]int32, n), need: make([]uint8, n)}
	for i := range g0.pin {
		g0.pin[i] = -1
	}
	for _, p := range G.pins {
		if p.node < 0 || p.node >= k {
			return nil, nil, &VertexError{Vertex: p.v, Err: ErrInvalid,
				Detail: fmt.Sprintf("pinned to node %d, which does not exist (have %d nodes)", p.node, k)}
		}
		if old := g0.pin[p.v]; old >= 0 && int(old) != p.node {
			return nil, nil, &VertexError{Vertex: p.v, Err: ErrInvalid,
				Detail: fmt.Sprintf("pinned to node %d and to node %d", old, p.node)}
		}
		g0.pin[p.v] = int32(p.node)
	}
	ps := newParts(mask)
	var total [2]int64
	for v := 0; v < n; v++ {
		var need uint8
		if src.cw[v] > 0 {
			need |= needCPU
		}
		if src.gw[v] > 0 {
			need |= needGPU
		}
		g0.need[v] = need
		total[0] += src.cw[v]
		total[1] += src.gw[v]
		if pin := g0.pin[v]; pin >= 0 {
			if mask[pin]&need != need {
				return nil, nil, &VertexError{Vertex: v, Err: ErrInfeasible,
					Detail: fmt.Sprintf("pinned to node %d, which has %s", pin, lacks(mask[pin], need))}
			}
		} else if !ps.exists[need] {
			return nil, nil, &VertexError{Vertex: v, Err: ErrInfeasible, Detail: noNode(need, ps)}
		}
	}
	pr := &problem{k: k, ps: ps, tol: tol, total: total, passes: passes, tries: tries,
		cap: make([][2]int64, k), target: make([]float64, 2*k), maxw: make([]int64, 2*k)}
	for m := 0; m < 4; m++ {
		c := make([]int32, k+1)
		for p := 0; p < k; p++ {
			c[p+1] = c[p]
			if mask[p]&uint8(m) == uint8(m) {
				c[p+1]++
			}
		}
		pr.cnt[m] = c
	}
	for p, nd := range nodes {
		pr.cap[p] = [2]int64{nd.CPU, nd.GPU}
		for c := 0; c < 2; c++ {
			t := 0.0
			if capSum[c] > 0 {
				t = float64(total[c]) * float64(pr.cap[p][c]) / float64(capSum[c])
			}
			pr.target[2*p+c] = t
			pr.maxw[2*p+c] = maxLoad(t, tol)
		}
	}
	if opt.Rand != nil {
		pr.rng = opt.Rand
	} else {
		pr.rng = rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15))
	}
	return pr, g0, nil
}

func lacks(have, need uint8) string {
	switch {
	case need&needGPU != 0 && have&needGPU == 0 && need&needCPU != 0 && have&needCPU == 0:
		return "neither CPU nor GPU capacity"
	case need&needGPU != 0 && have&needGPU == 0:
		return "no GPUs"
	default:
		return "no CPU capacity"
	}
}

func noNode(need uint8, ps *parts) string {
	switch {
	case need&needGPU != 0 && !ps.exists[needGPU]:
		return "GPU vertex, and no node has GPUs"
	case need&needCPU != 0 && !ps.exists[needCPU]:
		return "vertex has CPU weight, and no node has CPU capacity"
	default:
		return "vertex has CPU and GPU weight, and no node has both CPU and GPU capacity"
	}
}

// run is the multilevel scheme: contract keep-together groups, coarsen,
// partition the coarsest graph, refine back up, then split groups only if the
// balance demands it.
func (pr *problem) run(G *Graph, g0 *graph) []int32 {
	levels := []*graph{g0}
	groupOf, kept := pr.contractGroups(G, g0)
	top := g0
	if kept > 0 {
		var s contractScratch
		gl := contract(g0, g0.cmap, int(maxCmap(g0.cmap))+1, &s)
		levels = append(levels, gl)
		top = gl
	}
	// Coarsen to about 60 vertices a part (for large k; for small k the
	// second term rules). 30 a part, METIS's figure, cut 5% more than METIS
	// on a random geometric graph in 1000 parts; 60 matched it.
	coarsenTo := max(60*pr.k, int(float64(top.n)/(40*math.Max(1, math.Log2(float64(pr.k))))))
	if top.n > coarsenTo {
		more := coarsen(top, pr.ps, coarsenTo, pr.rng)
		levels = append(levels, more[1:]...)
	}
	coarsest := levels[len(levels)-1]
	where := pr.initial(coarsest)
	for l := len(levels) - 1; ; l-- {
		var locked []bool
		if l == 0 && kept > 0 {
			locked = make([]bool, g0.n)
			for v, grp := range groupOf {
				locked[v] = grp >= 0
			}
		}
		r := newKref(pr, levels[l], where, locked)
		r.improve()
		if l == 0 {
			if locked != nil {
				pr.splitGroups(r, groupOf)
			}
			return r.where
		}
		where = project(levels[l-1], r.where)
	}
}

func maxCmap(c []int32) int32 {
	m := int32(-1)
	for _, x := range c {
		m = max(m, x)
	}
	return m
}

// contractGroups sets g0.cmap so that each group (split by pin: members
// pinned to different nodes cannot be together) becomes one vertex, when
// that vertex fits on some node it may go to. It returns, per vertex, the
// index of its contracted group or -1, and how many groups were contracted.
func (pr *problem) contractGroups(G *Graph, g0 *graph) ([]int32, int) {
	type key struct {
		group int
		pin   int32
	}
	// A group whose pinned members agree on one node goes there whole; one
	// whose pins disagree is kept together per pin, its unpinned members
	// apart from the pinned ones.
	groupPin := map[int]int32{}
	for v, grp := range G.group {
		if grp == 0 || g0.pin[v] < 0 {
			continue
		}
		if p, ok := groupPin[grp]; !ok {
			groupPin[grp] = g0.pin[v]
		} else if p != g0.pin[v] {
			groupPin[grp] = -2
		}
	}
	idx := map[key]int32{}
	var members [][]int32
	for v, grp := range G.group {
		if grp == 0 {
			continue
		}
		kk := key{grp, g0.pin[v]}
		if p, ok := groupPin[grp]; ok && p >= 0 {
			kk.pin = p
		}
		i, ok := idx[kk]
		if !ok {
			i = int32(len(members))
			idx[kk] = i
			members = append(members, nil)
		}
		members[i] = append(members[i], int32(v))
	}
	groupOf := make([]int32, g0.n)
	for i := range groupOf {
		groupOf[i] = -1
	}
	kept := 0
	for i, ms := range members {
		if len(ms) < 2 {
			continue
		}
		var cw, gw int64
		var need uint8
		pin := int32(-1)
		for _, v := range ms {
			cw += g0.cw[v]
			gw += g0.gw[v]
			need |= g0.need[v]
			pin = max(pin, g0.pin[v])
		}
		fit := false
		for p := int32(0); p < int32(pr.k) && !fit; p++ {
			if pin >= 0 && p != pin || pr.ps.mask[p]&need != need {
				continue
			}
			fit = cw <= pr.maxw[2*p] && gw <= pr.maxw[2*p+1]
		}
		if !fit {
			continue
		}
		kept++
		for _, v := range ms {
			groupOf[v] = int32(i)
		}
	}
	if kept == 0 {
		return groupOf, 0
	}
	cmap := make([]int32, g0.n)
	first := make([]int32, len(members))
	for i := range first {
		first[i] = -1
	}
	cn := int32(0)
	for v := range cmap {
		if gi := groupOf[v]; gi >= 0 {
			if first[gi] < 0 {
				first[gi] = cn
				cn++
			}
			cmap[v] = first[gi]
		} else {
			cmap[v] = cn
			cn++
		}
	}
	g0.cmap = cmap
	return groupOf, kept
}

// splitGroups frees kept groups on overloaded nodes, heaviest first, until
// the freed weight covers the overload, and rebalances and refines with them
// free; it repeats while some node is overloaded and holds a kept group.
func (pr *problem) splitGroups(r *kref, groupOf []int32) {
	g := r.g
	for {
		if !r.anyOverloaded() {
			return
		}
		type gw struct {
			id     int32
			weight [2]int64
			part   int32
		}
		byID := map[int32]*gw{}
		for v, gi := range groupOf {
			if gi < 0 || !r.locked[v] {
				continue
			}
			x := byID[gi]
			if x == nil {
				x = &gw{id: gi, part: r.where[v]}
				byID[gi] = x
			}
			x.weight[0] += g.cw[v]
			x.weight[1] += g.gw[v]
		}
		var cand []*gw
		for _, x := range byID {
			if r.overloaded(x.part) {
				cand = append(cand, x)
			}
		}
		if len(cand) == 0 {
			return
		}
		sort.Slice(cand, func(i, j int) bool {
			a, b := cand[i], cand[j]
			if a.weight[0]+a.weight[1] != b.weight[0]+b.weight[1] {
				return a.weight[0]+a.weight[1] > b.weight[0]+b.weight[1]
			}
			return a.id < b.id
		})
		over := make([]int64, 2*pr.k)
		for p := 0; p < pr.k; p++ {
			for c := 0; c < 2; c++ {
				over[2*p+c] = max(0, r.load[2*p+c]-pr.maxw[2*p+c])
			}
		}
		free := map[int32]bool{}
		for _, x := range cand {
			p := x.part
			// Free a group only for a resource it carries and its node has
			// too much of.
			if (over[2*p] <= 0 || x.weight[0] == 0) && (over[2*p+1] <= 0 || x.weight[1] == 0) {
				continue
			}
			free[x.id] = true
			over[2*p] -= x.weight[0]
			over[2*p+1] -= x.weight[1]
		}
		if len(free) == 0 {
			return
		}
		for v, gi := range groupOf {
			if gi >= 0 && free[gi] {
				r.locked[v] = false
			}
		}
		r.improve()
	}
}

// Evaluate reports on an assignment made elsewhere (by METIS, say) with the
// same measures Partition uses: cut, loads, imbalance against the nodes'
// shares, balance within tol (0 means DefaultTolerance), split groups. Pins
// and affinity are not checked here; see Check.
func Evaluate(g *Graph, nodes []Node, assign []int, tol float64) (*Result, error) {
	if g == nil {
		return nil, fmt.Errorf("%w: nil graph", ErrInvalid)
	}
	if len(assign) != g.g.n {
		return nil, fmt.Errorf("%w: assignment has %d entries, graph %d vertices", ErrInvalid, len(assign), g.g.n)
	}
	for v, p := range assign {
		if p < 0 || p >= len(nodes) {
			return nil, &VertexError{Vertex: v, Err: ErrInvalid,
				Detail: fmt.Sprintf("assigned to node %d, which does not exist (have %d nodes)", p, len(nodes))}
		}
	}
	if tol == 0 {
		tol = DefaultTolerance
	}
	return evaluate(g, nodes, assign, tol), nil
}

func evaluate(G *Graph, nodes []Node, assign []int, tol float64) *Result {
	g := G.g
	k := len(nodes)
	res := &Result{Assign: assign, Loads: make([]Load, k), Balanced: true}
	for v := 0; v < g.n; v++ {
		p := assign[v]
		res.Loads[p].CPU += g.cw[v]
		res.Loads[p].GPU += g.gw[v]
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			if u := g.adj[e]; int(u) > v && assign[u] != p {
				res.Cut += g.ew[e]
			}
		}
	}
	var total, capSum [2]int64
	for p, nd := range nodes {
		total[0] += res.Loads[p].CPU
		total[1] += res.Loads[p].GPU
		capSum[0] += nd.CPU
		capSum[1] += nd.GPU
	}
	ratio := func(load, capacity int64, c int) float64 {
		if total[c] == 0 {
			return 0
		}
		if capacity == 0 || capSum[c] == 0 {
			if load > 0 {
				return math.Inf(1)
			}
			return 0
		}
		t := float64(total[c]) * float64(capacity) / float64(capSum[c])
		if load > maxLoad(t, tol) {
			res.Balanced = false
		}
		return float64(load) / t
	}
	for p, nd := range nodes {
		if r := ratio(res.Loads[p].CPU, nd.CPU, 0); r > res.Imbalance.CPU {
			res.Imbalance.CPU = r
		}
		if r := ratio(res.Loads[p].GPU, nd.GPU, 1); r > res.Imbalance.GPU {
			res.Imbalance.GPU = r
		}
	}
	if math.IsInf(res.Imbalance.CPU, 1) || math.IsInf(res.Imbalance.GPU, 1) {
		res.Balanced = false
	}
	first := map[int]int{}
	split := map[int]bool{}
	for v, grp := range G.group {
		if grp == 0 {
			continue
		}
		if p, ok := first[grp]; !ok {
			first[grp] = assign[v]
		} else if p != assign[v] {
			split[grp] = true
		}
	}
	for grp := range split {
		res.SplitGroups = append(res.SplitGroups, grp)
	}
	slices.Sort(res.SplitGroups)
	return res
}

// Check verifies the hard constraints of an assignment: every vertex on an
// existing node, pins honoured, GPU (and CPU) weight only on nodes with that
// capacity. It returns the first violation as a *VertexError wrapping
// ErrInfeasible.
func Check(g *Graph, nodes []Node, assign []int) error {
	if g == nil {
		return fmt.Errorf("%w: nil graph", ErrInvalid)
	}
	if len(assign) != g.g.n {
		return fmt.Errorf("%w: assignment has %d entries, graph %d vertices", ErrInvalid, len(assign), g.g.n)
	}
	pins := map[int]int{}
	for _, p := range g.pins {
		pins[p.v] = p.node
	}
	for v, p := range assign {
		if p < 0 || p >= len(nodes) {
			return &VertexError{Vertex: v, Err: ErrInfeasible, Detail: fmt.Sprintf("on node %d, which does not exist", p)}
		}
		if pin, ok := pins[v]; ok && pin != p {
			return &VertexError{Vertex: v, Err: ErrInfeasible, Detail: fmt.Sprintf("pinned to node %d, placed on %d", pin, p)}
		}
		if g.g.gw[v] > 0 && nodes[p].GPU == 0 {
			return &VertexError{Vertex: v, Err: ErrInfeasible, Detail: fmt.Sprintf("GPU vertex on node %d, which has no GPUs", p)}
		}
		if g.g.cw[v] > 0 && nodes[p].CPU == 0 {
			return &VertexError{Vertex: v, Err: ErrInfeasible, Detail: fmt.Sprintf("CPU weight on node %d, which has no CPU capacity", p)}
		}
	}
	return nil
}

// Cut returns the total weight of the edges of g whose ends assign puts on
// different nodes; assign must have one entry per vertex.
func (g *Graph) Cut(assign []int) (int64, error) {
	if len(assign) != g.g.n {
		return 0, fmt.Errorf("%w: assignment has %d entries, graph %d vertices", ErrInvalid, len(assign), g.g.n)
	}
	var cut int64
	gg := g.g
	for v := 0; v < gg.n; v++ {
		for e := gg.xadj[v]; e < gg.xadj[v+1]; e++ {
			if u := gg.adj[e]; int(u) > v && assign[u] != assign[v] {
				cut += gg.ew[e]
			}
		}
	}
	return cut, nil
}
