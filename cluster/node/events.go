package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// eventPub keeps the node's per-task state of each run in arrays (a row per
// vertex: state, activations, executions, times, the generation it was
// recorded under; the output of a sink and the error of a failure beside)
// and publishes what changed as TaskReports: every EventLinger after a
// first change, when flushed (the run's reports to the leader flush it, so
// at idle, on every heartbeat and at the run's end), at once when a task
// fails or is still running RunningAfter after it began, and, without the
// linger, when the publisher serves a volume kick: a run's table had
// cutRows rows (counted by chunk) first changed since its last cut (any
// cut, a flush's or the linger's too, restarts the count; kicks pending
// together wake one publish). A run of many short tasks may so be stored,
// and folded by the leader, while it goes on rather than all at its end:
// how often depends on when the publisher gets a core (beside two busy
// workers on two cores, only when a worker gives up its core, preempted
// or out of work, or the run ends). A task
// changed several times between two reports is sent once, with its latest
// values; no per-task message is made on the way.
//
// A vertex's row is written by the worker that ends its activation
// (record), under the row's own lock word, not the publisher's: the row is
// marked dirty, and its first change since the last cut sets its chunk's
// bit in the table's dirty bitmap (a bit for 64 rows: rowsPerBit) and, the
// table's first since the last cut, lists the table for the publisher
// (under p.mu, once a cut). A cut (under p.mu) unlists the table first,
// then swaps the bitmap's words and reads each row marked dirty in each
// chunk marked (under its lock), so a change either is in the cut or lists
// the table again (a volume publish keeps the run tables it cuts listed
// instead, so a change it misses waits in a listed table for the next
// publish: cutAllLocked): what was recorded before a flush is in the
// reports that flush stores (the report before every TermReport holds
// every change before it). A report is of one generation: a row changed
// under another generation than the one it waits to be sent under cuts
// the table first (under p.mu), and a cut makes one report per
// generation, the older first. Subflow children's rows (by name) are
// recorded under p.mu.
type eventPub struct {
	conn   *transport.Conn
	linger time.Duration
	log    *slog.Logger

	mu      sync.Mutex
	tabs    map[string]*taskTable // by run
	changed []*taskTable          // tables with changes not yet cut, in order of their first
	// queue is the reports cut and not stored yet, written as they were
	// cut (transport.ReportWriter): a cut makes no delta a task (a
	// 100K-task run's were 10 MB, written by the cut and read again by
	// the encoding), and holds no output once it is done.
	queue []*transport.ReportWriter
	// send, while a quiet publish cuts (under p.mu, set and cleared within
	// the one critical section), stores the messages of the reports that
	// cut begins as each is written (cutLocked): the leader reads and
	// folds the first ones while the publisher cuts the rest. Each publish
	// is the NATS client's async one, under p.mu: a copy into its buffer
	// and, for a message of 256 KiB, a write to the socket, which waits
	// while the server reads. A worker may wait on p.mu (listing a table
	// the cut unlisted, recordSlow, endFlight's barrier, open, forget), so
	// a publish streams only where quiet says, just before it, that no
	// part of any run on the node is running: a run's idle flush, and the
	// linger's or a volume kick's publish served at its idle (the run's
	// tail, where the gain is). Every other publish cuts everything under
	// p.mu and publishes after releasing it. Other cuts (a generation
	// change's, open's) find send nil and queue theirs whole.
	send *transport.ReportSend
	// quiet (nil: never) says whether no part of any run on the node is
	// running (Node.quiet), read by publish before it takes p.mu: a part
	// a Signal wakes during that one cut may wait for its writes, as it
	// would for the cut.
	quiet func() bool
	// spare is the rows of the last run's table dropped (everything in it
	// sent), for the next run of as many vertices: a run again of a plan
	// writes rows already in memory, not fresh pages (the first write of
	// each was a fault and a miss).
	spare      []taskRow
	spareDirty []atomic.Uint64
	// spareClear says every row of spare is zero (clearSpare cleared
	// them, and no table has had them since): the next run's open takes
	// them as they are, not clearing them on its way to its first
	// activation. Whatever puts other rows in spare (dropLocked) sets it
	// false, with them.
	spareClear bool
	// spareClearing, while not nil, says clearSpare is clearing spare's
	// rows outside p.mu. clearSpare closes it when its clear ends, whether
	// or not those rows are still spare (spareClear is set only if they
	// are; dropLocked may have put others there and set this nil). An open
	// of their size waits for it rather than make a table of its own.
	spareClearing chan struct{}

	kick     chan struct{}
	full     chan struct{}
	vol      chan struct{} // a table's volume: publish now, keeping it listed (write, cutAllLocked)
	flushReq chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	started  atomic.Bool

	// cutRows: a run's table (made by open) kicks an early publish (p.vol)
	// each time this many of its rows, counted by whole chunks of
	// rowsPerBit, were first changed since its last cut. 0 turns volume
	// kicks off; newEventPub sets the constant cutRows, tests smaller ones.
	cutRows int

	published, errors atomic.Uint64 // task deltas stored, lost
	reports           atomic.Uint64 // reports stored
	retries           atomic.Uint64 // publishes JetStream did not store at the first try
	volumeCuts        atomic.Uint64 // volume kicks (write), not publishes: kicks pending together wake one
}

// cutRows is the default eventPub.cutRows: a run's table of more rows
// than this is cut (and stored, and folded by the leader) while the run
// goes on, every cutRows rows first changed, rather than all at once
// when the run goes idle, where the cut, its store and the leader's fold
// were the serial tail of a short run of many tasks. 32K rows (~1 ms
// to cut): each early report costs a fixed share on the leader (its
// status long poll wakes, fetches, folds and answers its client, who
// asks again), ~1 ms of CPU a report under load, so few a run (a
// 100K-task run's table crosses 32K rows at most three times, 16K at
// most six: kicks, of which fewer may become early reports); at 16K the
// tail after idle was no shorter and the CPU higher
// (docs/benchmarks/cluster-speed.md, session 14).
const cutRows = 32768

// taskTable is one run's tasks on this node: rows by vertex, and rows by
// name for the subflow children (that are no vertex).
type taskTable struct {
	run, node string
	rows      []taskRow       // by vertex; a run's table is made for its graph (open) and never grows
	dirty     []atomic.Uint64 // bitmap of the chunks of rows (rowsPerBit) changed since the last cut
	fixed     bool            // made by open: rows may be written without p.mu, so they never move
	gen       atomic.Uint64   // the generation of the latest change (set under p.mu)
	listed    atomic.Bool     // in eventPub.changed (set without p.mu, cleared under it)
	// marked counts the chunks whose bit a writer set since the last cut
	// began (write: the writer whose Or set it); the one that brings it to
	// cutAt (0: never) kicks an early publish. A hint, not a tally: a
	// chunk marked between a cut's reset and its swap is counted and sent
	// by that cut, so a later kick may come a few chunks early.
	marked atomic.Int32
	cutAt  int32

	payMu   sync.Mutex            // payload (taken with a row's lock held)
	payload map[uint32]rowPayload // output or error, of the rows that have one

	// under p.mu:
	named  map[string]*namedRow
	dirtyN []*namedRow // children changed since the last cut
	forget bool        // the run has ended here: dropped once everything is sent
}

// taskRow is a vertex's latest values (no pointers: a run's rows cost the
// garbage collector nothing to scan), and its slot in the run's flight
// table (flight.go): 64 bytes, a cache line (a run's rows are a large
// allocation: page-aligned).
type taskRow struct {
	fl         flight
	lk         atomic.Uint32 // rowLocked | rowDirty | rowPay
	state      transport.TaskState
	act, execs uint64
	start, end int64
	gen        uint64 // the generation of the latest change
}

// take writes a change of activation act into r and reports whether it is
// the row's latest. An earlier activation that ended after a later one
// began (or ended) counts only its executions: the row keeps the later
// one, as the status fold would have; what it must not do is replace it.
// The caller writes the change's output and error when take reports true.
func (r *taskRow) take(st transport.TaskState, act, execs uint64, start, end int64) bool {
	if act < r.act {
		r.execs = max(r.execs, execs)
		return false
	}
	r.state, r.act, r.execs, r.start, r.end = st, act, execs, start, end
	return true
}

// The bits of taskRow.lk.
const (
	rowLocked = 1 << iota
	rowDirty  // changed since the last cut
	rowPay    // has a payload (taskTable.payload)
)

// lock takes the row's lock word and returns its flags.
func (r *taskRow) lock() uint32 {
	for {
		f := r.lk.Load()
		if f&rowLocked == 0 && r.lk.CompareAndSwap(f, f|rowLocked) {
			return f
		}
		runtime.Gosched() // held by a cut or another writer of the row: a few instructions
	}
}

// unlock releases the row with flags f.
func (r *taskRow) unlock(f uint32) { r.lk.Store(f &^ rowLocked) }

type rowPayload struct {
	out []byte
	err string
}

type namedRow struct {
	task  uint32
	name  string
	gen   uint64
	dirty bool
	taskRow
	rowPayload
}

func newEventPub(c *transport.Conn, linger time.Duration, log *slog.Logger) *eventPub {
	return &eventPub{
		conn: c, linger: linger, log: log, tabs: map[string]*taskTable{}, cutRows: cutRows,
		kick: make(chan struct{}, 1), full: make(chan struct{}, 1), vol: make(chan struct{}, 1),
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

// open returns the table of run for a run object of vertices vertices: a
// fresh one, whose rows its workers write without p.mu (record). A table
// the run left when it ended here before (forgotten) is cut first: what it
// still has goes ahead of the new one's. It may wait for clearSpare's
// clear of spare rows of its size (a pass over memory: a few ms at 100K
// rows), to take them rather than make rows of its own.
func (p *eventPub) open(run, node string, vertices int) *taskTable {
	var t *taskTable
	clean := false
	p.mu.Lock()
	for len(p.spare) == vertices && p.spareClearing != nil {
		c := p.spareClearing
		p.mu.Unlock()
		if h := openWaitTestHook.Load(); h != nil {
			(*h)()
		}
		<-c // a clear of rows in memory: it ends
		p.mu.Lock()
	}
	if len(p.spare) == vertices {
		t = &taskTable{run: run, node: node, rows: p.spare, dirty: p.spareDirty}
		clean = p.spareClear
		p.spare, p.spareDirty, p.spareClear = nil, nil, false
	}
	p.mu.Unlock()
	if t != nil {
		if !clean {
			clear(t.rows) // its last cut left no bit in t.dirty
		}
	} else {
		t = newTable(run, node, vertices)
	}
	t.fixed = true
	if p.cutRows > 0 && vertices > p.cutRows {
		t.cutAt = int32(max(p.cutRows/rowsPerBit, 1))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.tabs[run]; old != nil {
		p.cutLocked(old)
	}
	p.tabs[run] = t
	return t
}

func newTable(run, node string, vertices int) *taskTable {
	return &taskTable{run: run, node: node, rows: make([]taskRow, vertices), dirty: dirtyBitmap(vertices)}
}

// rowsPerBit is the rows a bit of a table's dirty bitmap stands for: the
// first change of any of them since the last cut sets it. A bit a row, as
// it was, had both workers of a run set bits of the same few lines (a
// layer's vertices are neighbours), a locked write to a line the other
// core held on nearly every activation; a bit for 64 rows is set once
// for 64 changes, and a cut reads the lock words of a chunk's 64 rows
// (most of them changed, where one is) to find those that did.
const rowsPerBit = 64

// dirtyBitmap is the dirty bitmap of a table of n rows.
func dirtyBitmap(n int) []atomic.Uint64 {
	chunks := (n + rowsPerBit - 1) / rowsPerBit
	return make([]atomic.Uint64, (chunks+63)/64)
}

// tableLocked is the table ev is recorded in (under p.mu): its run's, or a
// new one, when the run has none or an ended one (emit without open:
// tests), grown to hold ev's vertex when it is not a run's.
func (p *eventPub) tableLocked(ev *transport.TaskEvent) *taskTable {
	t := p.tabs[ev.Run]
	if t == nil || t.node != ev.Node || t.forget {
		if t != nil {
			p.cutLocked(t) // what the old one still has goes first
		}
		t = newTable(ev.Run, ev.Node, 64)
		p.tabs[ev.Run] = t
	}
	if v := int(ev.Task); ev.Name == "" && v >= len(t.rows) {
		if t.fixed {
			panic(fmt.Sprintf("node: task %d of run %s outside its table of %d", v, ev.Run, len(t.rows)))
		}
		n := max(2*len(t.rows), v+1)
		rows := make([]taskRow, n)
		for i := range t.rows {
			rows[i].lk.Store(t.rows[i].lk.Load())
			rows[i].state, rows[i].act, rows[i].execs = t.rows[i].state, t.rows[i].act, t.rows[i].execs
			rows[i].start, rows[i].end, rows[i].gen = t.rows[i].start, t.rows[i].end, t.rows[i].gen
		}
		dirty := dirtyBitmap(n)
		for i := range t.dirty {
			dirty[i].Store(t.dirty[i].Load())
		}
		t.rows, t.dirty = rows, dirty
	}
	return t
}

// emit records ev in its run's table, found by the run's id (under p.mu).
// ev.Name is "" for a vertex (ev.Task), else a subflow child's
// "parent/child".
func (p *eventPub) emit(ev transport.TaskEvent) { p.emitTo(nil, nil, ev) }

// emitTo records ev in t (nil: its run's table by id) unless stopped (when
// not nil) is set; stopped is set under p.mu (see runningWatch), so a
// change recorded here precedes what follows the stop.
func (p *eventPub) emitTo(t *taskTable, stopped *atomic.Bool, ev transport.TaskEvent) {
	if first, ok := p.emitLocked(t, stopped, &ev); ok {
		p.nudgeFor(ev.State, first)
	}
}

// emitLocked is emitTo's part under p.mu (released by a defer: a panic
// there leaves the publisher usable). It reports whether ev was recorded.
func (p *eventPub) emitLocked(t *taskTable, stopped *atomic.Bool, ev *transport.TaskEvent) (first, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if stopped != nil && stopped.Load() {
		return false, false
	}
	if t == nil {
		t = p.tableLocked(ev)
	}
	return p.recordLocked(t, ev), true
}

// emitFlight records the running event ev of the activation act that slot
// holds (flights.scan) in t, unless slot holds it no more: slot is marked
// reported under p.mu, so the event is recorded before the activation's
// final one (the activation that finds its slot marked when it clears it
// takes p.mu before it records anything: flights.end) or not at all.
func (p *eventPub) emitFlight(t *taskTable, slot *atomic.Uint64, act uint64, ev transport.TaskEvent) {
	if first, ok := p.emitFlightLocked(t, slot, act, &ev); ok {
		p.nudgeFor(ev.State, first)
	}
}

// emitFlightLocked is emitFlight's part under p.mu (released by a defer).
func (p *eventPub) emitFlightLocked(t *taskTable, slot *atomic.Uint64, act uint64, ev *transport.TaskEvent) (first, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slot.CompareAndSwap(act, act|reported) {
		return false, false
	}
	return p.recordLocked(t, ev), true
}

// barrier waits for what is being recorded under p.mu.
func (p *eventPub) barrier() {
	p.mu.Lock()
	//lint:ignore SA2001 an empty critical section: ordering only
	p.mu.Unlock()
}

// recordLocked records ev in t (under p.mu) and reports whether it is the
// first change since the last publish.
func (p *eventPub) recordLocked(t *taskTable, ev *transport.TaskEvent) (first bool) {
	if ev.Name == "" {
		first, _ := p.record(t, true, ev.Gen, ev.Task, ev.State, ev.Act, ev.Executions, ev.Output, ev.Error,
			transport.UnixNanos(ev.Start), transport.UnixNanos(ev.End)) // locked: no error, a panic goes on
		return first
	}
	nr := t.named[ev.Name]
	if nr == nil {
		if t.named == nil {
			t.named = map[string]*namedRow{}
		}
		nr = &namedRow{task: ev.Task, name: ev.Name}
		t.named[ev.Name] = nr
	}
	if t.gen.Load() != ev.Gen || (nr.dirty && nr.gen != ev.Gen) {
		p.cutLocked(t) // a report is of one generation: what changed under the last goes first
		t.gen.Store(ev.Gen)
	}
	if !nr.dirty {
		nr.dirty = true
		t.dirtyN = append(t.dirtyN, nr)
	}
	nr.gen = ev.Gen
	if nr.take(ev.State, ev.Act, ev.Executions, transport.UnixNanos(ev.Start), transport.UnixNanos(ev.End)) {
		if len(ev.Output) > 0 || ev.State == transport.TaskDone {
			nr.out = ev.Output
		}
		nr.err = ev.Error
	}
	return p.listLocked(t)
}

// listLocked lists t as changed (under p.mu) and reports whether it is the
// first change since the last publish.
func (p *eventPub) listLocked(t *taskTable) (first bool) {
	first = len(p.changed) == 0
	if t.listed.CompareAndSwap(false, true) {
		p.changed = append(p.changed, t)
	}
	return first
}

// record writes a change of vertex v into its row of t, under the row's
// lock (locked: the caller holds p.mu), and reports whether it is the
// first change since the last publish.
//
// The common change (the generation the table's last, the row clean or
// waiting under it) takes no lock but the row's and has no defer (a defer
// in a loop, as this had, is not open-coded: every call paid for the defer
// chain); the others (a generation change: every run's first change) go
// through recordSlow, which takes p.mu with a defer of its own. A panic
// there (a bug in a cut, say) releases p.mu and, where recordSlow took it,
// comes back as err (errRecordPanic): the caller fails the task with it
// (run.event), and that failure's record finds p.mu free, where a lock
// released by hand would have been held forever
// (TestPanicRecordingAChangeFailsTheRun). With locked, err is nil: a
// panic goes on to the caller, which holds p.mu by a defer of its own.
func (p *eventPub) record(t *taskTable, locked bool, gen uint64, v uint32, st transport.TaskState, act, execs uint64, out []byte, errText string, start, end int64) (first bool, err error) {
	if t.gen.Load() != gen {
		return p.recordSlow(t, locked, gen, v, st, act, execs, out, errText, start, end)
	}
	row := &t.rows[v]
	f := row.lock()
	if f&rowDirty != 0 && row.gen != gen {
		row.unlock(f)
		return p.recordSlow(t, locked, gen, v, st, act, execs, out, errText, start, end)
	}
	p.write(t, row, f, gen, v, st, act, execs, out, errText, start, end)
	if t.listed.Load() {
		return false, nil
	}
	if locked {
		return p.listLocked(t), nil
	}
	return p.list(t), nil
}

// errRecordPanic: recording a task's change panicked (recordSlow).
var errRecordPanic = errors.New("node: panic recording a task's change")

// recordTestHook, when set, runs in recordSlow with p.mu held (tests: a
// panic there).
var recordTestHook atomic.Pointer[func()]

// recordSlow is record's path under p.mu (taken here unless locked): a
// change of generation, or a row that waits to be sent under another.
func (p *eventPub) recordSlow(t *taskTable, locked bool, gen uint64, v uint32, st transport.TaskState, act, execs uint64, out []byte, errText string, start, end int64) (first bool, err error) {
	if !locked {
		p.mu.Lock()
		defer p.mu.Unlock()
		defer func() { // runs before the unlock
			if x := recover(); x != nil {
				p.log.Error("panic recording a task's change", "run", t.run, "task", v, "panic", x, "stack", string(debug.Stack()))
				first, err = false, fmt.Errorf("%w (task %d of run %s): %v", errRecordPanic, v, t.run, x)
			}
		}()
	}
	if h := recordTestHook.Load(); h != nil && !locked {
		(*h)() // only where the recover above catches it: a caller holding p.mu (a running event on the run's loop) has none
	}
	if t.gen.Load() != gen {
		// A report is of one generation: what changed under the last goes
		// first (a generation change: no hot path).
		p.cutLocked(t)
		t.gen.Store(gen)
	}
	row := &t.rows[v]
	f := row.lock()
	for f&rowDirty != 0 && row.gen != gen {
		// The row waits to be sent under another generation (a writer that
		// read the generation in force before it changed): cut it first.
		row.unlock(f)
		p.cutLocked(t)
		f = row.lock()
	}
	p.write(t, row, f, gen, v, st, act, execs, out, errText, start, end)
	return p.listLocked(t), nil
}

// write writes a change into row, whose lock the caller holds (its flags
// f), releases it dirty, and sets the bit of its chunk in t's dirty
// bitmap. The row lock (and payMu) are released by hand, not by a defer:
// nothing between lock and unlock may panic (a panic there would leave
// the row locked, and the failure's own record would spin on it). Only
// p.mu, taken by recordSlow, is released by a defer.
func (p *eventPub) write(t *taskTable, row *taskRow, f uint32, gen uint64, v uint32, st transport.TaskState, act, execs uint64, out []byte, errText string, start, end int64) {
	if row.take(st, act, execs, start, end) {
		// The output stays until an event says another (a done one, or one
		// with an output), as in the status fold: a report of a sink that
		// ran and then failed still shows what it gave.
		if f&rowPay != 0 || len(out) > 0 || errText != "" {
			t.payMu.Lock()
			cur := t.payload[v]
			if len(out) > 0 || st == transport.TaskDone {
				cur.out = out
			}
			cur.err = errText
			if t.payload == nil {
				t.payload = map[uint32]rowPayload{}
			}
			t.payload[v] = cur
			t.payMu.Unlock()
			f |= rowPay
		}
	}
	row.gen = gen
	row.unlock(f | rowDirty)
	// The bit and the listing (the caller's), even when the row was dirty
	// already: its earlier writer may not have set them yet, and a cut
	// between could have unlisted the table, so that this change (a
	// failure, say) would wait for that writer's listing and its linger
	// instead of going now. A bit left set on rows a cut has sent costs
	// that cut a read of their lock words.
	c := v / rowsPerBit
	w := &t.dirty[c/64]
	if bit := uint64(1) << (c % 64); w.Load()&bit == 0 {
		// The chunk's first change since the last cut: counted (by the
		// writer whose Or set the bit) towards an early cut, kicked once a
		// crossing (p.vol: publish now). What it publishes is cut as any
		// publish's is (the order of reports and generations is the cut's,
		// whatever woke it); only the table stays listed (cutAllLocked).
		if w.Or(bit)&bit == 0 && t.cutAt > 0 && t.marked.Add(1) == t.cutAt {
			p.volumeCuts.Add(1)
			nudge(p.vol)
		}
	}
}

// list lists t as changed (listLocked, under p.mu taken here).
func (p *eventPub) list(t *taskTable) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listLocked(t)
}

// nudgeFor wakes the publisher for a change recorded: at once for a
// failure or a running task, else after the linger when it is the first.
// (A table's volume kicks it at once too: write.)
func (p *eventPub) nudgeFor(st transport.TaskState, first bool) {
	if st == transport.TaskFailed || st == transport.TaskRunning {
		// A failure goes at once, and so does a task still running
		// RunningAfter after it began (a long one: no hot path), so that
		// the record the leader checks a verdict against shows it running
		// as soon as an event did.
		nudge(p.full)
	} else if first {
		nudge(p.kick)
	}
}

// cutTestHook, when set, runs in cutLocked (under p.mu) after it counted
// t's marked chunks and before it swaps them (tests: rows written there).
var cutTestHook atomic.Pointer[func(*taskTable)]

// cutLocked moves t's changes into reports on the queue (under p.mu), one
// per generation, the older first, each written as it is cut. It leaves
// t.listed as it finds it. A publish's cut (cutAllLocked) unlists t before
// calling it, so that a change the cut misses lists t again, or, with
// keep, leaves t listed, where such a change waits for the next publish.
// The other cuts (open's and tableLocked's of a table its run left, and
// recordLocked's and recordSlow's on a change of generation) unlist
// nothing: t stays listed if it was, and a change they miss finds it
// listed or lists it (record lists its table after each write); their
// reports wait in the queue for the next publish.
func (p *eventPub) cutLocked(t *taskTable) {
	// The count of chunks marked restarts before the swaps: a chunk
	// marked after its word's swap counts towards the next cut.
	t.marked.Store(0)
	var reps []*transport.ReportWriter // by generation, ascending; almost always one
	n := 0                             // the rows of the chunks marked, and the children: a hint (workers mark more until the swap)
	for i := range t.dirty {
		n += bits.OnesCount64(t.dirty[i].Load())
	}
	n = min(n*rowsPerBit, len(t.rows)) + len(t.dirtyN)
	if n == 0 {
		return
	}
	if h := cutTestHook.Load(); h != nil {
		(*h)(t) // between the count and the swap, where workers go on marking chunks
	}
	rep := func(gen uint64) *transport.ReportWriter {
		// A report begun after the cut's first gets the rows still to
		// read as its hint (its rows are among them), not all of them: a
		// second generation in a cut is mostly a row or two a worker wrote
		// under the generation before it changed, which with the cut's
		// hint of many thousands would take a pooled buffer of 256 KiB.
		i := 0
		for i < len(reps) && reps[i].Gen < gen {
			i++
		}
		if i < len(reps) && reps[i].Gen == gen {
			return reps[i]
		}
		hint := n
		for _, w := range reps {
			hint -= w.Tasks()
		}
		w := transport.NewReportWriter(t.run, gen, t.node, max(hint, 0)) // below 0: more read than counted, unknown
		reps = slices.Insert(reps, i, w)
		if p.send != nil {
			// A publish's cut: each message is stored as it ends. The
			// reports of one cut hold distinct tasks (a row is read once,
			// and so is a child), so the messages of two generations'
			// reports, in the rare cut that has both, may go out
			// interleaved: no task's values can overtake its own.
			p.send.Add(w)
		}
		return w
	}
	var last *transport.ReportWriter // the report of the row before's generation
	for i := range t.dirty {
		w := &t.dirty[i]
		if w.Load() == 0 {
			continue
		}
		for b := w.Swap(0); b != 0; b &= b - 1 {
			c := (i*64 + bits.TrailingZeros64(b)) * rowsPerBit
			for v := uint32(c); v < uint32(min(c+rowsPerBit, len(t.rows))); v++ {
				row := &t.rows[v]
				if row.lk.Load()&rowDirty == 0 {
					// Not changed since the last cut (or being changed for
					// the first time since: its writer then marks the chunk
					// and lists the table again, which this cut unlisted
					// before it read the bitmap).
					continue
				}
				f := row.lock()
				if f&rowDirty == 0 {
					row.unlock(f) // only a cut clears the mark, and cuts hold p.mu: never
					continue
				}
				d := transport.TaskDelta{Task: v, State: row.state, Act: row.act, Executions: row.execs, Start: row.start, End: row.end}
				if f&rowPay != 0 {
					t.payMu.Lock()
					pay := t.payload[v]
					t.payMu.Unlock()
					d.Output, d.Error = pay.out, pay.err
				}
				gen := row.gen
				row.unlock(f &^ rowDirty)
				if last == nil || last.Gen != gen {
					last = rep(gen) // a cut's rows are almost always of one generation: rep's search once
				}
				last.Add(&d)
			}
		}
	}
	for _, nr := range t.dirtyN {
		nr.dirty = false
		rep(nr.gen).Add(&transport.TaskDelta{Task: nr.task, Name: nr.name, State: nr.state, Act: nr.act,
			Executions: nr.execs, Output: nr.out, Error: nr.err, Start: nr.start, End: nr.end})
	}
	clear(t.dirtyN)
	t.dirtyN = t.dirtyN[:0]
	for _, w := range reps {
		w.Finish()
	}
	p.queue = append(p.queue, reps...)
}

// forget drops t once everything recorded in it is sent (the run has
// ended on this node; its last changes may still be on the way).
func (p *eventPub) forget(t *taskTable) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t.forget = true
	p.dropLocked(t)
}

// clearSpare clears the spare rows, if they are not clear yet, for the
// next run's table (open): a run's teardown calls it last, once its
// table is forgotten and its build kept. The teardown starts on the
// Cancel the leader sends once it has applied the run's run_finish
// (after the record check and that entry's commit), so the clear runs
// alongside the leader's answer to the client's status and the client's
// next submit, not before them, and the next run's Assignment may come
// while it runs: the rows stay in spare, marked as being cleared
// (spareClearing), and an open of their size waits for the clear to end
// (a pass over 6.4 MB for 100K rows) rather than make a fresh table. A
// clear done before the Assignment comes is off the next run's way to
// its first activation.
func (p *eventPub) clearSpare() {
	p.mu.Lock()
	rows := p.spare
	if rows == nil || p.spareClear || p.spareClearing != nil {
		p.mu.Unlock()
		return
	}
	done := make(chan struct{})
	p.spareClearing = done
	p.mu.Unlock()
	if h := clearSpareTestHook.Load(); h != nil {
		(*h)()
	}
	clear(rows) // a dropped table's: its last cut left no bit in its dirty bitmap
	p.mu.Lock()
	if p.spareClearing == done { // rows are spare still: open waits for them, only dropLocked replaces them
		p.spareClear, p.spareClearing = true, nil
	}
	p.mu.Unlock()
	close(done)
}

// clearSpareTestHook, when set, runs in clearSpare before it clears the
// rows (outside p.mu), and openWaitTestHook in open before it waits for
// that clear (tests: an open that comes while the spare rows are cleared).
var clearSpareTestHook, openWaitTestHook atomic.Pointer[func()]

// cutAllLocked cuts every changed table into the queue and takes the
// queue (under p.mu); a forgotten table with nothing left goes.
//
// With keep (a publish a table's volume kicked: p.vol), the tables of
// runs going on here that can kick one (cutAt) stay listed: their workers,
// writing rows while the cut reads them, find the table listed and take
// no p.mu to list it again (which would wait out the cut: a volume cut's
// rows are being written, both workers waited for each cut of 32K rows).
// A change the cut misses stays marked (its row, its chunk's bit) in a
// listed table, which the next publish cuts; the loop arms the linger
// after such a publish (a change after it finds the table listed, not
// first, and kicks nothing), so that it still waits no longer than that.
func (p *eventPub) cutAllLocked(keep bool) []*transport.ReportWriter {
	kept := p.changed[:0]
	for _, t := range p.changed {
		stay := keep && t.cutAt > 0 && !t.forget
		if !stay {
			t.listed.Store(false) // before its rows are read: a change the cut misses lists it again
		}
		p.cutLocked(t)
		if stay {
			kept = append(kept, t)
		} else {
			p.dropLocked(t)
		}
	}
	clear(p.changed[len(kept):])
	p.changed = kept
	q := p.queue
	p.queue = nil
	return q
}

// dropLocked drops t if it is forgotten and has nothing left to send
// (under p.mu; the queue holds reports, not tables, so only t.listed
// matters). A table becomes droppable only where forget marks it or
// publish unlists it, and both call this.
//
// A run's table dropped leaves its rows for the next run's (spare): its
// run has ended (no worker writes them, its loop scans them no more), and
// all it had is cut into reports, which copy what they send. Its rows are
// taken from it, so that a write that came after all the same would fail
// loudly rather than change another run's table.
func (p *eventPub) dropLocked(t *taskTable) {
	if t.forget && !t.listed.Load() && p.tabs[t.run] == t {
		delete(p.tabs, t.run)
		if t.fixed && len(t.dirtyN) == 0 {
			// not zero: the next open clears them, unless clearSpare does first
			p.spare, p.spareDirty, p.spareClear, p.spareClearing = t.rows, t.dirty, false, nil
			t.rows, t.dirty = nil, nil
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
// stored (or ctx ends, or the publisher stops, or the connection is
// closed: then nothing can be stored).
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
	answer := func() {
		for _, ch := range waiting {
			close(ch)
		}
		waiting = nil
	}
	publish := func(keep bool) {
		if err := p.publish(false, keep); err != nil {
			if errors.Is(err, transport.ErrClosed) {
				// The connection is closed for good: no retry can store
				// the reports. The flushes waiting are answered now, not
				// at their deadlines (a node closed after its connection
				// waited 5 s in each run's release); the reports stay
				// queued, and stop counts them lost.
				answer()
				return
			}
			arm(retryEvery) // the retry's publish cuts and unlists every table
			return
		}
		if keep {
			// The tables it kept listed (cutAllLocked) wait for the
			// linger, or the next publish, with what changes after it.
			arm(p.linger)
		}
		answer()
	}
	for {
		select {
		case <-p.kick:
			arm(p.linger)
		case <-p.full:
			publish(false)
		case <-p.vol:
			publish(true)
		case <-timer.C:
			armed = false
			publish(false)
		case ch := <-p.flushReq:
			waiting = append(waiting, ch)
			publish(false)
		case <-p.stop:
			timer.Stop()
			_ = p.publish(true, false)
			for _, ch := range waiting {
				close(ch)
			}
			return
		}
	}
}

// publish cuts every table's changes into reports and stores the queue, in
// order: the reports queued before, then the cut's, and the acks of all of
// them awaited at the end. On a quiet node (p.quiet: no part running) the
// queued reports' messages are published first and each of the cut's as
// the cut ends it (p.send), under p.mu; otherwise the cut is made whole
// under p.mu and published after p.mu is released, so that no worker waits
// on a socket write. Reports that fail go back to the front of the queue
// (a later cut goes behind them, so a task's later values are stored after
// its earlier ones) and publish returns the error, unless final: then they
// are counted as lost. keep: a volume kick's (cutAllLocked).
func (p *eventPub) publish(final, keep bool) error {
	stream := p.quiet != nil && p.quiet()
	send := p.conn.SendReports()
	p.mu.Lock()
	q := p.queue
	p.queue = nil
	if stream {
		send.Add(q...)
		p.send = send
	}
	q = append(q, p.cutAllLocked(keep)...)
	p.send = nil
	p.mu.Unlock()
	if !stream {
		send.Add(q...)
	}
	if len(q) == 0 {
		return nil
	}
	deltas := 0
	for _, w := range q {
		deltas += w.Tasks()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := send.Wait(ctx) // every message of q is published (or the send failed: err)
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
	if errors.Is(err, transport.ErrClosed) {
		p.log.Debug("task reports not stored: the connection is closed; kept for stop", "tasks", deltas)
	} else {
		p.retries.Add(1)
		p.log.Debug("task reports not stored yet; retrying", "tasks", deltas, "err", err)
	}
	p.mu.Lock()
	p.queue = append(q, p.queue...)
	p.mu.Unlock()
	return err
}
