package node

import (
	"log/slog"
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
