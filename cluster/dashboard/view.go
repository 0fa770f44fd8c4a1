package dashboard

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
)

// A graph view shows one scope of the run's expanded flow: the top level, or
// the instance of one module task. Module tasks are single boxes showing the
// progress of everything nested under them, with a link into their scope.
// A scope of more than MaxBoxes tasks is aggregated: its tasks, sorted by
// level (layer) then layout order, are cut into at most maxGroups groups of
// consecutive levels (a single huge level is cut into slices), each drawn as
// one box with its task counts and a link to its range (?lo=&hi=), which is
// drawn the same way: drill-down ends at individual tasks.

// MaxBoxes is the most tasks a graph view draws one by one.
const MaxBoxes = 240

const maxGroups = 48

// Query selects a view: Scope is a module task's path ("" the top level),
// [Lo, Hi) a range of the scope's sorted tasks (Hi 0: all).
type Query struct {
	Scope  string
	Lo, Hi int
}

// ParseQuery reads a view query from URL parameters scope, lo and hi.
func ParseQuery(v url.Values) (Query, error) {
	q := Query{Scope: v.Get("scope")}
	for _, p := range []struct {
		name string
		dst  *int
	}{{"lo", &q.Lo}, {"hi", &q.Hi}} {
		if s := v.Get(p.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return q, fmt.Errorf("dashboard: %s=%q: want a count ≥ 0", p.name, s)
			}
			*p.dst = n
		}
	}
	return q, nil
}

func (q Query) values() url.Values {
	v := url.Values{}
	if q.Scope != "" {
		v.Set("scope", q.Scope)
	}
	if q.Hi > 0 {
		v.Set("lo", strconv.Itoa(q.Lo))
		v.Set("hi", strconv.Itoa(q.Hi))
	}
	return v
}

// item is one box of a view.
type item struct {
	label, sub, title string
	kind              string // a task kind, or "group"
	state             string // a task's state; groups and modules: from their counts
	node              string
	acts              uint64
	loop              bool
	link              string // drill-down query ("" none)
	c                 Counts // groups and modules
	task              string // the task's path (data-task)
}

type viewEdge struct {
	from, to int
	weak     bool
	count    int // edges a group edge stands for
}

type view struct {
	title  string
	crumbs []crumb
	items  []item
	edges  []viewEdge
	total  int // tasks in the scope
	nodes  []string
	grid   bool // groups of levels, in reading order (gridPlace), not layered
}

type crumb struct {
	label string
	q     Query
}

// buildView builds the view q of a run (under rd.mu).
func buildView(rd *runData, st []*proto.TaskStatus, q Query) (*view, error) {
	g := rd.g
	module := -1
	if q.Scope != "" {
		v, ok := g.Lookup(q.Scope)
		if !ok || g.Vertices[v].Task.Kind != spec.KindModule || g.Vertices[v].Members == nil {
			return nil, fmt.Errorf("dashboard: scope %q: no such module task in the run: %w", q.Scope, ErrNotFound)
		}
		module = v
	}
	so := rd.scope(module)
	n := len(so.verts)
	lo, hi := q.Lo, q.Hi
	if hi == 0 || hi > n {
		hi = n
	}
	if lo > hi {
		return nil, fmt.Errorf("dashboard: range %d–%d: the scope has %d tasks: %w", q.Lo, q.Hi, n, ErrNotFound)
	}
	vw := &view{title: g.Name, total: n}
	vw.crumbs = append(vw.crumbs, crumb{g.Name, Query{}})
	for m := module; m >= 0; m = g.Vertices[m].Parent {
		vw.crumbs = append(vw.crumbs[:1], append([]crumb{{g.Vertices[m].Path, Query{Scope: g.Vertices[m].Path}}}, vw.crumbs[1:]...)...)
	}
	if lo > 0 || hi < n {
		vw.crumbs = append(vw.crumbs, crumb{levelsLabel(so.layer[lo], so.layer[hi-1]), q})
	}
	vw.nodes = runNodes(rd.info.Assignment)
	if hi-lo <= MaxBoxes {
		vw.tasks(rd, st, so.verts[lo:hi])
	} else {
		vw.groups(rd, st, q.Scope, so, lo, hi)
	}
	return vw, nil
}

func runNodes(asg []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range asg {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// tasks draws each vertex of verts as its own box.
func (vw *view) tasks(rd *runData, st []*proto.TaskStatus, verts []int) {
	g := rd.g
	at := make(map[int]int, len(verts))
	for _, v := range verts {
		vx := &g.Vertices[v]
		it := item{label: vx.Name(), kind: string(vx.Task.Kind), task: vx.Path, loop: rd.loops[v], state: proto.TaskPending}
		if v < len(rd.info.Assignment) {
			it.node = rd.info.Assignment[v]
		}
		if ts := st[v]; ts != nil {
			it.state, it.acts = ts.State, ts.Activations
			if ts.Node != "" {
				it.node = ts.Node
			}
		}
		switch vx.Task.Kind {
		case spec.KindModule:
			it.sub = "module " + vx.Task.Flow
			if vx.Members != nil {
				it.c = countVerts(g, st, g.Descendants(v))
				it.link = Query{Scope: vx.Path}.values().Encode()
				it.sub = fmt.Sprintf("module %s · %d/%d", vx.Task.Flow, it.c.Done+it.c.Skipped, it.c.Tasks)
			}
		case spec.KindCondition, spec.KindMultiCondition:
			it.sub = string(vx.Task.Kind) + " " + vx.Task.Func
		default:
			it.sub = vx.Task.Func
			if vx.Task.Domain == spec.DomainGPU {
				it.sub += " · gpu"
			}
		}
		if it.node != "" && !slices.Contains(vw.nodes, it.node) {
			// A node that took the task over after the assignment: in
			// the legend too, so its outline has a colour and a name.
			vw.nodes = append(vw.nodes, it.node)
		}
		it.title = fmt.Sprintf("%s\nstate: %s\nnode: %s\nactivations: %d", vx.Path, it.state, it.node, it.acts)
		at[v] = len(vw.items)
		vw.items = append(vw.items, it)
	}
	for _, v := range verts {
		for _, e := range g.Vertices[v].Succ {
			if j, ok := at[e.To]; ok {
				vw.edges = append(vw.edges, viewEdge{from: at[v], to: j, weak: e.Weak, count: 1})
			}
		}
	}
}

// vertexStatus indexes a status's tasks by vertex. The status lists the
// vertices in order (subflow children between them), so a walk finds them
// without a lookup; anything else is looked up by name.
func vertexStatus(g *spec.Graph, st proto.RunStatus) []*proto.TaskStatus {
	out := make([]*proto.TaskStatus, len(g.Vertices))
	k := 0
	for i := range st.Tasks {
		ts := &st.Tasks[i]
		if k < len(g.Vertices) && g.Vertices[k].Path == ts.Name {
			out[k] = ts
			k++
			continue
		}
		if v, ok := g.Lookup(ts.Name); ok {
			out[v] = ts
		}
	}
	return out
}

// countVerts tallies the states of verts.
func countVerts(g *spec.Graph, st []*proto.TaskStatus, verts []int) Counts {
	var c Counts
	for _, v := range verts {
		state := proto.TaskPending
		if ts := st[v]; ts != nil {
			state = ts.State
		}
		c.Add(state)
	}
	return c
}

// groups cuts so.verts[lo:hi] into at most maxGroups boxes of consecutive
// levels.
func (vw *view) groups(rd *runData, st []*proto.TaskStatus, scope string, so *scopeOrder, lo, hi int) {
	g := rd.g
	vw.grid = true
	cuts := groupCuts(so.layer, lo, hi)
	group := make([]int, len(g.Vertices)) // vertex → its group, -1 outside the range
	for i := range group {
		group[i] = -1
	}
	for gi := 0; gi+1 < len(cuts); gi++ {
		a, b := cuts[gi], cuts[gi+1]
		for k := a; k < b; k++ {
			group[so.verts[k]] = gi
		}
		c := countVerts(g, st, so.verts[a:b])
		it := item{kind: "group", c: c, state: groupState(c),
			link: Query{Scope: scope, Lo: a, Hi: b}.values().Encode()}
		it.label = levelsLabel(so.layer[a], so.layer[b-1])
		it.sub = fmt.Sprintf("%d tasks · %d%% done", b-a, int(100*progress(c)))
		it.title = fmt.Sprintf("%s: %d tasks\ndone %d, running %d, failed %d, pending %d", it.label, b-a, c.Done, c.Running, c.Failed, c.Pending)
		vw.items = append(vw.items, it)
	}
	type pair struct {
		a, b int
		weak bool
	}
	agg := map[pair]int{}
	var order []pair
	for k := lo; k < hi; k++ {
		v := so.verts[k]
		for _, e := range g.Vertices[v].Succ {
			gj := group[e.To]
			if gj < 0 || gj == group[v] {
				continue
			}
			p := pair{group[v], gj, e.Weak}
			if agg[p] == 0 {
				order = append(order, p)
			}
			agg[p]++
		}
	}
	for _, p := range order {
		vw.edges = append(vw.edges, viewEdge{from: p.a, to: p.b, weak: p.weak, count: agg[p]})
	}
}

// groupCuts cuts the sorted tasks [lo, hi) of a scope, whose levels are
// layer, into at most maxGroups groups. A range of several levels is cut
// only between levels, into groups of the same number of whole levels, so
// no two groups share a level and their labels ("levels 3–5") never
// overlap; a range of one level (a single huge level) is cut into slices
// of it. Either way a group is smaller than the range, so drilling down
// always ends at single tasks.
func groupCuts(layer []int, lo, hi int) []int {
	var starts []int // where each level of the range starts
	for k := lo; k < hi; k++ {
		if k == lo || layer[k] != layer[k-1] {
			starts = append(starts, k)
		}
	}
	var cuts []int
	if len(starts) == 1 {
		size := (hi - lo + maxGroups - 1) / maxGroups
		for a := lo; a < hi; a += size {
			cuts = append(cuts, a)
		}
	} else {
		per := (len(starts) + maxGroups - 1) / maxGroups // levels a group
		for i := 0; i < len(starts); i += per {
			cuts = append(cuts, starts[i])
		}
	}
	return append(cuts, hi)
}

// levelsLabel names a group's levels: "level 3" or "levels 3–5".
func levelsLabel(l1, l2 int) string {
	if l1 == l2 {
		return fmt.Sprintf("level %d", l1)
	}
	return fmt.Sprintf("levels %d–%d", l1, l2)
}

func groupState(c Counts) string {
	switch {
	case c.Failed > 0:
		return proto.TaskFailed
	case c.Running > 0:
		return proto.TaskRunning
	case c.Tasks > 0 && c.Done+c.Skipped == c.Tasks:
		return proto.TaskDone
	case c.Done > 0:
		return proto.TaskRunning
	case c.Cancelled > 0:
		return proto.TaskCancelled
	}
	return proto.TaskPending
}
