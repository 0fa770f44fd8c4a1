package localexec

import "sync/atomic"

// wsq is a Chase–Lev work-stealing deque of task nodes.
//
// The owner pushes and pops at the bottom (LIFO, which keeps a worker on the
// part of the graph it just touched); thieves steal from the top (FIFO, which
// hands them the oldest, usually largest, piece of work). Push and Pop never
// take a lock; Steal costs one CAS. The ring grows by doubling when full; old
// rings are left to the garbage collector, so a thief that still reads one
// sees valid (if stale) slots and its CAS on top decides whether the read
// counts.
//
// Go's sync/atomic operations are sequentially consistent, which gives the
// store–load ordering between the owner's bottom update and its read of top
// (the one fence Chase–Lev needs) without anything extra.
type wsq struct {
	top    atomic.Int64
	_      [56]byte // keep top and bottom on separate cache lines
	bottom atomic.Int64
	_      [56]byte
	ring   atomic.Pointer[wsqRing]
}

type wsqRing struct {
	mask  int64
	slots []atomic.Pointer[node]
}

func newRing(capacity int64) *wsqRing {
	return &wsqRing{mask: capacity - 1, slots: make([]atomic.Pointer[node], capacity)}
}

func (r *wsqRing) get(i int64) *node    { return r.slots[i&r.mask].Load() }
func (r *wsqRing) put(i int64, n *node) { r.slots[i&r.mask].Store(n) }

func (q *wsq) init(capacity int64) {
	q.ring.Store(newRing(capacity))
}

// push adds n at the bottom. Owner only.
func (q *wsq) push(n *node) {
	b := q.bottom.Load()
	t := q.top.Load()
	r := q.ring.Load()
	if b-t > r.mask {
		nr := newRing((r.mask + 1) * 2)
		for i := t; i < b; i++ {
			nr.put(i, r.get(i))
		}
		q.ring.Store(nr)
		r = nr
	}
	r.put(b, n)
	q.bottom.Store(b + 1)
}

// pushN adds ns at the bottom, in order, publishing them together (one store
// of bottom). Owner only.
func (q *wsq) pushN(ns []*node) {
	q.reserve(int64(len(ns)))
	b := q.bottom.Load()
	r := q.ring.Load()
	for i, n := range ns {
		r.put(b+int64(i), n)
	}
	q.bottom.Store(b + int64(len(ns)))
}

// reserve grows the ring, at most once, so that k more nodes fit. Owner
// only.
func (q *wsq) reserve(k int64) {
	b := q.bottom.Load()
	t := q.top.Load()
	r := q.ring.Load()
	if b-t+k <= r.mask+1 {
		return
	}
	c := r.mask + 1
	for b-t+k > c {
		c *= 2
	}
	nr := newRing(c)
	for i := t; i < b; i++ {
		nr.put(i, r.get(i))
	}
	q.ring.Store(nr)
}

// pop takes from the bottom. Owner only. Returns nil when empty.
func (q *wsq) pop() *node {
	b := q.bottom.Load() - 1
	r := q.ring.Load()
	q.bottom.Store(b)
	t := q.top.Load()
	if t > b {
		q.bottom.Store(b + 1)
		return nil
	}
	n := r.get(b)
	if t == b {
		// Last element: race the thieves for it.
		if !q.top.CompareAndSwap(t, t+1) {
			n = nil
		}
		q.bottom.Store(b + 1)
	}
	return n
}

// steal takes from the top. Any goroutine. Returns nil when empty or when it
// lost a race (the caller counts both as a failed steal).
func (q *wsq) steal() *node {
	t := q.top.Load()
	b := q.bottom.Load()
	if t >= b {
		return nil
	}
	r := q.ring.Load()
	n := r.get(t)
	if !q.top.CompareAndSwap(t, t+1) {
		return nil
	}
	return n
}

// empty reports whether the deque looked empty at the moment of the call.
func (q *wsq) empty() bool {
	return q.top.Load() >= q.bottom.Load()
}

// size is a snapshot of the number of queued nodes (may be stale).
func (q *wsq) size() int64 {
	s := q.bottom.Load() - q.top.Load()
	if s < 0 {
		return 0
	}
	return s
}
