package node

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// eventPub keeps the node's per-task state of each run in arrays (a row per
// vertex: state, activations, executions, times; the output of a sink and
// the error of a failure beside) and publishes what changed as TaskReports:
// every EventLinger after a first change, when flushed (the run's reports
// to the leader flush it, so at idle, on every heartbeat and at the run's
// end), and at once when a task fails or is still running RunningAfter
// after it began. A task changed several times
// between two reports is sent once, with its latest values; no per-task
// message is made on the way.
type eventPub struct {
	conn   *transport.Conn
	linger time.Duration
	log    *slog.Logger

	mu      sync.Mutex
	tabs    map[string]*taskTable // by run
	last    *taskTable            // the table of the latest emit (most emits are of the same run)
	changed []*taskTable          // tables with changes not yet cut, in order of their first
	queue   []*transport.TaskReport

	kick     chan struct{}
	full     chan struct{}
	flushReq chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	started  atomic.Bool

	published, errors atomic.Uint64 // task deltas stored, lost
	reports           atomic.Uint64 // reports stored
	retries           atomic.Uint64 // publishes JetStream did not store at the first try
}

// taskTable is one run's tasks on this node: rows by vertex, and rows by
// name for the subflow children (that are no vertex).
type taskTable struct {
	run, node string
	gen       uint64 // of the changes not yet cut
	rows      []taskRow
	payload   map[uint32]rowPayload // output or error, of the rows that have one
	named     map[string]*namedRow
	dirty     []uint32    // vertices changed since the last cut, in order
	dirtyN    []*namedRow // children changed since the last cut
	listed    bool        // in eventPub.changed
	forget    bool        // the run has ended here: dropped once everything is sent
}

// taskRow is a vertex's latest values (no pointers: a run's rows cost the
// garbage collector nothing to scan).
type taskRow struct {
	act, execs uint64
	start, end int64
	state      transport.TaskState
	dirty      bool
}

type rowPayload struct {
	out []byte
	err string
}

type namedRow struct {
	task uint32
	name string
	taskRow
	rowPayload
}

func newEventPub(c *transport.Conn, linger time.Duration, log *slog.Logger) *eventPub {
	return &eventPub{
		conn: c, linger: linger, log: log, tabs: map[string]*taskTable{},
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

// emitUnless records ev in its run's table unless stopped (when not nil)
// is set; stopped is set under p.mu (see runningWatch), so a change
// recorded here precedes what follows the stop. ev.Name is "" for a vertex
// (ev.Task), else a subflow child's "parent/child".
func (p *eventPub) emitUnless(stopped *atomic.Bool, ev transport.TaskEvent) {
	p.mu.Lock()
	if stopped != nil && stopped.Load() {
		p.mu.Unlock()
		return
	}
	first := p.recordLocked(&ev)
	p.mu.Unlock()
	p.nudgeFor(&ev, first)
}

// emitFlight records the running event ev of the activation act that slot
// holds (flights.scan), unless slot holds it no more: slot is marked
// reported under p.mu, so the event is recorded before the activation's
// final one (the activation clears its slot before that is recorded) or
// not at all.
func (p *eventPub) emitFlight(slot *atomic.Uint64, act uint64, ev transport.TaskEvent) {
	p.mu.Lock()
	if !slot.CompareAndSwap(act, act|reported) {
		p.mu.Unlock()
		return
	}
	first := p.recordLocked(&ev)
	p.mu.Unlock()
	p.nudgeFor(&ev, first)
}

// recordLocked records ev in its run's table (under p.mu) and reports
// whether it is the first change since the last publish.
func (p *eventPub) recordLocked(ev *transport.TaskEvent) (first bool) {
	t := p.last
	if t == nil || t.run != ev.Run || t.node != ev.Node {
		t = p.tabs[ev.Run]
		if t == nil || t.node != ev.Node {
			t = &taskTable{run: ev.Run, node: ev.Node, gen: ev.Gen}
			p.tabs[ev.Run] = t
		}
		p.last = t
	}
	if t.forget {
		// The run ended here and is held again (a new run object counts
		// from zero): a fresh table, after what the old one still has.
		p.cutLocked(t)
		t = &taskTable{run: ev.Run, node: ev.Node, gen: ev.Gen}
		p.tabs[ev.Run], p.last = t, t
	}
	if ev.Gen != t.gen {
		// A report is of one generation: what changed under the last goes first.
		p.cutLocked(t)
		t.gen = ev.Gen
	}
	row, pay := t.row(ev.Task, ev.Name)
	if ev.Act < row.act {
		// An earlier activation that ended after a later one began (or
		// ended): the row keeps the later one, as the status fold would
		// have (an event of an older activation counts only its
		// executions); what it must not do is replace the later one.
		row.execs = max(row.execs, ev.Executions)
	} else {
		row.state, row.act, row.execs = ev.State, ev.Act, ev.Executions
		row.start, row.end = transport.UnixNanos(ev.Start), transport.UnixNanos(ev.End)
		// The output stays until an event says another (a done one, or one
		// with an output), as in the status fold: a report of a sink that
		// ran and then failed still shows what it gave.
		setOut := len(ev.Output) > 0 || ev.State == transport.TaskDone
		if pay != nil {
			if setOut {
				pay.out = ev.Output
			}
			pay.err = ev.Error
		} else if cur, ok := t.payload[ev.Task]; ok || len(ev.Output) > 0 || ev.Error != "" {
			if setOut {
				cur.out = ev.Output
			}
			cur.err = ev.Error
			if t.payload == nil {
				t.payload = map[uint32]rowPayload{}
			}
			t.payload[ev.Task] = cur
		}
	}
	first = len(p.changed) == 0
	if !t.listed {
		t.listed = true
		p.changed = append(p.changed, t)
	}
	return first
}

// nudgeFor wakes the publisher for a change recorded: at once for a
// failure or a running task, else after the linger when it is the first.
func (p *eventPub) nudgeFor(ev *transport.TaskEvent, first bool) {
	if ev.State == transport.TaskFailed || ev.State == transport.TaskRunning {
		// A failure goes at once, and so does a task still running
		// RunningAfter after it began (a long one: no hot path), so that
		// the record the leader checks a verdict against shows it running
		// as soon as an event did.
		nudge(p.full)
	} else if first {
		nudge(p.kick)
	}
}

// row returns the row of vertex v (name "") or of child name, marked
// changed; pay is the child's payload (nil for a vertex: its payload is
// in t.payload).
func (t *taskTable) row(v uint32, name string) (row *taskRow, pay *rowPayload) {
	if name != "" {
		nr := t.named[name]
		if nr == nil {
			if t.named == nil {
				t.named = map[string]*namedRow{}
			}
			nr = &namedRow{task: v, name: name}
			t.named[name] = nr
		}
		if !nr.dirty {
			nr.dirty = true
			t.dirtyN = append(t.dirtyN, nr)
		}
		return &nr.taskRow, &nr.rowPayload
	}
	if int(v) >= len(t.rows) {
		n := max(2*len(t.rows), int(v)+1, 64)
		rows := make([]taskRow, n)
		copy(rows, t.rows)
		t.rows = rows
	}
	row = &t.rows[v]
	if !row.dirty {
		row.dirty = true
		t.dirty = append(t.dirty, v)
	}
	return row, nil
}

// cutLocked moves t's changes into a report on the queue (under p.mu).
func (p *eventPub) cutLocked(t *taskTable) {
	n := len(t.dirty) + len(t.dirtyN)
	if n == 0 {
		return
	}
	tr := &transport.TaskReport{Run: t.run, Gen: t.gen, Node: t.node, Tasks: make([]transport.TaskDelta, 0, n)}
	for _, v := range t.dirty {
		row := &t.rows[v]
		row.dirty = false
		d := transport.TaskDelta{Task: v, State: row.state, Act: row.act, Executions: row.execs, Start: row.start, End: row.end}
		if pay, ok := t.payload[v]; ok {
			d.Output, d.Error = pay.out, pay.err
		}
		tr.Tasks = append(tr.Tasks, d)
	}
	for _, nr := range t.dirtyN {
		nr.dirty = false
		tr.Tasks = append(tr.Tasks, transport.TaskDelta{Task: nr.task, Name: nr.name, State: nr.state, Act: nr.act,
			Executions: nr.execs, Output: nr.out, Error: nr.err, Start: nr.start, End: nr.end})
	}
	t.dirty, t.dirtyN = t.dirty[:0], t.dirtyN[:0]
	p.queue = append(p.queue, tr)
}

// forget drops run's table once everything recorded in it is sent (the
// run has ended on this node; its last changes may still be on the way).
func (p *eventPub) forget(run string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.tabs[run]; t != nil {
		t.forget = true
		p.dropLocked(t)
	}
}

// cutAllLocked cuts every changed table into the queue and takes the
// queue (under p.mu); a forgotten table with nothing left goes.
func (p *eventPub) cutAllLocked() []*transport.TaskReport {
	for _, t := range p.changed {
		p.cutLocked(t)
		t.listed = false
		p.dropLocked(t)
	}
	clear(p.changed)
	p.changed = p.changed[:0]
	q := p.queue
	p.queue = nil
	return q
}

// dropLocked drops t if it is forgotten and has nothing left to send
// (under p.mu; the queue holds reports, not tables, so only t.listed
// matters). A table becomes droppable only where forget marks it or
// publish unlists it, and both call this.
func (p *eventPub) dropLocked(t *taskTable) {
	if t.forget && !t.listed && p.tabs[t.run] == t {
		delete(p.tabs, t.run)
		if p.last == t {
			p.last = nil
		}
	}
}

func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// flush publishes every change recorded so far and waits until it is
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

// retryEvery is how soon reports JetStream did not store are tried again
// (NATS restarting, JetStream recovering): they are kept, in order, until
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

// publish cuts every table's changes into reports and stores the queue, in
// order. Reports that fail go back to the front of the queue (a later cut
// goes behind them, so a task's later values are stored after its earlier
// ones) and publish returns the error, unless final: then they are counted
// as lost.
func (p *eventPub) publish(final bool) error {
	p.mu.Lock()
	q := p.cutAllLocked()
	p.mu.Unlock()
	if len(q) == 0 {
		return nil
	}
	deltas := 0
	for _, tr := range q {
		deltas += len(tr.Tasks)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := p.conn.PublishReports(ctx, q...)
	cancel()
	if err == nil {
		p.published.Add(uint64(deltas))
		p.reports.Add(uint64(len(q)))
		return nil
	}
	if final {
		p.errors.Add(uint64(deltas))
		p.log.Warn("task reports not stored", "tasks", deltas, "err", err)
		return nil
	}
	p.retries.Add(1)
	p.log.Debug("task reports not stored yet; retrying", "tasks", deltas, "err", err)
	p.mu.Lock()
	p.queue = append(q, p.queue...)
	p.mu.Unlock()
	return err
}
