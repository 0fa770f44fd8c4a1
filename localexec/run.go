package localexec

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unsafe"
)

// frameKind says what finishing a frame completes.
type frameKind uint8

const (
	frameRoot     frameKind = iota // a run's top-level graph: finishing it ends one iteration
	frameJoined                    // a joined subflow or a module: finishing it completes the parent task
	frameDetached                  // a detached subflow: finishing it releases one hold on the root frame
	frameCorun                     // a graph co-run by a runtime task: finishing it sets done
)

// frame is a set of nodes scheduled together. pending counts the frame's
// nodes that are scheduled and not yet completed (a root frame also holds one
// count per detached subflow still running). A completing node hands its
// count to its ready successors before making them visible, so pending
// reaches zero exactly once per scheduling of the frame.
type frame struct {
	pending atomic.Int64
	kind    frameKind
	parent  *node // frameJoined: the task to complete
	topo    *topology
	sub     *graph // frameDetached: the children to release
	done    atomic.Bool
}

// topology is one submission of a taskflow: Run (one iteration), RunN or
// RunUntil.
type topology struct {
	ex         *Executor
	tf         *Taskflow
	root       *frame // &tf.root
	starter    node   // starter.frame is &startFrame, whose topo leads back here
	startFrame frame
	hold       node // an open run's hold, submitted by OpenRun.Close
	future     *Future
	remaining  int // iterations left; -1 with pred
	pred       func() bool
	cancelled  atomic.Bool
	// dirty: a node ran out of its graph's round (Runtime.Schedule, an
	// open run's Schedule, ScheduleAll or Release), so the next run
	// resets every join counter. Set by markDirty.
	dirty atomic.Bool
	open  *OpenRun   // set for RunOpen
	hints hintTables // its taskflow's when it was submitted (Taskflow.SetHints)

	errMu sync.Mutex
	err   error
	final bool
	// ctx is the run's context, made on first use by a context task
	// (EmplaceContext); ctxCancel cancels it when the run is cancelled or
	// finishes.
	ctx       context.Context
	ctxCancel context.CancelCauseFunc
}

func newTopology(ex *Executor, tf *Taskflow, n int, pred func() bool) *topology {
	t := &topology{ex: ex, tf: tf, remaining: n, pred: pred, hints: tf.hints}
	if pred != nil {
		t.remaining = -1
	}
	t.future = &Future{topo: t}
	t.future.state.Store(futPending)
	t.root = &tf.root
	t.starter.kind = kindStart
	t.startFrame.topo = t
	t.starter.frame = &t.startFrame
	return t
}

// markDirty records that a node ran out of the graph's round (dirty).
// Stored only when not set yet: dirty shares a cache line with cancelled,
// which every task reads, and a cluster node's every batch of Signals
// comes here (OpenRun's Schedule, ScheduleAll, Release).
func (t *topology) markDirty() {
	if !t.dirty.Load() {
		t.dirty.Store(true)
	}
}

// cancel stops scheduling the run's tasks and records err if none is
// recorded yet. It reports whether the run was still unfinished.
//
// An open run is closed too, whoever cancels it (OpenRun.Cancel, a task
// that panicked or failed, a GPU graph that failed to launch): otherwise
// its hold would keep it going, scheduling nothing, until its owner's
// Close, and nothing tells the owner it was cut short. Idle would report a
// run that skipped the rest of its tasks as one waiting for outside work,
// and Done would stay open: a cluster node would pass for idle with its
// successors never run. Closed, the run ends once its running tasks are
// done, and Wait returns err. The close comes after errMu is let go:
// Close takes the open run's lock, under which nothing cancels.
func (t *topology) cancel(err error) bool {
	t.errMu.Lock()
	if t.final {
		t.errMu.Unlock()
		return false
	}
	if t.err == nil {
		t.err = err
	}
	t.cancelled.Store(true)
	if t.ctxCancel != nil {
		t.ctxCancel(t.err)
	}
	t.errMu.Unlock()
	if t.open != nil {
		t.open.Close()
	}
	return true
}

// context returns the run's context (see EmplaceContext), making it on
// first use: a run without context tasks pays nothing for it.
func (t *topology) context() context.Context {
	t.errMu.Lock()
	defer t.errMu.Unlock()
	if t.ctx == nil {
		t.ctx, t.ctxCancel = context.WithCancelCause(context.Background())
		if t.err != nil {
			t.ctxCancel(t.err)
		}
	}
	return t.ctx
}

func (t *topology) errNow() error {
	t.errMu.Lock()
	defer t.errMu.Unlock()
	return t.err
}

// invoke runs n on w and returns the successor to run inline, if any. Static
// tasks do not come here: runGuarded runs them.
func (w *worker) invoke(n *node) *node {
	switch n.kind {
	case kindStart:
		return w.startIteration(n.frame.topo)
	case kindAsync:
		w.runAsync(n)
		return nil
	case kindSilent:
		w.runSilent(n)
		return nil
	case kindSilentBatch:
		w.runSilentBatch((*silentBatch)(unsafe.Pointer(n)))
		return nil
	case kindRange:
		w.runRange((*rangeTask)(unsafe.Pointer(n)))
		return nil
	case kindHold:
		return w.schedule(n.frame, nil)
	}
	f := n.frame
	topo := f.topo
	if topo.cancelled.Load() {
		return w.schedule(f, nil)
	}
	obs := w.ex.observers.Load()
	if obs != nil {
		w.observe(*obs, n, true)
	}
	var p *PanicError
	switch n.kind { // kindStatic: run by runGuarded itself
	case kindCondition:
		w.cur = n
		idx := n.ext.cond()
		w.cur = nil
		w.endTask(obs, n)
		ready := w.ready[:0]
		if succs := n.successors(); idx >= 0 && idx < len(succs) {
			ready = append(ready, succs[idx])
		}
		return w.schedule(f, ready)
	case kindMultiCondition:
		idxs, p := callMulti(n)
		w.endTask(obs, n)
		if p != nil {
			topo.cancel(p)
			return w.schedule(f, nil)
		}
		ready := w.ready[:0]
	pick:
		for _, idx := range idxs {
			if idx < 0 || idx >= int(n.nSucc) {
				continue
			}
			s := n.successors()[idx]
			for _, r := range ready {
				if r == s {
					continue pick
				}
			}
			ready = append(ready, s)
		}
		return w.schedule(f, ready)
	case kindSubflow:
		return w.invokeSubflow(n, obs)
	case kindModule:
		w.endTask(obs, n)
		x := n.ext
		cf := &x.child
		cf.kind, cf.parent, cf.topo = frameJoined, n, topo
		return w.scheduleGraph(cf, &x.module.graph, true)
	case kindRuntime:
		rt := &Runtime{w: w, n: n, topo: topo}
		p = callRuntime(n, rt)
		rt.w = nil
	case kindContext:
		var err error
		p, err = callContext(n, topo.context())
		if err != nil && p == nil {
			w.endTask(obs, n)
			topo.cancel(&TaskError{Task: n.taskName(), Err: err})
			return w.schedule(f, nil)
		}
	case kindGPU:
		if err := w.runGPU(n); err != nil {
			w.endTask(obs, n)
			topo.cancel(err)
			return w.schedule(f, nil)
		}
	}
	w.endTask(obs, n)
	if p != nil {
		topo.cancel(p)
		return w.schedule(f, nil)
	}
	return w.complete(n)
}

// taskPanicked ends n, whose function panicked with p: the task ends, its
// run is cancelled with p, and its pending count goes back to its frame.
func (w *worker) taskPanicked(n *node, p *PanicError) *node {
	w.endTask(w.ex.observers.Load(), n)
	n.frame.topo.cancel(p)
	return w.schedule(n.frame, nil)
}

func (w *worker) endTask(obs *[]Observer, n *node) {
	w.executed++
	if obs != nil {
		w.observe(*obs, n, false)
	}
}

// complete finishes a task with strong out-edges: it releases the
// successors whose counters reach zero, and returns one to run inline.
func (w *worker) complete(n *node) *node {
	ready := w.ready[:0]
	if !n.frame.topo.cancelled.Load() {
		for _, s := range n.successors() {
			// A successor with one strong predecessor (n) is ready
			// now: its counter is never touched, so a chain costs no
			// atomic per task.
			if s.nStrong == 1 {
				ready = append(ready, s)
				continue
			}
			for k := s.releaseJoin(); k > 0; k-- {
				ready = append(ready, s)
			}
		}
	}
	return w.schedule(n.frame, ready)
}

// releaseJoin counts one strong predecessor's completion into n's join
// counter (n has more than one) and returns how many activations of n that
// releases: one when it completes the round of n's strong predecessors,
// none before. The counter starts the next round at once, whether or not n
// has run (docs/design.md, The local runtime): a condition that picks n
// runs it at once, whatever its counter, and leaves the counter alone, so
// n runs once per pick and once per round of its strong predecessors, in
// whichever order they come.
// (It used to start again when n completed, which lost the completions of
// a round that came before a condition's pick: a task with strong and
// condition predecessors then ran once or twice by timing.) The restart is
// an Add, so a completion of the next round that races with it counts; the
// loop takes a whole next round that came in between.
func (n *node) releaseJoin() int {
	if n.join.Add(-1) != 0 {
		return 0
	}
	k := 1
	for n.join.Add(n.nStrong) == 0 {
		k++
	}
	return k
}

// schedule hands the completing task's pending count in f to the ready
// nodes, makes them visible and returns the one to run inline. With no ready
// node it gives the count back, finishing f when it was the last.
func (w *worker) schedule(f *frame, ready []*node) *node {
	k := len(ready)
	if k == 0 {
		if f.kind == frameRoot && f.topo.open == nil {
			return w.giveBack(f)
		}
		w.flush()
		// Read what idle needs before giving the count back: once it is
		// back, the frame may finish and a root frame be reused by the
		// taskflow's next run.
		var open *OpenRun
		if f.kind == frameRoot {
			open = f.topo.open
		}
		v := f.pending.Add(-1)
		if v == 0 {
			return w.frameDone(f)
		}
		if v == 1 && open != nil {
			open.idle()
		}
		return nil
	}
	if k > 1 {
		f.pending.Add(int64(k - 1))
		if invariants {
			for i := k - 1; i > 0; i-- {
				j := int(w.rand() % uint64(i+1))
				ready[i], ready[j] = ready[j], ready[i]
			}
		}
	}
	// The last ready successor of w's domain runs inline, as in Taskflow;
	// the others are pushed in order, so the deque hands them out from the
	// newest.
	var next *node
	for i := k - 1; i >= 0; i-- {
		if w.ex.domainOf(ready[i]) == w.dom {
			next = ready[i]
			ready[i] = nil
			break
		}
	}
	for _, s := range ready {
		if s != nil {
			w.push(s)
		}
	}
	w.ready = ready[:0]
	return next
}

// giveBack gives back the pending count in root frame f of a task that
// readied nothing. The count is owed, not paid: a worker keeps one frame's
// debt (oweF, owed) and pays it with one atomic add when it runs out of local
// work (findWork), before it runs a task of another frame (runGuarded), and
// while it co-runs and finds nothing (corunUntil). f cannot finish while
// counts are owed, and only waits for w to run out of its own work of f: so
// 1M independent tasks cost two workers a handful of adds on the shared
// counter, not a million contended ones (the add, and the publication of
// the executed count before it, were most of an independent task's cost).
// Open runs pay at once: their Idle reads the count. It returns the task to
// run inline when paying an earlier debt finished that frame.
func (w *worker) giveBack(f *frame) *node {
	if w.oweF == f {
		w.owed++
		return nil
	}
	next := w.settle()
	w.oweF, w.owed = f, 1
	return next
}

// settle pays what w owes (see giveBack) and returns the task to run
// inline when that finished the frame.
func (w *worker) settle() *node {
	if s := w.silentOwed; s != 0 {
		w.silentOwed = 0
		w.flush()
		w.ex.endN(s)
	}
	k := w.owed
	if k == 0 {
		return nil
	}
	f := w.oweF
	w.owed, w.oweF = 0, nil
	w.flush() // before the count: Stats read after Wait is exact
	if f.pending.Add(-k) == 0 {
		return w.frameDone(f)
	}
	return nil
}

// scheduleGraph starts g's nodes in frame f: it resets their join counters,
// points them at f and makes the sources visible, returning one to run inline
// when inline is set. A graph with no source finishes f at once.
func (w *worker) scheduleGraph(f *frame, g *graph, inline bool) *node {
	return w.scheduleGraphExtra(f, g, inline, 0)
}

// scheduleGraphExtra is scheduleGraph with extra pending counts held in f
// (an open run's hold and its queued schedules).
func (w *worker) scheduleGraphExtra(f *frame, g *graph, inline bool, extra int64) *node {
	c := &g.sched
	if !c.valid || c.version != g.version || c.frame != f {
		// Count while collecting up to a few hundred, then, if there
		// were more, fill slices of the exact size: growing them by
		// append to a million sources copied and faulted in twice the
		// memory, and a second pass costs a chain's first run 20%.
		few := min(256, g.count)
		nsrc, nmulti := 0, 0
		c.sources, c.multi = c.sources[:0], c.multi[:0]
		c.clean, c.dagOnly = false, g.conds == 0
		for n := range g.all() {
			if n.external {
				c.dagOnly = false
			}
			n.frame = f
			if n.nPreds == 0 && !n.external {
				if nsrc++; nsrc <= few {
					c.sources = append(c.sources, n)
				}
			}
			if n.nStrong > 1 {
				if nmulti++; nmulti <= few {
					c.multi = append(c.multi, n)
				}
			}
		}
		if nsrc > few || nmulti > few {
			c.sources = resize(c.sources, nsrc)
			c.multi = resize(c.multi, nmulti)
			for n := range g.all() {
				if n.nPreds == 0 && !n.external {
					c.sources = append(c.sources, n)
				}
				if n.nStrong > 1 {
					c.multi = append(c.multi, n)
				}
			}
		}
		c.valid, c.version, c.frame = true, g.version, f
	}
	// Counters of nodes with one strong predecessor are never touched
	// (see complete); the others may hold partial counts from a run that
	// a condition or a cancel cut short.
	// Stats.JoinResets counts a run's iterations (a root frame: not a
	// subflow's or a module's graph, which may start many times a run).
	counted := f.kind == frameRoot && len(c.multi) > 0
	if !c.clean {
		for _, n := range c.multi {
			n.join.Store(n.nStrong)
		}
		if counted {
			w.ex.joinResets.Add(1)
		}
	} else if counted {
		w.ex.joinSkips.Add(1)
	}
	c.clean = false // until this run proves it (iterationDone)
	srcs := c.sources
	if len(srcs) == 0 {
		f.pending.Store(1 + extra)
		return w.schedule(f, nil)
	}
	f.pending.Store(int64(len(srcs)) + extra)
	if len(g.gpus) == 0 && w.dom.kind == domCPU {
		// every source is a CPU task: no domain to look up per node
		var next *node
		if inline {
			next, srcs = srcs[0], srcs[1:]
		}
		if len(srcs) > 2*rangeGrain {
			// many sources: one range, split by whoever takes it
			w.push(newRange(f, srcs))
			return next
		}
		w.pushOwn(srcs)
		return next
	}
	var next *node
	if inline {
		for i, s := range srcs {
			if w.ex.domainOf(s) == w.dom {
				next = s
				w.pushMany(srcs[:i])
				srcs = srcs[i+1:]
				break
			}
		}
	}
	w.pushMany(srcs)
	return next
}

// resize returns s emptied, with room for exactly n when it has less, or
// far more than n (a cache that shrank gives its memory back).
func resize(s []*node, n int) []*node {
	if cap(s) < n || cap(s) > 2*n+64 {
		return make([]*node, 0, n)
	}
	clear(s[:cap(s)])
	return s[:0]
}

// frameDone runs when f's last pending node completed.
func (w *worker) frameDone(f *frame) *node {
	switch f.kind {
	case frameJoined:
		parent := f.parent
		if parent.kind == kindSubflow {
			x := parent.ext
			if !x.sf.retain {
				x.sub.release()
			}
		}
		return w.complete(parent)
	case frameDetached:
		f.sub.release()
		root := f.topo.root
		if root.pending.Add(-1) == 0 {
			return w.frameDone(root)
		}
		return nil
	case frameCorun:
		f.done.Store(true)
		return nil
	default:
		return w.iterationDone(f.topo)
	}
}

// startIteration begins the next iteration of t, or finishes t.
func (w *worker) startIteration(t *topology) *node {
	for {
		if t.cancelled.Load() || t.remaining == 0 {
			return w.finalize(t)
		}
		if t.pred != nil {
			stop, p := callPred(t.pred)
			if p != nil {
				t.cancel(p)
				return w.finalize(t)
			}
			if stop {
				return w.finalize(t)
			}
		}
		t.root.topo = t
		if t.open != nil {
			return w.startOpen(t)
		}
		if t.tf.graph.count > 0 {
			return w.scheduleGraph(t.root, &t.tf.graph, true)
		}
		if t.remaining > 0 {
			t.remaining--
		}
	}
}

func (w *worker) iterationDone(t *topology) *node {
	if c := &t.tf.graph.sched; c.dagOnly && c.frame == t.root && !t.dirty.Load() && !t.cancelled.Load() {
		c.clean = true
	}
	if t.remaining > 0 {
		t.remaining--
	}
	return w.startIteration(t)
}

// finalize ends t: its future completes, and the taskflow's next queued
// run starts on this worker.
func (w *worker) finalize(t *topology) *node {
	t.errMu.Lock()
	t.final = true
	err := t.err
	if t.ctxCancel != nil {
		t.ctxCancel(nil) // the run is over: release the context
	}
	t.errMu.Unlock()
	tf := t.tf
	tf.mu.Lock()
	var next *topology
	if len(tf.queue) > 0 {
		next = tf.queue[0]
		tf.queue[0] = nil
		tf.queue = tf.queue[1:]
	} else {
		tf.running = false
	}
	tf.mu.Unlock()
	t.future.finish(err)
	w.ex.end()
	if next != nil {
		return w.startIteration(next)
	}
	return nil
}

func (w *worker) invokeSubflow(n *node, obs *[]Observer) *node {
	x := n.ext
	topo := n.frame.topo
	if x.sub == nil {
		x.sub = &graph{pooled: true}
	} else if x.sub.count > 0 {
		x.sub.release() // children retained from the previous run
	}
	sf := &x.sf
	*sf = Subflow{parent: n, w: w}
	sf.builder.g = x.sub
	p := callSubflow(n, sf)
	w.endTask(obs, n)
	if p != nil {
		topo.cancel(p)
		x.sub.release()
		return w.schedule(n.frame, nil)
	}
	if sf.joined {
		// Join ran the children already.
		if !sf.retain {
			x.sub.release()
		}
		return w.complete(n)
	}
	if x.sub.count == 0 {
		return w.complete(n)
	}
	if err := w.ex.checkGraph(n.taskName(), x.sub); err != nil {
		topo.cancel(err)
		x.sub.release()
		return w.schedule(n.frame, nil)
	}
	if sf.detached {
		g := x.sub
		x.sub = nil
		df := &frame{kind: frameDetached, topo: topo, sub: g}
		topo.root.pending.Add(1)
		w.scheduleGraph(df, g, false)
		return w.complete(n)
	}
	cf := &x.child
	cf.kind, cf.parent, cf.topo = frameJoined, n, topo
	return w.scheduleGraph(cf, x.sub, true)
}

// asyncTask is an Executor.Async call (or a Runtime.CorunAsync one): its
// node and its future in one allocation. The node is the first field, so a
// *node of kind kindAsync is the *asyncTask it sits in.
type asyncTask struct {
	n node
	f Future
	// deps counts the futures a DependentAsync call still waits for,
	// plus one held while they are being registered; the call is
	// submitted when it reaches zero.
	deps atomic.Int32
	ex   *Executor
}

func newAsync(fn func()) *asyncTask {
	a := &asyncTask{}
	a.n.kind, a.n.static = kindAsync, fn
	a.f.state.Store(futPending)
	return a
}

// depDone releases one of a's dependencies; the last submits it.
func (a *asyncTask) depDone() {
	if a.deps.Add(-1) == 0 {
		a.ex.submit(&a.n)
	}
}

func (w *worker) runAsync(n *node) {
	f := &(*asyncTask)(unsafe.Pointer(n)).f
	if f.state.CompareAndSwap(futPending, futRunning) {
		obs := w.ex.observers.Load()
		if obs != nil {
			w.observe(*obs, n, true)
		}
		p := callStatic(n, n.static)
		w.endTask(obs, n)
		var err error
		if p != nil {
			err = p
		}
		f.finish(err)
	}
	w.flush()
	n.static = nil // the closure is the caller's, the future may live on
	w.ex.end()
}

// rangeGrain is the number of sources a worker runs from a range without
// splitting it further.
const rangeGrain = 64

// rangeTask stands for a run of sources of a graph being scheduled in
// frame (n.frame): scheduleGraph pushes one instead of a million sources
// (which filled a deque of a million slots, a store and a pop each, and
// faulted in its pages on a first run). A worker that takes it splits off
// the upper half as a new range while more than rangeGrain remain (a push:
// visible work, rule 2 of the essay in scheduler.go), then runs the rest
// one after the other. The range holds no pending count of its own: each
// source holds its own, from scheduleGraph's count. The node is the first
// field, so a *node of kind kindRange is the *rangeTask it sits in.
type rangeTask struct {
	n    node
	srcs []*node
}

func newRange(f *frame, srcs []*node) *node {
	r := &rangeTask{srcs: srcs}
	r.n.kind, r.n.frame = kindRange, f
	return &r.n
}

func (w *worker) runRange(r *rangeTask) {
	srcs := r.srcs
	r.srcs = nil
	for len(srcs) > rangeGrain {
		mid := len(srcs) / 2
		w.push(newRange(r.n.frame, srcs[mid:]))
		srcs = srcs[:mid]
	}
	for _, s := range srcs {
		w.run(s)
	}
}

// silentBatch is a run of SilentAsync calls that a worker took from its
// domain's shared queue at once (popBatch), where a node per call was a
// 64-byte allocation and, in a burst of calls, the collector's work. Each
// call stays a task of its own to the scheduler: whoever holds the batch
// claims calls one at a time (next), and a worker that takes the batch out
// of a deque pushes it back before it runs a call while more than one is
// left (a push: visible work, rule 2 of the essay in scheduler.go), so a
// call that blocks never holds the others back from an idle worker. The
// batch is in at most one deque at a time (it is pushed only by whoever
// just took it out of one, or made it). refs counts its holders: the deque
// it sits in, and each worker in its claim loop; the last to let go keeps
// it for its worker's next share (worker.batches), so a burst allocates no
// batches either once a few have come back. The node is the first field,
// so a *node of kind kindSilentBatch is the *silentBatch it sits in.
type silentBatch struct {
	n    node
	next atomic.Int64 // the next call to claim; ≥ k: none left
	refs atomic.Int32
	k    int // calls in fns; set while nobody else holds the batch
	fns  [maxShare]func()
	free *silentBatch // in a worker's list of spare batches
}

// batchPool is a worker's spare silentBatches (at most maxSpareBatches).
type batchPool struct {
	free *silentBatch
	n    int
}

const maxSpareBatches = 8

// get returns an empty batch with one holder (whoever runs it first, or
// the deque it is pushed to), for a share of at most maxShare calls.
func (bp *batchPool) get() *silentBatch {
	b := bp.free
	if b != nil {
		bp.free, b.free = b.free, nil
		bp.n--
	} else {
		b = &silentBatch{}
		b.n.kind = kindSilentBatch
	}
	b.k = 0
	b.next.Store(0)
	b.refs.Store(1)
	return b
}

// put keeps b, which nobody holds any more, for reuse.
func (bp *batchPool) put(b *silentBatch) {
	if bp.n < maxSpareBatches {
		b.free, bp.free = bp.free, b
		bp.n++
	}
}

// runSilentBatch claims and runs b's calls until none is left; w holds one
// of b's refs, from the deque it took b out of or from batchPool.get.
func (w *worker) runSilentBatch(b *silentBatch) {
	k := int64(b.k)
	if b.next.Load() < k-1 {
		// More than one call left: keep the rest visible, the
		// deque holding a ref of its own.
		b.refs.Add(1)
		w.push(&b.n)
	}
	for !w.claimSilent(b) {
		// A call panicked, recovered: claim on.
	}
	if b.refs.Add(-1) == 0 {
		w.batches.put(b)
	}
}

// claimSilent claims and runs b's calls, as callSilent would, until none
// is left (it returns true) or one panics: the panic is recovered, that
// call ends as any other, and it returns false. One deferred recover for a
// batch instead of one a call (callStatic) is a tenth of a burst's CPU. A
// panic in an observer is not a call's and is not recovered, as in
// callSilent.
func (w *worker) claimSilent(b *silentBatch) (done bool) {
	var obs *[]Observer
	inCall := false
	defer func() {
		if inCall {
			_ = recover()
			w.endSilent(obs, &b.n)
		}
	}()
	k := int64(b.k)
	for {
		i := b.next.Add(1) - 1
		if i >= k {
			return true
		}
		fn := b.fns[i]
		b.fns[i] = nil
		obs = w.ex.observers.Load()
		if obs != nil {
			w.observe(*obs, &b.n, true)
		}
		if fn != nil {
			inCall = true
			fn()
			inCall = false
		}
		w.endSilent(obs, &b.n)
	}
}

// runSilent runs a SilentAsync call.
func (w *worker) runSilent(n *node) {
	fn := n.static
	n.static = nil
	w.callSilent(n, fn)
}

// callSilent runs fn, a SilentAsync call, as task n. A panic is recovered
// (the worker lives on) and, with nothing to report it to, dropped.
func (w *worker) callSilent(n *node, fn func()) {
	obs := w.ex.observers.Load()
	if obs != nil {
		w.observe(*obs, n, true)
	}
	_ = callStatic(n, fn)
	w.endSilent(obs, n)
}

// endSilent ends a SilentAsync call run as task n.
func (w *worker) endSilent(obs *[]Observer, n *node) {
	w.endTask(obs, n)
	// Owed, like a frame's count (see giveBack): paid before w runs
	// anything but another SilentAsync call, and when it runs out of
	// work. A silent call that blocks keeps its own count in flight, so
	// WaitForAll could not have returned meanwhile anyway.
	w.silentOwed++
}

// The call helpers run user code and turn a panic into a *PanicError.

func newPanic(n *node, r any) *PanicError {
	return &PanicError{Task: n.taskName(), Value: r, Stack: debug.Stack()}
}

func callStatic(n *node, fn func()) (p *PanicError) {
	defer func() {
		if r := recover(); r != nil {
			p = newPanic(n, r)
		}
	}()
	if fn != nil {
		fn()
	}
	return nil
}

func callMulti(n *node) (idxs []int, p *PanicError) {
	defer func() {
		if r := recover(); r != nil {
			p = newPanic(n, r)
		}
	}()
	return n.ext.multi(), nil
}

func callSubflow(n *node, sf *Subflow) (p *PanicError) {
	defer func() {
		if r := recover(); r != nil {
			p = newPanic(n, r)
		}
	}()
	n.ext.subflow(sf)
	return nil
}

func callRuntime(n *node, rt *Runtime) (p *PanicError) {
	defer func() {
		if r := recover(); r != nil {
			p = newPanic(n, r)
		}
	}()
	n.ext.runtime(rt)
	return nil
}

func callContext(n *node, ctx context.Context) (p *PanicError, err error) {
	defer func() {
		if r := recover(); r != nil {
			p = newPanic(n, r)
		}
	}()
	return nil, n.ext.ctxFn(ctx)
}

func callPred(pred func() bool) (stop bool, p *PanicError) {
	defer func() {
		if r := recover(); r != nil {
			p = &PanicError{Task: "(RunUntil predicate)", Value: r, Stack: debug.Stack()}
		}
	}()
	return pred(), nil
}
