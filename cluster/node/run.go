package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/localexec"
	"github.com/hetflow/hetflow/transport"
)

var jsonMarshal = json.Marshal

// run is this node's share of one run, across generations: the tasks it was
// assigned first (parts[0]) and those it took over from lost nodes later
// (one more part per generation that moved tasks here). The protocol's
// decisions (the generation in force and its owner table, fencing, held
// Signals, dedup, the counters of the termination reports, the follow's
// bookkeeping) are sm's, under n.mu; run does the I/O and the execution.
type run struct {
	n  *Node
	id string
	sm *runproto.Run // under n.mu, except sm.Table and sm.AddSent
	// pt is the run's part here, compiled from the plans of its
	// Assignments (graphcache.go): the vertices it runs and their
	// neighbours, in a graph of the run's size. A newer generation that
	// moves tasks here replaces it by one that holds them too (update); a
	// vertex's data is the same in both, so a task that reads one or the
	// other reads the same.
	pt     atomic.Pointer[runproto.Part]
	nLocal int
	// firstIn is the vertices here of the Assignment that starts the run
	// here (planFits; of a generation after the first where this node
	// takes over tasks), for the first part's build (Node.assign), which
	// drops it.
	firstIn []bool

	ctx    context.Context
	cancel context.CancelFunc
	partsP atomic.Pointer[[]*part] // copy on write, under n.mu
	pwg    sync.WaitGroup          // watchers of parts after the first

	// The follow of the run's record, while this node owns tasks taken from
	// lost nodes (under n.mu).
	follow *transport.Follow

	vs      []vstate   // per vertex of the run's graph (made, or taken from an earlier run, by the first build)
	tab     *taskTable // the run's task table (events.go)
	flights flights    // the vertex activations in flight (flight.go)
	// caughtCh is closed when the follow in force has caught up and read
	// every node's mark of the generation (decidable; under n.mu; nil:
	// nobody waits): a condition that runs again here waits for it before
	// it takes the record's outcome (runCondition).
	caughtCh chan struct{}
	jobs     []*gpuJob // GPU work to free when the run ends
	// unread is, for each sender and generation, the newest batch with a
	// Signal the early buffer evicted before the run was held, that no read
	// of the record has shown yet (under n.mu; replaySignals); rereadsN
	// counts the reads that found it behind (a warning past a few).
	unread   map[unreadKey]uint64
	rereadsN int

	failed   atomic.Bool
	stopping atomic.Bool
	// failure is the fail envelope's task and error, sent again with every
	// report until the leader releases the run: core NATS may lose it, and
	// the SM keeps the run from reporting idle meanwhile (runproto.Fail).
	failure atomic.Pointer[failure]

	idleCh   chan struct{}
	probeCh  chan struct{}
	stopOnce sync.Once
	stopCh   chan struct{}
	reason   string
	done     chan struct{}
}

// part is one local taskflow of a run, open on the executor: a built
// taskflow (built.go's reuse: the first part of a run of a plan run here
// before may be the build of an earlier run) and this run's open run of it.
type part struct {
	*built
	run  *run
	open atomic.Pointer[localexec.OpenRun]
}

// early is Signals kept until their run's Assignment comes, a stretch of
// one batch: its sender, batch number, the place of the first in the batch
// and the batch's length.
type early struct {
	from string
	seq  uint64
	i, n int
	sigs []transport.Signal
}

// assignError is a refusal that names the task at fault.
type assignError struct {
	task string
	err  error
}

func (e *assignError) Error() string { return fmt.Sprintf("task %q: %v", e.task, e.err) }
func (e *assignError) Unwrap() error { return e.err }

func taskOf(err error) string {
	var ae *assignError
	if errors.As(err, &ae) {
		return ae.task
	}
	return ""
}

// graph is the run's graph as the plans here give it (any goroutine).
func (r *run) graph() *spec.Graph { return r.pt.Load().G }

// lp is the loop contexts of the run's graph (Signal.DstAct; any goroutine).
func (r *run) lp() *runproto.Loops { return r.pt.Load().Loops }

// newRun compiles the assignment's plan (graphcache.go); build makes the
// taskflow.
func newRun(n *Node, a *transport.Assignment, held *cachedPlan) (*run, error) {
	r := &run{
		n: n, id: a.Run,
		idleCh:  make(chan struct{}, 1),
		probeCh: make(chan struct{}, 1),
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	r.partsP.Store(&[]*part{})
	r.ctx, r.cancel = context.WithCancel(context.Background())
	var pt *runproto.Part
	var err error
	if held != nil {
		pt = held.pt // the plan a names by digest (Node.assign)
	} else if pt, err = n.graphs.compile(a.Plan, a.PlanDigest, len(a.Owner), n.conn.Limits(), n.reg); err != nil {
		return r, err
	}
	if r.firstIn, err = planFits(pt, a, n.id, true, n.builds.mask(pt)); err != nil {
		return r, err
	}
	r.pt.Store(pt)
	r.tab = n.events.open(a.Run, n.id, len(pt.G.Vertices))
	r.flights = flights{rows: r.tab.rows}
	r.sm, err = runproto.New(runproto.Config{Self: n.id, Run: a.Run, Gen: a.Gen, Nodes: a.Nodes, Owner: a.Owner, MaxHeld: maxEarlySignals,
		Done: func(v int) uint64 { return r.vs[v].done.Load() }, Loops: pt.Loops, Free: pt.Free, Spare: n.builds.spare(pt)})
	return r, r.named(err)
}

// planFits checks that pt, the part compiled from a's plans, is of a's run
// size and holds every task a gives node, and, where mark is set, returns
// those tasks (in: by vertex, as runproto.Run.Mine gives them once the SM
// has checked that every owner names a node of a; a first build takes it,
// run.firstIn, so that a run's start passes over its owners once for
// both). A mask equal to like (nil: none) is like itself, not a copy: the
// mask of the build an earlier run of the plan left (buildCache.mask),
// which a run again takes, is not made again (100 KB for 100K tasks).
// Masks are read only.
func planFits(pt *runproto.Part, a *transport.Assignment, node string, mark bool, like []bool) (in []bool, err error) {
	if len(a.Owner) != len(pt.G.Vertices) {
		return nil, fmt.Errorf("%w: the assignment places %d tasks, its plan has %d", runproto.ErrPlan, len(a.Owner), len(pt.G.Vertices))
	}
	mine := nodeMask(a.Nodes, node)
	if mark {
		if in = like; len(like) != len(a.Owner) {
			in, like = make([]bool, len(a.Owner)), nil
		}
	}
	for v, o := range a.Owner {
		here := int(o) < len(mine) && mine[o]
		if here && !pt.Holds(v) {
			return nil, fmt.Errorf("%w: the assignment gives task %d to node %s, and its plan does not hold it", runproto.ErrPlan, v, node)
		}
		if mark && in[v] != here {
			if like != nil { // the first difference: a mask of its own, like up to v
				in = make([]bool, len(a.Owner))
				copy(in, like[:v])
				like = nil
			}
			in[v] = here
		}
	}
	return in, nil
}

// named makes the SM's refusal of a placement name the task at fault.
func (r *run) named(err error) error {
	var oe *runproto.OwnerError
	if errors.As(err, &oe) && r.pt.Load() != nil && oe.Vertex < len(r.graph().Vertices) {
		return &assignError{r.graph().Vertices[oe.Vertex].Path, fmt.Errorf("owner %d names no node of the assignment", oe.Owner)}
	}
	return err
}

func (r *run) nodeOf(v int) string { return r.sm.Table().NodeOf(v) }

// curGen is the generation in force (any goroutine).
func (r *run) curGen() uint64 { return r.sm.Table().Gen }

func (r *run) parts() []*part { return *r.partsP.Load() }

// addPart records an opened part (under n.mu).
func (r *run) addPart(p *part, o *localexec.OpenRun) {
	p.open.Store(o)
	ps := append(append([]*part(nil), r.parts()...), p)
	r.partsP.Store(&ps)
	if r.failed.Load() || r.stopping.Load() {
		o.Cancel()
	}
}

// partsIdle: every part idle (under n.mu, so that no Signal counted is
// waiting to be scheduled).
func (r *run) partsIdle() bool {
	for _, p := range r.parts() {
		if !p.open.Load().Idle() {
			return false
		}
	}
	return true
}

// quiet says whether no part of any run on the node is running (every
// part idle): the node's publisher streams a cut under its lock only then,
// so that no worker waits on it (eventPub.quiet). It never waits for n.mu
// (an assignment's build holds it for milliseconds, and the publisher must
// not wait on whoever holds it): a node whose lock is held is not quiet.
func (n *Node) quiet() bool {
	if !n.mu.TryLock() {
		return false
	}
	defer n.mu.Unlock()
	for _, r := range n.runs {
		if !r.partsIdle() {
			return false
		}
	}
	return true
}

// onIdle is the open run's idle callback (on a worker: it must not block).
func (r *run) onIdle() {
	nudge(r.n.flushKick)
	select {
	case r.idleCh <- struct{}{}:
	default:
	}
}

// probe takes a termination probe (under n.mu) and asks for a report.
func (r *run) probe(wave uint64) {
	if len(r.sm.Probe(wave)) == 0 {
		return
	}
	select {
	case r.probeCh <- struct{}{}:
	default:
	}
}

func (r *run) requestStop(reason string) {
	r.stopOnce.Do(func() {
		r.reason = reason
		close(r.stopCh)
	})
}

// loop is the run's goroutine: it acknowledges the Assignment, reports on
// idleness, probes and every heartbeat, scans the activations in flight
// for long ones (flight.go), and tears the run down on Cancel.
func (r *run) loop() {
	defer r.n.wg.Done()
	defer close(r.done)
	open := r.parts()[0].open.Load()
	r.report()
	tick := time.NewTicker(r.n.cfg.Heartbeat)
	defer tick.Stop()
	scan := time.NewTicker(r.flights.scanPeriod())
	defer scan.Stop()
	finished := open.Done()
	beats := 0
	for {
		select {
		case <-r.stopCh:
			r.teardown()
			return
		case <-r.idleCh:
			r.report()
		case <-r.probeCh:
			r.report()
		case <-tick.C:
			beats++
			r.remark(beats)
			r.report()
		case <-scan.C:
			if !r.partsIdle() { // read without n.mu: an activation that begins meanwhile is seen by the next scan
				r.scanFlights(r.n.stamp()) // the clock the flights' starts were stamped with
			}
		case <-finished:
			finished = nil
			r.openEnded(open.Wait())
		}
	}
}

// report flushes what the run has sent (Signals, then TaskEvents, so that
// the leader never sees a node idle before its events are stored) and sends
// a TermReport, built by the SM from the parts' idleness (runproto.Run.Report
// says in which order the counters and idleness are read, and why).
func (r *run) report() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.n.batcher.Flush(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
		r.n.log.Warn("flushing signals", "run", r.id, "err", err)
	}
	r.n.events.flush(ctx)
	r.n.mu.Lock()
	rep := r.sm.Report(r.partsIdle())
	r.n.mu.Unlock()
	r.n.sendReport(&rep)
	if f := r.failure.Load(); f != nil {
		r.n.sendFail(r.id, f.task, f.err) // until the leader's Cancel releases the run
	}
}

// failure is what a run's fail envelope says.
type failure struct {
	task string
	err  error
}

// openEnded handles the open run ending on its own: after a failure this
// node reported (the wrappers cancel it), or a failure inside localexec (a
// GPU graph that failed to launch, a panic in the node's own code): the
// task's run is cancelled, and localexec ends an open run it cancels
// (TestPanicInNodeCodeFailsTheRun).
func (r *run) openEnded(err error) {
	if err == nil || r.stopping.Load() || r.failed.Load() {
		return
	}
	task := ""
	var pe *localexec.PanicError
	var te *localexec.TaskError
	switch {
	case errors.As(err, &pe):
		task = pe.Task
		// a panic localexec recovered is one in the node's own code (a
		// task's own panic is caught by callFunc and failed the run before
		// this): a bug, and its stack is the clue
		r.n.log.Error("panic in the node around a task", "run", r.id, "task", task, "panic", pe.Value, "stack", string(pe.Stack))
	case errors.As(err, &te):
		task = te.Task
	}
	v := -1
	if task != "" {
		for i := range r.graph().Vertices {
			if r.graph().Vertices[i].Path == task {
				v = i
				break
			}
		}
	}
	var act, execs uint64
	if v >= 0 {
		act, execs = r.vs[v].acts.Load(), r.vs[v].execs.Load()
	}
	r.fail(v, task, act, execs, 0, err)
}

// teardown cancels what still runs, waits for it and forgets the run.
func (r *run) teardown() {
	r.n.mu.Lock() // no part is added, no follow started, after this
	// every part idle: nothing is cut short, the build may serve the next run (reuse.go)
	idle := r.partsIdle()
	r.stopping.Store(true)
	r.sm.Stop()
	f := r.follow
	r.follow = nil
	r.n.mu.Unlock()
	r.cancel()
	if f != nil {
		f.Stop()
	}
	for _, p := range r.parts() {
		open := p.open.Load()
		if idle {
			// Safe: every part was idle when the SM stopped, both under
			// n.mu, the stopped SM acts on no Signal after it, and the
			// other ways a task is scheduled or released (r.update,
			// r.followed, r.completed) check stopping first, so nothing
			// is scheduled or running and nothing can be: a Close ends
			// the open run at once, cutting nothing short, as a Cancel
			// would.
			// Faster: unlike a Cancel it leaves the taskflow's run
			// uncancelled, so localexec may find that every join counter
			// restarted (a plain DAG that ran whole, not steered from
			// outside) and the next run of a kept build skips their reset,
			// a pass over every task with more than one predecessor: most
			// of a run again's way to its first activation (100K tasks:
			// 1–2 ms).
			open.Close()
		} else {
			open.Cancel()
		}
		<-open.Done()
	}
	r.pwg.Wait()
	keep := r.keepable(idle)
	r.cleanup(keep)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.n.events.flush(ctx)
	// The rows go to the next run with as many vertices (eventPub.forget):
	// the flight table, a view of them, goes first, so that a late writer
	// (there is none: every part and pwg are waited for above) would fail
	// loudly on a nil table instead of writing another run's slots.
	r.flights = flights{}
	r.n.events.forget(r.tab)
	if err := r.n.batcher.Forget(r.id); err != nil && !errors.Is(err, transport.ErrClosed) {
		r.n.log.Warn("forgetting the run's batches", "run", r.id, "err", err)
	}
	n := r.n
	n.mu.Lock()
	if n.runs[r.id] == r {
		delete(n.runs, r.id)
	}
	n.markEndedLocked(r.id, r.sm.Gen())
	n.checkDrainedLocked()
	closing := n.closed
	n.mu.Unlock()
	if keep != nil {
		// No Signal, probe or report reaches the run now (it is not in
		// n.runs, its parts and loop are done, its follow stopped): its
		// vertex table and the SM's per-vertex arrays go to the next run
		// of the plan. A Cancel that found the run before it left n.runs
		// reads only the SM's generation (Node.cancel); an Assignment
		// that found it (update) and a follow still starting (its caught
		// callback) reach the SM, stopped, which touches no array after
		// Stop (runproto.Run.Release).
		keep.spare = r.sm.Release()
		n.builds.put(keep)
	}
	if !closing { // a closing node opens no table: no run would take them
		n.events.clearSpare() // the rows the table forgotten above left, if it went (eventPub.clearSpare)
	}
	n.log.Info("run released", "run", r.id, "gen", r.curGen(), "reason", r.reason)
}

// cleanup frees what the run's GPU tasks hold: their device memory, and
// their GPU graphs (clearing the part's taskflows, which no longer run),
// but keep's, kept for the next run of the plan.
func (r *run) cleanup(keep *built) {
	r.cancel()
	for _, j := range r.jobs {
		j.free()
	}
	r.jobs = nil
	for _, p := range r.parts() {
		if p.built == keep {
			continue
		}
		for _, tf := range p.tfs {
			tf.Clear()
		}
	}
}

// take decides Signals of the run from the live subscription or a replay
// of this node's subject (under n.mu): sigs are those at first, first+1, …
// of batch seq of sender from, the whole batch when whole (a batch taken
// whole before is skipped: runproto.Run.BatchAll). It returns how many were
// new.
func (r *run) take(from string, seq uint64, first int, sigs []transport.Signal, whole bool) (fresh int) {
	if whole {
		acts, seen := r.sm.BatchAll(from, seq, sigs)
		if seen {
			r.n.stats.duplicate.Add(uint64(len(sigs)))
			return 0
		}
		return r.apply(acts).fresh
	}
	return r.apply(r.sm.Batch(from, seq, first, sigs)).fresh
}

// unreadKey names the sender of an evicted Signal's batch by its id and
// the Signal's generation: a sender's batch numbers (Seq) count from 1 again
// in a new process, which sends a run's Signals only under a later
// generation, so the order argument of replaySignals holds within one
// (sender, generation) and a batch of an earlier process of the same id
// proves nothing about a later one's (as runproto's batchID).
type unreadKey struct {
	from string
	gen  uint64
}

// readBack notes that a read of the record met batch seq of sender from,
// whose first Signal is of generation gen (under n.mu): the record holds
// every batch of that sender's process up to it. A batch whose Signals
// span two generations (the Batcher does not split them) is named by its
// first's: it clears no note of the later one, which costs reads, never a
// Signal.
func (r *run) readBack(from string, gen, seq uint64) {
	k := unreadKey{from, gen}
	if s, ok := r.unread[k]; ok && seq >= s {
		delete(r.unread, k)
	}
}

// applied is what apply left for its caller: the actions that must wait
// until n.mu is released.
type applied struct {
	fresh  int    // Signals delivered
	follow uint64 // a follow to start (0: none)
	report bool   // a report is due
	err    error  // opening a part failed
}

// apply carries out the SM's actions (under n.mu): it counts and logs the
// Signals refused, opens a part of tasks moved here, and queues the new
// Signals on their proxies and schedules them, the proxies of one part with
// one ScheduleAll (the executor's queue and wake-up are taken once per
// batch). What needs I/O (a follow, a report) is left to the caller.
func (r *run) apply(acts []runproto.Action) (res applied) {
	n := r.n
	q := &n.scratch.q
	var outs outputCopy
	for i := range acts {
		a := &acts[i]
		switch a.Kind {
		case runproto.Hold:
			n.stats.early.Add(1)
		case runproto.Fence:
			n.stats.fenced.Add(1)
			n.log.Debug("signal fenced: its sender does not own its source", "run", r.id, "src", a.Sig.Src, "from", a.From, "gen", a.Sig.Gen, "why", a.Reason)
		case runproto.Drop:
			n.stats.dropped.Add(1)
			n.log.Warn("signal dropped", "run", r.id, "src", a.Sig.Src, "dst", a.Sig.Dst, "from", a.From, "why", a.Reason)
		case runproto.Wait:
			n.log.Debug("signal waits for its destination's previous activation", "run", r.id, "src", a.Sig.Src, "dst", a.Sig.Dst, "act", a.Sig.Act, "starts", a.Sig.DstAct)
		case runproto.Duplicate:
			n.stats.duplicate.Add(1)
			if a.Replayed {
				n.stats.takenOver.Add(1)
			}
		case runproto.Deliver:
			if a.Replayed {
				n.stats.takenOver.Add(1)
			}
			e := r.proxy(a.Sig, a.Replayed, outs.of(a.Sig.Output))
			if e == nil {
				continue
			}
			res.fresh++
			if o := e.b.cur.open.Load(); o != q.open {
				r.schedule(q) // another part: schedule what the last one got
				q.open = o
			}
			switch {
			case !e.direct || e.kind == transport.SignalChoice:
				q.sched = append(q.sched, e.task)
			default:
				for range e.mult {
					q.rel = append(q.rel, e.task)
				}
				q.strong++
			}
		case runproto.Open:
			r.schedule(q) // the Signals before it go to the parts they were for
			res.err = r.open(a.In)
		case runproto.Switch:
			r.markSwitch(a.Table.Gen)
		case runproto.Follow:
			res.follow = a.Follow
		case runproto.Report:
			res.report = true
		}
	}
	r.schedule(q)
	return res
}

// deliveries are the delivered Signals of one part that apply has not
// handed to the part's open run yet: tasks to run (proxies, picked tasks)
// and tasks to release (their join counters count a remote predecessor's
// completion).
type deliveries struct {
	open       *localexec.OpenRun
	sched, rel []localexec.Task
	strong     int // Signals released (rel: one per parallel edge of the Signal's edge)
}

// markSwitch records in the run's record that this node took generation
// gen and fences by it from now on (Batcher.AddSwitched; under n.mu): the
// nodes that run conditions again after a loss decide once they have read
// every node's mark (runproto.Run.Settled). Without it they would wait, so
// a mark that cannot be queued fails the run.
func (r *run) markSwitch(gen uint64) {
	if err := r.n.batcher.AddSwitched(r.ctx, r.id, gen); err != nil && r.ctx.Err() == nil {
		go r.fail(-1, "", 0, 0, 0, fmt.Errorf("node %s cannot record that it took generation %d: %w", r.n.id, gen, err))
	}
}

// remark publishes this node's mark of the generation in force again at
// heartbeat beats (every one for the first ten, then every tenth), after
// the first generation: a mark a failed publish lost (the Batcher keeps
// only the error) would otherwise keep the conditions run again elsewhere
// waiting for ever. Marks are idempotent (runproto keeps the newest
// generation a node marked).
func (r *run) remark(beats int) {
	if beats > 10 && beats%10 != 0 {
		return
	}
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	if gen := r.sm.Gen(); gen > 1 && !r.stopping.Load() {
		r.markSwitch(gen)
	}
}

// decidable wakes the conditions that run again here and wait for the
// record (recorded) once the follow has caught up and read every node's
// mark of the generation in force (under n.mu).
func (r *run) decidable() {
	if r.caughtCh != nil && r.sm.Caught() && r.sm.Settled() {
		close(r.caughtCh)
		r.caughtCh = nil
	}
}

// proxy takes one new Signal for its edge (under n.mu): at the top level of
// a part it fills the edge's input slot, else it queues the Signal on the
// edge's receive proxy. out is the node's own copy of s.Output (s's bytes
// are the message's). It returns the edge for the caller to release or
// schedule, or nil when the Signal has no edge here.
func (r *run) proxy(s *transport.Signal, replayed bool, out []byte) *recvEdge {
	e := r.vs[s.Dst].in(int(s.Src))
	if e == nil || e.kind != s.Kind {
		if !replayed { // a replayed Signal between two tasks now in one part has no proxy: the part's own edge does its work
			r.n.stats.dropped.Add(1)
			r.n.log.Warn("signal for no edge of this node dropped", "run", r.id, "src", s.Src, "dst", s.Dst, "kind", s.Kind)
		}
		return nil
	}
	it := item{act: s.Act, out: out, ctx: s.Ctx}
	if !e.direct {
		e.fifo.push(it)
		return e
	}
	if e.kind == transport.SignalEdge {
		r.vs[e.src].setOut(it.act, it.out)
	}
	e.setLast(it)
	return e
}

// schedule hands the deliveries of q to their part's open run and empties
// q: the proxies and picked tasks run, the released tasks count a
// completion each.
func (r *run) schedule(q *deliveries) {
	n := 0
	if q.open != nil && (len(q.sched) > 0 || len(q.rel) > 0) {
		if len(q.sched) > 0 && q.open.ScheduleAll(q.sched) == nil {
			n += len(q.sched)
		}
		if len(q.rel) > 0 && q.open.Release(q.rel) == nil {
			n += q.strong
		}
		// otherwise the run is closing
	}
	if n > 0 {
		r.n.stats.received.Add(uint64(n))
	}
	clear(q.sched) // keep no task of an ended run alive
	clear(q.rel)
	q.sched, q.rel = q.sched[:0], q.rel[:0]
	q.open, q.strong = nil, 0
}

// fail reports a task's final failure once: a failed TaskEvent, a fail
// envelope to the leader, and the local run cancelled. v is the vertex (or
// -1), name what the envelope names; start is the activation's start
// stamp (Unix nanoseconds, 0 for none).
func (r *run) fail(v int, name string, act, execs uint64, start int64, err error) {
	if !r.failed.CompareAndSwap(false, true) {
		return
	}
	if v >= 0 {
		if name == "" {
			name = r.graph().Vertices[v].Path
		}
		r.event(v, name, transport.TaskFailed, act, execs, nil, err.Error(), start)
	}
	r.n.log.Warn("task failed", "run", r.id, "task", name, "err", err)
	r.failure.Store(&failure{task: name, err: err})
	r.n.mu.Lock()
	r.sm.Fail() // never idle again: the run must not pass for terminated
	r.n.mu.Unlock()
	r.n.sendFail(r.id, name, err)
	r.cancel()
	for _, p := range r.parts() {
		if o := p.open.Load(); o != nil {
			o.Cancel()
		}
	}
}

// event records a change of v (name "" or its path) or of its subflow
// child name in the run's task table: a vertex's in its row, by the worker
// (eventPub.record), a child's under the publisher's lock. start and the
// end stamp it returns are Unix nanoseconds (Node.nanos; start 0: none).
func (r *run) event(v int, name string, st transport.TaskState, act, execs uint64, out []byte, errText string, start int64) (end int64) {
	end = r.n.nanos()
	if start == 0 || (r.n.fastClock && end < start) {
		start = end // none, or a clock rebase between them took the stamps back (tscClock)
	}
	p := r.n.events
	if name == "" || name == r.graph().Vertices[v].Path {
		first, err := p.record(r.tab, false, r.curGen(), uint32(v), st, act, execs, out, errText, start, end)
		if err != nil {
			// A bug recording it (recordSlow recovered the panic, and let
			// the publisher's lock go): the task fails with it, once (a
			// failure's own record that fails so ends here).
			r.fail(v, "", act, execs, start, err)
			return end
		}
		p.nudgeFor(st, first)
		return end
	}
	p.emitTo(r.tab, nil, transport.TaskEvent{
		Run: r.id, Gen: r.curGen(), Task: uint32(v), Name: name, Node: r.n.id, State: st,
		Act: act, Executions: execs, Output: out, Error: errText, Start: unixStamp(start), End: unixStamp(end),
	})
	return end
}

// nodeMask marks, by index in nodes, the entries that name node: an owner
// table's vertex v is node's where mask[Owner[v]] (a string compare once a
// node, not once a vertex).
func nodeMask(nodes []string, node string) []bool {
	mask := make([]bool, len(nodes))
	for i, n := range nodes {
		mask[i] = n == node
	}
	return mask
}
