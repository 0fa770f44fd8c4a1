package partition

import (
	"fmt"
	"math"
	"slices"
)

// Vertex is one vertex of the input graph: a task, for the coordinator.
//
// CPU and GPU are the vertex's weights (its work) on the two resources; both
// must be >= 0. A vertex with GPU > 0 is a GPU vertex: it is placed only on a
// node with GPU capacity > 0. Likewise a vertex with CPU > 0 is placed only on
// a node with CPU capacity > 0. A vertex with both weights 0 may go anywhere.
//
// Group, when not 0, names a "keep together" group: every vertex of a group is
// placed on one node when the balance allows it; when it does not, the group
// is split, minimising the cut. Group ids are arbitrary non-zero ints.
type Vertex struct {
	CPU   int64
	GPU   int64
	Group int
}

// Builder assembles a Graph vertex by vertex and edge by edge. Its methods
// never fail on their own; the first problem found is reported by Build, with
// the vertex or edge it concerns. A Builder is not safe for concurrent use.
type Builder struct {
	cw, gw []int64
	group  []int
	pins   []pinReq
	eu, ev []int32
	ew     []int64
	err    error
}

type pinReq struct{ v, node int }

// NewBuilder returns an empty Builder; sizeHint is the expected number of
// vertices (0 is fine).
func NewBuilder(sizeHint int) *Builder {
	if sizeHint < 0 {
		sizeHint = 0
	}
	return &Builder{
		cw:    make([]int64, 0, sizeHint),
		gw:    make([]int64, 0, sizeHint),
		group: make([]int, 0, sizeHint),
	}
}

// GrowEdges makes room for n more edges (AddEdge), at once: a builder of
// a large graph does not grow its edge lists by doubling.
func (b *Builder) GrowEdges(n int) {
	if n > 0 {
		b.eu = slices.Grow(b.eu, n)
		b.ev = slices.Grow(b.ev, n)
		b.ew = slices.Grow(b.ew, n)
	}
}

func (b *Builder) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// AddVertex adds a vertex and returns its index (0, 1, 2, ... in order).
func (b *Builder) AddVertex(v Vertex) int {
	i := len(b.cw)
	if v.CPU < 0 || v.GPU < 0 {
		b.fail(&VertexError{Vertex: i, Err: ErrInvalid,
			Detail: fmt.Sprintf("negative weight (cpu %d, gpu %d)", v.CPU, v.GPU)})
	}
	b.cw = append(b.cw, v.CPU)
	b.gw = append(b.gw, v.GPU)
	b.group = append(b.group, v.Group)
	return i
}

// Pin fixes vertex v on node index node (an index into the []Node given to
// Partition). Whether that node exists is checked by Partition.
func (b *Builder) Pin(v, node int) {
	b.pins = append(b.pins, pinReq{v, node})
}

// AddEdge adds an edge between u and v with weight w >= 0. Direction does not
// matter: an edge u->v and an edge v->u are two edges, each counted once in the
// cut when u and v are apart (their weights add up). Self-loops are accepted
// and ignored (they can never be cut). Repeated edges add up.
func (b *Builder) AddEdge(u, v int, w int64) {
	n := len(b.cw)
	k := len(b.ew)
	switch {
	case u < 0 || u >= n:
		b.fail(&EdgeError{Edge: k, U: u, V: v, Err: ErrInvalid,
			Detail: fmt.Sprintf("endpoint %d is not a vertex (have %d)", u, n)})
		return
	case v < 0 || v >= n:
		b.fail(&EdgeError{Edge: k, U: u, V: v, Err: ErrInvalid,
			Detail: fmt.Sprintf("endpoint %d is not a vertex (have %d)", v, n)})
		return
	case w < 0:
		b.fail(&EdgeError{Edge: k, U: u, V: v, Err: ErrInvalid,
			Detail: fmt.Sprintf("negative weight %d", w)})
		return
	}
	b.eu = append(b.eu, int32(u))
	b.ev = append(b.ev, int32(v))
	b.ew = append(b.ew, w)
}

// Graph is an immutable weighted graph in compressed sparse row form, built
// by a Builder. Partition never modifies it, so one Graph may be partitioned
// many times (and concurrently).
type Graph struct {
	g     *graph
	group []int // caller's group ids, per vertex
	pins  []pinReq
	nedge int // distinct undirected vertex pairs with an edge
}

// NumVertices returns the number of vertices.
func (g *Graph) NumVertices() int { return g.g.n }

// NumEdges returns the number of distinct vertex pairs joined by an edge
// (parallel and opposite edges are merged, self-loops dropped).
func (g *Graph) NumEdges() int { return g.nedge }

// Vertex returns vertex i as it was added (without its pin).
func (g *Graph) Vertex(i int) Vertex {
	return Vertex{CPU: g.g.cw[i], GPU: g.g.gw[i], Group: g.group[i]}
}

// Neighbors calls fn for each neighbour of vertex i with the merged edge weight.
func (g *Graph) Neighbors(i int, fn func(j int, w int64)) {
	for e := g.g.xadj[i]; e < g.g.xadj[i+1]; e++ {
		fn(int(g.g.adj[e]), g.g.ew[e])
	}
}

const maxWeightSum = math.MaxInt64 / 4

// Build checks what was added and returns the Graph. Errors wrap ErrInvalid
// and, through *VertexError or *EdgeError, name the vertex or edge.
func (b *Builder) Build() (*Graph, error) {
	if b.err != nil {
		return nil, b.err
	}
	n := len(b.cw)
	if n > math.MaxInt32-1 {
		return nil, fmt.Errorf("%w: %d vertices, at most %d", ErrInvalid, n, math.MaxInt32-1)
	}
	if 2*len(b.ew) > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d edges, at most %d", ErrInvalid, len(b.ew), math.MaxInt32/2)
	}
	for _, p := range b.pins {
		if p.v < 0 || p.v >= n {
			return nil, &VertexError{Vertex: p.v, Err: ErrInvalid,
				Detail: fmt.Sprintf("pin of a vertex that does not exist (have %d)", n)}
		}
	}
	var tc, tg, te int64
	for i := 0; i < n; i++ {
		tc += b.cw[i]
		tg += b.gw[i]
		if tc > maxWeightSum || tg > maxWeightSum {
			return nil, &VertexError{Vertex: i, Err: ErrInvalid, Detail: "total vertex weight overflows"}
		}
	}
	for k, w := range b.ew {
		te += w
		if te > maxWeightSum {
			return nil, &EdgeError{Edge: k, U: int(b.eu[k]), V: int(b.ev[k]), Err: ErrInvalid,
				Detail: "total edge weight overflows"}
		}
	}
	g, nedge := buildCSR(n, b.eu, b.ev, b.ew)
	g.cw = append([]int64(nil), b.cw...)
	g.gw = append([]int64(nil), b.gw...)
	return &Graph{
		g:     g,
		group: append([]int(nil), b.group...),
		pins:  append([]pinReq(nil), b.pins...),
		nedge: nedge,
	}, nil
}

// buildCSR turns an edge list into symmetric CSR adjacency, merging parallel
// edges and dropping self-loops, in O(n+m) time.
func buildCSR(n int, eu, ev []int32, ew []int64) (*graph, int) {
	deg := make([]int, n+1)
	for k := range eu {
		if eu[k] != ev[k] {
			deg[eu[k]]++
			deg[ev[k]]++
		}
	}
	xadj := make([]int, n+1)
	for i := 0; i < n; i++ {
		xadj[i+1] = xadj[i] + deg[i]
	}
	adj := make([]int32, xadj[n])
	w := make([]int64, xadj[n])
	fill := deg[:n]
	copy(fill, xadj[:n])
	for k := range eu {
		u, v := eu[k], ev[k]
		if u == v {
			continue
		}
		adj[fill[u]] = v
		w[fill[u]] = ew[k]
		fill[u]++
		adj[fill[v]] = u
		w[fill[v]] = ew[k]
		fill[v]++
	}
	// Merge duplicates in place, vertex by vertex, with a position marker.
	mark := make([]int32, n)
	for i := range mark {
		mark[i] = -1
	}
	out := 0
	start := 0
	for i := 0; i < n; i++ {
		end := xadj[i+1]
		rowStart := out
		for e := start; e < end; e++ {
			j := adj[e]
			if p := mark[j]; p >= int32(rowStart) {
				w[p] += w[e]
				continue
			}
			mark[j] = int32(out)
			adj[out] = j
			w[out] = w[e]
			out++
		}
		start = end
		xadj[i+1] = out
		for e := rowStart; e < out; e++ {
			mark[adj[e]] = -1
		}
	}
	adj = adj[:out:out]
	w = w[:out:out]
	g := &graph{n: n, xadj: xadj, adj: adj, ew: w}
	return g, out / 2
}
