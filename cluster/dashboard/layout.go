package dashboard

import (
	"sort"
)

// This file is the layered ("Sugiyama-style") layout the graph view draws
// with. It is pure: boxes and edges in, positions out.
//
//  1. Order. A topological order over every edge, except that a weak
//     (condition) edge may point backwards: among the vertices whose strong
//     predecessors are all placed, those whose weak predecessors are placed too
//     go first. A flow's strong edges form a DAG (spec validation), so every
//     cycle is broken at a weak edge, which becomes a loop-back.
//  2. Layers. Longest path over the forward edges: every forward edge goes
//     from a lower layer to a higher one.
//  3. Crossings. A few barycenter sweeps order each layer.
//  4. Coordinates. Each layer is placed left to right, each box as close to
//     its predecessors' mean as the boxes left of it allow, so boxes never
//     overlap; layers are stacked top to bottom.

// Box is the size of one vertex to lay out.
type Box struct{ W, H float64 }

// LEdge is a directed edge between two boxes; Weak marks a condition edge.
type LEdge struct {
	From, To int
	Weak     bool
}

// Layout is where Place put each box (top-left corner) and which edges point
// backwards (loop-backs).
type Layout struct {
	X, Y          []float64
	Layer         []int
	Back          []bool // per edge: drawn as a loop-back (target not below its source)
	Width, Height float64
	Layers        int
}

// Spacing of the layout, in SVG user units.
const (
	gapX   = 24.0
	gapY   = 46.0
	margin = 16.0
)

// Order returns a topological order of n vertices in which only weak edges
// may point backwards when the strong edges form a DAG (a strong cycle is
// broken at an arbitrary vertex). Ties keep vertex order.
func Order(n int, edges []LEdge) []int {
	strongIn := make([]int, n)
	weakIn := make([]int, n)
	out := make([][]int, n)
	for i, e := range edges {
		out[e.From] = append(out[e.From], i)
		if e.Weak {
			weakIn[e.To]++
		} else {
			strongIn[e.To]++
		}
	}
	placed := make([]bool, n)
	order := make([]int, 0, n)
	// ready: all predecessors placed; strongReady: all strong ones placed.
	var ready, strongReady intHeap
	inStrong := make([]bool, n)
	for v := 0; v < n; v++ {
		if strongIn[v] == 0 && weakIn[v] == 0 {
			ready.push(v)
		} else if strongIn[v] == 0 {
			strongReady.push(v)
			inStrong[v] = true
		}
	}
	next := 0 // lowest vertex not yet placed, for strong cycles
	for len(order) < n {
		v := -1
		for v < 0 && ready.Len() > 0 {
			if c := ready.pop(); !placed[c] {
				v = c
			}
		}
		for v < 0 && strongReady.Len() > 0 {
			if c := strongReady.pop(); !placed[c] {
				v = c
			}
		}
		for v < 0 {
			for placed[next] {
				next++
			}
			v = next
		}
		placed[v] = true
		order = append(order, v)
		for _, ei := range out[v] {
			e := edges[ei]
			w := e.To
			if placed[w] {
				continue
			}
			if e.Weak {
				weakIn[w]--
			} else {
				strongIn[w]--
			}
			if strongIn[w] == 0 && weakIn[w] == 0 {
				ready.push(w)
			} else if strongIn[w] == 0 && !inStrong[w] {
				strongReady.push(w)
				inStrong[w] = true
			}
		}
	}
	return order
}

// Layers assigns each vertex its layer (longest path over the edges that
// point forwards in Order) and marks the loop-backs: the edges whose target
// is not below their source.
func Layers(n int, edges []LEdge) (layer []int, back []bool) {
	order := Order(n, edges)
	rank := make([]int, n)
	for i, v := range order {
		rank[v] = i
	}
	back = make([]bool, len(edges))
	preds := make([][]int, n)
	for i, e := range edges {
		if rank[e.From] >= rank[e.To] {
			back[i] = true
			continue
		}
		preds[e.To] = append(preds[e.To], e.From)
	}
	layer = make([]int, n)
	for _, v := range order {
		for _, p := range preds[v] {
			layer[v] = max(layer[v], layer[p]+1)
		}
	}
	// An edge that closed a cycle in the order but lands lower anyway is
	// drawn as an ordinary edge.
	for i, e := range edges {
		if back[i] && layer[e.To] > layer[e.From] {
			back[i] = false
		}
	}
	return layer, back
}

// Place lays out boxes and edges.
func Place(boxes []Box, edges []LEdge) Layout {
	n := len(boxes)
	layer, back := Layers(n, edges)
	L := Layout{X: make([]float64, n), Y: make([]float64, n), Layer: layer, Back: back}
	if n == 0 {
		L.Width, L.Height = 2*margin, 2*margin
		return L
	}
	nl := 0
	for _, l := range layer {
		nl = max(nl, l+1)
	}
	L.Layers = nl
	rows := make([][]int, nl)
	for v := 0; v < n; v++ {
		rows[layer[v]] = append(rows[layer[v]], v)
	}
	var up, down [][]int // forward neighbours
	up, down = make([][]int, n), make([][]int, n)
	for i, e := range edges {
		if !back[i] {
			down[e.From] = append(down[e.From], e.To)
			up[e.To] = append(up[e.To], e.From)
		}
	}
	pos := make([]float64, n)
	setPos := func(r []int) {
		for i, v := range r {
			pos[v] = float64(i)
		}
	}
	for _, r := range rows {
		setPos(r)
	}
	bary := func(v int, nb [][]int) float64 {
		if len(nb[v]) == 0 {
			return pos[v]
		}
		s := 0.0
		for _, u := range nb[v] {
			s += pos[u]
		}
		return s / float64(len(nb[v]))
	}
	sortRow := func(r []int, nb [][]int) {
		key := make(map[int]float64, len(r))
		for _, v := range r {
			key[v] = bary(v, nb)
		}
		sort.SliceStable(r, func(a, b int) bool { return key[r[a]] < key[r[b]] })
		setPos(r)
	}
	// Sweeps cost O(E log V) each; skip them where rows are huge.
	if n <= 5000 {
		for it := 0; it < 4; it++ {
			for l := 1; l < nl; l++ {
				sortRow(rows[l], up)
			}
			for l := nl - 2; l >= 0; l-- {
				sortRow(rows[l], down)
			}
		}
	}
	// Coordinates: rows top to bottom; within a row, each box at the mean
	// centre of its forward predecessors when it fits, else right of its
	// left neighbour.
	cx := make([]float64, n)
	y := margin
	for l := 0; l < nl; l++ {
		r := rows[l]
		h := 0.0
		right := margin - gapX
		for _, v := range r {
			want := right + gapX
			if ps := up[v]; len(ps) > 0 && l > 0 {
				s := 0.0
				for _, p := range ps {
					s += cx[p]
				}
				want = max(want, s/float64(len(ps))-boxes[v].W/2)
			}
			L.X[v], L.Y[v] = want, y
			cx[v] = want + boxes[v].W/2
			right = want + boxes[v].W
			h = max(h, boxes[v].H)
			L.Width = max(L.Width, right)
		}
		y += h + gapY
	}
	L.Width += margin + 40 // room on the right for loop-back arcs
	L.Height = y - gapY + margin
	return L
}

// intHeap is a min-heap of vertex ids (ties keep vertex order).
type intHeap []int

func (h intHeap) Len() int { return len(h) }

func (h *intHeap) push(v int) {
	*h = append(*h, v)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p] <= a[i] {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *intHeap) pop() int {
	a := *h
	v := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(a) && a[l] < a[m] {
			m = l
		}
		if r < len(a) && a[r] < a[m] {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return v
}

// gridCols is how many groups a row of a grid view holds.
const gridCols = 6

// GridPlace lays n boxes out in reading order, for a view of groups of
// consecutive levels: rows of up to gridCols cells, left to right, then
// right to left on the next row (a snake), so each group sits beside the
// one it leads to and a deep flow fills the page instead of one narrow
// column. Edges are never loop-backs here (groups are in level order).
func GridPlace(boxes []Box, edges []LEdge) Layout {
	n := len(boxes)
	L := Layout{X: make([]float64, n), Y: make([]float64, n), Layer: make([]int, n), Back: make([]bool, len(edges))}
	var cw, ch float64
	for _, b := range boxes {
		cw, ch = max(cw, b.W), max(ch, b.H)
	}
	cols := min(n, gridCols)
	for i := range boxes {
		r, c := i/gridCols, i%gridCols
		if r%2 == 1 {
			c = cols - 1 - c
		}
		L.X[i] = margin + float64(c)*(cw+2*gapX)
		L.Y[i] = margin + float64(r)*(ch+gapY)
		L.Layer[i] = r
	}
	rows := (n + gridCols - 1) / gridCols
	L.Layers = rows
	L.Width = 2*margin + float64(cols)*(cw+2*gapX) - 2*gapX
	L.Height = 2*margin + float64(rows)*(ch+gapY) - gapY
	if n == 0 {
		L.Width, L.Height = 2*margin, 2*margin
	}
	return L
}
