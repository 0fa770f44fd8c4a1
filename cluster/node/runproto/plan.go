package runproto

import (
	"errors"
	"fmt"
	"slices"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// A node builds its part of a run from a Plan the leader compiled for it
// (transport.Plan, in the Assignment), not from the flow's text: Compile
// is the leader's half, OpenPlan the node's. A plan holds the node's vertices
// and their neighbours, with what the run protocol derives from the whole
// graph (loop contexts, free joins), so that no node parses, validates or
// expands the flow, and none needs the whole of it.

// ErrPlan: a plan does not fit the run it came with (its size, or a
// vertex the node runs that it does not hold).
var ErrPlan = errors.New("runproto: bad plan")

var (
	kinds = map[spec.Kind]transport.TaskKind{
		spec.KindStatic: transport.KindStatic, spec.KindCondition: transport.KindCondition,
		spec.KindMultiCondition: transport.KindMultiCondition, spec.KindSubflow: transport.KindSubflow,
		spec.KindModule: transport.KindModule,
	}
	specKinds = [...]spec.Kind{spec.KindStatic, spec.KindCondition, spec.KindMultiCondition, spec.KindSubflow, spec.KindModule}
)

// Compile makes the plan of each node of an assignment (nodes, and owner:
// vertex → index in nodes) of the run whose expanded graph is g; loops and
// free are g's (NewLoops, FreeJoins). plans[i] is nodes[i]'s: the vertices
// it owns, and for each its predecessors, successors, module task and
// members, as neighbours. It reads g only.
func Compile(g *spec.Graph, loops *Loops, free []bool, nodes []string, owner []uint32) ([]*transport.Plan, error) {
	n := len(g.Vertices)
	if len(owner) != n {
		return nil, fmt.Errorf("%w: an assignment of %d tasks for a graph of %d", ErrPlan, len(owner), n)
	}
	plans := make([]*transport.Plan, len(nodes))
	mark := make([]uint8, n) // 1: local, 2: a neighbour
	for ni := range nodes {
		clear(mark)
		count := 0
		add := func(v int) {
			if mark[v] == 0 {
				mark[v] = 2
				count++
			}
		}
		for v := range g.Vertices {
			if int(owner[v]) != ni {
				continue
			}
			if mark[v] == 0 {
				count++
			}
			mark[v] = 1
		}
		for v := range g.Vertices {
			if mark[v] != 1 {
				continue
			}
			vx := &g.Vertices[v]
			for _, e := range vx.Succ {
				add(e.To)
			}
			for _, e := range vx.Pred {
				add(e.From)
			}
			if vx.Parent >= 0 {
				add(vx.Parent)
			}
			for _, m := range vx.Members {
				add(m)
			}
		}
		p := &transport.Plan{Tasks: uint32(n), Vertices: make([]transport.PlanVertex, 0, count)}
		var ids []int32 // the loops of its vertices
		seen := map[int32]bool{}
		// One backing array for the edge lists of the node's own vertices.
		ne := 0
		for v := range g.Vertices {
			if mark[v] == 1 {
				ne += len(g.Vertices[v].Succ) + len(g.Vertices[v].Pred)
			}
		}
		edges := make([]transport.PlanEdge, 0, ne)
		for v := range g.Vertices {
			if mark[v] == 0 {
				continue
			}
			pv := planVertex(g, v, mark[v] == 1, loops, free, &edges)
			if pv.Loop >= 0 && !seen[pv.Loop] {
				seen[pv.Loop] = true
				ids = append(ids, pv.Loop)
			}
			p.Vertices = append(p.Vertices, pv)
		}
		slices.Sort(ids)
		for _, c := range ids {
			heads := make([]uint32, len(loops.heads[c]))
			for j, u := range loops.heads[c] {
				heads[j] = uint32(u)
			}
			p.Loops = append(p.Loops, transport.PlanLoop{ID: uint32(c), Heads: heads})
		}
		plans[ni] = p
	}
	return plans, nil
}

func planVertex(g *spec.Graph, v int, local bool, loops *Loops, free []bool, edges *[]transport.PlanEdge) transport.PlanVertex {
	vx := &g.Vertices[v]
	t := &vx.Task
	pv := transport.PlanVertex{Index: uint32(v), Path: vx.Path, Name: t.Name, Local: local, Kind: kinds[t.Kind.Or()],
		Device: -1, Parent: -1, Loop: loops.comp[v], Slot: loops.slot[v]}
	if !local {
		return pv
	}
	pv.Func, pv.Args, pv.Retries, pv.Timeout = t.Func, t.Args, uint32(max(t.Retries, 0)), t.Timeout
	if t.Domain.Or() == spec.DomainGPU {
		pv.Domain = transport.DomainGPU
	}
	if t.Device != nil {
		pv.Device = int32(*t.Device)
	}
	pv.Parent = int32(vx.Parent)
	pv.Succ = planEdges(edges, vx.Succ, false)
	pv.Pred = planEdges(edges, vx.Pred, true)
	for _, m := range vx.Members {
		pv.Members = append(pv.Members, uint32(m))
	}
	pv.Free = v < len(free) && free[v]
	return pv
}

// planEdges appends es to *edges (room made for them all) and returns
// them, capped.
func planEdges(edges *[]transport.PlanEdge, es []spec.Edge, in bool) []transport.PlanEdge {
	if len(es) == 0 {
		return nil
	}
	at := len(*edges)
	*edges = append(*edges, make([]transport.PlanEdge, len(es))...)
	out := (*edges)[at : at+len(es) : at+len(es)]
	for i, e := range es {
		peer := e.To
		if in {
			peer = e.From
		}
		out[i] = transport.PlanEdge{Peer: uint32(peer), Index: -1}
		if e.Weak {
			out[i].Index = int32(e.Index)
		}
	}
	return out
}

// Part is what a node runs one run by, made from the plans it was given
// (OpenPlan): a graph of the run's size whose vertices the plans held are set
// (every other is a placeholder: ID -1, Parent -2, no edges), their loop
// contexts and free joins. It is read-only once made.
type Part struct {
	G     *spec.Graph
	Loops *Loops
	Free  []bool
	Local []bool // the vertices a plan gave as the node's own
}

// Placeholder is the Parent of a vertex no plan held.
const Placeholder = -2

// OpenPlan makes p into a Part. With base (the Part of the run's earlier
// generations here), the result holds base's vertices too: a vertex p
// gives as the node's own replaces base's, a neighbour is added where base
// has nothing. Neither p nor base is changed.
func OpenPlan(p *transport.Plan, base *Part) (*Part, error) {
	n := int(p.Tasks)
	if base != nil && len(base.G.Vertices) != n {
		return nil, fmt.Errorf("%w: a plan of %d tasks for a run of %d", ErrPlan, n, len(base.G.Vertices))
	}
	g := &spec.Graph{Vertices: make([]spec.Vertex, n)}
	l := &Loops{comp: make([]int32, n), slot: make([]int32, n)}
	pt := &Part{G: g, Loops: l, Free: make([]bool, n), Local: make([]bool, n)}
	sparse := false // only p's vertices are set: none is known here yet
	if base != nil {
		g.Name, g.Timeout = base.G.Name, base.G.Timeout
		copy(g.Vertices, base.G.Vertices)
		copy(l.comp, base.Loops.comp)
		copy(l.slot, base.Loops.slot)
		l.width = append(l.width, base.Loops.width...)
		l.heads = append(l.heads, base.Loops.heads...)
		copy(pt.Free, base.Free)
		copy(pt.Local, base.Local)
	} else {
		// A placeholder where the plan has no vertex; where its vertices
		// come in ascending order, each once (as Plan.Decode has them), a
		// vertex it has is written once, below, not twice.
		sparse = true
		for i := 1; i < len(p.Vertices) && sparse; i++ {
			sparse = p.Vertices[i].Index > p.Vertices[i-1].Index
		}
		j := 0
		for v := range g.Vertices {
			if sparse && j < len(p.Vertices) && int(p.Vertices[j].Index) == v {
				j++
				continue
			}
			g.Vertices[v] = spec.Vertex{ID: -1, Parent: Placeholder}
			l.comp[v], l.slot[v] = -1, -1
		}
	}
	// One backing array for every edge list and member list of the plan.
	ne, nm := 0, 0
	for i := range p.Vertices {
		ne += len(p.Vertices[i].Succ) + len(p.Vertices[i].Pred)
		nm += len(p.Vertices[i].Members)
	}
	edges := make([]spec.Edge, 0, ne)
	members := make([]int, 0, nm)
	for i := range p.Vertices {
		pv := &p.Vertices[i]
		v := int(pv.Index)
		if !pv.Local && !sparse && g.Vertices[v].Parent != Placeholder {
			continue // known here already, as a neighbour or as its own
		}
		vx := spec.Vertex{ID: v, Path: pv.Path, Parent: int(pv.Parent),
			Task: spec.Task{Name: pv.Name, Kind: specKinds[pv.Kind], Func: pv.Func, Args: pv.Args, Retries: int(pv.Retries), Timeout: pv.Timeout}}
		if pv.Kind != transport.KindModule {
			vx.Task.Domain = spec.DomainCPU
			if pv.Domain == transport.DomainGPU {
				vx.Task.Domain = spec.DomainGPU
			}
		}
		if pv.Device >= 0 {
			d := int(pv.Device)
			vx.Task.Device = &d
		}
		if !pv.Local && vx.Parent == Placeholder {
			vx.Parent = -1
		}
		start := len(edges)
		for _, e := range pv.Succ {
			edges = append(edges, spec.Edge{From: v, To: int(e.Peer), Weak: e.Weak(), Index: int(e.Index)})
		}
		vx.Succ = edges[start:len(edges):len(edges)]
		start = len(edges)
		for _, e := range pv.Pred {
			edges = append(edges, spec.Edge{From: int(e.Peer), To: v, Weak: e.Weak(), Index: int(e.Index)})
			if !e.Weak() {
				vx.StrongIn++
			}
		}
		vx.Pred = edges[start:len(edges):len(edges)]
		if len(pv.Members) > 0 {
			start = len(members)
			for _, m := range pv.Members {
				members = append(members, int(m))
			}
			vx.Members = members[start:len(members):len(members)]
		}
		if len(vx.Succ) == 0 {
			vx.Succ = nil
		}
		if len(vx.Pred) == 0 {
			vx.Pred = nil
		}
		g.Vertices[v] = vx
		l.comp[v], l.slot[v] = pv.Loop, pv.Slot
		pt.Free[v] = pv.Free
		pt.Local[v] = pt.Local[v] || pv.Local
	}
	for _, pl := range p.Loops {
		c := int(pl.ID)
		for len(l.width) <= c {
			l.width = append(l.width, 0)
			l.heads = append(l.heads, nil)
		}
		heads := make([]int, len(pl.Heads))
		for j, u := range pl.Heads {
			heads[j] = int(u)
		}
		l.width[c], l.heads[c] = len(heads), heads
	}
	return pt, nil
}

// Holds reports whether the part has vertex v as its own (a plan gave it
// as local).
func (pt *Part) Holds(v int) bool { return v >= 0 && v < len(pt.Local) && pt.Local[v] }
