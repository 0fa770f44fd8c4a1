package runsim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// Timings of the simulated cluster (those of cluster/coord and cluster/node
// where they exist).
const (
	tickEvery     = 100 * time.Millisecond // leader.go tickEvery
	resendFirst   = 500 * time.Millisecond // lead.go resendFirst: an Assignment neither acked nor reported goes again
	resendMax     = 4 * time.Second        // lead.go resendMax: the re-send interval doubles up to it
	syncEvery     = time.Second            // leader.go syncEvery
	probeTimeout  = 2 * time.Second        // leader.go probeTimeout
	cancelEvery   = 500 * time.Millisecond // leader.go cancelEvery
	heartbeat     = 500 * time.Millisecond // node: TermReport while a run is active
	replayAgain   = time.Second            // node.go replayAgain
	quietBound    = 30 * time.Second       // termination must follow the last fault within this
	tailAfterDone = 2 * time.Second        // simulated after the verdict, to see late effects
)

// simRun is one run of the simulation: its flow, the ground truth, the
// assignment of each generation the leader committed, and when it ended.
type simRun struct {
	id       string
	placeID  string // the run whose seed places it (Options.RunAgain)
	g        *spec.Graph
	flow     []byte
	truth    *truth
	free     []bool              // runproto.FreeJoins: their outputs depend on timing
	loops    *runproto.Loops     // runproto.NewLoops, for the nodes' plans
	tables   map[uint64][]string // gen → assignment (history, for the invariants)
	finished time.Duration       // 0: not yet
	// failNext: a fault made the next activation of the run to execute
	// fail for good; failedTask is the task that did
	failNext   bool
	failedTask string
}

func (r *simRun) path(v uint32) string {
	if int(v) < len(r.g.Vertices) {
		return r.g.Vertices[v].Path
	}
	return fmt.Sprint(v)
}

// event is one thing due at a time; seq orders events of one time by
// scheduling order, so a seed replays exactly.
type event struct {
	at  time.Duration
	seq uint64
	p   *proc // the node process the event belongs to (nil: world, leader)
	fn  func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// Violation is a broken invariant: the seed, the step and what broke.
type Violation struct {
	Seed uint64
	Step int
	At   time.Duration
	What string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("seed %d, step %d, t=%v: %s", v.Seed, v.Step, v.At, v.What)
}

// RunResult is the outcome of one run of a seed.
type RunResult struct {
	ID    string
	State string // the run's final state ("" if it never finished)
	Error string
	Gens  uint64
	// TaskFailed: a task of the run failed for good (a fault)
	TaskFailed bool
}

// Unrecoverable reports whether the run failed for a reason the fault
// model allows: a task that cannot move off a lost node, or no node left
// that the run can use.
func (r *RunResult) Unrecoverable() bool {
	return r.State == "failed" && (strings.Contains(r.Error, "pinned") || strings.Contains(r.Error, "no node is alive"))
}

// Result is the outcome of one seed.
type Result struct {
	Seed    uint64
	Runs    []RunResult
	Steps   int
	SimTime time.Duration
	Faults  []string
	Fenced  int  // Signals refused by ownership
	Dups    int  // duplicates dropped
	Reexec  int  // executions beyond the activations (moved tasks run again)
	Ahead   int  // Signals to a free join delivered before its previous activation completed (runproto.FreeJoins)
	Shaped  bool // a flow holds a join whose predecessors complete unequal numbers of times
	// OldOwner counts the batches a node accepted from a sender the newest
	// generation had already taken every task from (a node taken for dead
	// that went on running, reaching a node not yet told)
	OldOwner  int
	Violation *Violation
	Trace     []string    // the whole trace (verbose) or its tail (on a violation)
	Leader    LeaderStats // what the leader decided (leader.go)
}

// world is one simulation: everything a seed drives.
type world struct {
	seed    uint64
	opt     Options
	rng     *rand.Rand
	now     time.Duration
	q       eventQueue
	seq     uint64
	step    int
	verbose bool
	trace   []string
	viol    *Violation

	runs []*simRun

	nodeIDs []string
	cpus    map[string]int
	procs   map[string]*proc // the live process of each node (nil: down)
	boots   map[string]int
	ring    map[string]string // memberlist's view: alive or dead
	// ringBoot is the boot memberlist shows for a node: a restart's new
	// boot shows some time after the process is up (gossip), and the
	// leader may re-send the Assignment to the new process meanwhile
	ringBoot map[string]int
	holds    []*hold // every holding of the run, for the ledger

	natsUp bool
	record []recEntry
	picked []pickMade // condition picks of a task of their part, in order
	// accepted: the batches a node's runproto accepted a Signal of, live
	// (delivered, or waiting for its destination's previous activation)
	accepted map[*transport.Batch]bool
	fresh    []freshPick                 // checked again at the end (checkPickRecorded)
	chans    map[[2]string]time.Duration // per (sender, subject) FIFO: last delivery time

	fsm       *coord.FSM
	ls        leaderWorld // leader.go: event stream, suspicions, counts
	lead      *leader     // nil while no coordinator leads
	leadConn  bool
	leadOut   []func()
	leadEpoch int

	lossP, dupP float64
	faultEnd    time.Duration // the last fault's effect ends here
	faults      []string
	finished    time.Duration // when the last run finished (0: not yet)
	res         Result
}

// recEntry is one batch in the JetStream record: stream sequence, the
// node it was addressed to, the batch.
type recEntry struct {
	seq uint64
	to  string
	b   *transport.Batch
}

func (w *world) logf(format string, args ...any) {
	line := fmt.Sprintf("%9.3fs #%d ", w.now.Seconds(), w.step) + fmt.Sprintf(format, args...)
	if w.verbose {
		w.trace = append(w.trace, line)
		return
	}
	const keep = 400
	if len(w.trace) >= 2*keep {
		w.trace = append(w.trace[:0], w.trace[keep:]...)
	}
	w.trace = append(w.trace, line)
}

// fail records the first broken invariant; the run stops there.
func (w *world) fail(format string, args ...any) {
	if w.viol != nil {
		return
	}
	w.viol = &Violation{Seed: w.seed, Step: w.step, At: w.now, What: fmt.Sprintf(format, args...)}
	w.logf("VIOLATION: %s", w.viol.What)
}

func (w *world) at(d time.Duration, p *proc, fn func()) {
	w.seq++
	heap.Push(&w.q, &event{at: w.now + d, seq: w.seq, p: p, fn: fn})
}

// dur draws a duration in [lo, hi).
func (w *world) dur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

// latency is one core NATS hop: mostly fast, sometimes slow (reordering
// across subjects follows).
func (w *world) latency() time.Duration {
	if w.rng.IntN(10) == 0 {
		return w.dur(5*time.Millisecond, 60*time.Millisecond)
	}
	return w.dur(100*time.Microsecond, 3*time.Millisecond)
}

func (w *world) inFaultWindow() bool { return w.now < w.faultEnd }

// loop runs events until the run finished (and a tail after it), or the
// termination bound passed, or an invariant broke.
func (w *world) loop() {
	deadline := w.faultEnd + quietBound
	for w.q.Len() > 0 && w.viol == nil {
		e := heap.Pop(&w.q).(*event)
		if w.finished > 0 && e.at > w.finished+tailAfterDone {
			return
		}
		if e.at > deadline {
			w.now = deadline
			w.fail("no verdict %v after the last fault ended (at %v): the run did not terminate", quietBound, w.faultEnd)
			return
		}
		w.now = e.at
		if p := e.p; p != nil {
			if w.procs[p.id] != p {
				continue // the process is gone: its timers and messages with it
			}
			if p.frozen {
				p.backlog = append(p.backlog, e.fn)
				continue
			}
		}
		w.step++
		e.fn()
	}
	// A draw afresh is checked at the end too: what the old owner sent
	// after its pick may be accepted after the draw.
	for _, f := range w.fresh {
		if w.viol == nil {
			w.checkPickRecorded(f.run, f.v, f.act, f.upto, f.by)
		}
	}
	if w.viol == nil && w.finished == 0 {
		w.fail("no event left and no verdict: the run is stuck")
	}
}

// freshPick is a condition run again after a loss that found no pick of
// its activation in the first upto batches of the record.
type freshPick struct {
	run  string
	v    int
	act  uint64
	upto int
	by   string
}

// pickMade is a condition's pick of a task of its part: by a node, when
// the record held at batches.
type pickMade struct {
	run      string
	v        int
	act      uint64
	by       string
	at       int
	remote   bool // a task of another part: its Choice Signal is the record
	replayed bool // the record's outcome, taken by a condition run again
}

// checkPickRecorded is the invariant behind condition replay, for a
// condition run again by node by after a loss that found no pick of
// activation act of v in the first upto batches of the record (and drew
// afresh):
//   - a node that picked a task of its condition's part recorded the pick
//     before anything it sent after, so those batches hold no batch of the
//     run its node sent after picking (whatever the branch sent reached the
//     record behind its pick, or not at all);
//   - nothing a node sent after its own pick of that activation (one not
//     replayed from the record) was accepted anywhere, then or later: an
//     old owner taken for dead that picked as the takeover began reached
//     no node that had not fenced it by its mark.
func (w *world) checkPickRecorded(run string, v int, act uint64, upto int, by string) {
	path := w.run(run).g.Vertices[v].Path
	for _, pm := range w.picked {
		if pm.run != run || pm.v != v || pm.act != act || pm.by == by || pm.replayed {
			continue
		}
		if !pm.remote && pm.at < min(upto, len(w.record)) {
			for _, e := range w.record[pm.at:min(upto, len(w.record))] {
				if e.b.From == pm.by && len(e.b.Signals) > 0 && e.b.Signals[0].Run == run {
					w.fail("the record's first %d batches do not hold the pick of %s#%d by %s, but hold its batch #%d to %s sent after it: a replay draws afresh although the branch reached other nodes", upto, path, act, pm.by, e.b.Seq, e.to)
					return
				}
			}
		}
		for _, e := range w.record[pm.at:] {
			if e.b.From == pm.by && w.accepted[e.b] && (!pm.remote || holdsPick(e.b, v, act)) {
				w.fail("%s ran %s#%d again and drew afresh, the follow having read %d batches without a pick of it, but %s had picked it, and its batch #%d to %s, sent after the pick, was accepted there: both branches run", by, path, act, upto, pm.by, e.b.Seq, e.to)
				return
			}
		}
	}
}

// holdsPick reports whether b holds a Choice Signal of activation act of v.
func holdsPick(b *transport.Batch, v int, act uint64) bool {
	for _, s := range b.Signals {
		if s.Kind == transport.SignalChoice && int(s.Src) == v && s.Act == act {
			return true
		}
	}
	return false
}

// recordedPick reports whether the first upto batches of the record hold
// a pick of activation act of condition v of run (a Choice Signal,
// wherever it was addressed).
func (w *world) recordedPick(run string, v int, act uint64, upto int) bool {
	for _, e := range w.record[:min(upto, len(w.record))] {
		for _, s := range e.b.Signals {
			if s.Run == run && s.Kind == transport.SignalChoice && int(s.Src) == v && s.Act == act {
				return true
			}
		}
	}
	return false
}

// plans is the leader's LeaderConfig.Plans, as the server's
// (coord's flowCaches.plans): each node's plan of a generation of run r,
// compiled from the run's graph (runproto.Compile).
func (w *world) plans(r coord.Run) (map[string]coord.NodePlan, error) {
	sr := w.run(r.ID)
	if sr == nil {
		return nil, fmt.Errorf("no run %s", r.ID)
	}
	if sr.loops == nil {
		sr.loops = runproto.NewLoops(sr.g)
	}
	owner := make([]uint32, len(r.Assignment))
	for v, n := range r.Assignment {
		owner[v] = uint32(slices.Index(r.Nodes, n))
	}
	ps, err := runproto.Compile(sr.g, sr.loops, sr.free, r.Nodes, owner)
	if err != nil {
		return nil, err
	}
	out := map[string]coord.NodePlan{}
	for i, p := range ps {
		out[r.Nodes[i]] = coord.NewNodePlan(transport.Encode(p))
	}
	return out, nil
}

func (w *world) run(id string) *simRun {
	for _, r := range w.runs {
		if r.id == id {
			return r
		}
	}
	return nil
}
