package node

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/flowgen"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/transport"
)

// kicked takes a pending volume kick of p, if any.
func kicked(p *eventPub) bool {
	select {
	case <-p.vol:
		return true
	default:
		return false
	}
}

// A run's reports cut early, by volume (a cut each time cutRows rows were
// first changed, as the publisher's loop makes on the kick), fold to the
// same table, tallies and verdict as the same changes cut once at idle:
// the leader reads every stored report, and a row changed again after an
// early cut is sent again, with its latest values, in a later report. The
// changes are random: every vertex done once (some never, which the
// verdict owes), vertices already sent done again, a generation change.
func TestEarlyCutsFoldAsOneAtIdle(t *testing.T) {
	_, g := parseFlow(t, string(flowgen.Layered(5, 200, 1, false)))
	nv := len(g.Vertices)
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 11))
		early := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
		early.cutRows = 128 // two chunks
		idle := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
		idle.cutRows = 0
		te, ti := early.open("r", "n1", nv), idle.open("r", "n1", nv)
		if te.cutAt != 2 || ti.cutAt != 0 {
			t.Fatalf("cutAt %d and %d, want 2 and 0", te.cutAt, ti.cutAt)
		}
		fe, fi := coord.NewFold(), coord.NewFold()
		fold := func(f *coord.Fold, reps []*transport.TaskReport) (rows map[uint32]bool) {
			rows = map[uint32]bool{}
			for _, tr := range reps {
				data := transport.Encode(tr)
				var dec transport.TaskReport
				if err := dec.Decode(data, transport.Limits{}); err != nil {
					t.Fatal(err)
				}
				f.AddReport(g, &dec)
				for _, d := range tr.Tasks {
					rows[d.Task] = true
				}
			}
			return rows
		}
		sent := map[uint32]bool{} // rows in an early cut's reports
		earlyCuts, again := 0, 0
		gen := uint64(1)
		acts := make([]uint64, nv)
		record := func(v uint32) {
			acts[v]++
			a := acts[v]
			var out []byte
			if len(g.Vertices[v].Succ) == 0 {
				out = []byte{byte(a)}
			}
			for _, p := range []*eventPub{early, idle} {
				tab := te
				if p == idle {
					tab = ti
				}
				first, err := p.record(tab, false, gen, v, transport.TaskDone, a, a, out, "", int64(a), int64(a)+1)
				if err != nil {
					t.Fatal(err)
				}
				p.nudgeFor(transport.TaskDone, first)
			}
			if kicked(idle) {
				t.Fatal("a table with no volume threshold kicked a publish")
			}
			if kicked(early) {
				earlyCuts++
				for v := range fold(fe, early.cutAs(true)) {
					sent[v] = true
				}
			}
		}
		for v := range uint32(nv) {
			if rng.IntN(300) == 0 {
				continue // never ran: the verdict owes it (or its successors)
			}
			record(v)
			if rng.IntN(8) == 0 && v > 0 {
				w := uint32(rng.IntN(int(v)))
				if sent[w] {
					again++
				}
				if acts[w] > 0 {
					record(w) // a row changed again, often after an early cut sent it
				}
			}
			if v == uint32(nv)/2 && seed%2 == 0 {
				gen++
			}
		}
		fold(fe, early.cut()) // at idle: the remainder
		fold(fi, idle.cut())
		if earlyCuts < nv/256 {
			t.Fatalf("seed %d: %d early cuts of a table of %d rows changed once or more, cut every 128", seed, earlyCuts, nv)
		}
		if again == 0 {
			t.Fatalf("seed %d: no row changed again after an early cut sent it", seed)
		}
		for _, state := range []string{proto.RunRunning, proto.RunSucceeded} {
			r := coord.Run{ID: "r", FlowName: "layered", State: state}
			if want, got := fi.AppendJSON(nil, r, g), fe.AppendJSON(nil, r, g); !bytes.Equal(want, got) {
				t.Fatalf("seed %d, run %s: the early reports fold to\n%s\none at idle to\n%s", seed, state, got, want)
			}
			if want, got := fi.Progress(r, g), fe.Progress(r, g); !reflect.DeepEqual(want, got) {
				t.Fatalf("seed %d, run %s: the early reports tally %+v, one at idle %+v", seed, state, got, want)
			}
		}
		wo, wf := coord.CheckSuccess(g, fi)
		gotO, gotF := coord.CheckSuccess(g, fe)
		if !reflect.DeepEqual(wo, gotO) || !reflect.DeepEqual(wf, gotF) {
			t.Fatalf("seed %d: the record check of the early reports says %v %v, of one at idle %v %v", seed, gotO, gotF, wo, wf)
		}
	}
}

// Workers write a table's rows while a publisher cuts it only when its
// volume kicks (as the loop does on p.vol: the table kept listed): every
// kick is cut once (none merge here: the next kick needs the count the
// cut that takes this one restarts), the reports, read in order, end at
// each vertex's last activation, and the cut at idle leaves nothing
// behind. Worker 0 waits after its first pass (which alone marks more
// than cutRows rows, so it kicks) for the first cut, so that a cut always
// comes while rows are still being written, however the cores go.
func TestVolumeCutsByWorkersLoseNothing(t *testing.T) {
	const workers, per, acts = 2, 4096, 3
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	p.cutRows = 512
	tab := p.open("r", "n1", workers*per)
	stop := make(chan struct{})
	var reports []*transport.TaskReport
	cuts := 0
	firstCut := make(chan struct{}) // closed by the cutter after its first cut
	cutter := make(chan struct{})
	go func() {
		defer close(cutter)
		cut := func() {
			reports = append(reports, p.cutAs(true)...)
			if cuts++; cuts == 1 {
				close(firstCut)
			}
		}
		for {
			select {
			case <-stop:
				// select may pick the stop over a kick pending beside it
				// (a cutter that got no core before the workers ended):
				// that kick is cut first.
				if kicked(p) {
					cut()
				}
				return
			case <-p.vol:
				cut()
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for a := uint64(1); a <= acts; a++ {
				for i := range per {
					v := uint32(w*per + i)
					first, _ := p.record(tab, false, 1, v, transport.TaskDone, a, a, nil, "", 1, 2)
					p.nudgeFor(transport.TaskDone, first)
				}
				if w == 0 && a == 1 {
					<-firstCut
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-cutter
	early := len(reports)
	if kicks := p.volumeCuts.Load(); early == 0 || uint64(cuts) != kicks {
		t.Fatalf("%d reports in %d cuts on %d volume kicks while %d rows were written %d times each, kicked every 512", early, cuts, kicks, workers*per, acts)
	}
	reports = append(reports, p.cut()...)
	reportsEndAt(t, p, reports, workers*per, acts)
}

// The publisher's loop stores a table's reports once its volume kicks,
// without the linger (here an hour) or a flush; a flush then stores the
// remainder, and every vertex's row is stored.
func TestVolumeKickStoresWithoutALinger(t *testing.T) {
	ctx, c, p := storedPub(t)
	p.cutRows = 256
	p.start()
	defer p.close()
	const nv = 1000
	tab := p.open("r1", "n1", nv)
	stored := func() map[uint32]uint64 { return storedActs(t, ctx, c, "r1") }
	for v := range uint32(300) {
		first, _ := p.record(tab, false, 1, v, transport.TaskDone, 1, 1, nil, "", 1, 2)
		p.nudgeFor(transport.TaskDone, first)
	}
	// The kick came with row 192's write, the first of its chunk (the
	// fourth): the cut it woke holds that row and every one before.
	testsupport.EventuallyCtx(t, ctx, "the rows of a volume kick stored without a flush", func() bool { return len(stored()) >= 193 })
	for v := range uint32(nv) {
		first, _ := p.record(tab, false, 1, v, transport.TaskDone, 2, 2, nil, "", 1, 2)
		p.nudgeFor(transport.TaskDone, first)
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p.flush(fctx)
	m := stored()
	for v := range uint32(nv) {
		if m[v] != 2 {
			t.Fatalf("task %d: stored at activation %d after the flush, want 2", v, m[v])
		}
	}
	if p.volumeCuts.Load() < 2 || p.reports.Load() < 2 { // a kick at row 192, and one after the cut it woke once 4 chunks more are marked
		t.Fatalf("%d volume kicks, %d reports stored for %d rows changed, kicked every 256", p.volumeCuts.Load(), p.reports.Load(), nv+300)
	}
}

// A table's volume kicks once a crossing: when the chunks first marked
// since the last cut reach cutAt, not again as more are marked, and again
// once a cut has counted them from naught.
func TestVolumeKicksOnceACrossing(t *testing.T) {
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	p.cutRows = 4 * rowsPerBit
	tab := p.open("r", "n1", 16*rowsPerBit)
	rec := func(lo, hi int, act uint64) {
		for v := lo; v < hi; v++ {
			if _, err := p.record(tab, false, 1, uint32(v), transport.TaskDone, act, act, nil, "", 1, 2); err != nil {
				t.Fatal(err)
			}
		}
	}
	rec(0, 3*rowsPerBit, 1) // three chunks
	if kicked(p) {
		t.Fatal("a kick before cutAt chunks were marked")
	}
	rec(3*rowsPerBit, 3*rowsPerBit+1, 1) // the fourth
	if !kicked(p) {
		t.Fatal("no kick when the fourth chunk was marked")
	}
	rec(3*rowsPerBit+1, 12*rowsPerBit, 1) // eight more, no cut between
	if kicked(p) {
		t.Fatal("a second kick in one crossing")
	}
	rec(0, 12*rowsPerBit, 2) // rows of chunks marked already: nothing first marked
	if kicked(p) {
		t.Fatal("a kick for rows of chunks marked already")
	}
	if n := len(p.cut()); n != 1 {
		t.Fatalf("%d reports cut, want 1", n)
	}
	rec(0, 3*rowsPerBit, 3)
	if kicked(p) {
		t.Fatal("a kick before cutAt chunks were marked since the cut")
	}
	rec(3*rowsPerBit, 4*rowsPerBit, 3)
	if !kicked(p) {
		t.Fatal("no kick when the fourth chunk since the cut was marked")
	}
	if got := p.volumeCuts.Load(); got != 2 {
		t.Fatalf("%d volume kicks counted, want 2", got)
	}
	// A table of no more rows than cutRows never kicks.
	small := p.open("s", "n1", 4*rowsPerBit)
	if small.cutAt != 0 {
		t.Fatalf("a table of cutRows rows has cutAt %d", small.cutAt)
	}
}

// A volume kick's publish keeps the run's table listed, so that its
// workers take no publisher's lock to list it again, and arms the linger
// for what changes after it: a change then (no first change, no kick of
// its own) is stored without a flush. A flush's cut unlists the table, and
// a forgotten table is never kept.
func TestVolumeCutKeepsTheTableListed(t *testing.T) {
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	p.cutRows = 4 * rowsPerBit
	tab := p.open("r", "n1", 16*rowsPerBit)
	rec := func(v uint32, act uint64) bool {
		first, err := p.record(tab, false, 1, v, transport.TaskDone, act, act, nil, "", 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		return first
	}
	for v := range uint32(4 * rowsPerBit) {
		rec(v, 1)
	}
	if n := len(p.cutAs(true)); n != 1 || !tab.listed.Load() || len(p.changed) != 1 {
		t.Fatalf("a volume cut: %d reports, listed %v, %d tables listed", n, tab.listed.Load(), len(p.changed))
	}
	if rec(5, 2) {
		t.Fatal("a change to a table kept listed counted as the first")
	}
	got := p.cut()
	if len(got) != 1 || len(got[0].Tasks) != 1 || got[0].Tasks[0].Task != 5 || got[0].Tasks[0].Act != 2 {
		t.Fatalf("the cut after a volume cut: %v", got)
	}
	if tab.listed.Load() || len(p.changed) != 0 {
		t.Fatal("a flush's cut kept the table listed")
	}
	rec(6, 2)
	p.forget(tab)
	p.cutAs(true)
	if tab.listed.Load() || p.tabs["r"] != nil {
		t.Fatal("a forgotten table was kept listed by a volume cut")
	}
}

// A volume kick's publish arms the linger: a change after it, to the
// table it kept listed, is stored without a flush.
func TestVolumeCutArmsTheLinger(t *testing.T) {
	url := testsupport.NATS(t).URL()
	ctx := testCtx(t, 30*time.Second)
	c := connect(t, url, "n1")
	if err := c.EnsureStreams(ctx, transport.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	p := newEventPub(c, 20*time.Millisecond, slog.New(slog.DiscardHandler))
	p.cutRows = 256
	p.start()
	defer p.close()
	tab := p.open("r1", "n1", 1000)
	stored := func() map[uint32]uint64 { return storedActs(t, ctx, c, "r1") }
	// No nudge for the first change (no linger armed by it): only the
	// volume kick, with row 192, the first of the fourth chunk.
	for v := range uint32(193) {
		if _, err := p.record(tab, false, 1, v, transport.TaskDone, 1, 1, nil, "", 1, 2); err != nil {
			t.Fatal(err)
		}
	}
	testsupport.EventuallyCtx(t, ctx, "the volume kick's reports stored", func() bool { return len(stored()) == 193 })
	// The table is kept listed: this change is no first and kicks nothing
	// (unless the linger the volume publish armed has fired already); only
	// that linger stores it.
	first, _ := p.record(tab, false, 1, 999, transport.TaskDone, 5, 5, nil, "", 1, 2)
	p.nudgeFor(transport.TaskDone, first)
	testsupport.EventuallyCtx(t, ctx, "a change after a volume cut stored without a flush", func() bool { return stored()[999] == 5 })
}

// A table a volume cut kept listed and its run then forgot is not dropped
// while listed (what it still has is not cut yet); the next publish's cut
// (no keep) unlists, cuts and drops it, and leaves its rows as the spare
// that the next run of as many vertices opens on.
func TestKeptTableForgottenGoesToTheSpare(t *testing.T) {
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	p.cutRows = 4 * rowsPerBit
	const nv = 16 * rowsPerBit
	tab := p.open("r", "n1", nv)
	rec := func(v uint32, act uint64) {
		if _, err := p.record(tab, false, 1, v, transport.TaskDone, act, act, nil, "", 1, 2); err != nil {
			t.Fatal(err)
		}
	}
	for v := range uint32(4 * rowsPerBit) {
		rec(v, 1)
	}
	if n := len(p.cutAs(true)); n != 1 || !tab.listed.Load() {
		t.Fatalf("a volume cut: %d reports, listed %v", n, tab.listed.Load())
	}
	rec(7, 2) // after the kept cut: waits in the listed table
	p.forget(tab)
	if p.tabs["r"] != tab || !tab.listed.Load() || tab.rows == nil || p.spare != nil {
		t.Fatalf("a listed table was dropped when forgotten: in tabs %v, listed %v, spare %v", p.tabs["r"] == tab, tab.listed.Load(), p.spare != nil)
	}
	got := p.cut()
	if len(got) != 1 || len(got[0].Tasks) != 1 || got[0].Tasks[0].Task != 7 || got[0].Tasks[0].Act != 2 {
		t.Fatalf("the cut after the forget: %v", got)
	}
	if p.tabs["r"] != nil || tab.listed.Load() || len(p.changed) != 0 {
		t.Fatal("the cut after the forget left the table")
	}
	if p.spare == nil || len(p.spare) != nv || tab.rows != nil {
		t.Fatalf("the dropped table's rows are not the spare: %d spare rows, %d left in the table", len(p.spare), len(tab.rows))
	}
	spare := &p.spare[0]
	next := p.open("r2", "n1", nv)
	if &next.rows[0] != spare || p.spare != nil {
		t.Fatal("the next run of as many vertices did not open on the spare rows")
	}
	for i := range next.dirty {
		if next.dirty[i].Load() != 0 {
			t.Fatalf("the spare's dirty word %d is set", i)
		}
	}
	for v := range next.rows {
		if next.rows[v].lk.Load() != 0 || next.rows[v].act != 0 {
			t.Fatalf("the spare's row %d not cleared", v)
		}
	}
}

// storedActs is the latest activation of each task of run that c's
// stream holds.
func storedActs(t *testing.T, ctx context.Context, c *transport.Conn, run string) map[uint32]uint64 {
	t.Helper()
	m := map[uint32]uint64{}
	if err := c.ReplayEvents(ctx, run, func(e *transport.TaskEvent) error { m[e.Task] = e.Act; return nil }); err != nil {
		t.Fatal(err)
	}
	return m
}
