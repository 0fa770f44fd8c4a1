package spec

import (
	"fmt"
	"slices"
	"time"
)

// Graph is a validated flow with names resolved to indices: the view the
// coordinator partitions and a node runs. Build it with File.Expand (module
// tasks inlined) or File.Graph (one flow, modules left as single vertices).
//
// Scopes. Every vertex belongs to a scope: the top level of the flow (Parent
// -1) or the instance of a module task's flow (Parent = that module vertex).
// Edges never cross scopes. A module vertex behaves in its own scope like any
// task; when it is activated, its instance runs: the instance's sources
// (ScopeSources) start, and the module vertex completes when the instance has
// nothing left to run (a termination question the runtime answers, as
// localexec does for a composed taskflow). Tasks of an instance see only their
// own scope's predecessors as inputs.
type Graph struct {
	Name     string        // the flow's name
	Timeout  time.Duration // the flow's run timeout; 0: none
	Vertices []Vertex

	byPath map[string]int
}

// Vertex is one task of a Graph.
type Vertex struct {
	ID     int
	Path   string // the task's name, prefixed by its module tasks' names: "mod/inner"
	Flow   string // the flow that declares the task
	Parent int    // the enclosing module vertex, -1 at the top level
	// Task is the declared task with Kind and Domain defaulted (never empty).
	Task Task
	// Succ holds the out-edges in order. For a condition task, they are its
	// precede list in order (Edge.Index is the position a returned index
	// selects; a name listed twice gives two edges). For other tasks, its
	// precede list in order, then the edges other tasks declared with
	// succeed, in task order.
	Succ []Edge
	// Pred holds the in-edges.
	Pred []Edge
	// StrongIn counts the strong in-edges: the task's join counter.
	StrongIn int
	// Members lists, for an expanded module task, the tasks of its flow's
	// instance in declaration order; nil otherwise.
	Members []int
}

// Edge is an edge between two vertices of one scope.
type Edge struct {
	From, To int
	Weak     bool // out of a condition task
	Index    int  // a weak edge's position in the condition's precede list; -1 for strong edges
}

// Name returns the task's declared name (without the module prefix).
func (v *Vertex) Name() string { return v.Task.Name }

// MaxVertices bounds the size of an expanded graph.
const MaxVertices = 1 << 20

// Expand validates the file's structure and returns the graph of its first
// flow with every module task's flow inlined, recursively, as tasks named
// "module/task". Each module task gets its own instance.
func (f *File) Expand() (*Graph, error) {
	root := f.Root()
	if root == nil {
		return nil, Errors{{File: f.Path, Msg: "file has no flows", Kind: ErrMissing}}
	}
	return f.build(root.Name, true)
}

// Graph validates the file's structure and returns the graph of the named
// flow without inlining modules: a module task is one vertex without Members.
func (f *File) Graph(name string) (*Graph, error) { return f.build(name, false) }

// Compile validates the file with opts and returns the graph of its first
// flow expanded, as Validate and then Expand do, but validating and
// resolving each flow once: what a node does with every run it is assigned.
func (f *File) Compile(opts Options) (*Graph, error) {
	root := f.Root()
	if root == nil {
		return nil, Errors{{File: f.Path, Msg: "file has no flows", Kind: ErrMissing}}
	}
	return f.validBuild(root.Name, true, opts)
}

func (f *File) build(name string, expand bool) (*Graph, error) {
	return f.validBuild(name, expand, Options{})
}

// validBuild validates f with opts (keeping the flows' resolved graphs) and
// builds the graph of flow name from them.
func (f *File) validBuild(name string, expand bool, opts Options) (*Graph, error) {
	c := &collector{file: f.Path}
	graphs := map[string]*flowGraph{}
	validateFile(c, f, opts, graphs)
	if err := c.result(); err != nil {
		return nil, err
	}
	fl := f.Flow(name)
	if fl == nil {
		return nil, Errors{{File: f.Path, Flow: name, Msg: fmt.Sprintf("no flow %q in the file", name), Kind: ErrUnknownFlow}}
	}
	n := len(fl.Tasks)
	if expand {
		if n = f.expandedSize(fl.Name, map[string]int{}); n > MaxVertices {
			return nil, Errors{{File: f.Path, Flow: name, Msg: fmt.Sprintf("expanding modules gives over %d tasks", MaxVertices), Kind: ErrTooLarge}}
		}
	}
	// Sized once: grown module by module, the vertices (~300 bytes each)
	// were copied over and over, and the path index rehashed.
	g := &Graph{Name: fl.Name, Timeout: fl.Timeout, Vertices: make([]Vertex, 0, n), byPath: make(map[string]int, n)}
	if err := g.instantiate(f, fl, "", -1, expand, graphs); err != nil {
		return nil, err
	}
	return g, nil
}

// Graph returns the graph of a flow validated alone (see Flow.Validate); its
// module tasks are single vertices.
func (fl *Flow) Graph() (*Graph, error) {
	if err := fl.Validate(Options{}); err != nil {
		return nil, err
	}
	g := &Graph{Name: fl.Name, Timeout: fl.Timeout, byPath: map[string]int{}}
	if err := g.instantiate(nil, fl, "", -1, false, map[string]*flowGraph{}); err != nil {
		return nil, err
	}
	return g, nil
}

// ExpandedSize is the number of vertices Expand would make of the file's
// first flow, without making them: a cheap size check before expanding.
// Above MaxVertices, and for flows that compose themselves in a cycle, it
// reports MaxVertices+1; an unknown module flow counts as empty; a file
// without flows gives 0.
func (f *File) ExpandedSize() int {
	root := f.Root()
	if root == nil {
		return 0
	}
	return f.expandedSize(root.Name, map[string]int{})
}

// expandedSize counts the vertices Expand would make (saturating above
// MaxVertices, and on a module cycle).
func (f *File) expandedSize(name string, memo map[string]int) int {
	if n, ok := memo[name]; ok {
		return n
	}
	fl := f.Flow(name)
	if fl == nil {
		return 0
	}
	memo[name] = MaxVertices + 1 // while counting: a cycle through name saturates
	n := len(fl.Tasks)
	for i := range fl.Tasks {
		if fl.Tasks[i].Kind == KindModule {
			n += f.expandedSize(fl.Tasks[i].Flow, memo)
			if n > MaxVertices {
				n = MaxVertices + 1
				break
			}
		}
	}
	memo[name] = n
	return n
}

func (g *Graph) instantiate(f *File, fl *Flow, prefix string, parent int, expand bool, graphs map[string]*flowGraph) error {
	fg := graphs[fl.Name]
	if fg == nil {
		fg = resolve(nil, fl)
		graphs[fl.Name] = fg
	}
	if len(g.Vertices)+len(fl.Tasks) > MaxVertices {
		return Errors{{Flow: fl.Name, Msg: fmt.Sprintf("expanding modules gives over %d tasks", MaxVertices), Kind: ErrTooLarge}}
	}
	base := len(g.Vertices)
	g.Vertices = slices.Grow(g.Vertices, len(fl.Tasks))
	for i := range fl.Tasks {
		t := fl.Tasks[i]
		t.Kind = t.Kind.Or()
		if t.Kind != KindModule {
			t.Domain = t.Domain.Or()
		}
		v := Vertex{ID: base + i, Path: prefix + t.Name, Flow: fl.Name, Parent: parent, Task: t}
		g.byPath[v.Path] = v.ID
		g.Vertices = append(g.Vertices, v)
	}
	// The instance's edges in two arrays, each vertex's a full slice of
	// them (its out-edges are succ[i], its in-edges pred[i]; edges never
	// cross scopes): two allocations, not a few growing ones a vertex.
	nsucc, npred := 0, 0
	for i := range fl.Tasks {
		nsucc += len(fg.succ[i])
		npred += len(fg.pred[i])
	}
	succs, preds := make([]Edge, 0, nsucc), make([]Edge, 0, npred)
	for i := range fl.Tasks {
		v := &g.Vertices[base+i]
		if lo := len(succs); len(fg.succ[i]) > 0 {
			for _, e := range fg.succ[i] {
				succs = append(succs, Edge{From: base + e.from, To: base + e.to, Weak: e.weak, Index: e.index})
			}
			v.Succ = succs[lo:len(succs):len(succs)]
		}
		if lo := len(preds); len(fg.pred[i]) > 0 {
			for _, e := range fg.pred[i] {
				preds = append(preds, Edge{From: base + e.from, To: base + e.to, Weak: e.weak, Index: e.index})
				if !e.weak {
					v.StrongIn++
				}
			}
			v.Pred = preds[lo:len(preds):len(preds)]
		}
	}
	if !expand || f == nil {
		return nil
	}
	for i := range fl.Tasks {
		t := &fl.Tasks[i]
		if t.Kind != KindModule {
			continue
		}
		sub := f.Flow(t.Flow)
		id := base + i
		start := len(g.Vertices)
		if err := g.instantiate(f, sub, g.Vertices[id].Path+"/", id, expand, graphs); err != nil {
			return err
		}
		members := make([]int, len(sub.Tasks))
		for j := range members {
			members[j] = start + j
		}
		g.Vertices[id].Members = members
	}
	return nil
}

// Len returns the number of vertices.
func (g *Graph) Len() int { return len(g.Vertices) }

// Lookup returns the vertex with the given path ("task" or "module/task").
func (g *Graph) Lookup(path string) (int, bool) {
	i, ok := g.byPath[path]
	return i, ok
}

// Paths returns the paths of the given vertices.
func (g *Graph) Paths(ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = g.Vertices[id].Path
	}
	return out
}

// Scope returns the vertices of a scope (-1: the top level; else a module
// vertex) in declaration order.
func (g *Graph) Scope(module int) []int {
	if module >= 0 {
		return g.Vertices[module].Members
	}
	var out []int
	for i := range g.Vertices {
		if g.Vertices[i].Parent == -1 {
			out = append(out, i)
		}
	}
	return out
}

// Sources returns the top-level tasks without any predecessor: a run starts
// with them.
func (g *Graph) Sources() []int { return g.ScopeSources(-1) }

// ScopeSources returns the tasks of a scope without any predecessor: they
// start when the scope starts (a run, or an activation of the module task).
func (g *Graph) ScopeSources(module int) []int {
	var out []int
	for _, i := range g.Scope(module) {
		if len(g.Vertices[i].Pred) == 0 {
			out = append(out, i)
		}
	}
	return out
}

// Sinks returns the tasks of a scope without successors.
func (g *Graph) Sinks(module int) []int {
	var out []int
	for _, i := range g.Scope(module) {
		if len(g.Vertices[i].Succ) == 0 {
			out = append(out, i)
		}
	}
	return out
}

// Successors returns the targets of i's out-edges in order (see Vertex.Succ).
func (g *Graph) Successors(i int) []int {
	out := make([]int, len(g.Vertices[i].Succ))
	for k, e := range g.Vertices[i].Succ {
		out[k] = e.To
	}
	return out
}

// StrongSuccs returns the targets of i's strong out-edges.
func (g *Graph) StrongSuccs(i int) []int { return g.succs(i, false) }

func (g *Graph) succs(i int, weak bool) []int {
	var out []int
	for _, e := range g.Vertices[i].Succ {
		if e.Weak == weak {
			out = append(out, e.To)
		}
	}
	return out
}

// StrongPreds returns i's strong predecessors: the tasks whose outputs are its
// inputs and whose completion its join counter waits for.
func (g *Graph) StrongPreds(i int) []int { return g.preds(i, false) }

// WeakPreds returns the condition tasks with an edge to i (one entry per
// distinct condition task).
func (g *Graph) WeakPreds(i int) []int {
	out := g.preds(i, true)
	slices.Sort(out)
	return slices.Compact(out)
}

func (g *Graph) preds(i int, weak bool) []int {
	var out []int
	for _, e := range g.Vertices[i].Pred {
		if e.Weak == weak {
			out = append(out, e.From)
		}
	}
	return out
}

// StrongPredCount returns i's join counter.
func (g *Graph) StrongPredCount(i int) int { return g.Vertices[i].StrongIn }

// Edges returns every edge, grouped by source in vertex order.
func (g *Graph) Edges() []Edge {
	var out []Edge
	for i := range g.Vertices {
		out = append(out, g.Vertices[i].Succ...)
	}
	return out
}

// Descendants returns every vertex nested under a module vertex, at any depth.
func (g *Graph) Descendants(module int) []int {
	var out []int
	stack := slices.Clone(g.Vertices[module].Members)
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		out = append(out, v)
		stack = append(stack, g.Vertices[v].Members...)
	}
	slices.Sort(out)
	return out
}

// hasWeak reports whether any edge is weak (out of a condition task).
func (g *Graph) hasWeak() bool {
	for i := range g.Vertices {
		for _, e := range g.Vertices[i].Succ {
			if e.Weak {
				return true
			}
		}
	}
	return false
}

// Cycles returns the strongly connected components of the graph (over all
// edges, strong and weak) that hold a cycle, sorted ascending and ordered by
// their smallest vertex: disjoint, each inside one scope (LoopGroups adds
// the tasks nested under their module tasks).
//
// A graph without a weak edge (no condition task) has none: every cycle
// of a valid flow goes through a condition task (Validate refuses a cycle
// of strong edges), so it is not searched (a DAG of 100K tasks took 60 ms).
func (g *Graph) Cycles() [][]int {
	if !g.hasWeak() {
		return nil
	}
	// The successors laid out once (Successors makes a slice a call, and
	// every vertex is asked twice).
	off := make([]int, len(g.Vertices)+1)
	for i := range g.Vertices {
		off[i+1] = off[i] + len(g.Vertices[i].Succ)
	}
	to := make([]int, off[len(g.Vertices)])
	for i := range g.Vertices {
		for k, e := range g.Vertices[i].Succ {
			to[off[i]+k] = e.To
		}
	}
	adj := func(i int) []int { return to[off[i]:off[i+1]:off[i+1]] }
	var out [][]int
	for _, comp := range components(len(g.Vertices), adj) {
		if cyclic(comp, adj) {
			out = append(out, comp)
		}
	}
	return out
}

// LoopGroups returns the condition loops of the graph: the strongly connected
// components (over all edges, strong and weak) of more than one task, or of a
// task with an edge to itself. Each group is a set of tasks that activate one
// another again and again, so the coordinator keeps a group on one node
// (coord.Plan; unless the flow pins its tasks apart). A module task in a group brings every task nested
// under it (each activation reruns them). Groups are sorted ascending and
// ordered by their smallest vertex; loops inside a module instance are
// groups of their own (and also part of an outer group whose loop holds the
// module task).
func (g *Graph) LoopGroups() [][]int {
	var out [][]int
	for _, comp := range g.Cycles() {
		group := slices.Clone(comp)
		for _, v := range comp {
			if g.Vertices[v].Task.Kind == KindModule {
				group = append(group, g.Descendants(v)...)
			}
		}
		slices.Sort(group)
		out = append(out, slices.Compact(group))
	}
	return out
}
