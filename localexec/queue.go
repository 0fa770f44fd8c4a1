package localexec

import (
	"sync"
	"sync/atomic"
)

// sharedQueue is a domain's queue for work pushed from outside the domain:
// from a goroutine that is not a worker (Run, Async, SilentAsync), or from a
// worker of another domain (a CPU task readying a GPU task). It is a
// mutex-protected FIFO of fixed-size chunks; n mirrors its length so that
// parking workers can check it without the lock (see "The re-check" in
// scheduler.go). A burst that queues up a million calls grows it a chunk
// at a time, never copying what is queued (a ring doubling to a million
// slots copied them, with the collector's write barrier on each while it
// marked), and a chunk that empties is kept (up to maxSpareChunks) for the
// next one to fill: a queue that drains as fast as it fills allocates
// nothing.
//
// A slot holds a node, or, for a SilentAsync call, only its function (n
// nil): a call allocates nothing, and the worker that takes a run of such
// slots makes them one silentBatch (see grabShared).
type sharedQueue struct {
	mu     sync.Mutex
	head   *sharedChunk // the oldest slot is head.slots[hi]
	tail   *sharedChunk // the next free one is tail.slots[ti]
	hi, ti int
	spare  *sharedChunk // emptied chunks, linked by next
	nspare int
	n      atomic.Int64 // number of queued slots; written under mu, read anywhere
}

type sharedSlot struct {
	n  *node  // nil: a SilentAsync call of fn
	fn func() // for n == nil
}

const (
	sharedChunkLen = 255 // slots a chunk: with next, 4 KiB
	maxSpareChunks = 2
)

type sharedChunk struct {
	slots [sharedChunkLen]sharedSlot
	next  *sharedChunk
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

// slotLocked returns the free slot after the last queued one, adding a
// chunk when the last is full. q.mu is held; the caller fills the slot,
// then publishes it by incrementing n.
func (q *sharedQueue) slotLocked() *sharedSlot {
	if q.tail == nil {
		q.tail = q.newChunk()
		q.head = q.tail
	} else if q.ti == sharedChunkLen {
		c := q.newChunk()
		q.tail.next, q.tail, q.ti = c, c, 0
	}
	s := &q.tail.slots[q.ti]
	q.ti++
	return s
}

func (q *sharedQueue) newChunk() *sharedChunk {
	if c := q.spare; c != nil {
		q.spare, c.next = c.next, nil
		q.nspare--
		return c
	}
	return new(sharedChunk)
}

// takeLocked removes and returns the oldest slot; the queue holds one.
// q.mu is held; the caller stores n.
func (q *sharedQueue) takeLocked() sharedSlot {
	c := q.head
	s := c.slots[q.hi]
	c.slots[q.hi] = sharedSlot{}
	q.hi++
	switch {
	case c == q.tail && q.hi == q.ti:
		q.hi, q.ti = 0, 0 // empty: fill the same chunk again from its start
	case q.hi == sharedChunkLen:
		q.head, q.hi = c.next, 0
		c.next = nil
		if q.nspare < maxSpareChunks {
			c.next, q.spare = q.spare, c
			q.nspare++
		}
	}
	return s
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
	s := q.takeLocked()
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
		dst = append(dst, q.takeLocked())
	}
	q.n.Store(int64(cnt - k))
	q.mu.Unlock()
	return dst
}
