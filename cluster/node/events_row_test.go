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
