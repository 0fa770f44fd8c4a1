package localexec

// Subflow is the graph a dynamic task (EmplaceSubflow) builds while it runs.
// It has every graph-building call of a Taskflow. By default the subflow
// joins its parent: the parent's successors wait for every child. Detach lets
// the children run on independently; they still finish before the run ends.
//
// A Subflow is valid only during the call of the function that received it.
type Subflow struct {
	builder
	parent   *node
	w        *worker
	detached bool
	retain   bool
}

// Detach lets the subflow run independently of its parent task. It panics
// after Join.
func (sf *Subflow) Detach() {
	if sf.joined {
		panic("localexec: Detach of a joined subflow")
	}
	sf.detached = true
}

// Join runs the children spawned so far and returns when every one of them
// has finished, so that the function can read their results before it
// returns (Taskflow's explicit join; recursive Fibonacci spawns two
// children, joins them and adds their results). The worker does not block:
// while it waits it runs other tasks, the children among them. Join
// returns the run's error, non-nil when a child (or any task of the run)
// failed, panicked or the run was cancelled; the children not yet started
// then do not start. After Join the subflow is done: it takes no more
// children (Emplace and the like panic) and cannot be detached. Join on a
// detached subflow panics; a second Join returns at once.
func (sf *Subflow) Join() error {
	if sf.detached {
		panic("localexec: Join of a detached subflow")
	}
	n := sf.parent
	topo := n.frame.topo
	if sf.joined {
		return topo.errNow()
	}
	sf.joined = true
	w, g := sf.w, sf.builder.g
	if g.count == 0 {
		return topo.errNow()
	}
	if err := w.ex.checkGraph(n.taskName(), g); err != nil {
		topo.cancel(err)
		return topo.errNow()
	}
	f := &frame{kind: frameCorun, topo: topo}
	if next := w.scheduleGraph(f, g, true); next != nil {
		w.run(next)
	}
	w.corunUntil(&f.done)
	return topo.errNow()
}

// Detached reports whether Detach was called.
func (sf *Subflow) Detached() bool { return sf.detached }

// Retain keeps the children after they ran, until the parent task runs
// again, so that Taskflow.Dump shows them. By default they are recycled as
// soon as the subflow joins.
func (sf *Subflow) Retain(on bool) { sf.retain = on }

// Name returns the parent task's name.
func (sf *Subflow) Name() string { return sf.parent.taskName() }
