package spec

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode"
)

// Validate checks every rule of a flow file (docs/design.md, "The contract") on every flow of the file, and
// returns all problems as an Errors (nil when the file is valid):
//
//   - a task without a name or with a duplicate one; a flow without a name or
//     with a duplicate one; a file or flow without any;
//   - an unknown kind, function (with opts.Funcs), flow (module), predecessor
//     (succeed) or successor (precede);
//   - a condition task given a successor through another task's succeed list
//     instead of its own precede list;
//   - a cycle with no condition task on it (see below); flows whose modules
//     compose each other in a cycle;
//   - a GPU request (domain gpu, device N) the cluster cannot meet or a node pin
//     to a node that is not there (with opts.Resources);
//   - a flow with no task without predecessors;
//   - and the field checks a user expects: negative retries or device, an
//     unknown domain, a device without domain gpu, a gpu domain on a task that
//     is not static, a module task with func, args, domain, retries, node or
//     timeout, flow on a task that is not a module, a missing func, a function
//     whose kind or domain does not fit the task, arguments the function
//     rejects, names with '/' (reserved for module paths) or control characters.
//
// The cycle rule. Edges out of a non-condition task are strong (they count in
// the successor's join counter); edges out of a condition task are weak (the
// condition schedules the successor directly). A cycle made of strong edges
// only can never run: each task on it waits for its predecessor on it. A
// cycle through a condition task contains that task's weak out-edge and is
// legal. Since an edge is weak exactly when it leaves a condition task, "a
// cycle with no condition task on it" and "a cycle of strong edges" are the
// same thing, and Validate finds them as the strongly connected components of
// the strong-edge graph (a component of more than one task, or a task with a
// strong edge to itself). Each such component is reported once, with one
// cycle through it spelled out.
func (f *File) Validate(opts Options) error {
	c := &collector{file: f.Path}
	validateFile(c, f, opts, nil)
	return c.result()
}

// Validate checks one flow alone: every rule except the existence of the
// flows its module tasks name and module cycles (those need the file).
func (fl *Flow) Validate(opts Options) error {
	c := &collector{}
	checkParams(c, &File{Flows: []Flow{*fl}})
	opts.params = len(fl.Params) > 0
	validateFlow(c, fl, nil, opts)
	return c.result()
}

// validateFile validates f; graphs, when not nil, receives each flow's
// resolved graph by name, for building the file's Graph without resolving
// it again.
func validateFile(c *collector, f *File, opts Options, graphs map[string]*flowGraph) {
	if len(f.Flows) == 0 {
		c.add(&Error{Msg: "file has no flows", Kind: ErrMissing})
		return
	}
	checkParams(c, f)
	opts.params = len(f.Params()) > 0
	flows := map[string]*Flow{}
	for i := range f.Flows {
		fl := &f.Flows[i]
		line := fl.pos.field("name")
		switch {
		case fl.Name == "":
			c.add(&Error{Field: "name", Line: line, Msg: fmt.Sprintf("flow #%d has no name", i+1), Kind: ErrMissing})
		case badName(fl.Name, false) != "":
			c.add(&Error{Flow: fl.Name, Field: "name", Line: line, Msg: badName(fl.Name, false), Kind: ErrBadValue})
		case flows[fl.Name] != nil:
			c.add(&Error{Flow: fl.Name, Field: "name", Line: line, Msg: "duplicate flow name" + firstAt(flows[fl.Name].pos.field("name")), Kind: ErrDuplicate})
		default:
			flows[fl.Name] = fl
		}
	}
	for i := range f.Flows {
		fl := &f.Flows[i]
		g := validateFlow(c, fl, flows, opts)
		if graphs != nil && g != nil && flows[fl.Name] == fl {
			graphs[fl.Name] = g
		}
	}
	checkModuleCycles(c, f, flows)
}

func firstAt(line int) string {
	if line > 0 {
		return fmt.Sprintf(", first at line %d", line)
	}
	return ""
}

// badName explains what is wrong with a name, or returns "".
func badName(s string, task bool) string {
	if task && strings.Contains(s, "/") {
		return fmt.Sprintf("name %q contains '/', which is reserved for module paths (parent/child)", s)
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Sprintf("name %q contains a control or invalid character", s)
		}
	}
	if strings.TrimSpace(s) != s {
		return fmt.Sprintf("name %q starts or ends with white space", s)
	}
	return ""
}

// edge is one resolved edge of a flow, with where it was declared.
type edge struct {
	from, to int
	weak     bool
	index    int    // position in the condition's precede list; -1 for strong edges
	declTask int    // the task whose list declares it
	field    string // "precede" or "succeed"
	item     int    // position in that list
}

// flowGraph is a flow with names resolved to indices.
type flowGraph struct {
	flow   *Flow
	index  map[string]int      // name -> first task with it
	succ   [][]edge            // ordered out-edges
	pred   [][]edge            // in-edges, in declaration order
	strong map[[2]int]struct{} // strong out-edges of the tasks with more than scanMax
}

// has reports whether the edge from → to is in the graph, for a from that
// is not a condition (all its out-edges strong). A short out-list is
// scanned; past scanMax edges they are also kept in a set, since scanning
// made a task with thousands of successors (or a sink listing thousands of
// predecessors) quadratic to resolve.
func (g *flowGraph) has(from, to int) bool {
	if len(g.succ[from]) <= scanMax {
		for _, e := range g.succ[from] {
			if e.to == to {
				return true
			}
		}
		return false
	}
	_, ok := g.strong[[2]int{from, to}]
	return ok
}

// scanMax is the longest out-list has scans.
const scanMax = 16

func (g *flowGraph) add(e edge) {
	g.succ[e.from] = append(g.succ[e.from], e)
	g.pred[e.to] = append(g.pred[e.to], e)
	switch out := g.succ[e.from]; {
	case len(out) == scanMax+1: // from now on, from's edges are looked up in the set
		if g.strong == nil {
			g.strong = map[[2]int]struct{}{}
		}
		for _, x := range out {
			if !x.weak {
				g.strong[[2]int{x.from, x.to}] = struct{}{}
			}
		}
	case len(out) > scanMax+1 && !e.weak:
		g.strong[[2]int{e.from, e.to}] = struct{}{}
	}
}

// resolve builds the flow's graph, reporting (when c is not nil) unknown and
// duplicate references and condition successors given through succeed.
func resolve(c *collector, fl *Flow) *flowGraph {
	n := len(fl.Tasks)
	g := &flowGraph{flow: fl, index: make(map[string]int, n), succ: make([][]edge, n), pred: make([][]edge, n)}
	for i, t := range fl.Tasks {
		if t.Name == "" {
			continue
		}
		if _, dup := g.index[t.Name]; !dup {
			g.index[t.Name] = i
		}
	}
	report := func(i int, field string, item int, kind error, format string, a ...any) {
		if c == nil {
			return
		}
		t := &fl.Tasks[i]
		c.add(&Error{Flow: fl.Name, Task: t.Name, Index: taskIndex(t, i), Field: field, Line: t.pos.item(field, item), Msg: fmt.Sprintf(format, a...), Kind: kind})
	}
	for i, t := range fl.Tasks {
		cond := t.Kind.IsCondition()
		for j, s := range t.Precede {
			k, ok := g.index[s]
			if !ok {
				report(i, "precede", j, ErrUnknownTask, "unknown task %q", s)
				continue
			}
			if cond {
				g.add(edge{from: i, to: k, weak: true, index: j, declTask: i, field: "precede", item: j})
				continue
			}
			if g.has(i, k) {
				report(i, "precede", j, ErrDuplicate, "%q listed twice", s)
				continue
			}
			g.add(edge{from: i, to: k, index: -1, declTask: i, field: "precede", item: j})
		}
	}
	for i, t := range fl.Tasks {
		seen := map[string]bool{}
		for j, p := range t.Succeed {
			k, ok := g.index[p]
			if !ok {
				report(i, "succeed", j, ErrUnknownTask, "unknown task %q", p)
				continue
			}
			if seen[p] {
				report(i, "succeed", j, ErrDuplicate, "%q listed twice", p)
				continue
			}
			seen[p] = true
			if fl.Tasks[k].Kind.IsCondition() {
				report(i, "succeed", j, ErrConditionEdge, "%q is a condition task: list %q in its precede list instead (a condition's successors are its precede list, in order)", p, t.Name)
				continue
			}
			if g.has(k, i) {
				continue // the same edge, also declared in p's precede list
			}
			g.add(edge{from: k, to: i, index: -1, declTask: i, field: "succeed", item: j})
		}
	}
	return g
}

func taskIndex(t *Task, i int) int {
	if t.Name == "" {
		return i + 1
	}
	return 0
}

func validateFlow(c *collector, fl *Flow, flows map[string]*Flow, opts Options) *flowGraph {
	flowErr := func(field string, kind error, format string, a ...any) {
		c.add(&Error{Flow: fl.Name, Field: field, Line: fl.pos.field(field), Msg: fmt.Sprintf(format, a...), Kind: kind})
	}
	if fl.Timeout < 0 {
		flowErr("timeout", ErrBadValue, "must be positive, got %s", fl.Timeout)
	}
	if len(fl.Tasks) == 0 {
		flowErr("tasks", ErrMissing, "flow has no tasks")
		return nil
	}
	first := map[string]int{}
	for i := range fl.Tasks {
		t := &fl.Tasks[i]
		te := func(field string, kind error, format string, a ...any) {
			c.add(&Error{Flow: fl.Name, Task: t.Name, Index: taskIndex(t, i), Field: field, Line: t.pos.field(field), Msg: fmt.Sprintf(format, a...), Kind: kind})
		}
		argErr := func(key, msg string) {
			line := 0
			if t.pos != nil {
				line = t.pos.keys[key]
			}
			if line == 0 {
				line = t.pos.field("args")
			}
			c.add(&Error{Flow: fl.Name, Task: t.Name, Index: taskIndex(t, i), Field: "args", Line: line, Msg: msg, Kind: ErrBadValue})
		}
		switch {
		case t.Name == "":
			te("name", ErrMissing, "missing name")
		case badName(t.Name, true) != "":
			te("name", ErrBadValue, "%s", badName(t.Name, true))
		default:
			if j, dup := first[t.Name]; dup {
				te("name", ErrDuplicate, "duplicate task name%s", firstAt(fl.Tasks[j].pos.field("name")))
			} else {
				first[t.Name] = i
			}
		}
		checkTask(t, flows, opts, te, argErr)
	}
	g := resolve(c, fl)
	checkStrongCycles(c, g)
	hasSource := false
	for i := range fl.Tasks {
		if len(g.pred[i]) == 0 {
			hasSource = true
			break
		}
	}
	if !hasSource {
		flowErr("tasks", ErrNoSource, "no task without predecessors: nothing can start")
	}
	return g
}

type taskErr func(field string, kind error, format string, a ...any)

func checkTask(t *Task, flows map[string]*Flow, opts Options, te taskErr, argErr func(key, msg string)) {
	if !t.Kind.Valid() {
		te("kind", ErrUnknownKind, "unknown kind %q (want static, condition, multicondition, subflow or module)", string(t.Kind))
	}
	kind := t.Kind.Or()
	if !t.Domain.Valid() {
		te("domain", ErrBadValue, "unknown domain %q (want cpu or gpu)", string(t.Domain))
	}
	if t.Retries < 0 {
		te("retries", ErrBadValue, "must be a non-negative integer, got %d", t.Retries)
	}
	if t.Timeout < 0 {
		te("timeout", ErrBadValue, "must be positive, got %s", t.Timeout)
	}
	if t.Device != nil {
		switch {
		case *t.Device < 0:
			te("device", ErrBadValue, "must be a non-negative integer, got %d", *t.Device)
		case t.Domain.Or() != DomainGPU:
			te("device", ErrBadValue, "device %d needs domain: gpu", *t.Device)
		}
	}
	if t.Node != "" && badName(t.Node, false) != "" {
		te("node", ErrBadValue, "%s", badName(t.Node, false))
	}
	if kind == KindModule {
		switch {
		case t.Flow == "":
			te("flow", ErrMissing, "missing flow (the flow this module task runs)")
		case flows != nil && flows[t.Flow] == nil:
			te("flow", ErrUnknownFlow, "unknown flow %q", t.Flow)
		}
		if t.Func != "" {
			te("func", ErrBadValue, "a module task runs a flow, not a function")
		}
		if len(t.Args) > 0 {
			te("args", ErrBadValue, "a module task takes no args")
		}
		if t.Domain != "" {
			te("domain", ErrBadValue, "a module task has no domain: its flow's tasks have theirs")
		}
		if t.Retries != 0 {
			te("retries", ErrBadValue, "a module task is not retried: its flow's tasks are")
		}
		if t.Timeout != 0 {
			te("timeout", ErrBadValue, "a module task takes no timeout: its flow's tasks do")
		}
		if t.Node != "" {
			te("node", ErrBadValue, "a module task is not pinned: pin its flow's tasks")
		}
		return
	}
	if t.Flow != "" {
		te("flow", ErrBadValue, "flow is only for module tasks")
	}
	if t.Domain.Or() == DomainGPU && t.Kind.Valid() && kind != KindStatic {
		te("domain", ErrBadValue, "domain gpu is for static tasks only, not %s ones", kind)
	}
	if t.Func == "" {
		te("func", ErrMissing, "missing func (the registered function to run)")
	} else if opts.Funcs != nil {
		info, ok := opts.Funcs.Func(t.Func)
		switch {
		case !ok:
			te("func", ErrUnknownFunc, "unknown function %q", t.Func)
		case info.Kind != "" && t.Kind.Valid() && info.Kind != kind:
			te("func", ErrBadValue, "function %q is for %s tasks, not %s ones", t.Func, info.Kind, kind)
		case t.Domain.Or() == DomainGPU && kind == KindStatic && !info.GPU:
			te("func", ErrBadValue, "function %q has no GPU body (domain gpu)", t.Func)
		case t.Domain.Or() == DomainCPU && !info.CPU:
			te("func", ErrBadValue, "function %q runs only on a GPU (set domain: gpu)", t.Func)
		}
		if ok && info.CheckArgs != nil && !(opts.params && hasRefs(t.Args)) {
			if err := info.CheckArgs(t.Args); err != nil {
				key := ""
				var named interface{ ArgName() string }
				if errors.As(err, &named) {
					key = named.ArgName()
				}
				argErr(key, err.Error())
			}
		}
	}
	if opts.Resources != nil {
		checkResources(t, opts.Resources, te)
	}
}

func checkResources(t *Task, res *Resources, te taskErr) {
	if t.Node != "" {
		if _, ok := res.Nodes[t.Node]; !ok {
			te("node", ErrUnknownNode, "unknown node %q (nodes: %s)", t.Node, nodeList(res))
			return
		}
	}
	if t.Domain.Or() != DomainGPU || !t.Domain.Valid() {
		return
	}
	dev := 0
	if t.Device != nil {
		if *t.Device < 0 {
			return
		}
		dev = *t.Device
	}
	if t.Node != "" {
		n := res.Nodes[t.Node]
		switch {
		case n.GPUs == 0:
			te("node", ErrNoGPU, "node %q has no GPU (domain gpu)", t.Node)
		case dev >= n.GPUs:
			te("device", ErrNoGPU, "node %q has %d GPU(s), no device %d", t.Node, n.GPUs, dev)
		}
		return
	}
	most := 0
	for _, n := range res.Nodes {
		most = max(most, n.GPUs)
	}
	switch {
	case most == 0:
		te("domain", ErrNoGPU, "asks for a GPU but no node of the cluster has one")
	case dev >= most:
		te("device", ErrNoGPU, "asks for GPU device %d but no node has more than %d GPU(s)", dev, most)
	}
}

func nodeList(res *Resources) string {
	if len(res.Nodes) == 0 {
		return "none"
	}
	ids := make([]string, 0, len(res.Nodes))
	for id := range res.Nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return strings.Join(ids, ", ")
}

// checkStrongCycles reports each strongly connected component of the
// strong-edge graph that holds a cycle.
func checkStrongCycles(c *collector, g *flowGraph) {
	n := len(g.flow.Tasks)
	adj := func(i int) []int {
		var out []int
		for _, e := range g.succ[i] {
			if !e.weak {
				out = append(out, e.to)
			}
		}
		return out
	}
	for _, comp := range components(n, adj) {
		if !cyclic(comp, adj) {
			continue
		}
		cyc := cycleThrough(comp, adj)
		names := make([]string, len(cyc))
		for i, v := range cyc {
			names[i] = g.flow.Tasks[v].Name
		}
		// Report at the declaration of the cycle's first edge.
		var decl edge
		for _, e := range g.succ[cyc[0]] {
			if !e.weak && e.to == cyc[1%len(cyc)] {
				decl = e
				break
			}
		}
		names = append(names, names[0])
		t := &g.flow.Tasks[decl.declTask]
		c.add(&Error{Flow: g.flow.Name, Task: t.Name, Index: taskIndex(t, decl.declTask), Field: decl.field, Line: t.pos.item(decl.field, decl.item),
			Msg: "cycle with no condition task on it: " + cyclePath(names), Kind: ErrCycle})
	}
}

func checkModuleCycles(c *collector, f *File, flows map[string]*Flow) {
	idx := map[string]int{}
	for i := range f.Flows {
		if flows[f.Flows[i].Name] == &f.Flows[i] {
			idx[f.Flows[i].Name] = i
		}
	}
	adj := func(i int) []int {
		var out []int
		for _, t := range f.Flows[i].Tasks {
			if t.Kind == KindModule {
				if j, ok := idx[t.Flow]; ok {
					out = append(out, j)
				}
			}
		}
		return out
	}
	for _, comp := range components(len(f.Flows), adj) {
		if !cyclic(comp, adj) {
			continue
		}
		cyc := cycleThrough(comp, adj)
		names := make([]string, 0, len(cyc)+1)
		for _, v := range cyc {
			names = append(names, f.Flows[v].Name)
		}
		names = append(names, names[0])
		from := &f.Flows[cyc[0]]
		next := f.Flows[cyc[1%len(cyc)]].Name
		for i := range from.Tasks {
			t := &from.Tasks[i]
			if t.Kind == KindModule && t.Flow == next {
				c.add(&Error{Flow: from.Name, Task: t.Name, Index: taskIndex(t, i), Field: "flow", Line: t.pos.field("flow"),
					Msg: "flows compose each other in a cycle: " + cyclePath(names), Kind: ErrModuleCycle})
				break
			}
		}
	}
}

// cyclePath spells a cycle (its first name repeated at the end), eliding the
// middle of a long one.
func cyclePath(names []string) string {
	const keep = 5
	if len(names) <= 2*keep+1 {
		return strings.Join(names, " -> ")
	}
	head := strings.Join(names[:keep], " -> ")
	tail := strings.Join(names[len(names)-keep:], " -> ")
	return fmt.Sprintf("%s -> ... (%d more) -> %s", head, len(names)-2*keep, tail)
}

// components returns the strongly connected components of a graph of n
// vertices (Tarjan's algorithm, iterative), each sorted ascending, in order
// of their smallest vertex.
func components(n int, adj func(int) []int) [][]int {
	index := make([]int, n)
	low := make([]int, n)
	on := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	var out [][]int
	members := make([]int, 0, n) // every component's vertices, one after another
	first := make([]int32, n)    // the component whose smallest vertex this is, or -1
	for i := range first {
		first[i] = -1
	}
	next := 0
	type frame struct {
		v     int
		succ  []int
		child int
	}
	for root := 0; root < n; root++ {
		if index[root] >= 0 {
			continue
		}
		calls := []frame{{v: root, succ: adj(root)}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		on[root] = true
		for len(calls) > 0 {
			fr := &calls[len(calls)-1]
			if fr.child < len(fr.succ) {
				w := fr.succ[fr.child]
				fr.child++
				if index[w] < 0 {
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					on[w] = true
					calls = append(calls, frame{v: w, succ: adj(w)})
				} else if on[w] {
					low[fr.v] = min(low[fr.v], index[w])
				}
				continue
			}
			v := fr.v
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				p := calls[len(calls)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] == index[v] {
				start := len(members)
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					on[w] = false
					members = append(members, w)
					if w == v {
						break
					}
				}
				comp := members[start:len(members):len(members)] // an append to it copies
				slices.Sort(comp)
				first[comp[0]] = int32(len(out))
				out = append(out, comp)
			}
		}
	}
	// In order of the smallest vertex, in one pass: the components part
	// the vertices, so each vertex is the smallest of at most one.
	sorted := make([][]int, 0, len(out))
	for _, k := range first {
		if k >= 0 {
			sorted = append(sorted, out[k])
		}
	}
	return sorted
}

// cyclic reports whether a component holds a cycle: more than one vertex, or a
// vertex with an edge to itself.
func cyclic(comp []int, adj func(int) []int) bool {
	if len(comp) > 1 {
		return true
	}
	return slices.Contains(adj(comp[0]), comp[0])
}

// cycleThrough returns a shortest cycle from the component's smallest vertex
// back to it, staying inside the component (breadth-first).
func cycleThrough(comp []int, adj func(int) []int) []int {
	start := comp[0]
	in := map[int]bool{}
	for _, v := range comp {
		in[v] = true
	}
	parent := map[int]int{}
	queue := []int{start}
	seen := map[int]bool{start: true}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range adj(v) {
			if w == start {
				var path []int
				for u := v; u != start; u = parent[u] {
					path = append(path, u)
				}
				path = append(path, start)
				slices.Reverse(path)
				return path
			}
			if in[w] && !seen[w] {
				seen[w] = true
				parent[w] = v
				queue = append(queue, w)
			}
		}
	}
	return []int{start} // unreachable for a cyclic component
}
