package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/localexec"
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

// invokeOnce ends its activation's flight on each of its ends: a function
// that panics, one that returns an error, and an activation that finds the
// run stopping before it calls its function. A slot left set would hold
// the vertex's next activations off the flight table (each then watched by
// a timer of its own) and have the scan report a finished activation
// running.
func TestInvokeOnceEndsItsFlight(t *testing.T) {
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name, fn string
		args     funcs.Args
		ctx      context.Context
		err      func(error) bool
		execs    uint64
	}{
		{"panic", funcs.Panic, funcs.Args{"msg": "kaboom"}, context.Background(),
			func(err error) bool { var pe *localexec.PanicError; return errors.As(err, &pe) }, 1},
		{"error", funcs.Fail, funcs.Args{"msg": "boom"}, context.Background(),
			func(err error) bool { return errors.Is(err, funcs.ErrFailed) }, 1},
		{"stopped", funcs.Noop, nil, stopped,
			func(err error) bool { return errors.Is(err, errStopped) }, 0},
		{"done", funcs.Noop, nil, context.Background(),
			func(err error) bool { return err == nil }, 1},
	} {
		body, err := funcs.Default().Bind(tc.fn, "")
		if err != nil {
			t.Fatal(err)
		}
		r := &run{n: &Node{}, ctx: tc.ctx, flights: flights{rows: make([]taskRow, 1)}}
		vs := &vstate{body: body}
		c := &funcs.Call{Task: "t", Path: "t", Args: tc.args, Activation: 1}
		var res funcs.Result
		err = r.invokeOnce(0, vs, c, 1, 0, &res)
		if !tc.err(err) || vs.execs.Load() != tc.execs {
			t.Fatalf("%s: invokeOnce: %v, %d executions", tc.name, err, vs.execs.Load())
		}
		if a := r.flights.rows[0].fl.act.Load(); a != 0 {
			t.Fatalf("%s: the flight slot holds activation %#x after invokeOnce", tc.name, a)
		}
	}
}
