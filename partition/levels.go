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
		for i, v := range win {
			assign[v] = res.Assign[i]
			placed[v] = true
			local[v] = -1
		}
	}
	return withWindows(evaluate(g, nodes, assign, pr.tol), g, nodes, assign, windows), nil
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
