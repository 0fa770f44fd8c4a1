package localexec

import (
	"runtime"

	"github.com/hetflow/hetflow/gpu"
)

// Runtime is what a runtime task (EmplaceRuntime) receives: a handle on the
// worker running it and on its run. It is valid only during the call.
type Runtime struct {
	w    *worker
	n    *node
	topo *topology
}

// Executor returns the executor running the task.
func (rt *Runtime) Executor() *Executor { return rt.w.ex }

// WorkerID returns the id of the worker running the task.
func (rt *Runtime) WorkerID() int { return rt.w.id }

// GPUHost is the worker running the task as a host thread of the timed gpu sim: a task that
// launches a GPU graph itself launches with gpu.Graph.LaunchFrom(rt.GPUHost()), so that the
// worker is blocked, in the model, while the graph runs (plain Launch uses a Host kept for
// the calling goroutine, found by its id at the cost of a stack walk).
func (rt *Runtime) GPUHost() *gpu.Host { return rt.w.host }

// Cancelled reports whether the run has been cancelled (by Future.Cancel or
// because a task panicked); long-running tasks should poll it.
func (rt *Runtime) Cancelled() bool { return rt.topo.cancelled.Load() }

// Schedule runs task t of the same graph now, whatever its join counter, as
// a condition task's pick would. t runs in this run; the run does not end
// before it completes.
func (rt *Runtime) Schedule(t Task) {
	if t.n == nil || rt.topo.cancelled.Load() {
		return
	}
	f := t.n.frame
	if f == nil || f.topo != rt.topo {
		f = rt.n.frame
		t.n.frame = f
	}
	rt.topo.markDirty()
	f.pending.Add(1)
	rt.w.push(t.n)
}

// Corun runs tf to completion inside this task without blocking the worker:
// while tf runs, the worker keeps executing other tasks. It returns the run's
// error (a panic in one of tf's tasks fails the enclosing run too).
func (rt *Runtime) Corun(tf *Taskflow) error {
	w := rt.w
	if err := w.ex.check(tf); err != nil {
		return err
	}
	f := &frame{kind: frameCorun, topo: rt.topo}
	if next := w.scheduleGraph(f, &tf.graph, true); next != nil {
		w.run(next)
	}
	w.corunUntil(&f.done)
	return rt.topo.errNow()
}

// CorunAsync runs fn on another worker (or this one) and returns when it is
// done, executing other tasks meanwhile.
func (rt *Runtime) CorunAsync(fn func()) error {
	w := rt.w
	a := newAsync(fn)
	fut := &a.f
	w.ex.begin()
	w.q.push(&a.n)
	w.dom.wake(w)
	for fut.state.Load() != futDone {
		if !w.step() {
			runtime.Gosched()
		}
	}
	return fut.err
}

// corunUntil executes tasks until done is set.
func (w *worker) corunUntil(done interface{ Load() bool }) {
	for !done.Load() {
		if !w.step() {
			if t := w.settle(); t != nil {
				w.run(t)
				continue
			}
			runtime.Gosched()
		}
	}
}

// step runs one task from w's deque or a steal; it reports whether it found
// one.
func (w *worker) step() bool {
	t := w.q.pop()
	if t == nil {
		w.carry = 0 // a stolen task, or none (the co-run loop spins): see EmplaceCarried
		t = w.stealOnce()
	}
	if t == nil {
		return false
	}
	w.run(t)
	return true
}
