package localexec

import (
	"sync"
	"sync/atomic"
)

// Future is the handle of a submitted run or Async call.
//
// Wait returns nil on success, or an error that wraps ErrCancelled (the work
// was cancelled), ErrClosed (submitted to a closed executor),
// ErrModuleConflict, ErrNoDevice or ErrNoSource (the graph was rejected
// before anything ran), or is a *PanicError (a task panicked) or *TaskError
// (a task returned an error, or failed to launch).
//
// The zero Future is empty, like Taskflow's default-constructed future: it
// refers to no work, so Wait returns nil at once, Done is closed and Cancel
// returns false.
type Future struct {
	state atomic.Uint32 // futPending → futRunning → futDone, or futPending → futDone; futEmpty: the zero Future
	mu    sync.Mutex
	ch    chan struct{} // made lazily by Done/Wait; closed when done
	err   error
	// then are the DependentAsync calls waiting for this future (under
	// mu until done; taken by finish).
	then []*asyncTask

	topo *topology // for runs; nil for Async calls
}

const (
	futEmpty uint32 = iota // the zero Future: no work, already done
	futPending
	futRunning
	futDone
)

// done reports whether the work has finished (or there is none).
func (f *Future) done() bool {
	s := f.state.Load()
	return s == futDone || s == futEmpty
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done returns a channel closed when the work has finished.
func (f *Future) Done() <-chan struct{} {
	if f.done() {
		return closedCh
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done() {
		return closedCh
	}
	if f.ch == nil {
		f.ch = make(chan struct{})
	}
	return f.ch
}

// Wait blocks until the work has finished and returns its error.
func (f *Future) Wait() error {
	if !f.done() {
		<-f.Done()
	}
	return f.err
}

// Cancel asks the work to stop. For a run, tasks not yet started do not start
// and the run's error wraps ErrCancelled; for an Async call that has not
// started, it never runs. It reports whether the work was still unfinished
// (so the cancel took effect): false for the zero Future.
func (f *Future) Cancel() bool {
	if f.topo != nil {
		return f.topo.cancel(ErrCancelled)
	}
	if f.state.CompareAndSwap(futPending, futRunning) {
		f.finish(ErrCancelled)
		return true
	}
	return false
}

// finish records err and wakes waiters. Called once, by whoever moved the
// state out of futPending.
func (f *Future) finish(err error) {
	f.mu.Lock()
	f.err = err
	f.state.Store(futDone) // after err: Wait's fast path reads err after seeing futDone
	if f.ch != nil {
		close(f.ch)
	}
	then := f.then
	f.then = nil
	f.mu.Unlock()
	for _, a := range then {
		a.depDone()
	}
}

// after registers a to be released when f finishes; it reports false, and
// registers nothing, when f has finished already.
func (f *Future) after(a *asyncTask) bool {
	if f.done() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done() {
		return false
	}
	f.then = append(f.then, a)
	return true
}

func doneFuture(err error) *Future {
	f := &Future{err: err}
	f.state.Store(futDone)
	return f
}
