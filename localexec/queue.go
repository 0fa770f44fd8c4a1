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
// marked), and a chunk that empties is kept for the next one to fill: as
// the ring kept its size, the queue keeps the chunks of its deepest burst
// (8 bytes a slot, 16 where SilentAsync calls were queued), and a queue
// that fills and drains again allocates nothing.
//
// A slot holds a node, or, for a SilentAsync call, only its function (in
// the chunk's fns, the node nil): a call allocates nothing, and the worker
// that takes a run of such slots makes them one silentBatch (see
// popBatch). A chunk of nodes only is 4 KiB for 510 slots, as a ring was
// (8 bytes a slot); its fns, 4 KiB more, are made the first time it holds
// a SilentAsync call and kept with it.
type sharedQueue struct {
	mu     sync.Mutex
	head   *sharedChunk // the oldest slot is head's hi
	tail   *sharedChunk // the next free one is tail's ti
	hi, ti int
	spare  *sharedChunk // emptied chunks, linked by next
	n      atomic.Int64 // number of queued slots; written under mu, read anywhere
}

const sharedChunkLen = 510 // slots a chunk: with fns and next, 4 KiB

type sharedChunk struct {
	nodes [sharedChunkLen]*node   // nil: a SilentAsync call, in fns
	fns   *[sharedChunkLen]func() // nil until the chunk first holds one
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
	c, i := q.slotLocked()
	if c.fns == nil {
		c.fns = new([sharedChunkLen]func())
	}
	c.fns[i] = fn
	q.n.Store(q.n.Load() + 1)
	q.mu.Unlock()
}

func (q *sharedQueue) pushLocked(n *node) {
	c, i := q.slotLocked()
	c.nodes[i] = n
	q.n.Store(q.n.Load() + 1)
}

// slotLocked returns the free slot after the last queued one, adding a
// chunk when the last is full. q.mu is held; the caller fills the slot,
// then publishes it by incrementing n.
func (q *sharedQueue) slotLocked() (*sharedChunk, int) {
	if q.tail == nil {
		q.tail = q.newChunk()
		q.head = q.tail
	} else if q.ti == sharedChunkLen {
		c := q.newChunk()
		q.tail.next, q.tail, q.ti = c, c, 0
	}
	q.ti++
	return q.tail, q.ti - 1
}

func (q *sharedQueue) newChunk() *sharedChunk {
	if c := q.spare; c != nil {
		q.spare, c.next = c.next, nil
		return c
	}
	return new(sharedChunk)
}

// takeLocked removes the oldest slot and returns its node, or its function
// (n nil); the queue holds one. q.mu is held; the caller stores n.
func (q *sharedQueue) takeLocked() (n *node, fn func()) {
	c := q.head
	if n = c.nodes[q.hi]; n != nil {
		c.nodes[q.hi] = nil
	} else {
		fn, c.fns[q.hi] = c.fns[q.hi], nil
	}
	q.hi++
	switch {
	case c == q.tail && q.hi == q.ti:
		q.hi, q.ti = 0, 0 // empty: fill the same chunk again from its start
	case q.hi == sharedChunkLen:
		q.head, q.hi = c.next, 0
		c.next, q.spare = q.spare, c
	}
	return n, fn
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
	n, fn := q.takeLocked()
	q.n.Store(cnt - 1)
	q.mu.Unlock()
	if n == nil {
		one.static = fn
		return one
	}
	return n
}

// popBatch takes up to max slots (at least one when the queue holds any)
// under one lock, appending their work to dst: a worker that finds the
// shared queue holding many (a burst of Async calls) takes its share at
// once instead of taking the lock per node against the submitter. Each run
// of SilentAsync calls among them becomes one silentBatch from the
// worker's spares (bp), claimed call by call by whoever holds it.
func (q *sharedQueue) popBatch(dst []*node, max int, bp *batchPool) []*node {
	if q.n.Load() == 0 {
		return dst
	}
	q.mu.Lock()
	cnt := int(q.n.Load())
	k := min(cnt, max)
	var b *silentBatch
	for i := 0; i < k; i++ {
		n, fn := q.takeLocked()
		if n != nil {
			dst = append(dst, n)
			b = nil
			continue
		}
		if b == nil {
			b = bp.get()
			dst = append(dst, &b.n)
		}
		b.fns[b.k] = fn
		b.k++
	}
	q.n.Store(int64(cnt - k))
	q.mu.Unlock()
	return dst
}
