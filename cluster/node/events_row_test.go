package node

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// A change recorded while another writer of the same row is between its
// unlock and its bitmap bit (simulated here: the row marked dirty, its bit
// not set, the table not listed, as a cut in that window leaves it) still
// sets the bit and lists the table: a failure so recorded is in the
// publish its nudge asks for (p.full), not a linger later when the other
// writer lists the table. Needs two activations of one vertex at once (a
// vertex in two parts after a recovery).
func TestFailureBehindAnotherWriterOfItsRowGoesAtOnce(t *testing.T) {
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	tab := p.open("r", "n1", 8)
	p.record(tab, false, 1, 3, transport.TaskDone, 1, 1, nil, "", 1, 2)
	p.cut()
	// W1 (activation 2 of vertex 3, in another part) has written its row
	// and unlocked it dirty, and not yet set its bit.
	f := tab.rows[3].lock()
	tab.rows[3].unlock(f | rowDirty)
	// W2 fails activation 3 of vertex 3: recorded, the publisher nudged.
	first, _ := p.record(tab, false, 1, 3, transport.TaskFailed, 3, 3, nil, "boom", 1, 2)
	p.nudgeFor(transport.TaskFailed, first)
	got := p.cut() // the publish the failure's nudge runs
	for _, tr := range got {
		for _, d := range tr.Tasks {
			if d.Task == 3 && d.State == transport.TaskFailed {
				return
			}
		}
	}
	t.Fatalf("the failure recorded before the publish it nudged is not in it: %v", got)
}

// A bit of the dirty bitmap marks a chunk of rowsPerBit rows: a cut sends
// the rows of a marked chunk that changed since the last cut, and only
// those (a row of the chunk sent before, or never changed, is not sent
// again), and a row of another chunk as well.
func TestCutSendsTheChangedRowsOfAMarkedChunkOnly(t *testing.T) {
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	tab := p.open("r", "n1", 3*rowsPerBit)
	deltas := func() map[uint32]uint64 {
		got := map[uint32]uint64{}
		for _, tr := range p.cut() {
			for _, d := range tr.Tasks {
				if _, dup := got[d.Task]; dup {
					t.Fatalf("task %d twice in one cut", d.Task)
				}
				got[d.Task] = d.Act
			}
		}
		return got
	}
	p.record(tab, false, 1, 1, transport.TaskDone, 1, 1, nil, "", 1, 2)
	p.record(tab, false, 1, rowsPerBit+6, transport.TaskDone, 1, 1, nil, "", 1, 2)
	if got := deltas(); len(got) != 2 || got[1] != 1 || got[rowsPerBit+6] != 1 {
		t.Fatalf("first cut: %v", got)
	}
	p.record(tab, false, 1, 2, transport.TaskDone, 1, 1, nil, "", 1, 2)
	p.record(tab, false, 1, 1, transport.TaskDone, 2, 2, nil, "", 3, 4)
	p.record(tab, false, 1, 3*rowsPerBit-1, transport.TaskDone, 1, 1, nil, "", 1, 2)
	if got := deltas(); len(got) != 3 || got[1] != 2 || got[2] != 1 || got[3*rowsPerBit-1] != 1 {
		t.Fatalf("second cut: %v", got)
	}
	if got := deltas(); len(got) != 0 {
		t.Fatalf("a cut with nothing changed: %v", got)
	}
}

// Workers share chunks (interleaved vertices), the generation
// moves while they write, and cuts run at random: every change is in a
// report, under the generation it was recorded with (Start carries it).
func TestEventRowsSharedChunksAcrossGenerations(t *testing.T) {
	const workers, per, acts = 4, 300, 30
	p := newEventPub(nil, time.Hour, slog.New(slog.DiscardHandler))
	tab := p.open("r", "n1", workers*per)
	var gen atomic.Uint64
	gen.Store(1)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var reports []*transport.TaskReport
	cutter := make(chan struct{})
	go func() {
		defer close(cutter)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%50 == 0 {
				gen.Add(1)
			}
			reports = append(reports, p.cut()...)
		}
	}()
	for w := range workers {
		wg.Go(func() {
			for a := uint64(1); a <= acts; a++ {
				for i := range per {
					v := uint32(i*workers + w)
					g := gen.Load()
					first, err := p.record(tab, false, g, v, transport.TaskDone, a, a, nil, "", int64(g), int64(g))
					if err != nil {
						t.Error(err)
					}
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
		for _, d := range tr.Tasks {
			if uint64(d.Start) != tr.Gen {
				t.Fatalf("task %d act %d recorded under gen %d filed in report of gen %d", d.Task, d.Act, d.Start, tr.Gen)
			}
		}
	}
	reportsEndAt(t, p, reports, workers*per, acts)
}

// reportsEndAt checks reports (in the order they were cut) against rows
// 0..n-1 each written up to activation acts: no task's activation goes
// back from one report to a later one, each task's last is acts, and p has
// nothing left to cut.
func reportsEndAt(t *testing.T, p *eventPub, reports []*transport.TaskReport, n int, acts uint64) {
	t.Helper()
	latest := map[uint32]uint64{}
	for _, tr := range reports {
		for _, d := range tr.Tasks {
			if d.Act < latest[d.Task] {
				t.Fatalf("task %d: activation %d reported after %d", d.Task, d.Act, latest[d.Task])
			}
			latest[d.Task] = d.Act
		}
	}
	for v := range uint32(n) {
		if latest[v] != acts {
			t.Fatalf("task %d: the reports end at activation %d, want %d", v, latest[v], acts)
		}
	}
	if got := p.cut(); len(got) != 0 {
		t.Fatalf("a cut after everything was cut made %d reports", len(got))
	}
}
