package localexec

import (
	"sync"
	"sync/atomic"
)

// sharedQueue is a domain's queue for work pushed from outside the domain:
// from a goroutine that is not a worker (Run, Async), or from a worker of
// another domain (a CPU task readying a GPU task). It is a mutex-protected
// ring whose size is a power of two (16, doubling); n mirrors its length so that parking workers can check it without the
// lock (see "The re-check" in scheduler.go).
type sharedQueue struct {
	mu   sync.Mutex
	buf  []*node
	head int
	n    atomic.Int64 // number of queued nodes; written under mu, read anywhere
}

func (q *sharedQueue) push(n *node) {
	q.mu.Lock()
	q.pushLocked(n)
	q.mu.Unlock()
}

func (q *sharedQueue) pushLocked(n *node) {
	cnt := int(q.n.Load())
	if cnt == len(q.buf) {
		nb := make([]*node, max(16, 2*len(q.buf)))
		for i := 0; i < cnt; i++ {
			nb[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+cnt)&(len(q.buf)-1)] = n
	q.n.Store(int64(cnt + 1))
}

func (q *sharedQueue) pop() *node {
	if q.n.Load() == 0 {
		return nil
	}
	q.mu.Lock()
	cnt := q.n.Load()
	if cnt == 0 {
		q.mu.Unlock()
		return nil
	}
	n := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n.Store(cnt - 1)
	q.mu.Unlock()
	return n
}

// popBatch takes up to max nodes (at least one when the queue holds any)
// under one lock, appending them to dst: a worker that finds the shared
// queue holding many (a burst of Async calls) takes its share at once
// instead of taking the lock per node against the submitter.
func (q *sharedQueue) popBatch(dst []*node, max int) []*node {
	if q.n.Load() == 0 {
		return dst
	}
	q.mu.Lock()
	cnt := int(q.n.Load())
	k := min(cnt, max)
	for i := 0; i < k; i++ {
		dst = append(dst, q.buf[q.head])
		q.buf[q.head] = nil
		q.head = (q.head + 1) & (len(q.buf) - 1)
	}
	q.n.Store(int64(cnt - k))
	q.mu.Unlock()
	return dst
}

func (q *sharedQueue) empty() bool { return q.n.Load() == 0 }
