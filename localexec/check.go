package localexec

import (
	"fmt"
	"strings"
)

// check validates tf before a run starts: module tasks (no module cycle; no
// two module tasks over one taskflow that no strong path orders, since they
// would share the composed graph's nodes) and GPU tasks (their device
// exists). The answer depends only on the graphs, never on timing, and is
// cached until tf's graph changes.
func (ex *Executor) check(tf *Taskflow) error {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	v := tf.fingerprint()
	if tf.checkedEx == ex && tf.checkedVersion == v {
		return tf.checkErr
	}
	err := ex.checkTaskflow(tf, nil)
	tf.checkedEx, tf.checkedVersion, tf.checkErr = ex, v, err
	return err
}

// fingerprint changes whenever tf or a taskflow it composes changes. It is
// the sum of the graph versions reachable through module tasks (cycles are
// cut by the visited set).
func (tf *Taskflow) fingerprint() uint64 {
	seen := map[*Taskflow]bool{}
	var walk func(t *Taskflow) uint64
	walk = func(t *Taskflow) uint64 {
		if t == nil || seen[t] {
			return 0
		}
		seen[t] = true
		s := t.graph.version*0x9E3779B97F4A7C15 + uint64(t.graph.count)
		for _, n := range t.graph.modules {
			s += walk(n.ext.module)
		}
		return s
	}
	return walk(tf)
}

func (ex *Executor) checkTaskflow(tf *Taskflow, stack []*Taskflow) error {
	for _, s := range stack {
		if s == tf {
			names := make([]string, 0, len(stack)+1)
			for _, t := range stack {
				names = append(names, fmt.Sprintf("%q", t.name))
			}
			names = append(names, fmt.Sprintf("%q", tf.name))
			return fmt.Errorf("%w: taskflows compose each other in a cycle: %s", ErrModuleConflict, strings.Join(names, " → "))
		}
	}
	stack = append(stack, tf)
	for _, n := range tf.graph.modules {
		if m := n.ext.module; m != nil { // checkGraph reports a nil one
			if err := ex.checkTaskflow(m, stack); err != nil {
				return err
			}
		}
	}
	return ex.checkGraph(fmt.Sprintf("taskflow %q", tf.name), &tf.graph)
}

// checkGraph checks one graph's sources, GPU placements and module pairs.
// owner names the graph in errors.
func (ex *Executor) checkGraph(owner string, g *graph) error {
	if err := checkSources(owner, g); err != nil {
		return err
	}
	for _, n := range g.gpus {
		if ex.openErr != nil {
			return &TaskError{Task: n.taskName(), Err: ex.openErr}
		}
		if int(n.ext.device) < 0 || int(n.ext.device) >= len(ex.devices) {
			return fmt.Errorf("%w: GPU task %q of %s is on device %d, the executor has %d GPU device(s)", ErrNoDevice, n.taskName(), owner, n.ext.device, len(ex.devices))
		}
	}
	mods := g.modules
	for _, n := range mods {
		if n.ext.module == nil {
			return fmt.Errorf("%w: module task %q of %s composes a nil taskflow", ErrModuleConflict, n.taskName(), owner)
		}
	}
	if len(mods) < 2 {
		return nil
	}
	uses := make([]map[*Taskflow]bool, len(mods))
	for i, m := range mods {
		uses[i] = map[*Taskflow]bool{}
		collectUses(m.ext.module, uses[i])
	}
	for i := range mods {
		for j := i + 1; j < len(mods); j++ {
			shared := sharedTaskflow(uses[i], uses[j])
			if shared == nil {
				continue
			}
			if strongPath(mods[i], mods[j]) || strongPath(mods[j], mods[i]) {
				continue
			}
			return fmt.Errorf("%w: module tasks %q and %q of %s both run taskflow %q and no strong path orders them, so they could run at once",
				ErrModuleConflict, mods[i].taskName(), mods[j].taskName(), owner, shared.name)
		}
	}
	return nil
}

func collectUses(tf *Taskflow, into map[*Taskflow]bool) {
	if into[tf] {
		return
	}
	into[tf] = true
	for _, n := range tf.graph.modules {
		collectUses(n.ext.module, into)
	}
}

func sharedTaskflow(a, b map[*Taskflow]bool) *Taskflow {
	for t := range a {
		if b[t] {
			return t
		}
	}
	return nil
}

// strongPath reports whether to is reachable from from through strong edges
// only (edges out of condition tasks are weak and do not order).
func strongPath(from, to *node) bool {
	seen := map[*node]bool{from: true}
	stack := []*node{from}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n.kind.weakOut() {
			continue
		}
		for _, s := range n.successors() {
			if s == to {
				return true
			}
			if !seen[s] {
				seen[s] = true
				stack = append(stack, s)
			}
		}
	}
	return false
}

// checkSources reports a graph with tasks of which none can start: every
// task has a predecessor (a cycle with no condition task on it, or tasks
// reached only from such a cycle) and none is External (an entry point an
// open run schedules). Such a run would end at once having run nothing.
func checkSources(owner string, g *graph) error {
	if g.count == 0 {
		return nil
	}
	if c := &g.sched; c.valid && c.version == g.version && len(c.sources) > 0 {
		return nil
	}
	for n := range g.all() {
		if n.nPreds == 0 || n.external {
			return nil
		}
	}
	return fmt.Errorf("%w: every one of the %d tasks of %s has a predecessor, so none can start (a cycle needs a condition task and an entry task without predecessors)", ErrNoSource, g.count, owner)
}
