package localexec

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrRunClosed is returned by OpenRun.Schedule after Close, or after the run
// ended.
var ErrRunClosed = errors.New("localexec: open run closed")

// OpenRun is a run that outside events drive: it does not end when its
// tasks run out, only after Close, or once it is cancelled (Cancel, or a
// task that panicked or failed: its owner learns of it by Done, and Wait
// returns the error), and once everything scheduled has finished. Tasks
// marked External do not start with the run; Schedule runs one, as a
// condition task's pick would, from any goroutine; Release counts the
// completion of a predecessor a task awaits from outside its graph
// (Task.Await). hetflow's cluster node runs its part of a distributed flow
// this way: a message from a remote predecessor releases its successor, a
// remote condition's pick schedules it.
type OpenRun struct {
	*Future
	t      *topology
	mu     sync.Mutex
	start  bool    // the graph has been scheduled
	closed bool    // Close was called
	queue  []*node // scheduled before the start
	rel    []*node // released before the start (Release)
	ready  []*node // Release's scratch, under mu
	onIdle func()
	held   atomic.Bool // the hold is still in place
}

// RunOpen starts an open run of tf. onIdle, if not nil, is called (on a
// worker goroutine; it must not block) each time the run has nothing left to
// do but wait: no task scheduled or running. The run must not be running
// already.
func (ex *Executor) RunOpen(tf *Taskflow, onIdle func()) (*OpenRun, error) {
	if ex.closed.Load() {
		return nil, ErrClosed
	}
	if err := ex.check(tf); err != nil {
		return nil, err
	}
	t := newTopology(ex, tf, 1, nil)
	o := &OpenRun{Future: t.future, t: t, onIdle: onIdle}
	o.held.Store(true)
	t.open = o
	ex.begin()
	tf.mu.Lock()
	if tf.running {
		tf.mu.Unlock()
		ex.end()
		return nil, fmt.Errorf("localexec: RunOpen of taskflow %q while it is running", tf.name)
	}
	tf.running = true
	tf.mu.Unlock()
	ex.submit(&t.starter)
	return o, nil
}

// Schedule runs task t of the run's taskflow now, whatever its join
// counter. Before the run's graph is scheduled, the call is queued.
func (o *OpenRun) Schedule(t Task) error {
	return o.ScheduleAll([]Task{t})
}

// ScheduleAll is Schedule for each of ts, in order, taking the run's lock
// once and pushing them to each domain's shared queue together with one
// wake-up, not one per task: by the scheduler's rule (scheduler.go) the thief
// it wakes wakes the next when it finds work, so parallelism is not lost. A
// cluster node schedules the proxies of a whole batch of Signals this way.
func (o *OpenRun) ScheduleAll(ts []Task) error {
	return o.enqueue(ts, &o.queue, func(ns []*node, n *node) []*node { return append(ns, n) })
}

// enqueue hands ts to the run: before its start, to *before; after, each
// through add (which appends the nodes it makes ready) to the workers.
func (o *OpenRun) enqueue(ts []Task, before *[]*node, add func([]*node, *node) []*node) error {
	for _, t := range ts {
		if t.n == nil {
			return errors.New("localexec: Schedule or Release of an empty task")
		}
	}
	o.mu.Lock()
	if o.closed || o.state.Load() == futDone {
		o.mu.Unlock()
		return ErrRunClosed
	}
	// A task scheduled from outside (Schedule, ScheduleAll) runs out of
	// its graph's round, as Runtime.Schedule's does: its completion counts
	// into its successors' join counters beyond the round, so the run
	// cannot prove every counter restarted (sched.clean), and the next run
	// of the taskflow resets them. A Release is out of the round when its
	// task does not Await (a plain DAG's never does): it counts a
	// completion the graph's own predecessors count too. (A graph with
	// External tasks, or with a task that Awaits, is never clean anyway;
	// this covers a plain DAG steered from outside.)
	o.t.markDirty()
	if !o.start {
		for _, t := range ts {
			*before = append(*before, t.n)
		}
		o.mu.Unlock()
		return nil
	}
	ns := o.ready[:0]
	o.ready = nil // ours until submit gives it back
	for _, t := range ts {
		ns = add(ns, t.n)
	}
	for _, n := range ns {
		n.frame.pending.Add(1)
	}
	o.mu.Unlock()
	return o.submit(ns)
}

// submit pushes ns to their domains' shared queues and keeps its storage
// as the scratch of the next call (o.ready).
func (o *OpenRun) submit(ns []*node) error {
	o.t.ex.submitNodes(ns)
	clear(ns)
	if cap(ns) <= 1<<12 {
		o.mu.Lock()
		o.ready = ns[:0]
		o.mu.Unlock()
	}
	return nil
}

// Release counts, for each of ts, the completion of one of the strong
// predecessors it awaits from outside its graph (Task.Await), and runs the
// tasks whose join counters that completes, as a predecessor in the graph
// would (a task listed k times counts k completions). Before the run's
// graph is scheduled, the releases are kept and counted once it is. Like
// ScheduleAll it takes the run's lock once and wakes the workers once.
func (o *OpenRun) Release(ts []Task) error {
	return o.enqueue(ts, &o.rel, appendReleased)
}

// appendReleased counts one outside predecessor's completion into n and
// appends n for each activation that releases.
func appendReleased(ready []*node, n *node) []*node {
	if n.nStrong == 1 {
		return append(ready, n)
	}
	for k := n.releaseJoin(); k > 0; k-- {
		ready = append(ready, n)
	}
	return ready
}

// Close lets the run end once everything scheduled has finished. It is
// idempotent; Wait then returns the run's error.
func (o *OpenRun) Close() {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.closed = true
	started := o.start
	o.mu.Unlock()
	if started {
		o.release()
	}
	// not started: startOpen sees closed and does not take the hold
}

func (o *OpenRun) release() {
	if o.held.CompareAndSwap(true, false) {
		h := &o.t.hold
		h.kind, h.frame = kindHold, o.t.root
		o.t.ex.submit(h)
	}
}

// Cancel stops scheduling the run's tasks (running ones finish) and closes
// it; Wait returns an error wrapping ErrCancelled (unless a task's failure
// cancelled it first).
func (o *OpenRun) Cancel() bool {
	ok := o.Future.Cancel() // topology.cancel closes it, unless it had ended
	o.Close()               // a no-op then: kept so Cancel closes whatever path it took
	return ok
}

// Idle reports whether the run has nothing scheduled or running: only the
// hold remains. It is a snapshot; a Schedule call may change it at once. A
// cancelled run is never idle, even before topology.cancel's Close lets the
// hold go: it was cut short, not waiting for outside work.
func (o *OpenRun) Idle() bool {
	o.mu.Lock()
	started := o.start
	o.mu.Unlock()
	return started && o.held.Load() && !o.t.cancelled.Load() && o.t.root.pending.Load() == 1
}

func (o *OpenRun) idle() {
	if o.onIdle != nil && o.held.Load() {
		o.onIdle()
	}
}

// startOpen schedules an open run's graph with the hold in place, and the
// tasks scheduled before the start.
func (w *worker) startOpen(t *topology) *node {
	o := t.open
	o.mu.Lock()
	o.start = true
	closed := o.closed
	queued := o.queue
	o.queue = nil
	extra := int64(len(queued))
	if !closed {
		extra++ // the hold
	} else {
		o.held.Store(false)
	}
	rel := o.rel
	o.rel = nil
	next := w.scheduleGraphExtra(t.root, &t.tf.graph, true, extra)
	for _, n := range queued {
		w.push(n)
	}
	if !closed {
		// Scheduling the graph reset the join counters: the releases count
		// from here, and the hold keeps the frame pending meanwhile.
		var ready []*node
		for _, n := range rel {
			ready = appendReleased(ready, n)
		}
		t.root.pending.Add(int64(len(ready)))
		for _, n := range ready {
			w.push(n)
		}
	}
	o.mu.Unlock()
	return next
}
