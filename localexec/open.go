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
// tasks run out, only after Close (and once everything scheduled has
// finished). Tasks marked External do not start with the run; Schedule runs
// one, as a condition task's pick would, from any goroutine. hetflow's
// cluster node runs its part of a distributed flow this way: proxies of
// remote predecessors are external tasks scheduled when their messages
// arrive.
type OpenRun struct {
	*Future
	t      *topology
	mu     sync.Mutex
	start  bool    // the graph has been scheduled
	closed bool    // Close was called
	queue  []*node // scheduled before the start
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
	for _, t := range ts {
		if t.n == nil {
			return errors.New("localexec: Schedule of an empty task")
		}
	}
	o.mu.Lock()
	if o.closed || o.state.Load() == futDone {
		o.mu.Unlock()
		return ErrRunClosed
	}
	if !o.start {
		for _, t := range ts {
			o.queue = append(o.queue, t.n)
		}
		o.mu.Unlock()
		return nil
	}
	for _, t := range ts {
		t.n.frame.pending.Add(1)
	}
	o.mu.Unlock()
	o.t.ex.submitTasks(ts)
	return nil
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
// it; Wait returns an error wrapping ErrCancelled.
func (o *OpenRun) Cancel() bool {
	ok := o.Future.Cancel()
	o.Close()
	return ok
}

// Idle reports whether the run has nothing scheduled or running: only the
// hold remains. It is a snapshot; a Schedule call may change it at once.
func (o *OpenRun) Idle() bool {
	o.mu.Lock()
	started := o.start
	o.mu.Unlock()
	return started && o.held.Load() && o.t.root.pending.Load() == 1
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
	next := w.scheduleGraphExtra(t.root, &t.tf.graph, true, extra)
	for _, n := range queued {
		w.push(n)
	}
	o.mu.Unlock()
	return next
}
