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

// run is this node's part of one run under one generation.
type run struct {
	n      *Node
	id     string
	gen    uint64
	me     uint32
	nodes  []string
	owner  []uint32
	g      *spec.Graph
	tf     *localexec.Taskflow
	nLocal int

	ctx    context.Context
	cancel context.CancelFunc
	openP  atomic.Pointer[localexec.OpenRun]

	vs   []vstate              // per vertex of g
	recv map[edgeKey]*recvEdge // proxies of remote predecessors, by (src, dst)
	jobs []*gpuJob             // GPU work to free when the run ends

	sent, received atomic.Uint64
	inflight       atomic.Int64 // accepted Signals being scheduled
	failed         atomic.Bool
	stopping       atomic.Bool
	superseded     bool // under n.mu

	idleCh    chan struct{}
	probeCh   chan struct{}
	probeWave atomic.Uint64
	stopOnce  sync.Once
	stopCh    chan struct{}
	reason    string
	done      chan struct{}
}

type edgeKey struct{ src, dst uint32 }

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
		n: n, id: a.Run, gen: a.Gen, me: me, nodes: a.Nodes, owner: a.Owner,
		recv:    map[edgeKey]*recvEdge{},
		idleCh:  make(chan struct{}, 1),
		probeCh: make(chan struct{}, 1),
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	f, err := spec.Parse("run "+a.Run+".json", a.Flow)
	if err != nil {
		return r, err
	}
	if err := f.Validate(spec.Options{Funcs: n.reg}); err != nil {
		return r, err
	}
	g, err := f.Expand()
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

func (r *run) local(v int) bool { return r.owner[v] == r.me }

func (r *run) nodeOf(v int) string { return r.nodes[r.owner[v]] }

func (r *run) setOpen(o *localexec.OpenRun) {
	r.openP.Store(o)
	if r.failed.Load() || r.stopping.Load() {
		o.Cancel()
	}
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
	open := r.openP.Load()
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
	received := r.received.Load()
	open := r.openP.Load()
	idle := open.Idle() && r.inflight.Load() == 0
	sent := r.sent.Load()
	r.n.sendReport(&transport.TermReport{
		Run: r.id, Gen: r.gen, Node: r.n.id, Wave: r.probeWave.Load(),
		Sent: sent, Received: received, Idle: idle,
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
	r.stopping.Store(true)
	r.cancel()
	open := r.openP.Load()
	open.Cancel()
	<-open.Done()
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
	if !r.superseded {
		n.dedup.EndRun(r.id)
		n.markEndedLocked(r.id, r.gen)
	}
	n.checkDrainedLocked()
	n.mu.Unlock()
	n.log.Info("run released", "run", r.id, "gen", r.gen, "reason", r.reason)
}

// cleanup frees what the run's GPU tasks hold.
func (r *run) cleanup() {
	r.cancel()
	for _, j := range r.jobs {
		j.free()
	}
	r.jobs = nil
}

// deliver takes one accepted Signal (under n.mu): it queues it on the edge's
// proxy and schedules the proxy, then counts it as received.
func (r *run) deliver(s *transport.Signal) {
	if s.Gen != r.gen {
		r.n.stats.dropped.Add(1)
		r.n.log.Warn("signal of another generation dropped", "run", r.id, "gen", s.Gen, "running", r.gen)
		return
	}
	e := r.recv[edgeKey{s.Src, s.Dst}]
	if e == nil || e.kind != s.Kind {
		r.n.stats.dropped.Add(1)
		r.n.log.Warn("signal for no edge of this node dropped", "run", r.id, "src", s.Src, "dst", s.Dst, "kind", s.Kind)
		return
	}
	open := r.openP.Load()
	r.inflight.Add(1)
	e.fifo.push(item{act: s.Act, out: clone(s.Output)})
	if err := open.Schedule(e.task); err != nil {
		r.inflight.Add(-1)
		return // the run is closing
	}
	r.received.Add(1)
	r.inflight.Add(-1)
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
	if o := r.openP.Load(); o != nil {
		o.Cancel()
	}
}

func (r *run) event(v int, name string, st transport.TaskState, act, execs uint64, out []byte, errText string, start time.Time) {
	end := r.n.now()
	if start.IsZero() {
		start = end
	}
	r.n.events.emit(transport.TaskEvent{
		Run: r.id, Gen: r.gen, Task: uint32(v), Name: name, Node: r.n.id, State: st,
		Act: act, Executions: execs, Output: out, Error: errText, Start: start, End: end,
	})
}
