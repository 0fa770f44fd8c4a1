package localexec

import (
	"sync"
	"sync/atomic"
)

// sharedQueue is a domain's queue for work pushed from outside the domain:
// from a goroutine that is not a worker (Run, Async, SilentAsync), or from a
// worker of another domain (a CPU task readying a GPU task). It is a
// mutex-protected ring whose size is a power of two (16, doubling); n
// mirrors its length so that parking workers can check it without the lock
// (see "The re-check" in scheduler.go).
//
// A slot holds a node, or, for a SilentAsync call, only its function (n
// nil): a call allocates nothing, and the worker that takes a run of such
// slots makes them one silentBatch (see takeShared).
type sharedQueue struct {
	mu   sync.Mutex
	buf  []sharedSlot
	head int
	n    atomic.Int64 // number of queued slots; written under mu, read anywhere
}

type sharedSlot struct {
	n  *node  // nil: a SilentAsync call of fn
	fn func() // for n == nil
}

func (q *sharedQueue) push(n *node) {
	q.mu.Lock()
	q.pushLocked(n)
	q.mu.Unlock()
}

// pushFunc queues a SilentAsync call of fn.
func (q *sharedQueue) pushFunc(fn func()) {
	q.mu.Lock()
	q.slotLocked().fn = fn
	q.n.Store(q.n.Load() + 1)
	q.mu.Unlock()
}

func (q *sharedQueue) pushLocked(n *node) {
	q.slotLocked().n = n
	q.n.Store(q.n.Load() + 1)
}

// slotLocked returns the free slot after the last queued one, growing the
// ring when it is full. q.mu is held; the caller fills the slot, then
// publishes it by incrementing n.
func (q *sharedQueue) slotLocked() *sharedSlot {
	cnt := int(q.n.Load())
	if cnt == len(q.buf) {
		nb := make([]sharedSlot, max(16, 2*len(q.buf)))
		for i := 0; i < cnt; i++ {
			nb[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
		}
		q.buf, q.head = nb, 0
	}
	return &q.buf[(q.head+cnt)&(len(q.buf)-1)]
}

// pop takes the oldest queued slot's work, nil when there is none. A
// SilentAsync call comes back in one, the caller's node for it: the
// worker that pops runs it at once (see worker.one).
func (q *sharedQueue) pop(one *node) *node {
	if q.n.Load() == 0 {
		return nil
	}
	q.mu.Lock()
	cnt := q.n.Load()
	if cnt == 0 {
		q.mu.Unlock()
		return nil
	}
	s := q.buf[q.head]
	q.buf[q.head] = sharedSlot{}
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n.Store(cnt - 1)
	q.mu.Unlock()
	if s.n == nil {
		one.static = s.fn
		return one
	}
	return s.n
}

// popBatch takes up to max slots (at least one when the queue holds any)
// under one lock, appending them to dst: a worker that finds the shared
// queue holding many (a burst of Async calls) takes its share at once
// instead of taking the lock per node against the submitter.
func (q *sharedQueue) popBatch(dst []sharedSlot, max int) []sharedSlot {
	if q.n.Load() == 0 {
		return dst
	}
	q.mu.Lock()
	cnt := int(q.n.Load())
	k := min(cnt, max)
	for i := 0; i < k; i++ {
		dst = append(dst, q.buf[q.head])
		q.buf[q.head] = sharedSlot{}
		q.head = (q.head + 1) & (len(q.buf) - 1)
	}
	q.n.Store(int64(cnt - k))
	q.mu.Unlock()
	return dst
}

func (q *sharedQueue) empty() bool { return q.n.Load() == 0 }
