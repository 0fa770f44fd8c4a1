package node

import "testing"

// A sender's batch numbers count from 1 again in a new process, which sends
// a run's Signals under a later generation: a read of the record that meets
// an earlier process's batch 9000 does not show that the later one's batch
// 200, evicted before the run started here, is stored. Found by the review of
// the dense hang's fix: keyed by sender alone, the note was cleared and the
// run read its record once, the hang the note closes.
func TestUnreadNoteKeepsGenerationsApart(t *testing.T) {
	n := &Node{}
	n.unreadLocked("r1", "s", 1, 9000)
	n.unreadLocked("r1", "s", 2, 200)
	r := &run{unread: n.takeUnreadLocked("r1")}
	if n.unread["r1"] != nil {
		t.Fatal("the run took its note, but the node still holds it")
	}
	r.readBack("s", 1, 9000)
	if _, ok := r.unread[unreadKey{"s", 2}]; !ok || len(r.unread) != 1 {
		t.Fatalf("after the first process's batch 9000 was read: notes %v, want the second process's batch 200 still unread", r.unread)
	}
	r.readBack("s", 2, 150)
	if len(r.unread) != 1 {
		t.Fatalf("batch 150 of generation 2 read: notes %v, want batch 200 still unread", r.unread)
	}
	r.readBack("s", 2, 200)
	if len(r.unread) != 0 {
		t.Fatalf("batch 200 of generation 2 read: notes %v, want none", r.unread)
	}
}
