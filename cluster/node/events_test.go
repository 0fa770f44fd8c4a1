package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/transport"
	"github.com/nats-io/nats.go"
)

// cut returns the reports a publish would store now, without storing
// them: each writer's messages decoded into one report.
func (p *eventPub) cut() []*transport.TaskReport { return p.cutAs(false) }

// cutAs is cut by a publish that keeps its run tables listed (keep: a
// volume kick's) or not.
func (p *eventPub) cutAs(keep bool) []*transport.TaskReport {
	p.mu.Lock()
	q := p.cutAllLocked(keep)
	p.mu.Unlock()
	return decodeWritten(q)
}

// decodeWritten is the reports of writers q, each decoded from its
// messages into one.
func decodeWritten(q []*transport.ReportWriter) []*transport.TaskReport {
	var out []*transport.TaskReport
	for _, w := range q {
		tr := &transport.TaskReport{Run: w.Run, Gen: w.Gen, Node: w.Node}
		for _, b := range w.Messages() {
			var m transport.TaskReport
			if err := m.Decode(b, transport.Limits{}); err != nil {
				panic(fmt.Sprintf("a report cut does not decode: %v", err))
			}
			if m.Run != w.Run || m.Gen != w.Gen || m.Node != w.Node {
				panic(fmt.Sprintf("a message of %s/%d/%s in a report of %s/%d/%s", m.Run, m.Gen, m.Node, w.Run, w.Gen, w.Node))
			}
			tr.Tasks = append(tr.Tasks, m.Tasks...)
		}
		out = append(out, tr)
	}
	return out
}

func TestEventTableSendsTheLatestOfWhatChanged(t *testing.T) {
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	ev := func(run string, gen uint64, task uint32, name string, st transport.TaskState, act uint64, out []byte) transport.TaskEvent {
		return transport.TaskEvent{Run: run, Gen: gen, Task: task, Name: name, Node: "n1", State: st, Act: act, Executions: act, Output: out,
			Start: time.Unix(100, int64(act)), End: time.Unix(100, int64(act)+5)}
	}
	done, run := transport.TaskDone, transport.TaskRunning
	p.emit(ev("r", 1, 1, "", run, 1, nil))
	p.emit(ev("r", 1, 2, "", done, 1, nil))
	p.emit(ev("r", 1, 1, "", done, 1, []byte("o1")))
	p.emit(ev("r", 1, 3, "fan/0", done, 1, []byte("c")))
	p.emit(ev("q", 1, 7, "", done, 1, nil))
	p.emit(ev("r", 1, 1, "", run, 2, nil)) // a loop's next activation: the output of the first stays, as in the fold
	d := func(task uint32, name string, st transport.TaskState, act uint64, out []byte) transport.TaskDelta {
		return transport.TaskDelta{Task: task, Name: name, State: st, Act: act, Executions: act, Output: out,
			Start: time.Unix(100, int64(act)).UnixNano(), End: time.Unix(100, int64(act)+5).UnixNano()}
	}
	want := []*transport.TaskReport{
		{Run: "r", Gen: 1, Node: "n1", Tasks: []transport.TaskDelta{d(1, "", run, 2, []byte("o1")), d(2, "", done, 1, nil), d(3, "fan/0", done, 1, []byte("c"))}},
		{Run: "q", Gen: 1, Node: "n1", Tasks: []transport.TaskDelta{d(7, "", done, 1, nil)}},
	}
	if got := p.cut(); !reflect.DeepEqual(got, want) {
		t.Fatalf("first cut:\n got %v\nwant %v", got, want)
	}
	if got := p.cut(); len(got) != 0 {
		t.Fatalf("nothing changed, yet a cut made %v", got)
	}
	// Only what changed since is sent; a new generation starts a new report,
	// after the changes made under the old one.
	p.emit(ev("r", 1, 2, "", done, 2, nil))
	p.emit(ev("r", 2, 5, "", done, 1, []byte("s")))
	p.emit(ev("r", 2, 2, "", done, 3, nil))
	want = []*transport.TaskReport{
		{Run: "r", Gen: 1, Node: "n1", Tasks: []transport.TaskDelta{d(2, "", done, 2, nil)}},
		{Run: "r", Gen: 2, Node: "n1", Tasks: []transport.TaskDelta{d(2, "", done, 3, nil), d(5, "", done, 1, []byte("s"))}}, // by vertex
	}
	if got := p.cut(); !reflect.DeepEqual(got, want) {
		t.Fatalf("second cut:\n got %v\nwant %v", got, want)
	}
	// An earlier activation that ends after a later one leaves the later
	// one in the row, its executions counted.
	p.emit(ev("r", 2, 4, "", done, 3, []byte("late")))
	older := ev("r", 2, 4, "", done, 2, []byte("early"))
	older.Executions = 4
	p.emit(older)
	later := d(4, "", done, 3, []byte("late"))
	later.Executions = 4
	want = []*transport.TaskReport{{Run: "r", Gen: 2, Node: "n1", Tasks: []transport.TaskDelta{later}}}
	if got := p.cut(); !reflect.DeepEqual(got, want) {
		t.Fatalf("an earlier activation reported last:\n got %v\nwant %v", got, want)
	}
	// A forgotten run's table goes once nothing of it waits.
	p.emit(ev("q", 1, 7, "", done, 2, nil))
	p.forget(p.tabs["q"])
	if p.tabs["q"] == nil {
		t.Fatal("a table with changes not sent was dropped")
	}
	p.cut()
	if p.tabs["q"] != nil {
		t.Fatal("a forgotten table with nothing to send was kept")
	}
}

// The status a coordinator folds from a node's reports (the table cut at
// random moments, encoded, read back as events) is the status it folded
// from every event the node made, as an earlier node sent them (named by
// path): the same rows, and the same verdict check. The events are random:
// loops, activations that end out of order, a subflow's children, sink
// outputs, a failure, a generation change.
func TestReportsFoldAsTheirEvents(t *testing.T) {
	_, g := parseFlow(t, `
name: eq
tasks:
  - {name: a, func: hash}
  - {name: b, func: hash, succeed: [a]}
  - {name: c, kind: condition, func: loop, args: {n: 3}, succeed: [b], precede: [b, d]}
  - {name: d, func: hash}
  - {name: fan, kind: subflow, func: fanout, args: {n: 3}, succeed: [a]}
  - {name: e, func: hash, succeed: [fan]}
`)
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
		raw := coord.NewFold()
		rep := coord.NewFold()
		direct := coord.NewFold() // the reports decoded and folded whole (Fold.AddReport), as the leader reads them
		fold := func() {
			for _, tr := range p.cut() {
				data := transport.Encode(tr)
				if err := transport.EachEvent(data, transport.Limits{}, func(e *transport.TaskEvent) error {
					rep.Add(g, e)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				var dec transport.TaskReport
				if err := dec.Decode(data, transport.Limits{}); err != nil {
					t.Fatal(err)
				}
				direct.AddReport(g, &dec)
			}
		}
		gen := uint64(1)
		execs := map[string]uint64{}
		emit := func(v int, name string, st transport.TaskState, act uint64) {
			path := g.Vertices[v].Path
			if name != "" {
				path = name
			}
			if st != transport.TaskRunning {
				execs[path]++ // read from a counter as the event is made: never less than an earlier event's
			}
			var out []byte
			if st == transport.TaskDone && (len(g.Vertices[v].Succ) == 0 || name != "") {
				out = []byte(fmt.Sprintf("%s#%d", path, act))
			}
			e := transport.TaskEvent{Run: "r", Gen: gen, Task: uint32(v), Name: name, Node: "n1", State: st, Act: act, Executions: execs[path], Output: out}
			if st == transport.TaskFailed {
				e.Error = "boom"
			}
			p.emit(e)
			e.Name = path // as an earlier node named every task
			raw.Add(g, &e)
			if rng.IntN(4) == 0 {
				fold()
			}
		}
		for v := range g.Vertices {
			acts := uint64(1 + rng.IntN(3))
			for a := uint64(1); a <= acts; a++ {
				if rng.IntN(2) == 0 {
					emit(v, "", transport.TaskRunning, a)
				}
				if a < acts && rng.IntN(3) == 0 { // a later activation ends first
					emit(v, "", transport.TaskDone, a+1)
					emit(v, "", transport.TaskDone, a)
					a++
					continue
				}
				emit(v, "", transport.TaskDone, a)
			}
			if g.Vertices[v].Path == "fan" {
				for k := range 3 {
					emit(v, fmt.Sprintf("fan/%d", k), transport.TaskDone, 1)
				}
			}
			if rng.IntN(10) == 0 {
				gen++
			}
		}
		if rng.IntN(3) == 0 {
			emit(rng.IntN(len(g.Vertices)), "", transport.TaskFailed, 9)
		}
		fold()
		for _, state := range []string{proto.RunRunning, proto.RunFailed} {
			r := coord.Run{ID: "r", FlowName: "eq", State: state}
			want, got := raw.AppendJSON(nil, r, g), rep.AppendJSON(nil, r, g)
			if !bytes.Equal(want, got) {
				t.Fatalf("seed %d, run %s: the reports fold to\n%s\nthe events to\n%s", seed, state, got, want)
			}
			if got := direct.AppendJSON(nil, r, g); !bytes.Equal(want, got) {
				t.Fatalf("seed %d, run %s: the reports folded whole fold to\n%s\nthe events to\n%s", seed, state, got, want)
			}
			if wp, gp := raw.Progress(r, g), direct.Progress(r, g); !reflect.DeepEqual(wp, gp) {
				t.Fatalf("seed %d, run %s: the reports folded whole tally %+v, the events %+v", seed, state, gp, wp)
			}
		}
		wo, wf := coord.CheckSuccess(g, raw)
		for _, f := range []*coord.Fold{rep, direct} {
			go_, gf := coord.CheckSuccess(g, f)
			if !reflect.DeepEqual(wo, go_) || !reflect.DeepEqual(wf, gf) {
				t.Fatalf("seed %d: the record check of the reports says %v %v, of the events %v %v", seed, go_, gf, wo, wf)
			}
		}
	}
}

// A task's failure, and a task still running, are stored at once; other
// changes wait for the linger (here an hour) or a flush.
func TestEventFailureAndRunningAreSentAtOnce(t *testing.T) {
	ctx, c, p := storedPub(t)
	p.start()
	defer p.close()
	stored := func() map[uint32]transport.TaskState {
		m := map[uint32]transport.TaskState{}
		if err := c.ReplayEvents(ctx, "r1", func(e *transport.TaskEvent) error { m[e.Task] = e.State; return nil }); err != nil {
			t.Fatal(err)
		}
		return m
	}
	p.emit(transport.TaskEvent{Run: "r1", Gen: 1, Task: 0, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1})
	p.emit(transport.TaskEvent{Run: "r1", Gen: 1, Task: 1, Node: "n1", State: transport.TaskFailed, Act: 1, Executions: 1, Error: "boom"})
	testsupport.EventuallyCtx(t, ctx, "the failure stored without a flush", func() bool { return stored()[1] == transport.TaskFailed })
	if m := stored(); m[0] != transport.TaskDone {
		t.Fatalf("the failure's report left without the change before it: %v", m)
	}
	p.emit(transport.TaskEvent{Run: "r1", Gen: 1, Task: 2, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1})
	if _, ok := stored()[2]; ok {
		t.Fatal("a done task was stored before the linger or a flush")
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p.flush(fctx)
	if stored()[2] != transport.TaskDone {
		t.Fatal("flush returned before the change was stored")
	}
	if got := p.published.Load(); got != 3 {
		t.Fatalf("published %d task deltas, want 3", got)
	}
	// So is a task still running RunningAfter after it began (the only
	// running event a node makes).
	p.emit(transport.TaskEvent{Run: "r1", Gen: 1, Task: 3, Node: "n1", State: transport.TaskRunning, Act: 1, Executions: 1})
	testsupport.EventuallyCtx(t, ctx, "the running task stored without a flush", func() bool { return stored()[3] == transport.TaskRunning })
}

// BenchmarkEventTable100K is a node's share of the status of a 100,000-task
// run: a done event recorded per task (as run.event makes it), then the
// changes cut into a report and encoded as it is stored.
func BenchmarkEventTable100K(b *testing.B) {
	const n = 100000
	b.ReportAllocs()
	bytes := 0
	for range b.N {
		p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
		for v := range n {
			now := time.Now()
			p.emit(transport.TaskEvent{Run: "r0000000000001-000001", Gen: 1, Task: uint32(v), Node: "n1", State: transport.TaskDone,
				Act: 1, Executions: 1, Start: now, End: now})
		}
		bytes = 0
		for _, tr := range p.cut() {
			bytes += len(transport.Encode(tr))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/task")
	b.ReportMetric(float64(bytes)/n, "B/task")
}

// Workers write their vertices' rows without the publisher's lock while
// the publisher cuts at random moments: every change is in a report, so
// the reports, read in order, end at each vertex's last activation, and a
// flush after the writers are done leaves nothing behind.
func TestEventRowsWrittenByWorkersLoseNothing(t *testing.T) {
	const workers, per, acts = 4, 500, 20
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	tab := p.open("r", "n1", workers*per)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	latest := map[uint32]uint64{}
	var reports []*transport.TaskReport
	cutter := make(chan struct{})
	go func() {
		defer close(cutter)
		for {
			select {
			case <-stop:
				return
			default:
			}
			reports = append(reports, p.cut()...)
		}
	}()
	for w := range workers {
		wg.Go(func() {
			for a := uint64(1); a <= acts; a++ {
				for i := range per {
					v := uint32(w*per + i)
					first, _ := p.record(tab, false, 1, v, transport.TaskDone, a, a, nil, "", 1, 2)
					p.nudgeFor(transport.TaskDone, first)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-cutter
	reports = append(reports, p.cut()...)
	for _, tr := range reports {
		if tr.Gen != 1 || tr.Run != "r" {
			t.Fatalf("report of run %s gen %d", tr.Run, tr.Gen)
		}
		for _, d := range tr.Tasks {
			if d.Act < latest[d.Task] {
				t.Fatalf("task %d: activation %d reported after %d", d.Task, d.Act, latest[d.Task])
			}
			latest[d.Task] = d.Act
			if d.Executions != d.Act {
				t.Fatalf("task %d: activation %d with %d executions", d.Task, d.Act, d.Executions)
			}
		}
	}
	for v := range uint32(workers * per) {
		if latest[v] != acts {
			t.Fatalf("task %d: the reports end at activation %d, want %d", v, latest[v], acts)
		}
	}
	if got := p.cut(); len(got) != 0 {
		t.Fatalf("a cut after everything was cut made %d reports", len(got))
	}
	// A forgotten table with nothing left goes, and leaves its rows to the
	// next run's table of as many vertices, cleared; the old table holds
	// none of them any more.
	p.forget(tab)
	if p.tabs["r"] != nil {
		t.Fatal("a forgotten table with nothing to send was kept")
	}
	next := p.open("s", "n1", workers*per)
	if tab.rows != nil {
		t.Fatal("the dropped table still holds its rows")
	}
	for v := range next.rows {
		if r := &next.rows[v]; r.act != 0 || r.lk.Load() != 0 || r.fl.act.Load() != 0 {
			t.Fatalf("row %d of a new table: %+v", v, r)
		}
	}
}

// A run's teardown clears the rows its forgotten table left (clearSpare):
// the next table of as many vertices takes them clear, as the same
// array, and a table dropped later (its last changes sent after the
// forget) leaves rows that its successor's open clears itself. Rows that
// take the place of cleared ones are not taken for clear (spareClear ⇒
// every row of spare is zero).
func TestSpareRowsClearedBeforeTheNextRun(t *testing.T) {
	const n = 300
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	emitAll := func(run string) { emitN(p, run, n) }
	a := p.open("a", "n1", n)
	emitAll("a")
	p.cut()
	rows := a.rows
	p.forget(a)
	p.clearSpare()
	if !p.spareClear || &p.spare[0] != &rows[0] {
		t.Fatal("the forgotten table's rows are not the spare, cleared")
	}
	for v := range rows {
		if r := &rows[v]; r.act != 0 || r.lk.Load() != 0 || r.state != 0 {
			t.Fatalf("row %d of the spare: %+v", v, r)
		}
	}
	p.clearSpare() // clear already: nothing to do
	b := p.open("b", "n1", n)
	if &b.rows[0] != &rows[0] || p.spare != nil || p.spareClear {
		t.Fatal("the next table did not take the spare rows")
	}
	zeroRows(t, b)
	// b's last changes wait when it is forgotten: it goes at the cut,
	// later than the teardown's clearSpare, and its successor clears
	emitAll("b")
	p.forget(b)
	p.clearSpare()
	if p.spare != nil {
		t.Fatal("a table with changes not sent left its rows")
	}
	p.cut()
	if p.spare == nil || p.spareClear {
		t.Fatal("the table dropped at the cut did not leave its rows, not cleared")
	}
	c := p.open("c", "n1", n)
	if &c.rows[0] != &rows[0] {
		t.Fatal("the third table did not take the spare rows")
	}
	zeroRows(t, c)
	// c's rows, cleared at its teardown, then a table of another size
	// (which does not take them) is dropped on top: its rows, written,
	// are the spare now, not clear, and its successor's open clears them
	emitAll("c")
	p.cut()
	p.forget(c)
	p.clearSpare()
	if !p.spareClear || &p.spare[0] != &rows[0] {
		t.Fatal("c's rows are not the spare, cleared")
	}
	const m = n / 2
	d := p.open("d", "n1", m)
	if &d.rows[0] == &rows[0] || p.spare == nil {
		t.Fatal("a table of another size took the spare rows")
	}
	dRows := d.rows
	emitN(p, "d", m)
	p.cut()
	p.forget(d)
	takesSpare(t, p, dRows)
}

// An Assignment may come while the last run's teardown clears the spare
// rows (the leader's Cancel and the client's next submit go on at once):
// an open of their size waits for the clear and takes them, not a fresh
// table. Rows that take the place of those being cleared (a table of
// another size dropped meanwhile) are not marked clear when that clear
// ends: the next open of their size clears them.
func TestOpenWaitsForTheSpareRowsClear(t *testing.T) {
	const n, m = 300, 150
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	ended := func(run string, size int) []taskRow {
		tab := p.open(run, "n1", size)
		emitN(p, run, size)
		p.cut()
		rows := tab.rows
		p.forget(tab) // dropped: its rows are the spare
		return rows
	}
	// holdClear starts a teardown's clearSpare held before its clear, and
	// returns what lets it go and what says it has returned
	holdClear := func() (release func(), done <-chan struct{}) {
		clearing, rel, fin := make(chan struct{}), make(chan struct{}), make(chan struct{})
		hook := func() { close(clearing); <-rel }
		clearSpareTestHook.Store(&hook)
		go func() {
			defer close(fin)
			p.clearSpare()
		}()
		<-clearing
		clearSpareTestHook.Store(nil)
		var once sync.Once
		release = func() { once.Do(func() { close(rel) }) }
		t.Cleanup(func() { release(); <-fin }) // a test that fails while it is held lets it go
		return release, fin
	}
	t.Cleanup(func() { clearSpareTestHook.Store(nil); openWaitTestHook.Store(nil) })

	rows := ended("a", n)
	release, done := holdClear()
	p.clearSpare() // one clear at a time: this one leaves it to the one going on
	waiting := make(chan struct{})
	var once sync.Once
	wait := func() { once.Do(func() { close(waiting) }) }
	openWaitTestHook.Store(&wait)
	got := make(chan *taskTable, 1)
	go func() { got <- p.open("b", "n1", n) }()
	select {
	case <-waiting: // the open waits for the clear
	case <-got:
		t.Fatal("an open went ahead while the spare rows were cleared")
	}
	openWaitTestHook.Store(nil)
	release()
	b := <-got
	<-done
	if &b.rows[0] != &rows[0] {
		t.Fatal("an open while the spare rows were cleared made a table of its own")
	}
	zeroRows(t, b)

	// b's rows are being cleared when a table of another size is dropped
	// on top: its written rows are the spare, and stay marked not clear
	p.forget(b)
	release, done = holdClear()
	dRows := ended("d", m)
	release()
	<-done
	takesSpare(t, p, dRows)
}

// emitN records every task of run's table, of n tasks, done once.
func emitN(p *eventPub, run string, n int) {
	for v := range uint32(n) {
		p.emit(transport.TaskEvent{Run: run, Gen: 1, Task: v, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1,
			Start: time.Unix(100, 1), End: time.Unix(100, 6)})
	}
}

// A cut reads the rows of the chunks marked when it swaps the bitmap, which
// may be more than it counted for its writer's hint: workers go on marking
// chunks until the swap (here the hook writes them there, as a worker on
// record's fast path would, each a second before the one before so that
// the writer begins message after message). The cut sends them all and
// does not panic: a message begun past the hint once made a buffer of
// negative room (publish's cut has no recover; the node died).
func TestCutReadsMoreRowsThanItCounted(t *testing.T) {
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	const more = 300
	tab := p.open("r", "n1", (more+1)*rowsPerBit)
	at := int64(1700000000000000000)
	if _, err := p.record(tab, false, 1, 0, transport.TaskDone, 1, 1, nil, "", at, at+500); err != nil {
		t.Fatal(err)
	}
	hook := func(tab *taskTable) {
		for k := 1; k <= more; k++ {
			s := at - int64(k)*1_000_000_000
			// locked: the cut holds p.mu (tab is listed already).
			if _, err := p.record(tab, true, 1, uint32(k*rowsPerBit), transport.TaskDone, 1, 1, nil, "", s, s+500); err != nil {
				panic(err)
			}
		}
	}
	cutTestHook.Store(&hook)
	defer cutTestHook.Store(nil)
	p.mu.Lock()
	func() {
		defer func() {
			if x := recover(); x != nil {
				p.mu.Unlock()
				t.Fatalf("a cut of %d rows counted as %d panicked: %v", more+1, rowsPerBit, x)
			}
		}()
		p.cutLocked(tab)
	}()
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	cutTestHook.Store(nil)
	rs := decodeWritten(q)
	if len(rs) != 1 || len(rs[0].Tasks) != more+1 {
		t.Fatalf("a cut of %d rows: %d reports", more+1, len(rs))
	}
	for k, d := range rs[0].Tasks {
		if d.Task != uint32(k*rowsPerBit) || d.Start != at-int64(k)*1_000_000_000 {
			t.Fatalf("row %d of the cut: %+v", k, d)
		}
	}
	if msgs := len(q[0].Messages()); msgs < 3 {
		t.Fatalf("%d messages: none begun past the hint", msgs)
	}
}

// A cut of a run's rows and a row a worker wrote under the generation
// before (it read the generation before it changed) writes two reports;
// the old generation's one row, read last, takes a buffer of its size, not
// a pooled one of 256 KiB by the cut's hint.
func TestCutSizesALateReportByTheRowsLeft(t *testing.T) {
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	const n = 20_000
	tab := p.open("r", "n1", n)
	at := int64(1700000000000000000)
	for v := range uint32(n - 1) {
		if _, err := p.record(tab, false, 2, v, transport.TaskDone, 1, 1, nil, "", at, at+500); err != nil {
			t.Fatal(err)
		}
	}
	row := &tab.rows[n-1]
	p.write(tab, row, row.lock(), 1, n-1, transport.TaskDone, 1, 1, nil, "", at, at+500) // record's fast path, generation 1 read before it changed
	p.mu.Lock()
	p.cutLocked(tab)
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	rs := decodeWritten(q)
	if len(rs) != 2 || rs[0].Gen != 1 || len(rs[0].Tasks) != 1 || rs[1].Gen != 2 || len(rs[1].Tasks) != n-1 {
		t.Fatalf("a cut of %d rows under generation 2 and one under 1: %d reports", n-1, len(rs))
	}
	if c := cap(q[0].Messages()[0]); c > 4<<10 {
		t.Errorf("a report of one row written into a buffer of %d bytes", c)
	}
}

// A cut writes what it sends as it cuts (no delta is kept a task): a
// row, its output or its error changed after the cut leaves the reports
// cut before as they were. And the rows of a run cut at its end, their
// times in no strict order within a few µs, go in a few messages of a
// few bytes a task (a message's base, from its first row, serves them).
func TestCutWritesWhatItSends(t *testing.T) {
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	out := []byte("first")
	p.emit(transport.TaskEvent{Run: "r", Gen: 1, Task: 0, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1, Output: out,
		Start: time.Unix(100, 0), End: time.Unix(100, 5)})
	p.emit(transport.TaskEvent{Run: "r", Gen: 1, Task: 1, Node: "n1", State: transport.TaskFailed, Act: 1, Executions: 1, Error: "boom",
		Start: time.Unix(100, 0), End: time.Unix(100, 5)})
	p.mu.Lock()
	q := p.cutAllLocked(false)
	p.mu.Unlock()
	copy(out, "XXXXX")
	p.emit(transport.TaskEvent{Run: "r", Gen: 1, Task: 1, Node: "n1", State: transport.TaskDone, Act: 2, Executions: 2,
		Start: time.Unix(101, 0), End: time.Unix(101, 5)})
	got := decodeWritten(q)
	if len(got) != 1 || len(got[0].Tasks) != 2 || string(got[0].Tasks[0].Output) != "first" || got[0].Tasks[1].Error != "boom" || got[0].Tasks[1].Act != 1 {
		t.Fatalf("the reports cut before the changes: %+v", got)
	}

	p.cut() // the change after the first cut
	const n = 100_000
	tab := p.open("big", "n1", n)
	t0 := time.Now().UnixNano()
	for v := range uint32(n) {
		s := t0 + int64(v/2)*200 + int64(v%2)*3000 // two workers, one a few µs behind
		if _, err := p.record(tab, false, 1, v, transport.TaskDone, 1, 1, nil, "", s, s+60); err != nil {
			t.Fatal(err)
		}
	}
	p.mu.Lock()
	q = p.cutAllLocked(false)
	p.mu.Unlock()
	msgs, bytes := 0, 0
	for _, w := range q {
		for _, b := range w.Messages() {
			msgs++
			bytes += len(b)
		}
	}
	if msgs > 5 || bytes > 9*n {
		t.Errorf("a run's %d rows cut at its end: %d messages, %d bytes, want a few messages of a few bytes a task", n, msgs, bytes)
	}
	rs := decodeWritten(q)
	if len(rs) != 1 || len(rs[0].Tasks) != n || rs[0].Tasks[n-1].Start != t0+int64((n-1)/2)*200+3000 {
		t.Fatalf("a run's rows cut at its end: %d reports", len(rs))
	}
}

// zeroRows fails t unless every row of tab is zero (its activation, lock
// word, flight and state): a new table's.
func zeroRows(t *testing.T, tab *taskTable) {
	t.Helper()
	for v := range tab.rows {
		if r := &tab.rows[v]; r.act != 0 || r.lk.Load() != 0 || r.fl.act.Load() != 0 || r.state != 0 {
			t.Fatalf("row %d of a new table: %+v", v, r)
		}
	}
}

// takesSpare fails t unless rows, a dropped table's, are p's spare and
// the next open of their size takes them, zero.
func takesSpare(t *testing.T, p *eventPub, rows []taskRow) {
	t.Helper()
	if len(p.spare) != len(rows) || &p.spare[0] != &rows[0] {
		t.Fatal("the dropped table's rows are not the spare")
	}
	e := p.open("e", "n1", len(rows))
	if &e.rows[0] != &rows[0] {
		t.Fatal("the next open of their size did not take the dropped table's rows")
	}
	zeroRows(t, e)
}

// A flush whose reports cannot be stored because the connection is closed
// for good returns at once, not at its deadline (it has none here): a node
// closing after its connection used to wait 5 s in each run's release. The
// reports are counted lost when the publisher stops.
func TestEventFlushReturnsOnAClosedConnection(t *testing.T) {
	ctx, c, p := storedPub(t)
	p.start()
	p.emit(transport.TaskEvent{Run: "r1", Gen: 1, Task: 0, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1})
	c.NATS().Close()
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		p.flush(context.Background())
	}()
	select {
	case <-flushed:
	case <-ctx.Done():
		t.Error("flush on a closed connection did not return")
	}
	p.close() // ends a flush still waiting
	<-flushed
	if got := p.errors.Load(); got != 1 {
		t.Fatalf("%d task deltas counted lost, want 1", got)
	}
	if got := p.published.Load(); got != 0 {
		t.Fatalf("%d task deltas published on a closed connection", got)
	}
}

// storedPub is an event publisher of node n1 on a NATS server of the
// test's own, its streams made, its linger an hour (reports are stored
// by flushes, kicks and failures only), not started: the test sets what
// it needs first. It returns the test's context and the connection.
func storedPub(t *testing.T) (context.Context, *transport.Conn, *eventPub) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	c := connect(t, testsupport.NATS(t).URL(), "n1")
	if err := c.EnsureStreams(ctx, transport.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	return ctx, c, newEventPub(c, time.Hour, slog.New(slog.DiscardHandler))
}

// A publish stores what it cut as it cuts: the reports queued before it
// (a generation change's cut) are published first, and each message of
// its own cut as the cut ends it, so that the leader reads a table's
// first messages while the publisher cuts the rest (here: run r1's
// reports are stored before the same publish has cut run r2's table).
// What is stored is in order, and the publish's acks cover it all.
func TestPublishStoresAsItCuts(t *testing.T) {
	ctx, c, p := storedPub(t)
	p.quiet = func() bool { return true }
	stored := func(run string) []transport.TaskEvent {
		var evs []transport.TaskEvent
		if err := c.ReplayEvents(ctx, run, func(e *transport.TaskEvent) error { evs = append(evs, *e); return nil }); err != nil {
			t.Fatal(err)
		}
		return evs
	}
	p.emit(transport.TaskEvent{Run: "r1", Gen: 1, Task: 0, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1})
	p.emit(transport.TaskEvent{Run: "r1", Gen: 2, Task: 1, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1}) // cuts gen 1's first: queued
	p.emit(transport.TaskEvent{Run: "r2", Gen: 1, Task: 0, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1})
	hooked := false
	hook := func(tab *taskTable) {
		if tab.run != "r2" {
			return
		}
		hooked = true
		testsupport.EventuallyCtx(t, ctx, "r1's reports stored before the publish cut r2's table", func() bool { return len(stored("r1")) == 2 })
	}
	cutTestHook.Store(&hook)
	defer cutTestHook.Store(nil)
	if err := p.publish(false, false); err != nil {
		t.Fatal(err)
	}
	cutTestHook.Store(nil)
	if !hooked {
		t.Fatal("the publish did not cut r2's table")
	}
	if evs := stored("r1"); len(evs) != 2 || evs[0].Gen != 1 || evs[0].Task != 0 || evs[1].Gen != 2 || evs[1].Task != 1 {
		t.Fatalf("r1's reports stored: %+v, want gen 1's task 0, then gen 2's task 1", evs)
	}
	if evs := stored("r2"); len(evs) != 1 {
		t.Fatalf("r2's reports stored: %+v", evs)
	}
	if got := p.reports.Load(); got != 3 {
		t.Fatalf("%d reports counted stored, want 3", got)
	}
}

// A publish streams its cut's messages as it writes them, under p.mu,
// only where the node is quiet (no part of any run running, checked just
// before it); otherwise, and where quiet is not set, it cuts everything
// under p.mu and publishes after it, so that no worker waiting on p.mu
// waits on a socket write. Either way it stores everything, and tells of
// it with a notice of stored events.
func TestPublishStreamsOnlyOnAQuietNode(t *testing.T) {
	ctx, c, p := storedPub(t)
	notices := make(chan *nats.Msg, 16)
	filter, err := transport.RunEventNoticesFilter("r1")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(filter, func(m *nats.Msg) { notices <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Stop(ctx) }()
	if err := c.NATS().Flush(); err != nil { // the server has the subscription before the first publish
		t.Fatal(err)
	}
	var quiet atomic.Bool
	var streaming []bool
	hook := func(*taskTable) { streaming = append(streaming, p.send != nil) } // under p.mu
	cutTestHook.Store(&hook)
	defer cutTestHook.Store(nil)
	for i, q := range []bool{true, false, true, false} {
		want := q
		if i == 0 {
			want = false // quiet not set: never
		} else {
			p.quiet = quiet.Load
		}
		quiet.Store(q)
		p.emit(transport.TaskEvent{Run: "r1", Gen: 1, Task: uint32(i), Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1})
		if err := p.publish(false, false); err != nil {
			t.Fatal(err)
		}
		if len(streaming) != i+1 || streaming[i] != want {
			t.Fatalf("publish %d (quiet %v): its cuts streamed %v, want the last %v", i, q, streaming, want)
		}
		select { // a waiting status read is woken by it (ReportSend.Wait's)
		case <-notices:
		case <-ctx.Done():
			t.Fatalf("publish %d (streamed %v): no notice of r1's stored events", i, want)
		}
	}
	n := 0
	if err := c.ReplayEvents(ctx, "r1", func(*transport.TaskEvent) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("%d task events stored, want 4", n)
	}
	if err := c.NATS().Flush(); err != nil { // a second notice of a publish would be in by now
		t.Fatal(err)
	}
	if len(notices) != 0 {
		t.Fatalf("%d more notices: one a publish of one (run, node)", len(notices))
	}
}
