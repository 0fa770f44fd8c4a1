package node

import (
	"sync/atomic"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// flights is a run's table of the vertex activations in flight here: a
// slot per vertex of the run's graph, holding the activation that runs
// and when it began. The run's loop scans it every scanPeriod while the
// run is not idle and publishes one running event for each activation
// still running RunningAfter after it began (so within
// RunningAfter+scanPeriod). An activation costs two
// atomic stores and a load, not a timer of its own (a time.AfterFunc made
// and stopped per activation was a fifth of a no-op task's cost here).
//
// Ordering: an activation's slot is cleared (end) before its done or
// failed event is recorded, and the scan records a running event only
// after it has marked the slot reported under the event publisher's lock
// (eventPub.emitFlight): a running event is either recorded before the
// activation's final one or not at all, as the per-activation timer's
// stop ensured.
type flights struct {
	slot []flight
}

type flight struct {
	act   atomic.Uint64 // the activation in flight, | reported once its running event is recorded; 0: none
	start atomic.Int64  // when it began (Unix nanoseconds), stored before act
}

// reported marks a slot whose running event is recorded.
const reported = 1 << 63

// scanEvery is how often a run's loop scans the flights of a run of up to
// scanSlots vertices; a larger run's are scanned as much less often, so a
// busy run spends at most one scan of scanSlots slots (80–120 µs here) each
// scanEvery however large it is.
const (
	scanEvery = RunningAfter / 2
	scanSlots = 100_000
)

// scanPeriod is how often the run's loop scans f.
func (f *flights) scanPeriod() time.Duration {
	return scanEvery * time.Duration(max(1, (len(f.slot)+scanSlots-1)/scanSlots))
}

func newFlights(vertices int) flights { return flights{slot: make([]flight, vertices)} }

// begin records that activation act of v began at start. It reports false
// when v's slot holds another activation (a vertex running in two parts at
// once after a recovery): the caller watches that one by a timer.
func (f *flights) begin(v int, act uint64, start time.Time) bool {
	s := &f.slot[v]
	if s.act.Load() != 0 || act == 0 || act&reported != 0 {
		return false
	}
	s.start.Store(start.UnixNano())
	return s.act.CompareAndSwap(0, act)
}

// end clears v's slot: its activation is over.
func (f *flights) end(v int) { f.slot[v].act.Store(0) }

// scan publishes a running event for each activation in flight since
// before now-RunningAfter whose event is not recorded yet.
func (r *run) scanFlights(now time.Time) {
	due := now.Add(-RunningAfter).UnixNano()
	slots := r.flights.slot
	for v := range slots {
		s := &slots[v]
		a := s.act.Load()
		if a == 0 || a&reported != 0 {
			continue
		}
		start := s.start.Load()
		if start > due || s.act.Load() != a {
			continue // not long yet, or another activation meanwhile (its start may be the one read)
		}
		r.n.events.emitFlight(&s.act, a, transport.TaskEvent{
			Run: r.id, Gen: r.curGen(), Task: uint32(v), Node: r.n.id, State: transport.TaskRunning,
			Act: a, Executions: r.vs[v].execs.Load(), Start: time.Unix(0, start), End: r.n.now(),
		})
	}
}
