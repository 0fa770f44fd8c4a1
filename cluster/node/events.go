package node

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// eventPub batches the node's TaskEvents: a batch leaves EventLinger after
// its first event, when it holds EventBatch events, or on flush.
type eventPub struct {
	conn   *transport.Conn
	linger time.Duration
	max    int
	log    *slog.Logger

	mu  sync.Mutex
	buf []transport.TaskEvent

	kick     chan struct{}
	full     chan struct{}
	flushReq chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	started  atomic.Bool

	published, errors atomic.Uint64
	retries           atomic.Uint64 // batches JetStream did not store at the first try
}

func newEventPub(c *transport.Conn, linger time.Duration, max int, log *slog.Logger) *eventPub {
	return &eventPub{
		conn: c, linger: linger, max: max, log: log,
		kick: make(chan struct{}, 1), full: make(chan struct{}, 1),
		flushReq: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
	}
}

func (p *eventPub) start() {
	if p.started.CompareAndSwap(false, true) {
		go p.loop()
	}
}

// close publishes what is waiting and stops the goroutine.
func (p *eventPub) close() {
	if p.started.Load() {
		close(p.stop)
		<-p.done
	}
}

func (p *eventPub) emit(ev transport.TaskEvent) { p.emitUnless(nil, ev) }

// emitUnless emits ev unless stopped (when not nil) is set; stopped is set
// under p.mu (see runningWatch), so an event emitted here precedes what
// follows the stop.
func (p *eventPub) emitUnless(stopped *atomic.Bool, ev transport.TaskEvent) {
	p.mu.Lock()
	if stopped != nil && stopped.Load() {
		p.mu.Unlock()
		return
	}
	p.buf = append(p.buf, ev)
	n := len(p.buf)
	p.mu.Unlock()
	if n == 1 {
		nudge(p.kick)
	}
	if n >= p.max {
		nudge(p.full)
	}
}

func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// flush publishes every event emitted so far and waits until they are
// stored (or ctx ends, or the publisher stops).
func (p *eventPub) flush(ctx context.Context) {
	if !p.started.Load() {
		return
	}
	ch := make(chan struct{})
	select {
	case p.flushReq <- ch:
	case <-p.done:
		return
	case <-ctx.Done():
		return
	}
	select {
	case <-ch:
	case <-p.done:
	case <-ctx.Done():
	}
}

// retryEvery is how soon a batch JetStream did not store is tried again
// (NATS restarting, JetStream recovering): events are kept, in order, until
// stored or the publisher stops.
const retryEvery = 250 * time.Millisecond

func (p *eventPub) loop() {
	defer close(p.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	arm := func(d time.Duration) {
		if !armed {
			timer.Reset(d)
			armed = true
		}
	}
	var waiting []chan struct{} // flushes answered once what they asked for is stored
	publish := func() {
		if err := p.publish(false); err != nil {
			arm(retryEvery)
			return
		}
		for _, ch := range waiting {
			close(ch)
		}
		waiting = nil
	}
	for {
		select {
		case <-p.kick:
			arm(p.linger)
		case <-p.full:
			publish()
		case <-timer.C:
			armed = false
			publish()
		case ch := <-p.flushReq:
			waiting = append(waiting, ch)
			publish()
		case <-p.stop:
			timer.Stop()
			_ = p.publish(true)
			for _, ch := range waiting {
				close(ch)
			}
			return
		}
	}
}

// publish stores the waiting events, a batch at a time. A batch that fails
// goes back to the front of the buffer and publish returns the error, unless
// final: then it is counted as lost.
func (p *eventPub) publish(final bool) error {
	for {
		p.mu.Lock()
		evs := p.buf
		if len(evs) > p.max {
			evs = evs[:p.max:p.max]
			p.buf = p.buf[p.max:]
		} else {
			p.buf = nil
		}
		p.mu.Unlock()
		if len(evs) == 0 {
			return nil
		}
		evs = coalesce(evs)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := p.conn.PublishEvents(ctx, evs...)
		cancel()
		if err == nil {
			p.published.Add(uint64(len(evs)))
			continue
		}
		if final {
			p.errors.Add(uint64(len(evs)))
			p.log.Warn("task events not stored", "events", len(evs), "err", err)
			continue
		}
		p.retries.Add(1)
		p.log.Debug("task events not stored yet; retrying", "events", len(evs), "err", err)
		p.mu.Lock()
		p.buf = append(evs, p.buf...)
		p.mu.Unlock()
		return err
	}
}

type eventKey struct {
	run  string
	task uint32
	name string
}

// coalesce keeps, of the events of one batch, the latest per task (run,
// index and name): a task's later event supersedes its earlier ones, and
// everything a status reads from them (state, activations, executions,
// output) is in the latest, so a loop publishes one event per task per
// batch rather than one per activation. Order follows the kept events.
func coalesce(evs []transport.TaskEvent) []transport.TaskEvent {
	if len(evs) < 2 {
		return evs
	}
	last := make(map[eventKey]int, len(evs))
	for i := range evs {
		last[eventKey{evs[i].Run, evs[i].Task, evs[i].Name}] = i
	}
	if len(last) == len(evs) {
		return evs
	}
	out := make([]transport.TaskEvent, 0, len(last))
	for i := range evs {
		if last[eventKey{evs[i].Run, evs[i].Task, evs[i].Name}] == i {
			out = append(out, evs[i])
		}
	}
	return out
}
