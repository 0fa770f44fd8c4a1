package node

import (
	"strings"
	"testing"
	"time"
	"unsafe"

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

// TestScanPeriod: a run of up to scanSlots vertices is scanned every
// scanEvery, a larger one as much less often as it is larger.
func TestScanPeriod(t *testing.T) {
	for _, c := range []struct {
		slots int
		want  time.Duration
	}{{1, scanEvery}, {scanSlots, scanEvery}, {scanSlots + 1, 2 * scanEvery}, {1 << 20, 11 * scanEvery}} {
		f := flights{rows: make([]taskRow, c.slots)}
		if got := f.scanPeriod(); got != c.want {
			t.Errorf("%d slots: every %v, want %v", c.slots, got, c.want)
		}
	}
}

// BenchmarkScanFlights100K is one scan of scanSlots slots with nothing in
// flight (what a busy run's loop spends every scanEvery at most).
func BenchmarkScanFlights100K(b *testing.B) {
	r := &run{flights: flights{rows: make([]taskRow, scanSlots)}}
	now := time.Now()
	for b.Loop() {
		r.scanFlights(now)
	}
}

// A task row, flight slot included, is one cache line.
func TestTaskRowIsACacheLine(t *testing.T) {
	if n := unsafe.Sizeof(taskRow{}); n != 64 {
		t.Fatalf("a task row is %d bytes, want 64", n)
	}
}
