package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/localexec"
	"github.com/hetflow/hetflow/transport"
)

var jsonMarshal = json.Marshal

// run is this node's share of one run, across generations: the tasks it was
// assigned first (parts[0]) and those it took over from lost nodes later
// (one more part per generation that moved tasks here).
type run struct {
	n      *Node
	id     string
	gen    uint64 // the generation in force; written under n.mu (see curGen)
	genA   atomic.Uint64
	tab    atomic.Pointer[ownerTab]
	g      *spec.Graph
	nLocal int

	ctx    context.Context
	cancel context.CancelFunc
	partsP atomic.Pointer[[]*part] // copy on write, under n.mu
	pwg    sync.WaitGroup          // watchers of parts after the first

	// Counters of the termination reports (see doc.go, Recovery).
	cmu      sync.Mutex
	recvFrom map[string]uint64 // Signals counted for the leader (accept, replayed), by sender
	pending  []fromSig         // Signals of a generation newer than gen, until its Assignment (under n.mu)

	// The follow of the run's record, while this node owns tasks taken from
	// lost nodes (under n.mu, except caught).
	follow   *transport.Follow
	caught   atomic.Bool   // the follow has caught up (true when there is none)
	followID atomic.Uint64 // numbers the follows, so a stopped one's catch-up is ignored
	taken    map[sigPos]struct{}
	// moved marks the vertices whose owner changed in a generation this node
	// saw (under n.mu); nil on a node that joined the run after a loss (it
	// cannot tell, and counts every duplicate).
	moved []bool
	phys  map[physID]struct{} // physical Signals of moved sources counted (under n.mu)

	vs   []vstate              // per vertex of g
	recv map[edgeKey]*recvEdge // proxies of remote predecessors, by (src, dst)
	jobs []*gpuJob             // GPU work to free when the run ends

	sent, received atomic.Uint64
	inflight       atomic.Int64 // accepted Signals being scheduled
	failed         atomic.Bool
	stopping       atomic.Bool

	idleCh    chan struct{}
	probeCh   chan struct{}
	probeWave atomic.Uint64
	stopOnce  sync.Once
	stopCh    chan struct{}
	reason    string
	done      chan struct{}
}

type edgeKey struct{ src, dst uint32 }

// ownerTab is one generation's placement: vertex v runs on nodes[owner[v]].
type ownerTab struct {
	nodes []string
	owner []uint32
}

func (t *ownerTab) nodeOf(v int) string { return t.nodes[t.owner[v]] }

func (t *ownerTab) has(node string) bool {
	for _, n := range t.nodes {
		if n == node {
			return true
		}
	}
	return false
}

// part is one local taskflow of a run, open on the executor.
type part struct {
	tf   *localexec.Taskflow
	tfs  []*localexec.Taskflow // tf and its modules' taskflows, cleared when the run ends
	in   []bool                // the vertices it runs
	open atomic.Pointer[localexec.OpenRun]
}

type fromSig struct {
	from string
	id   physID
	s    transport.Signal
}

// physID names one Signal as it crossed the wire: its batch (sender, batch
// number) and place in it. Gen keeps a restarted sender's batch numbers,
// which start again at 1, apart: it is only ever given later generations.
type physID struct {
	from string
	gen  uint64
	seq  uint64
	i    int
}

type sigPos struct {
	seq uint64
	i   int
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

// newRun parses and expands the assignment's flow; build makes the graph.
func newRun(n *Node, a *transport.Assignment, me uint32) (*run, error) {
	r := &run{
		n: n, id: a.Run, gen: a.Gen,
		recvFrom: map[string]uint64{},
		recv:     map[edgeKey]*recvEdge{},
		idleCh:   make(chan struct{}, 1),
		probeCh:  make(chan struct{}, 1),
		stopCh:   make(chan struct{}),
		done:     make(chan struct{}),
	}
	r.genA.Store(a.Gen)
	r.tab.Store(&ownerTab{nodes: a.Nodes, owner: a.Owner})
	r.caught.Store(true)
	r.partsP.Store(&[]*part{})
	r.ctx, r.cancel = context.WithCancel(context.Background())
	_ = me
	f, err := spec.Parse("run "+a.Run+".json", a.Flow)
	if err != nil {
		return r, err
	}
	g, err := f.Compile(spec.Options{Funcs: n.reg}) // validated and resolved once
	if err != nil {
		return r, err
	}
	if len(a.Owner) != len(g.Vertices) {
		return r, fmt.Errorf("the assignment places %d tasks, the flow has %d", len(a.Owner), len(g.Vertices))
	}
	r.g = g
	r.vs = make([]vstate, len(g.Vertices))
	return r, nil
}

// local reports whether v runs on this node in the generation in force.
func (r *run) local(v int) bool { return r.tab.Load().nodeOf(v) == r.n.id }

func (r *run) nodeOf(v int) string { return r.tab.Load().nodeOf(v) }

// curGen is the generation in force (any goroutine).
func (r *run) curGen() uint64 { return r.genA.Load() }

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

// idle: every part idle, no accepted Signal being scheduled, and the record
// of lost nodes read up to where it stood when the follow began.
func (r *run) idle() bool {
	for _, p := range r.parts() {
		if !p.open.Load().Idle() {
			return false
		}
	}
	return r.inflight.Load() == 0 && r.caught.Load()
}

// onIdle is the open run's idle callback (on a worker: it must not block).
func (r *run) onIdle() {
	nudge(r.n.flushKick)
	select {
	case r.idleCh <- struct{}{}:
	default:
	}
}

func (r *run) probe(wave uint64) {
	for {
		cur := r.probeWave.Load()
		if wave <= cur || r.probeWave.CompareAndSwap(cur, wave) {
			break
		}
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
// idleness, probes and every heartbeat, and tears the run down on Cancel.
func (r *run) loop() {
	defer r.n.wg.Done()
	defer close(r.done)
	open := r.parts()[0].open.Load()
	r.report()
	tick := time.NewTicker(r.n.cfg.Heartbeat)
	defer tick.Stop()
	finished := open.Done()
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
			r.report()
		case <-finished:
			finished = nil
			r.openEnded(open.Wait())
		}
	}
}

// report flushes what the run has sent (Signals, then TaskEvents, so that
// the leader never sees a node idle before its events are stored) and sends
// a TermReport. Received is read before Idle and Sent after it: a Signal
// counted as received has been scheduled, so either the run is not idle or
// its consequences, Signals included, are counted.
func (r *run) report() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.n.batcher.Flush(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
		r.n.log.Warn("flushing signals", "run", r.id, "err", err)
	}
	r.n.events.flush(ctx)
	r.cmu.Lock()
	received := r.received.Load()
	from := make(map[string]uint64, len(r.recvFrom))
	for k, v := range r.recvFrom {
		from[k] = v
	}
	r.cmu.Unlock()
	gen := r.curGen()
	idle := r.idle()
	sent := r.sent.Load()
	r.n.sendReport(&transport.TermReport{
		Run: r.id, Gen: gen, Node: r.n.id, Wave: r.probeWave.Load(),
		Sent: sent, Received: received, Idle: idle, ReceivedFrom: from,
	})
}

// openEnded handles the open run ending on its own: after a failure this
// node reported (the wrappers cancel it), or a failure inside localexec (a
// GPU graph that failed to launch, a panic in the node's own code).
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
	case errors.As(err, &te):
		task = te.Task
	}
	v, ok := r.g.Lookup(task)
	if !ok {
		v = -1
	}
	var act, execs uint64
	if v >= 0 {
		act, execs = r.vs[v].acts.Load(), r.vs[v].execs.Load()
	}
	r.fail(v, task, act, execs, time.Time{}, err)
}

// teardown cancels what still runs, waits for it and forgets the run.
func (r *run) teardown() {
	r.n.mu.Lock() // no part is added, no follow started, after this
	r.stopping.Store(true)
	f := r.follow
	r.follow = nil
	r.followID.Add(1)
	r.n.mu.Unlock()
	r.cancel()
	if f != nil {
		f.Stop()
	}
	for _, p := range r.parts() {
		open := p.open.Load()
		open.Cancel()
		<-open.Done()
	}
	r.pwg.Wait()
	r.cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.n.events.flush(ctx)
	if err := r.n.batcher.Forget(r.id); err != nil && !errors.Is(err, transport.ErrClosed) {
		r.n.log.Warn("forgetting the run's batches", "run", r.id, "err", err)
	}
	n := r.n
	n.mu.Lock()
	if n.runs[r.id] == r {
		delete(n.runs, r.id)
	}
	n.dedup.EndRun(r.id)
	n.markEndedLocked(r.id, r.gen)
	n.checkDrainedLocked()
	n.mu.Unlock()
	n.log.Info("run released", "run", r.id, "gen", r.curGen(), "reason", r.reason)
}

// cleanup frees what the run's GPU tasks hold: their device memory, and
// their GPU graphs (clearing the part's taskflows, which no longer run).
func (r *run) cleanup() {
	r.cancel()
	for _, j := range r.jobs {
		j.free()
	}
	r.jobs = nil
	for _, p := range r.parts() {
		for _, tf := range p.tfs {
			tf.Clear()
		}
	}
}

// accept takes one Signal from the live subscription (under n.mu): a batch
// of one (see acceptAll).
func (r *run) accept(from string, id physID, s *transport.Signal) (fresh bool) {
	return r.acceptAll(from, []physID{id}, []*transport.Signal{s}) > 0
}

// acceptAll takes Signals of the run from the live subscription (under
// n.mu), sigs[i] named ids[i], and returns how many were new. A Signal of a
// newer generation waits for its Assignment; one whose sender does not own
// its source in the generation in force is fenced; the rest go to the
// Deduper together; a new one is counted and delivered (fresh); a duplicate
// is counted only when its source moved (see below). The per-Signal work is
// the fence and the bookkeeping; the Deduper's lock, the counters' lock and
// the executor's queue and wake-up are taken once for the whole batch.
func (r *run) acceptAll(from string, ids []physID, sigs []*transport.Signal) (fresh int) {
	n := r.n
	tab := r.tab.Load()
	sc := &n.scratch
	sc.sigs, sc.ids = sc.sigs[:0], sc.ids[:0]
	for i, s := range sigs {
		if s.Gen > r.gen {
			if len(r.pending) >= maxEarlySignals {
				n.stats.dropped.Add(1)
				continue
			}
			c := *s
			c.Output = clone(s.Output)
			r.pending = append(r.pending, fromSig{from, ids[i], c})
			n.stats.early.Add(1)
			continue
		}
		if int(s.Src) >= len(tab.owner) || int(s.Dst) >= len(tab.owner) {
			n.stats.dropped.Add(1)
			n.log.Warn("signal for no task of the run dropped", "run", r.id, "src", s.Src, "dst", s.Dst, "from", from)
			continue
		}
		if owner := tab.nodeOf(int(s.Src)); owner != from {
			n.stats.fenced.Add(1)
			n.log.Debug("signal fenced: its sender does not own its source", "run", r.id, "src", s.Src, "from", from, "owner", owner, "gen", s.Gen)
			continue
		}
		sc.sigs, sc.ids = append(sc.sigs, s), append(sc.ids, ids[i])
	}
	if len(sc.sigs) == 0 {
		return 0
	}
	// Scheduled work is in flight before it is counted, so that a report
	// never shows it counted while the run looks idle without it.
	r.inflight.Add(int64(len(sc.sigs)))
	defer r.inflight.Add(-int64(len(sc.sigs)))
	sc.verdicts = n.dedup.AdmitReplayedAll(sc.sigs, sc.verdicts)
	// What the leader balances is physical Signals: each one its sender
	// counted in Sent is counted here once. A Signal of a source that never
	// moved is sent once, so it counts when new; a duplicate of one is a
	// batch published again (after a NATS outage this node reads its own
	// record back) and counting it would unbalance the run. The new owner of
	// a moved source runs it again and re-sends what its old owner had sent:
	// those duplicates were counted by their sender, so they count here —
	// once per physical Signal (id), however often it is read.
	counted := 0
	sc.tasks = sc.tasks[:0]
	var open *localexec.OpenRun
	for i, s := range sc.sigs {
		v := sc.verdicts[i]
		moved := r.moved == nil || r.moved[s.Src]
		if moved && v != transport.Ended {
			if _, seen := r.phys[sc.ids[i]]; !seen {
				if r.phys == nil {
					r.phys = map[physID]struct{}{}
				}
				r.phys[sc.ids[i]] = struct{}{}
				counted++
			}
		} else if v == transport.Accept {
			counted++
		}
		if v != transport.Accept {
			continue
		}
		e := r.proxy(s, false)
		if e == nil {
			continue
		}
		fresh++
		if o := e.p.open.Load(); o != open && open != nil {
			r.schedule(open, sc.tasks) // another part: schedule what the last one got
			sc.tasks = sc.tasks[:0]
		}
		open = e.p.open.Load()
		sc.tasks = append(sc.tasks, e.task)
	}
	r.countN(from, counted)
	if open != nil {
		r.schedule(open, sc.tasks)
	}
	clear(sc.sigs) // keep no Signal, and no task of an ended run, alive
	clear(sc.tasks)
	return fresh
}

// count counts one Signal processed after fencing, from sender.
func (r *run) count(from string) { r.countN(from, 1) }

// countN counts k Signals processed after fencing, from sender.
func (r *run) countN(from string, k int) {
	if k == 0 {
		return
	}
	r.cmu.Lock()
	r.recvFrom[from] += uint64(k)
	r.received.Add(uint64(k))
	r.cmu.Unlock()
}

// proxy queues one new Signal on its edge's receive proxy (under n.mu) and
// returns the proxy for the caller to schedule, or nil when the Signal has
// no edge here.
func (r *run) proxy(s *transport.Signal, replayed bool) *recvEdge {
	e := r.recv[edgeKey{s.Src, s.Dst}]
	if e == nil || e.kind != s.Kind {
		if !replayed { // a replayed Signal between two tasks now in one part has no proxy: the part's own edge does its work
			r.n.stats.dropped.Add(1)
			r.n.log.Warn("signal for no edge of this node dropped", "run", r.id, "src", s.Src, "dst", s.Dst, "kind", s.Kind)
		}
		return nil
	}
	e.fifo.push(item{act: s.Act, out: clone(s.Output)})
	return e
}

// schedule runs the proxies of delivered Signals on one part's open run.
func (r *run) schedule(open *localexec.OpenRun, tasks []localexec.Task) {
	if len(tasks) == 0 || open.ScheduleAll(tasks) != nil {
		return // the run is closing
	}
	r.n.stats.received.Add(uint64(len(tasks)))
}

// deliver schedules one new Signal (under n.mu): it queues it on the edge's
// proxy and schedules the proxy.
func (r *run) deliver(s *transport.Signal, replayed bool) {
	e := r.proxy(s, replayed)
	if e == nil {
		return
	}
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	if err := e.p.open.Load().Schedule(e.task); err != nil {
		return // the run is closing
	}
	r.n.stats.received.Add(1)
}

// fail reports a task's final failure once: a failed TaskEvent, a fail
// envelope to the leader, and the local run cancelled. v is the vertex (or
// -1), name what the envelope names.
func (r *run) fail(v int, name string, act, execs uint64, start time.Time, err error) {
	if !r.failed.CompareAndSwap(false, true) {
		return
	}
	if v >= 0 {
		if name == "" {
			name = r.g.Vertices[v].Path
		}
		r.event(v, name, transport.TaskFailed, act, execs, nil, err.Error(), start)
	}
	r.n.log.Warn("task failed", "run", r.id, "task", name, "err", err)
	r.n.sendFail(r.id, name, err)
	r.cancel()
	for _, p := range r.parts() {
		if o := p.open.Load(); o != nil {
			o.Cancel()
		}
	}
}

func (r *run) event(v int, name string, st transport.TaskState, act, execs uint64, out []byte, errText string, start time.Time) {
	end := r.n.now()
	if start.IsZero() {
		start = end
	}
	r.n.events.emit(transport.TaskEvent{
		Run: r.id, Gen: r.curGen(), Task: uint32(v), Name: name, Node: r.n.id, State: st,
		Act: act, Executions: execs, Output: out, Error: errText, Start: start, End: end,
	})
}
