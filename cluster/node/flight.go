package node

import (
	"sync/atomic"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// flights is a run's table of the vertex activations in flight here: a
// slot per vertex of the run's graph, holding the activation that runs
// and when it began (its start stamp: for a static task that its worker
// came to straight from another, that one's end, runStatic). The run's loop scans it every scanPeriod while the
// run is not idle and publishes one running event for each activation
// still running RunningAfter after it began (so within
// RunningAfter+scanPeriod). An activation costs two
// atomic stores and a load, not a timer of its own (a time.AfterFunc made
// and stopped per activation was a fifth of a no-op task's cost here).
//
// Ordering: an activation's slot is cleared (end) before its done or
// failed event is recorded, and the scan records a running event only
// after it has marked the slot reported under the event publisher's lock
// (eventPub.emitFlight); an activation that finds its slot so marked when
// it clears it takes that lock once before it records anything
// (endFlight), so the running event is in its row by then. A slot cleared
// unmarked is never marked after. So a running event is either recorded
// before the activation's final one or not at all, as the per-activation
// timer's stop ensured, and an activation the scan did not reach (almost
// all) takes no lock.
//
// The slots are in the run's task table, a slot in each vertex's row
// (taskRow.fl): the row an activation writes when it ends is the cache
// line it took when it began.
type flights struct {
	rows []taskRow
}

type flight struct {
	act   atomic.Uint64 // the activation in flight, | reported once its running event is recorded; 0: none
	start atomic.Int64  // when it began (Unix nanoseconds), stored before act
}

// reported marks a slot whose running event is recorded.
const reported = 1 << 63

// scanEvery is how often a run's loop scans the flights of a run of up to
// scanSlots vertices; a larger run's are scanned as much less often, so a
// busy run spends at most one scan of scanSlots slots (a 64-byte row each:
// 300–400 µs here under load, 80–120 µs when the slots were 16 bytes) each
// scanEvery however large it is.
const (
	scanEvery = RunningAfter / 2
	scanSlots = 100_000
)

// scanPeriod is how often the run's loop scans f.
func (f *flights) scanPeriod() time.Duration {
	return scanEvery * time.Duration(max(1, (len(f.rows)+scanSlots-1)/scanSlots))
}

// begin records that activation act of v began at start (Unix
// nanoseconds). It reports false when v's slot holds another activation (a
// vertex running in two parts at once after a recovery): the caller
// watches that one by a timer.
func (f *flights) begin(v int, act uint64, start int64) bool {
	s := &f.rows[v].fl
	if s.act.Load() != 0 || act == 0 || act&reported != 0 {
		return false
	}
	s.start.Store(start)
	return s.act.CompareAndSwap(0, act)
}

// end clears v's slot: its activation is over. It reports whether the
// slot was marked reported (its running event recorded, or being recorded
// under the event publisher's lock).
func (f *flights) end(v int) bool { return f.rows[v].fl.act.Swap(0)&reported != 0 }

// endFlight ends v's activation in flight; when the scan reported it
// running, it waits until that event is recorded (see flights).
func (r *run) endFlight(v int) {
	if r.flights.end(v) {
		r.n.events.barrier()
	}
}

// scan publishes a running event for each activation in flight since
// before now-RunningAfter whose event is not recorded yet. now, like the
// starts and the event's end, is of the node's stamp clock (Node.stamp).
func (r *run) scanFlights(now time.Time) {
	due := now.Add(-RunningAfter).UnixNano()
	rows := r.flights.rows
	for v := range rows {
		s := &rows[v].fl
		a := s.act.Load()
		if a == 0 || a&reported != 0 {
			continue
		}
		start := s.start.Load()
		if start > due || s.act.Load() != a {
			continue // not long yet, or another activation meanwhile (its start may be the one read)
		}
		r.n.events.emitFlight(r.tab, &s.act, a, transport.TaskEvent{
			Run: r.id, Gen: r.curGen(), Task: uint32(v), Node: r.n.id, State: transport.TaskRunning,
			Act: a, Executions: r.vs[v].execs.Load(), Start: time.Unix(0, start), End: r.n.stamp(),
		})
	}
}
