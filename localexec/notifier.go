package localexec

import (
	"sync"
	"sync/atomic"
)

// notifier is the two-phase-commit parking primitive of a domain (an
// eventcount). A worker that wants to sleep calls prepare, re-checks every
// queue of its domain, and then either cancel (it found work) or commit
// (it sleeps until notified). A notify that lands anywhere between prepare and
// commit makes commit return at once, so the re-check and the notify cannot
// miss each other: this is the barrier that "The race" in scheduler.go relies
// on.
//
// notify is cheap when nobody is preparing or sleeping: one atomic load.
type notifier struct {
	waiting  atomic.Int32  // workers between prepare and the end of commit/cancel
	epoch    atomic.Uint64 // bumped by every notify that found waiting > 0
	mu       sync.Mutex
	sleepers []*parker // committed sleepers, LIFO (the warmest cache first)
}

// parker is a worker's own parking slot.
type parker struct {
	epoch uint64
	ch    chan struct{}
}

func newParker() *parker { return &parker{ch: make(chan struct{}, 1)} }

func (n *notifier) prepare(p *parker) {
	p.epoch = n.epoch.Load()
	n.waiting.Add(1)
}

func (n *notifier) cancel(p *parker) {
	n.waiting.Add(-1)
}

// commit sleeps until a notify that happened after prepare. It returns at
// once when one already has.
func (n *notifier) commit(p *parker) {
	n.mu.Lock()
	if n.epoch.Load() != p.epoch {
		n.mu.Unlock()
		n.waiting.Add(-1)
		return
	}
	n.sleepers = append(n.sleepers, p)
	n.mu.Unlock()
	<-p.ch
	// waiting was decremented by the notifier that woke us.
}

// notifyOne wakes one sleeper, or makes every prepared-but-uncommitted
// worker's commit return. It reports whether it woke or released anyone.
func (n *notifier) notifyOne() bool {
	if n.waiting.Load() == 0 {
		return false
	}
	n.mu.Lock()
	n.epoch.Add(1)
	if k := len(n.sleepers); k > 0 {
		p := n.sleepers[k-1]
		n.sleepers[k-1] = nil
		n.sleepers = n.sleepers[:k-1]
		n.waiting.Add(-1)
		n.mu.Unlock()
		p.ch <- struct{}{}
		return true
	}
	n.mu.Unlock()
	return true
}

// notifyAll wakes every sleeper (shutdown).
func (n *notifier) notifyAll() {
	n.mu.Lock()
	n.epoch.Add(1)
	ss := n.sleepers
	n.sleepers = nil
	n.waiting.Add(int32(-len(ss)))
	n.mu.Unlock()
	for _, p := range ss {
		p.ch <- struct{}{}
	}
}
