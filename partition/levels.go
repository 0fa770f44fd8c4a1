package partition

import (
	"errors"
	"fmt"
	"slices"
)

// DefaultWindowPerNode is the default of Options.WindowPerNode.
const DefaultWindowPerNode = 4

// PartitionLevels is Partition for a graph that runs in time steps, such as a
// task DAG whose level (longest path from a source) says when a task can
// run: it balances every node's load within each window of consecutive
// levels, not only in total, so that the nodes work side by side at every
// step instead of one band of levels after another.
//
// Minimising the cut alone is the wrong objective for such a graph: the cut
// of a layered DAG is smallest when each node takes a band of consecutive
// layers, and then only one node works at a time. PartitionLevels cuts
// levels[v] (>= 0; vertices of one group take the group's smallest level)
// into windows of consecutive levels, each holding at least
// Options.WindowPerNode vertices per node (the last window may hold fewer),
// and partitions the windows in order of level: each window is one Partition
// of its vertices, under the same tolerance, pins, GPU affinity and groups,
// plus one weightless vertex per node pinned there and joined to the
// window's vertices by their edges to earlier windows on that node. The cut
// it minimises is thus the window's own edges plus its edges to the vertices
// already placed: the placement follows its predecessors where the balance
// allows. Edges to later windows are left to those windows. Unless
// Options.Tries says otherwise, each window is one multilevel run (Tries 1).
//
// With a cost model (Options.Hop or Options.EdgeCost > 0), spreading a
// window must pay for itself: tiny tasks split over nodes make every level a
// network round trip. Each window is then also placed whole on one node —
// the node its edges to earlier windows weigh most on, else the one most of
// its pins name, else the largest by CPU (ties by the seed) — but for the
// vertices pinned elsewhere or needing a resource that node lacks (a group
// follows such a member). Both placements are estimated as the slowest
// node's time plus the hops: a node's time is its load over its capacity
// (CPU and GPU apart, the larger counting) plus EdgeCost per unit of
// weight of the cut edges it sends or receives, and every level of the
// window that a cut edge enters adds Hop. The window's edges to later
// windows are charged too, as if they all went to the node most of them
// leave from (one more hop if any leaves another): spreading a window
// commits the next ones to spread as well or to gather their inputs, so a
// first level of tiny tasks is not spread merely because nothing is cut
// yet. The faster is kept, one node on a tie; Result.Spread counts the
// windows that were spread. The choice is greedy, window by window.
//
// The result is measured on the whole graph as Partition's is (Cut, Loads,
// Imbalance over all levels; Balanced means the totals are within the
// tolerance); WindowImbalance gives the worst window. Errors are Partition's,
// plus ErrInvalid for levels of the wrong length or a negative level (a
// *VertexError naming the vertex).
func PartitionLevels(g *Graph, nodes []Node, levels []int, opt Options) (*Result, error) {
	pr, _, err := setup(g, nodes, opt)
	if err != nil {
		return nil, err
	}
	n := g.g.n
	if len(levels) != n {
		return nil, fmt.Errorf("%w: %d levels for %d vertices", ErrInvalid, len(levels), n)
	}
	per := opt.WindowPerNode
	if per < 0 {
		return nil, fmt.Errorf("%w: window of %d vertices per node, want >= 0", ErrInvalid, per)
	}
	if per == 0 {
		per = DefaultWindowPerNode
	}
	lv := slices.Clone(levels)
	minOf := map[int]int{}
	for v, l := range lv {
		if l < 0 {
			return nil, &VertexError{Vertex: v, Err: ErrInvalid, Detail: fmt.Sprintf("level %d, want >= 0", l)}
		}
		if grp := g.group[v]; grp != 0 {
			if m, ok := minOf[grp]; !ok || l < m {
				minOf[grp] = l
			}
		}
	}
	for v := range lv {
		if grp := g.group[v]; grp != 0 {
			lv[v] = minOf[grp]
		}
	}
	k := pr.k
	assign := make([]int, n)
	if k == 1 || n == 0 {
		return withWindows(evaluate(g, nodes, assign, pr.tol), g, nodes, assign, nil), nil
	}
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return lv[a] - lv[b] })
	pins := make(map[int]int, len(g.pins))
	for _, p := range g.pins {
		pins[p.v] = p.node
	}

	local := make([]int32, n) // vertex -> index in its window's graph, -1 outside it
	for i := range local {
		local[i] = -1
	}
	placed := make([]bool, n)
	cm := newCostModel(g, nodes, opt)
	spreadWins := 0
	var windows [][]int32
	for lo := 0; lo < n; {
		hi := lo
		// whole levels, until the window holds per × k vertices
		for hi < n && (hi-lo < per*k || lv[order[hi]] == lv[order[hi-1]]) {
			hi++
		}
		windows = append(windows, order[lo:hi])
		lo = hi
	}
	var toNode []int64
	for wi, win := range windows {
		if cm != nil && opt.Rand == nil && !noGatherShortcut {
			if one := cm.gathered(win, assign, placed, pins, local, lv, opt.Seed); one != nil {
				if gatheredHook != nil {
					gatheredHook()
				}
				for i, v := range win {
					assign[v] = one[i]
					placed[v] = true
				}
				continue
			}
		}
		b := NewBuilder(len(win) + k)
		for i, v := range win {
			local[v] = int32(i)
			b.AddVertex(g.Vertex(int(v)))
			if p, ok := pins[int(v)]; ok {
				b.Pin(i, p)
			}
		}
		for p := 0; p < k; p++ {
			b.Pin(b.AddVertex(Vertex{}), p)
		}
		for i, v := range win {
			toNode = toNode[:0]
			toNode = append(toNode, make([]int64, k)...)
			g.Neighbors(int(v), func(j int, w int64) {
				switch {
				case placed[j]:
					toNode[assign[j]] += w
				case local[j] > int32(i): // each window edge once
					b.AddEdge(i, int(local[j]), w)
				}
			})
			for p, w := range toNode {
				if w > 0 {
					b.AddEdge(i, len(win)+p, w)
				}
			}
		}
		sub, err := b.Build()
		if err != nil {
			return nil, fmt.Errorf("%w: window %d: %w", ErrInvalid, wi, err)
		}
		o := opt
		o.Seed = opt.Seed + uint64(wi)
		if o.Tries == 0 {
			o.Tries = 1 // a window is small, and most of its cut is fixed by the anchors
		}
		res, err := Partition(sub, nodes, o)
		if err != nil {
			var ve *VertexError
			if errors.As(err, &ve) && ve.Vertex < len(win) {
				return nil, &VertexError{Vertex: int(win[ve.Vertex]), Err: ve.Err, Detail: ve.Detail}
			}
			return nil, err
		}
		spread := true
		for i, v := range win {
			assign[v] = res.Assign[i]
		}
		if cm != nil {
			tSpread := cm.time(win, assign, nil, placed, local, lv)
			one := cm.oneNode(win, assign, placed, pins, opt.Seed)
			if cm.time(win, assign, one, placed, local, lv) <= tSpread {
				spread = false
				for i, v := range win {
					assign[v] = one[i]
				}
			}
		}
		if spread {
			spreadWins++
		}
		for _, v := range win {
			placed[v] = true
			local[v] = -1
		}
	}
	out := withWindows(evaluate(g, nodes, assign, pr.tol), g, nodes, assign, windows)
	out.Spread = spreadWins
	return out, nil
}

// costModel estimates a window's time under an assignment (PartitionLevels
// with Options.Hop or Options.EdgeCost).
type costModel struct {
	g        *Graph
	nodes    []Node
	hop      float64
	edge     float64
	load     [][2]int64 // per node, CPU and GPU (scratch)
	ends     []int64    // per node, cut edge weight sent or received (scratch)
	later    []int64    // per node, edge weight to later windows (scratch)
	anchor   []int64    // per node (scratch)
	pinned   []int      // per node (scratch)
	cutLevel []bool     // per level of the window (scratch)
	one      []int      // the one-node assignment (per window vertex; scratch)
}

func newCostModel(g *Graph, nodes []Node, opt Options) *costModel {
	if opt.Hop == 0 && opt.EdgeCost == 0 {
		return nil
	}
	k := len(nodes)
	return &costModel{g: g, nodes: nodes, hop: float64(opt.Hop), edge: float64(opt.EdgeCost),
		load: make([][2]int64, k), ends: make([]int64, k), later: make([]int64, k), anchor: make([]int64, k), pinned: make([]int, k)}
}

// time is the estimated time of window win (sorted by level) when its
// vertices run where assign says, or where in says (by index in the window)
// when in is not nil: the slowest node's load over its
// capacity plus its cut edge ends, plus Hop for every level a cut edge
// enters. The edges to later windows count as cut, with one hop, where
// they leave another node than the one most of them leave from.
func (m *costModel) time(win []int32, assign, in []int, placed []bool, local []int32, lv []int) float64 {
	g := m.g.g
	clear(m.load)
	clear(m.ends)
	clear(m.later)
	lo, hi := lv[win[0]], lv[win[len(win)-1]]
	m.cutLevel = append(m.cutLevel[:0], make([]bool, hi-lo+1)...)
	at := func(v int32) int {
		if in != nil && local[v] >= 0 {
			return in[local[v]]
		}
		return assign[v]
	}
	for _, v := range win {
		p := at(v)
		m.load[p][0] += g.cw[v]
		m.load[p][1] += g.gw[v]
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			j := g.adj[e]
			if !placed[j] && local[j] < 0 {
				m.later[p] += g.ew[e]
				continue
			}
			if !placed[j] && j < v { // window edges once
				continue
			}
			q := at(j)
			if q == p {
				continue
			}
			m.ends[p] += g.ew[e]
			m.ends[q] += g.ew[e]
			m.cutLevel[max(lv[v], lv[j])-lo] = true
		}
	}
	// The edges to later windows are charged as if their ends went to the
	// node most of them leave from: spreading a window commits the next to
	// spread too or to pay for gathering its inputs.
	f := 0
	var out int64
	for p, w := range m.later {
		out += w
		if w > m.later[f] {
			f = p
		}
	}
	hops := 0
	if gather := out - m.later[f]; gather > 0 {
		for p, w := range m.later {
			if p != f {
				m.ends[p] += w
			}
		}
		m.ends[f] += gather
		hops++
	}
	var slowest float64
	for p, nd := range m.nodes {
		var t float64
		for c, capacity := range [2]int64{nd.CPU, nd.GPU} {
			if l := m.load[p][c]; l > 0 && capacity > 0 {
				t = max(t, float64(l)/float64(capacity))
			}
		}
		slowest = max(slowest, t+m.edge*float64(m.ends[p]))
	}
	for _, c := range m.cutLevel {
		if c {
			hops++
		}
	}
	return slowest + m.hop*float64(hops)
}

// noGatherShortcut turns costModel.gathered off, and gatheredHook counts
// the windows it places (tests compare with and without it).
var (
	noGatherShortcut = false
	gatheredHook     func()
)

// gathered returns the one-node placement of window win (oneNode's) when
// it is the one PartitionLevels keeps whatever the window's partition
// would give, so that the partition need not be run (a 100K-task DAG of
// tiny tasks ran 100 of them, each thrown away); nil when that is not
// certain. It is certain when the window holds CPU work only, with no
// pins and no groups, every node has CPU capacity, every vertex of the
// window has a placed predecessor or successor and all of those are on
// one node A, and the window on A costs no more than any spread could:
// the window on A has no cut edge and no hop (its edges to later windows
// all leave A), so its time is its load over A's CPU capacity; any other
// placement either is the window on A (the same time: a tie keeps the
// one-node placement) or puts a vertex on another node, cutting its edge
// to A, which costs at least one Hop on top of the load's share of the
// whole capacity (the slowest node carries at least that), and on top of
// A's own time, load and cut ends, when moving any vertex off A costs
// more in cut ends than it saves A in load. The shared
// random source (Options.Rand) is not used: each window seeds its own, so
// skipping one changes no other. local must be -1 for every vertex; it is
// again on return.
func (m *costModel) gathered(win []int32, assign []int, placed []bool, pins map[int]int, local []int32, lv []int, seed uint64) []int {
	g := m.g.g
	var capCPU int64
	for _, nd := range m.nodes {
		if nd.CPU <= 0 {
			return nil
		}
		capCPU += nd.CPU
	}
	a := -1 // the node of the window's placed neighbours
	var load int64
	for _, v := range win {
		if _, ok := pins[int(v)]; ok || g.gw[v] != 0 || m.g.group[v] != 0 {
			return nil
		}
		load += g.cw[v]
		anchored := false
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			j := g.adj[e]
			if !placed[j] {
				continue
			}
			if a < 0 {
				a = assign[j]
			} else if assign[j] != a {
				return nil
			}
			anchored = true
		}
		if !anchored {
			return nil
		}
	}
	one := m.oneNode(win, assign, placed, pins, seed)
	for _, p := range one {
		if p != a {
			return nil
		}
	}
	for i, v := range win {
		local[v] = int32(i)
	}
	t := m.time(win, assign, one, placed, local, lv)
	for _, v := range win {
		local[v] = -1
	}
	// A margin of rounding: the bounds below hold in exact arithmetic, and
	// m.time rounds; half a Hop, at least a millionth of t, is far over it.
	if m.hop <= 0 || m.hop < 1e-6*t {
		return nil
	}
	if t <= float64(load)/float64(capCPU)+m.hop/2 {
		return one // under the load's share of all the capacity plus one Hop
	}
	// Or each vertex's edges to A cost more to cut than its load takes on
	// A (EdgeCost × their weight ≥ its load / A's CPU capacity): then a
	// placement with vertices X off A gives A load − load(X) and at least
	// weight(X's edges to A) cut ends, which together take no less than
	// the whole load on A, plus at least one Hop.
	capA := float64(m.nodes[a].CPU)
	if t > float64(load)/capA+m.hop/2 {
		return nil
	}
	for _, v := range win {
		var w int64
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			if placed[g.adj[e]] {
				w += g.ew[e]
			}
		}
		if m.edge*float64(w)*capA < float64(g.cw[v])*(1+1e-9) {
			return nil
		}
	}
	return one
}

// oneNode places window win on one node: the node its edges to placed
// vertices weigh most on, else the one most of its pins name, else the
// largest by CPU capacity (ties broken by seed). A pinned vertex stays on
// its pin, a vertex needing a resource the node lacks goes to the best
// node that has it, and a group follows its first such member (where its
// other members can run). It returns the node of each vertex of the window,
// by index in win (scratch, valid until the next call).
func (m *costModel) oneNode(win []int32, assign []int, placed []bool, pins map[int]int, seed uint64) []int {
	g := m.g.g
	k := len(m.nodes)
	clear(m.anchor)
	clear(m.pinned)
	for _, v := range win {
		if p, ok := pins[int(v)]; ok {
			m.pinned[p]++
		}
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			if j := g.adj[e]; placed[j] {
				m.anchor[assign[j]] += g.ew[e]
			}
		}
	}
	rot := int(seed % uint64(k))
	better := func(p, q int) bool { // p ranks before q
		switch {
		case m.anchor[p] != m.anchor[q]:
			return m.anchor[p] > m.anchor[q]
		case m.pinned[p] != m.pinned[q]:
			return m.pinned[p] > m.pinned[q]
		case m.nodes[p].CPU != m.nodes[q].CPU:
			return m.nodes[p].CPU > m.nodes[q].CPU
		}
		return (p-rot+k)%k < (q-rot+k)%k
	}
	mask := func(p int) uint8 {
		var mk uint8
		if m.nodes[p].CPU > 0 {
			mk |= needCPU
		}
		if m.nodes[p].GPU > 0 {
			mk |= needGPU
		}
		return mk
	}
	need := func(v int32) uint8 {
		var nd uint8
		if g.cw[v] > 0 {
			nd |= needCPU
		}
		if g.gw[v] > 0 {
			nd |= needGPU
		}
		return nd
	}
	bestFor := func(nd uint8) int {
		b := -1
		for p := range k {
			if mask(p)&nd == nd && (b < 0 || better(p, b)) {
				b = p
			}
		}
		return b // a vertex no node can hold was refused by setup
	}
	target := bestFor(0)
	m.one = append(m.one[:0], make([]int, len(win))...)
	one := m.one
	forced := map[int]int{} // group -> node of its first pinned or displaced member
	for i, v := range win {
		p, pinned := pins[int(v)]
		if !pinned {
			p = target
			if nd := need(v); mask(p)&nd != nd {
				p = bestFor(nd)
				pinned = true
			}
		}
		one[i] = p
		if grp := m.g.group[v]; grp != 0 && pinned {
			if _, ok := forced[grp]; !ok {
				forced[grp] = p
			}
		}
	}
	for i, v := range win {
		if grp := m.g.group[v]; grp != 0 {
			if p, ok := forced[grp]; ok {
				if _, pinned := pins[int(v)]; !pinned && mask(p)&need(v) == need(v) {
					one[i] = p
				}
			}
		}
	}
	return one
}

// withWindows sets res.WindowImbalance: the largest, over windows and
// resources, of a node's load in the window over its share of the window.
func withWindows(res *Result, g *Graph, nodes []Node, assign []int, windows [][]int32) *Result {
	var capSum [2]int64
	for _, nd := range nodes {
		capSum[0] += nd.CPU
		capSum[1] += nd.GPU
	}
	load := make([][2]int64, len(nodes))
	for _, win := range windows {
		clear(load)
		var total [2]int64
		for _, v := range win {
			p := assign[v]
			load[p][0] += g.g.cw[v]
			load[p][1] += g.g.gw[v]
			total[0] += g.g.cw[v]
			total[1] += g.g.gw[v]
		}
		for p, nd := range nodes {
			for c, capacity := range [2]int64{nd.CPU, nd.GPU} {
				if total[c] == 0 || capacity == 0 || capSum[c] == 0 {
					continue
				}
				share := float64(total[c]) * float64(capacity) / float64(capSum[c])
				res.WindowImbalance = max(res.WindowImbalance, float64(load[p][c])/share)
			}
		}
	}
	res.Windows = len(windows)
	return res
}
