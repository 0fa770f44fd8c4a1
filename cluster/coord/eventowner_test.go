package coord

import (
	"testing"

	"github.com/hetflow/hetflow/transport"
)

// The status fold believes a task event only from the node that owns the
// task, or for an older generation from a node the run no longer has, and
// never of a generation the run has not reached (issue 14: a node could
// rewrite a finished run's output with an event of a higher generation).
func TestEventFromOwner(t *testing.T) {
	// Generation 2: n3 was lost, its task 2 moved to n1.
	r := Run{ID: "r", Gen: 2, Assignment: []string{"n1", "n2", "n1"}, Nodes: []string{"n1", "n2"}, Lost: []string{"n3"}}
	for _, c := range []struct {
		gen  uint64
		task uint32
		node string
		want bool
	}{
		{2, 0, "n1", true},
		{1, 1, "n2", true},  // a task that never moved, reported under generation 1
		{1, 2, "n3", true},  // the lost node's report of its former task
		{2, 2, "n3", false}, // ... but not under the generation that moved it
		{2, 1, "n1", false}, // another live node's task
		{1, 1, "n1", false},
		{3, 0, "n1", false}, // a generation to come
		{99, 1, "n2", false},
		{2, 3, "n1", false}, // no such task
		{1, 0, "n9", false}, // a node never of the run, on an old generation
	} {
		e := &transport.TaskEvent{Run: "r", Gen: c.gen, Task: c.task, Node: c.node}
		if got := EventFromOwner(r, e); got != c.want {
			t.Errorf("gen %d task %d from %s: %v, want %v", c.gen, c.task, c.node, got, c.want)
		}
	}
}
