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

// Detach lets the subflow run independently of its parent task.
func (sf *Subflow) Detach() { sf.detached = true }

// Detached reports whether Detach was called.
func (sf *Subflow) Detached() bool { return sf.detached }

// Retain keeps the children after they ran, until the parent task runs
// again, so that Taskflow.Dump shows them. By default they are recycled as
// soon as the subflow joins.
func (sf *Subflow) Retain(on bool) { sf.retain = on }

// Name returns the parent task's name.
func (sf *Subflow) Name() string { return sf.parent.taskName() }
