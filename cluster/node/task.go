package node

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/localexec"
	"github.com/hetflow/hetflow/transport"
)

// errStopped: the run is being cancelled; the wrapper gives up quietly.
var errStopped = errors.New("node: run stopped")

// callPool holds the Calls of functions that keep none (funcs.Entry.Transient,
// vTransient): a no-op activation allocates nothing. A Call is put back
// overwritten (funcs.Release), so it points at nothing of the run.
var callPool = sync.Pool{New: func() any { return new(funcs.Call) }}

// call prepares activation act of vertex v: without Inputs and State for a
// function that reads neither (funcs.Entry.NoInputs). The Call of a
// Transient function comes from callPool: runTask gives it back
// (funcs.Release, then callPool.Put) once the function has returned.
func (r *run) call(v int, act uint64) *funcs.Call {
	vs := &r.vs[v]
	dom, dev := spec.DomainCPU, 0
	if vs.flags&vPlaced != 0 {
		dom, dev = vs.domain, int(vs.device) // off the hot line (vcold)
	}
	var args funcs.Args
	if vs.flags&vArgs != 0 {
		args = vs.args
	}
	var c *funcs.Call
	if vs.flags&vTransient != 0 {
		c = callPool.Get().(*funcs.Call)
	} else {
		c = new(funcs.Call)
	}
	// Field by field, over a Call that is new or Released (whose other
	// fields are zero): a composite literal is built on the stack by
	// 8-byte stores and copied 16 bytes at a time, and a 16-byte load of
	// two 8-byte stores waits for them to reach the cache.
	c.Run, c.Task, c.Path, c.Args = r.id, vs.name, vs.pathOf(), args
	c.Activation, c.Domain, c.Device = act, dom, dev
	if vs.flags&vNoInputs != 0 {
		return c
	}
	c.State = vs.getState()
	if len(vs.preds) > 0 {
		c.Inputs = make(map[string][]byte, len(vs.preds))
		for _, p := range vs.preds {
			if e := vs.in(p); e != nil {
				if out, ok := e.output(); ok {
					c.Inputs[r.graph().Vertices[p].Name()] = out
				}
				continue
			}
			if out, ok := r.vs[p].output(); ok {
				c.Inputs[r.graph().Vertices[p].Name()] = out
			}
		}
	}
	return c
}

// invoke runs fn for c: up to 1+retries executions on application errors
// (panics are not retried), each under the per-activation timeout.
// An activation is watched through v's slot in the run's flight table
// (flight.go) when that slot is free, else by a timer of its own; noSlot
// says it takes no slot: a subflow child's (the slot is its vertex's), or
// a vertex's whose slot invokeOnce found another activation holding.
// body is fn bound (nil: looked up by name at each execution); shard is
// the Stats.TasksExecuted cell its executions count into (workerShard).
// invokeOnce repeats invoke's per-attempt start (the stop check, execs
// and the tasks counted) for its one execution: the two change together.
// The function's Result is left in *res (Result{} on an error, as execute
// leaves it): one Result in the frame of the activation's wrapper, not
// one returned by value through each frame on the way (a copy a frame,
// each copy's loads stalled on the stores of the one before:
// funcs.Result's padding).
func (r *run) invoke(v int, fn string, body *funcs.Bound, retries int, timeout time.Duration, c *funcs.Call, execs *atomic.Uint64, start int64, noSlot bool, shard int, res *funcs.Result) error {
	if noSlot || !r.flights.begin(v, c.Activation, start) {
		w := r.watch(v, c.Path, c.Activation, execs)
		defer w.stop()
	} else {
		defer r.endFlight(v)
	}
	for attempt := 0; ; attempt++ {
		if r.ctx.Err() != nil {
			return errStopped
		}
		c.Attempt = attempt
		execs.Add(1)
		r.n.stats.tasks.Add(shard, 1)
		err := r.execute(fn, body, timeout, c, res)
		if err == nil {
			return nil
		}
		if r.ctx.Err() != nil {
			return errStopped
		}
		var pe *localexec.PanicError
		if errors.As(err, &pe) || attempt >= retries {
			return err
		}
	}
}

// invokeOnce is invoke for an activation of a vertex whose function is
// bound and that has neither retries nor a timeout (almost every task):
// one execution, without invoke's loop, lookup by name and timeout
// context, and the same outcomes (errStopped, the function's error, a
// PanicError). Its flight slot watches it; where another activation holds
// the slot, invoke watches it by a timer (noSlot; the vertex's path names
// no child, runningWatch).
func (r *run) invokeOnce(v int, vs *vstate, c *funcs.Call, start int64, shard int, res *funcs.Result) error {
	if !r.flights.begin(v, c.Activation, start) {
		return r.invoke(v, "", vs.body, 0, 0, c, &vs.execs, start, true, shard, res)
	}
	// The slot is ended by calls, not a defer (an indirect call through
	// the defer's closure): nothing between can panic, callFunc recovers
	// the function's panics.
	if r.ctx.Err() != nil {
		r.endFlight(v)
		return errStopped
	}
	vs.execs.Add(1)
	r.n.stats.tasks.Add(shard, 1)
	err := r.callFunc(r.ctx, "", vs.body, c, res)
	r.endFlight(v)
	if err != nil && r.ctx.Err() != nil {
		return errStopped
	}
	return err
}

// callFunc runs fn for c into *res under ctx, through body where it is bound
// (nil: by name); a panic of the function is its activation's failure, a
// localexec.PanicError with its stack, and leaves Result{}. Both
// invokeOnce (the run's context) and execute (under a timeout's) call it,
// so a panic is recovered in one place.
func (r *run) callFunc(ctx context.Context, fn string, body *funcs.Bound, c *funcs.Call, res *funcs.Result) (err error) {
	defer func() {
		if p := recover(); p != nil {
			*res, err = funcs.Result{}, &localexec.PanicError{Task: c.Path, Value: p, Stack: debug.Stack()}
		}
	}()
	if body != nil {
		return body.InvokeTo(ctx, c, res)
	}
	*res, err = r.n.reg.Invoke(ctx, fn, c)
	return err
}

// RunningAfter is how long an activation runs before the node publishes a
// running event for it (a shorter one shows only as done or failed).
const RunningAfter = 50 * time.Millisecond

// runningWatch publishes one running event for an activation still running
// RunningAfter after it began, by a timer of its own: a subflow child's, or
// a vertex's whose flight slot another activation holds (invoke's noSlot; a
// vertex's activations are watched by the run's flight table, flight.go).
// stop orders itself with that event through the event publisher's lock:
// once stop returns, the event is either in the batch already (before the
// activation's done or failed event) or never.
type runningWatch struct {
	p       *eventPub
	t       *time.Timer
	stopped atomic.Bool
}

func (r *run) watch(v int, path string, act uint64, execs *atomic.Uint64) *runningWatch {
	w := &runningWatch{p: r.n.events}
	start := r.n.stamp() // the clock its done or failed row is stamped with
	if path == r.graph().Vertices[v].Path {
		path = "" // the vertex: its index names it
	}
	w.t = time.AfterFunc(RunningAfter, func() {
		w.p.emitTo(r.tab, &w.stopped, transport.TaskEvent{
			Run: r.id, Gen: r.curGen(), Task: uint32(v), Name: path, Node: r.n.id, State: transport.TaskRunning,
			Act: act, Executions: execs.Load(), Start: start, End: r.n.stamp(),
		})
	})
	return w
}

func (w *runningWatch) stop() {
	w.t.Stop()
	w.p.mu.Lock()
	w.stopped.Store(true)
	w.p.mu.Unlock()
}

// execute runs one execution of fn for c into *res, under timeout (0:
// none). On an error *res is Result{}: Bound.InvokeTo and Registry.Invoke
// leave none (TestInvokeLeavesNoResultOnAnError in funcs), and a panic's
// recovery (callFunc's) clears it, so the callers need not.
func (r *run) execute(fn string, body *funcs.Bound, timeout time.Duration, c *funcs.Call, res *funcs.Result) error {
	ctx := r.ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	err := r.callFunc(ctx, fn, body, c, res)
	if err != nil && timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && r.ctx.Err() == nil {
		err = fmt.Errorf("%w after %s: %w", ErrTimeout, spec.FormatDuration(timeout), err)
	}
	return err
}

// ctxOf is the loop context of activation act of v (runproto.Loops): the
// merge of its predecessors' latest, its own place set to act. Nil outside
// a loop.
func (r *run) ctxOf(v int, act uint64) []uint64 {
	if !r.lp().HasCtx(v) {
		return nil
	}
	pred := r.graph().Vertices[v].Pred
	srcs := make([]int, 0, len(pred))
	ctxs := make([][]uint64, 0, len(pred))
	vs := &r.vs[v]
	for _, e := range pred {
		srcs = append(srcs, e.From)
		if re := vs.in(e.From); re != nil {
			ctxs = append(ctxs, re.ctx())
		} else {
			ctxs = append(ctxs, r.vs[e.From].getCtx())
		}
	}
	return r.lp().Ctx(v, act, srcs, ctxs)
}

// begin counts a new activation of v, or reports that the run is stopping.
// Its start is the stamp its worker carried from the activation it ended
// just before (runStatic) when there is one, else the clock now. Stamps
// are Unix nanoseconds (Node.nanos), 0 for none, from begin to the row
// (record): no time.Time on the way.
func (r *run) begin(v int, carried int64) (act uint64, start int64, ok bool) {
	if r.ctx.Err() != nil {
		return 0, 0, false
	}
	vs := &r.vs[v]
	// The activation's two misses, its vstate and its row (the flight
	// slot), asked for side by side by plain loads before the locked add
	// (which waits for every load before it): their latencies overlap
	// instead of adding up.
	f := vs.flags
	if v < len(r.flights.rows) {
		r.flights.rows[v].fl.act.Load()
	}
	act = vs.acts.Add(1)
	if f&vHasCtx != 0 { // else its context stays nil
		vs.setCtx(r.ctxOf(v, act))
	}
	if carried != 0 {
		return act, carried, true
	}
	return act, r.n.nanos(), true
}

// runTask runs an activation of v: carried is the stamp its worker carried
// to it (runStatic), 0 for none; shard its TasksExecuted cell (invoke).
// The function's Result is left in *res (invoke).
func (r *run) runTask(v int, carried int64, shard int, res *funcs.Result) (uint64, int64, bool) {
	act, start, ok := r.begin(v, carried)
	if !ok {
		return 0, start, false
	}
	vs := &r.vs[v]
	c := r.call(v, act)
	var err error
	if vs.flags&vLimits == 0 && vs.body != nil {
		err = r.invokeOnce(v, vs, c, start, shard, res)
	} else {
		fn := ""
		if vs.body == nil {
			fn = r.graph().Vertices[v].Task.Func // looked up at each execution: it fails with why
		}
		var retries int
		var timeout time.Duration
		if vs.flags&vLimits != 0 { // off the hot line (vcold)
			retries, timeout = int(vs.retries), vs.timeout
		}
		err = r.invoke(v, fn, vs.body, retries, timeout, c, &vs.execs, start, false, shard, res)
	}
	if vs.flags&vTransient != 0 {
		funcs.Release(c) // the function has returned, and it keeps no Call
		callPool.Put(c)
	}
	if err != nil {
		if !errors.Is(err, errStopped) {
			r.fail(v, "", act, vs.execs.Load(), start, err)
		}
		return act, start, false
	}
	if vs.flags&vNoInputs == 0 {
		vs.setState(res.State) // none is kept of a function that reads none
	}
	return act, start, true
}

// runStatic runs an activation of a static task v. carry is its worker's
// word (localexec.EmplaceCarried): with the node's tscClock (no
// Config.Now) an activation that ends leaves its end stamp there, and the
// next one its worker comes to straight from it takes that as its start,
// instead of a clock read of its own (about 20 ns here by the time-stamp
// counter, 40 by the monotonic clock: tscClock). So a start is
// when the worker took the activation up after the one before, earlier
// than the wrapper's first instruction by what happened between them: the
// node's own work after the end stamp (completed: the node lock, applying
// Signals that waited on the task), the scheduler's (pushing successors),
// a pause of the worker's goroutine. Only shown times stretch: no timeout,
// failure or verdict reads a start (a task's timeout starts at its call),
// and a flight only publishes its running event sooner. Never
// across a steal, a park or a task of another kind, where the word is 0
// and the activation reads the clock. The node's other static tasks (the
// edge proxies, module and GPU ends, subflow children and their end) are
// carried too, and reset the word: localexec's plain static tasks would
// leave it as it was, and the activation after one of them would take a
// start from before it.
func (r *run) runStatic(v int, carry *int64) {
	if h := staticTestHook.Load(); h != nil {
		(*h)(r.n.ID(), v)
	}
	var carried int64
	if r.n.fastClock {
		carried = *carry
	}
	*carry = 0 // left so unless this activation completes
	var res funcs.Result
	act, start, ok := r.runTask(v, carried, workerShard(carry), &res)
	if ok {
		end := r.complete(v, act, res.Output, start)
		if r.n.fastClock {
			*carry = end
		}
	}
}

// staticTestHook, when set, runs first in runStatic with the node's id and
// the vertex (tests: a panic in the node's own code, outside callFunc's
// and recordSlow's recovers, that only localexec's recover catches). Unset
// it costs an activation one load and a predicted branch.
var staticTestHook atomic.Pointer[func(node string, v int)]

// workerShard is the Stats.TasksExecuted cell (spread) of the worker whose
// carry word is at c (runStatic): a worker's word is a field of its own,
// so each worker adds to a cell of its own (two collide one time in 16),
// where a cell by vertex had both workers of a run add to the same lines
// at once, a line taken from the other core on about every other
// activation.
func workerShard(c *int64) int {
	return int(uint64(uintptr(unsafe.Pointer(c))>>3) * 0x9E3779B97F4A7C15 >> 60)
}

func (r *run) runCondition(v int) int {
	var res funcs.Result
	act, start, ok := r.runTask(v, 0, v, &res)
	if !ok {
		return -1
	}
	k := res.Choice
	if d, ok := r.recorded(v, act); ok {
		for i, e := range r.graph().Vertices[v].Succ {
			if uint32(e.To) == d[0] {
				k = i
				break
			}
		}
	}
	if cs := r.vs[v].condSends; k >= 0 && k < len(cs) {
		if cs[k] != nil {
			r.pushPick(v, act, cs[k])
		} else if !r.recordPick(v, act, k) {
			return -1
		}
	}
	r.complete(v, act, nil, start)
	return k
}

// recordPick records, before the branch starts, that activation act of
// condition v picked its k-th successor, one on this node (a remote pick's
// Choice Signal is its own record): the Batcher publishes it to the record
// ahead of every later batch of the run (Batcher.AddPick), so whatever the
// branch sends anywhere reaches the record behind its pick, and a node that
// runs v again after a loss takes the same branch (recorded) instead of a
// fresh draw. A run on one node in one part sends nothing through the
// record, so nothing of its branches can outlive the node: it records
// nothing. It reports false when the record could not be asked (the run
// fails).
func (r *run) recordPick(v int, act uint64, k int) bool {
	tab := r.sm.Table()
	if len(tab.Nodes) < 2 && len(*r.partsP.Load()) < 2 {
		return true
	}
	s := transport.Signal{Run: r.id, Gen: tab.Gen, Src: uint32(v), Dst: uint32(r.graph().Vertices[v].Succ[k].To), Act: act, Kind: transport.SignalChoice}
	if err := r.n.batcher.AddPick(r.ctx, &s); err != nil {
		if r.ctx.Err() == nil {
			r.fail(v, "", act, r.vs[v].execs.Load(), 0, fmt.Errorf("recording its pick of %q: %w", r.graph().Vertices[s.Dst].Path, err))
		}
		return false
	}
	r.n.stats.picks.Add(1)
	return true
}

// pushPick queues a condition's pick of a remote successor for its send
// proxy, with the activation of the successor it starts.
func (r *run) pushPick(v int, act uint64, se *sendEdge) {
	picks := se.picks.Add(1)
	ctx := r.vs[v].getCtx()
	se.fifo.push(item{act: act, ctx: ctx, dstAct: r.lp().DstAct(v, act, ctx, se.dst, false, picks)})
}

// recorded is the outcome the run's record holds for activation act of
// condition v, when v runs again here after a loss (runproto's Replays and
// Outcome): it waits until the follow has caught up with the record and
// read every node's mark of the generation (runproto's Settled), so that
// a pick made before the loss, or by the old owner before the other nodes
// fenced it, is known, and the re-run takes the branch it took then (docs/cluster-protocol.md, Node → node, data plane,
// "Condition replay": condition outcomes are recorded, so replay takes the
// same branches) rather than a fresh draw.
func (r *run) recorded(v int, act uint64) ([]uint32, bool) {
	n := r.n
	for {
		n.mu.Lock()
		if !r.sm.Replays(v) || r.stopping.Load() {
			n.mu.Unlock()
			return nil, false
		}
		if r.sm.Caught() && r.sm.Settled() {
			d, ok := r.sm.Outcome(v, act)
			n.mu.Unlock()
			return d, ok
		}
		if r.caughtCh == nil {
			r.caughtCh = make(chan struct{})
		}
		ch := r.caughtCh
		n.mu.Unlock()
		select {
		case <-ch:
		case <-r.ctx.Done():
			return nil, false
		}
	}
}

func (r *run) runMulti(v int) []int {
	var res funcs.Result
	act, start, ok := r.runTask(v, 0, v, &res)
	if !ok {
		return nil
	}
	cs := r.vs[v].condSends
	if d, ok := r.recorded(v, act); ok {
		// the record's picks, local (recordPick) and remote, in successor order
		var choices []int
		for i, e := range r.graph().Vertices[v].Succ {
			if slices.Contains(d, uint32(e.To)) {
				choices = append(choices, i)
			}
		}
		res.Choices = choices
	}
	picks := make([]int, 0, len(res.Choices))
	var remote []int // remote targets picked: each gets one Signal per activation
pick:
	for _, k := range res.Choices {
		if k < 0 || k >= len(cs) {
			continue
		}
		if se := cs[k]; se != nil {
			for _, d := range remote {
				if d == se.dst {
					continue pick
				}
			}
			remote = append(remote, se.dst)
			r.pushPick(v, act, se)
		} else if !r.recordPick(v, act, k) {
			return nil
		}
		picks = append(picks, k)
	}
	r.complete(v, act, nil, start)
	return picks
}

// runSubflow runs a subflow task's function and spawns its children, and a
// hidden last child that completes the task once every child has run.
func (r *run) runSubflow(v int, sf *localexec.Subflow) {
	var res funcs.Result
	act, start, ok := r.runTask(v, 0, v, &res)
	if !ok {
		return
	}
	path := r.graph().Vertices[v].Path
	outs := &childOutputs{m: map[string][]byte{}}
	tasks := make(map[string]localexec.Task, len(res.Children))
	hasSucc := map[string]bool{}
	for _, ch := range res.Children {
		for _, p := range ch.Succeed {
			hasSucc[p] = true
		}
	}
	for _, ch := range res.Children {
		tasks[ch.Name] = sf.EmplaceCarried(func(c *int64) { *c = 0; r.runChild(v, act, ch, outs, !hasSucc[ch.Name]) }).Name(path + "/" + ch.Name)
	}
	fin := sf.EmplaceCarried(func(c *int64) {
		*c = 0
		if r.ctx.Err() == nil {
			r.complete(v, act, nil, start)
		}
	}).Name(path + "#done")
	for _, ch := range res.Children {
		t := tasks[ch.Name]
		for _, p := range ch.Succeed {
			t.Succeed(tasks[p])
		}
		t.Precede(fin)
	}
}

type childOutputs struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (r *run) runChild(v int, act uint64, ch funcs.Child, outs *childOutputs, sink bool) {
	if r.ctx.Err() != nil {
		return
	}
	start := r.n.nanos()
	vx := &r.graph().Vertices[v]
	path := vx.Path + "/" + ch.Name
	c := &funcs.Call{Run: r.id, Task: ch.Name, Path: path, Args: ch.Args, Activation: act, Domain: spec.DomainCPU}
	if len(ch.Succeed) > 0 {
		c.Inputs = make(map[string][]byte, len(ch.Succeed))
		outs.mu.Lock()
		for _, p := range ch.Succeed {
			c.Inputs[p] = outs.m[p]
		}
		outs.mu.Unlock()
	}
	execs := r.vs[v].childCounter(path)
	var res funcs.Result
	err := r.invoke(v, ch.Func, nil, vx.Task.Retries, vx.Task.Timeout, c, execs, start, true, v, &res)
	if err != nil {
		if !errors.Is(err, errStopped) {
			r.fail(v, path, act, execs.Load(), start, err)
		}
		return
	}
	outs.mu.Lock()
	outs.m[ch.Name] = res.Output
	outs.mu.Unlock()
	var out []byte
	if sink {
		out = res.Output
	}
	r.event(v, path, transport.TaskDone, act, execs.Load(), out, "", start)
}

// moduleDone completes a module task: its instance has run.
func (r *run) moduleDone(v int) {
	act, start, ok := r.begin(v, 0)
	if !ok {
		return
	}
	r.vs[v].execs.Add(1)
	r.complete(v, act, nil, start)
}

// gpuDone is the hidden CPU task after a GPU task: it reads the result the
// GPU graph copied back and completes the task.
func (r *run) gpuDone(v int, job *gpuJob) {
	act, start, ok := r.begin(v, 0)
	if !ok {
		return
	}
	r.vs[v].execs.Add(1)
	r.n.stats.tasks.Add(v, 1)
	r.complete(v, act, job.output(), start)
}

// complete records activation act of v: its output (for local successors'
// Inputs; not when none reads it: vNoReaders), sends the traversals of its strong cross-node edges, and emits a
// done event. It returns the event's end stamp (Unix nanoseconds).
func (r *run) complete(v int, act uint64, out []byte, start int64) int64 {
	vs := &r.vs[v]
	if vs.flags&vNoReaders == 0 {
		vs.setOut(act, out)
	}
	if vs.flags&vSends != 0 {
		r.sendStrong(v, act, out, vs.strongSends)
	}
	var evOut []byte
	if vs.flags&vSink != 0 {
		evOut = out
	}
	end := r.event(v, "", transport.TaskDone, act, vs.execs.Load(), evOut, "", start)
	r.completed(v)
	return end
}

// completed counts an activation of v completed and lets in the Signals
// that waited for it (runproto's Wait): counted first, looked at after, so
// a Signal that comes meanwhile either sees the count or is seen.
func (r *run) completed(v int) {
	r.vs[v].done.Add(1)
	if !r.sm.Waits(v) {
		return
	}
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	if r.stopping.Load() {
		return
	}
	r.apply(r.sm.Completed(v))
}

// sendStrong hands activation act of v's strong cross-node edges to the
// Batcher, from the task itself (still running, so the run is not idle
// before they are counted in Sent): one AddAll per stretch of successors on
// one node, each resolved to the owner in force (a task moved off a lost
// node is sent to its new one). A source with thousands of remote
// successors costs one call, not a proxy task and a lock each.
func (r *run) sendStrong(v int, act uint64, out []byte, dsts []int) {
	if r.ctx.Err() != nil {
		return
	}
	tab := r.sm.Table() // one generation: its number and its owners
	gen := tab.Gen
	ctx := r.vs[v].getCtx()
	sc := sendScratchPool.Get().(*sendScratch)
	sigs, ptrs := sc.get(len(dsts))
	defer sc.put(len(dsts))
	for i := 0; i < len(dsts); {
		node := tab.NodeOf(dsts[i])
		j := i
		for ; j < len(dsts) && tab.NodeOf(dsts[j]) == node; j++ {
			d := dsts[j]
			sigs[j] = transport.Signal{Run: r.id, Gen: gen, Src: uint32(v), Dst: uint32(d), Act: act, Kind: transport.SignalEdge, Output: out,
				DstAct: r.lp().DstAct(v, act, ctx, d, true, 0), Ctx: ctx}
			ptrs[j] = &sigs[j]
		}
		if err := r.n.batcher.AddAll(r.ctx, node, ptrs[i:j]); err != nil {
			if r.ctx.Err() == nil {
				r.fail(v, "", act, r.vs[v].execs.Load(), 0, fmt.Errorf("sending its edges to node %s: %w", node, err))
			}
			return
		}
		r.sm.AddSent(j - i)
		r.n.stats.sent.Add(uint64(j - i))
		i = j
	}
}

// sendScratch is the Signals a completion hands to the Batcher, which
// encodes them at once and keeps none: reused from completion to
// completion (any worker's).
type sendScratch struct {
	sigs []transport.Signal
	ptrs []*transport.Signal
}

var sendScratchPool = sync.Pool{New: func() any { return new(sendScratch) }}

// get returns room for n Signals and their pointers.
func (sc *sendScratch) get(n int) ([]transport.Signal, []*transport.Signal) {
	if cap(sc.sigs) < n {
		sc.sigs = make([]transport.Signal, n)
		sc.ptrs = make([]*transport.Signal, n)
	}
	return sc.sigs[:n], sc.ptrs[:n]
}

// put clears what the n Signals got referenced (outputs, contexts) and
// gives sc back, unless it grew large.
func (sc *sendScratch) put(n int) {
	clear(sc.sigs[:n])
	clear(sc.ptrs[:n])
	if cap(sc.sigs) <= 1<<12 {
		sendScratchPool.Put(sc)
	}
}

// send is a condition's send proxy: it hands the traversal of the
// cross-node edge the condition picked to the Batcher.
func (r *run) send(se *sendEdge) {
	it, ok := se.fifo.pop()
	if !ok || r.ctx.Err() != nil {
		return
	}
	tab := r.sm.Table() // one generation: its number and its owners
	s := transport.Signal{
		Run: r.id, Gen: tab.Gen, Src: uint32(se.src), Dst: uint32(se.dst),
		Act: it.act, Kind: transport.SignalChoice, Output: it.out, DstAct: it.dstAct, Ctx: it.ctx,
	}
	node := tab.NodeOf(se.dst) // the owner in force: a task moved off a lost node is sent to its new one
	if err := r.n.batcher.Add(r.ctx, node, &s); err != nil {
		if r.ctx.Err() == nil {
			v := se.src
			r.fail(v, "", it.act, r.vs[v].execs.Load(), 0, fmt.Errorf("sending its edge to %q on node %s: %w", r.graph().Vertices[se.dst].Path, node, err))
		}
		return
	}
	r.sm.AddSent(1)
	r.n.stats.sent.Add(1)
}

// recvEdge is the proxy of a remote strong predecessor: it records the
// producer's output for the local successor's Inputs.
func (r *run) recvEdge(re *recvEdge) {
	if it, ok := re.fifo.pop(); ok {
		r.vs[re.src].setOut(it.act, it.out)
		re.setLast(it)
	}
}

// recvChoice is the proxy of a remote condition's pick: it schedules its
// one successor.
func (r *run) recvChoice(re *recvEdge) int {
	if it, ok := re.fifo.pop(); ok && r.ctx.Err() == nil {
		re.setLast(it)
		return 0
	}
	return -1
}
