package node

import (
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/transport"
)

const flightFlow = `
name: flights
tasks:
  - {name: quick, func: noop}
  - {name: slow, func: sleep, args: {ms: 300}, succeed: [quick]}
  - {name: after, func: noop, succeed: [slow]}
  - {name: kids, kind: subflow, func: fanout, args: {n: 2, us: 150000}, succeed: [quick]}
`

// TestRunningEvents: an activation still running RunningAfter after it
// began is recorded running (the flight table's scan for a vertex, a
// timer for a subflow child) before it is recorded done; a quick one is
// recorded done only.
func TestRunningEvents(t *testing.T) {
	c := newCluster(t, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, flightFlow)
	out := c.runFlow(ctx, file, make([]uint32, len(g.Vertices)), runOpts{})
	if out.failed != nil {
		t.Fatalf("the run failed: %+v", out.failed)
	}
	seen := map[string][]transport.TaskState{}
	paths, _ := c.paths.Load(out.run)
	err := c.leader.conn.ReplayEvents(ctx, out.run, func(e *transport.TaskEvent) error {
		name := e.Name
		if ps, _ := paths.([]string); name == "" && int(e.Task) < len(ps) {
			name = ps[e.Task]
		}
		seen[name] = append(seen[name], e.State)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := func(name string, states ...transport.TaskState) {
		t.Helper()
		got := seen[name]
		if len(got) != len(states) {
			t.Fatalf("%s: states %v, want %v (all: %v)", name, got, states, seen)
		}
		for i := range got {
			if got[i] != states[i] {
				t.Fatalf("%s: states %v, want %v", name, got, states)
			}
		}
	}
	want("quick", transport.TaskDone)
	want("after", transport.TaskDone)
	want("slow", transport.TaskRunning, transport.TaskDone)
	want("kids", transport.TaskDone)
	children := 0
	for name := range seen {
		if strings.HasPrefix(name, "kids/") {
			children++
			want(name, transport.TaskRunning, transport.TaskDone)
		}
	}
	if children != 2 {
		t.Fatalf("%d children recorded, want 2: %v", children, seen)
	}
}
