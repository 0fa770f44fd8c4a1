package localexec

// Adaptive worker management: bounded wasteful steals.
//
// # Goal
//
// A work-stealing executor has two ways to waste a machine. It can let work
// wait while a worker that could run it sleeps (lost parallelism), or it can
// keep workers awake stealing from empty queues (wasted steals: a core spent
// on nothing, taken from the other programs on the machine and from the
// workers of another domain). The scheduler must do neither: every ready task
// is picked up while its domain has a sleeping worker, and the number of
// failed steals is bounded by a small constant per wake-up, so that a graph
// with one task ready at a time (a linear chain) costs one core, not two.
//
// # Rejected designs
//
// The seed (Taskflow 3) keeps one thief awake whenever any worker is active:
// "if there is an active worker, there is at least one thief". That closes the
// lost-wake-up race by brute force, but beside a linear chain the thief spins
// for the whole run: the chain costs two cores. Taskflow 4 instead wakes a
// worker on every push. Nothing spins, but a burst of pushes wakes a worker
// per push, each pays a futex wake and a failed steal or two, and most go
// straight back to sleep: the waste moves from spinning to wake-ups and is
// unbounded in the number of pushes.
//
// # The rule
//
// We do what the Go runtime does with spinning Ms (runtime/proc.go, "Worker
// thread parking/unparking"). Per domain:
//
//  1. At most one thief spins when no work is visible. A worker that runs dry
//     becomes the spinner only if nobody else is (domain.nSpinning 0→1);
//     otherwise it goes straight to parking.
//  2. Whoever makes work visible — a push to a deque or to a domain's shared
//     queue, from any domain — wakes a thief if none is spinning
//     (domain.wake: if nSpinning == 0, notify one parked worker). A batch
//     published at once (pushMany: a graph's sources) is one push here:
//     one thief is woken, and rule 3 wakes the next if there is more.
//     A graph with many sources publishes them as one range (rangeTask)
//     that whoever takes it splits, pushing its upper half (a push, with
//     its wake) while it runs the lower: to the protocol a range is a
//     task that readies one task and runs more inline, a shape the model
//     below checks ("source range").
//     A thief that takes a share of its domain's shared queue at once
//     (takeShared: a burst of Async calls) moves all but one to its own
//     deque and wakes per rule 2: to the protocol that is a worker pushing
//     work it holds, as when a task it runs readies successors, so the
//     model below covers it without a step of its own. The re-check
//     takes a share the same way (grabShared) but holds the rest until
//     it has cancelled its prepare, then pushes them with one wake
//     (findWork): to the protocol, a shared-queue entry that, taken,
//     pushes several at once and runs one, which the model's "batch"
//     scenario submits from outside. (Taking one node per re-check left
//     a burst of a million SilentAsync calls to be drained a node, a
//     lock and a prepare/cancel at a time: 400K re-checks a burst.)
//     SilentAsync calls sit in the shared queue as bare functions,
//     published like any push (under its lock, then n); a share makes
//     each run of them one batch (silentBatch) whose calls its holders
//     claim one at a time, and whoever takes a batch out of a deque
//     pushes it back before it runs a call while more than one is left.
//     To the protocol that is again a worker pushing work it holds, then
//     running one task of it: the range's shape, which the model checks
//     as "silent batch".
//  3. The last spinning thief that finds work wakes another before it runs
//     it, so that if there is more work, a new spinner looks for it. This
//     holds for work found while spinning and for work found in the
//     re-check just after it stopped (see "The spinner's last look").
//
// A spinner makes at most maxSteals steal attempts (random victims of its
// domain, and its domain's shared queue), then stops spinning and parks.
// Wasted steals are therefore bounded by one spinner's maxSteals per wake-up,
// and wake-ups come only from pushes that found no spinner. A chain never
// pushes (its one ready successor runs inline), so after the second worker's
// first maxSteals attempts it sleeps for the rest of the chain.
//
// # The race
//
// A spinner that gives up races a pusher: the pusher pushes, then reads
// nSpinning; the spinner decrements nSpinning, then parks. If the spinner
// checked the queues before the push, and the pusher read nSpinning before the
// decrement, the pusher wakes nobody (it saw a spinner) and the spinner sleeps
// (it saw no work): the task waits while a worker sleeps.
//
// # Why the barrier closes it
//
// The spinner parks in two phases (notifier.go): prepare (register as
// waiting), then re-check every queue of the domain (the re-check), then
// commit (sleep) or cancel (work was found). It decrements nSpinning before
// prepare. All of these are sequentially consistent atomics, so in the single
// order of the pusher's "push; load nSpinning; load waiting" and the parker's
// "decrement nSpinning; increment waiting; load queues", one of two things
// holds: the parker's queue loads come after the push (it sees the task and
// cancels), or the pusher's loads come after the parker's decrement and
// increment (it sees nSpinning == 0 and waiting > 0 and notifies, and a notify
// after prepare makes commit return at once). Either way the task is seen.
//
// # The spinner's last look
//
// The barrier makes the task *seen*; seeing is not enough when the spinner
// takes it. Every push made while a thief spun skipped its wake-up (rule 2),
// so that thief answers for all of them: a burst of a thousand pushes by a
// worker releasing a fan-out can land entirely while it spins. If its
// steals miss them and its re-check then finds one, it takes that one and
// would run it with the rest still queued and nobody woken: a worker stays
// parked beside ready work (issue 13; with tasks that wait for each other,
// a hang). So findWork applies rule 3 to the re-check too: a worker that
// was the spinner of this pass and finds work there wakes another after it
// cancels its prepare — the Go runtime's "a spinning M that found work
// wakes a P" (resetspinning), which re-becomes spinning for the same
// reason. A worker that never spun answers for no skipped push and wakes
// nobody. For the same reason the re-check does not give up on a victim
// whose steal lost a race while it still holds work: the winner of that
// race took one task, not the responsibility for the rest.
//
// # Counts owed
//
// A task that readies nothing gives its frame's pending count back; for a
// root frame a worker defers that (worker.giveBack) until it runs out of
// local work, runs a task of another frame, or co-runs with nothing to do.
// This changes when a run is seen to finish, never when work is visible:
// nothing here reads pending, and a frame cannot finish while a count is
// owed, so no task is released early. What it must not do is make a run
// wait for a worker that will not come back to it: findWork settles before
// it spins (and so before it parks), and runGuarded before it runs a task
// of another frame; a task of the same frame that blocks holds a count of
// its own, so that frame could not have finished meanwhile anyway.
// SilentAsync calls owe the executor's in-flight count the same way, paid
// before anything but another such call runs.
//
// # Checking it
//
// Every counter below points back here. Executor.Stats reports, per domain,
// executed tasks, steal attempts, failed steals, parks and wake-ups; tests
// check the bound (failed steals per task on a chain and on a wavefront) and
// the liveness half: a task that releases 1,000 tasks gets every worker busy,
// a thousand times, under -race (TestNoLostWakeup), and a loop that releases
// a fan-out of tasks waiting for three of them to run at once, from inside
// the run, completes (TestNoLostWakeupBurstInLoop, Taskflow's own work-
// stealing test; the first test could not see issue 13, whose burst has to
// be pushed while a thief spins). parkmodel_test.go checks the protocol
// itself: a model of these steps, one atomic operation each, explored in
// every interleaving for a few workers, pushes from inside and outside a
// domain and across domains, finds no state where a task waits beside a
// parked worker and nothing is left to wake it; with the fix above
// reverted, it finds issue 13's. In -race and `invariants` builds the
// scheduler randomizes victim and successor order and throws (panics) when
// nSpinning leaves [0, workers] or a worker parks while counted as spinning.

import (
	"runtime"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/hetflow/hetflow/gpu"
)

const (
	domCPU = 0
	domGPU = 1
)

// domain is a set of workers that run the same kind of task: the CPU domain,
// or the workers of one GPU device.
type domain struct {
	index   int
	kind    uint8 // domCPU or domGPU
	device  int   // for GPU domains
	name    string
	workers []*worker
	shared  sharedQueue
	// nSpinning is the number of this domain's workers that are spinning
	// thieves: rule 1 of the essay keeps it ≤ 1 when no work is visible;
	// rule 2 reads it before waking; rule 3 decrements it when a spinner
	// finds work. Invariant: 0 ≤ nSpinning ≤ len(workers).
	nSpinning atomic.Int32
	notifier  notifier
	maxSteals int
}

// wake is rule 2 of the essay: called after making work visible in d.
func (d *domain) wake(from *worker) {
	if d.nSpinning.Load() != 0 {
		return
	}
	if d.notifier.notifyOne() && from != nil {
		from.stats.wakeups.Add(1) // counts notifications that reached a waiter
	}
}

func (d *domain) addSpinning(delta int32) int32 {
	v := d.nSpinning.Add(delta)
	if invariants && (v < 0 || int(v) > len(d.workers)) {
		throw("nSpinning out of range")
	}
	return v
}

// workerStats are a worker's scheduler counters (see the essay above).
type workerStats struct {
	executed      atomic.Uint64 // tasks whose body ran on this worker (published by flush)
	stealAttempts atomic.Uint64 // steal attempts made while spinning or on re-check
	failedSteals  atomic.Uint64 // attempts that found nothing: the wasted steals the essay bounds
	parks         atomic.Uint64 // commits that put this worker to sleep
	wakeups       atomic.Uint64 // notifications this worker sent that reached a waiter (rule 2 and 3)
	spins         atomic.Uint64 // spin episodes begun (rule 1): each wastes at most maxSteals attempts
	rechecks      atomic.Uint64 // re-checks before a park: each wastes at most one attempt a queue, plus one per take it lost to another
	_             [8]byte
}

type worker struct {
	id     int // executor-wide
	ex     *Executor
	dom    *domain
	q      wsq
	parker *parker
	rng    uint64
	ready  []*node // scratch: ready successors of the task being finished
	batch  []*node // scratch: nodes taken from the shared queue at once
	held   []*node // of batch, those still to push (see grabShared)
	// one is the node of a SilentAsync call that w popped alone from
	// the shared queue (sharedQueue.pop): w runs it at once, before it
	// could pop another (a silent call does not co-run), so a call
	// taken alone allocates nothing either. kind is kindSilent.
	one node
	// batches are spare silentBatches for w's next shares of
	// SilentAsync calls (see silentBatch).
	batches batchPool
	stats   workerStats
	// executed counts tasks run since the last flush. A worker publishes it
	// to stats.executed before it makes work visible or gives back a
	// pending count (push, schedule), which always happens before the run
	// that holds those tasks can finish: so Stats read after Future.Wait is
	// exact, and a chain of inline tasks pays no atomic for counting.
	executed uint64
	// owed counts pending counts of the root frame oweF that w's
	// completed tasks still owe (see worker.giveBack).
	owed int64
	oweF *frame
	// silentOwed counts SilentAsync calls w ran whose end (Executor
	// inflight) it still owes (see runSilent).
	silentOwed int64
	// spinning mirrors whether this worker is counted in dom.nSpinning.
	spinning bool
	// cur is the static or condition task whose function is running on
	// this worker, nil between calls (see runGuarded).
	cur  *node
	info WorkerInfo
	// host is this worker as a host thread of the timed gpu sim (gpu.Host): GPU tasks launch
	// from it, and runtime tasks get it (Runtime.GPUHost).
	host *gpu.Host
	// warmSucc: static tasks' successors are warmed (WithWarmSuccessors).
	warmSucc bool
	// carry is the word carried tasks share (EmplaceCarried): what the
	// carried task w ran last left there, 0 once w ran a task of another
	// kind or looked for work beyond its own deque.
	carry int64
}

// warm asks for the lines of t's successors (up to warmMax) before t's
// function runs (WithWarmSuccessors, carried tasks): complete reads their counters when t
// ends, and in a graph larger than the cache each is a miss, a stall a
// successor where the join counter's atomic add waits for its line. Asked
// for before the function (a prefetch, which holds nothing back), the
// lines come in while it runs, not one after another after it. For a
// function that does next to nothing (localexec's own benchmarks) it is a
// few instructions more a task, so it is an option.
func (w *worker) warm(t *node) {
	succ := t.successors()
	for _, s := range succ[:min(len(succ), warmMax)] {
		prefetch(unsafe.Pointer(s))
	}
}

// warmClosures asks for the first line of the closures of t's successors
// (up to warmMax) once t's function has returned, when the successors'
// own lines (warm) have come: what a closure captured is what its
// function reads first (the cluster node's wrapper: its build and vertex,
// which name the vertex's state), and one of these successors runs next.
// A successor's own array of successors (more than one) is asked for too:
// warm reads it first when the successor runs, a miss before any of its
// prefetches could go out. A successor with a hint (Task.Hint) has its lines of the run's tables
// asked for too: the node's wrapper reads them right after its closure,
// one pointer further than this could follow, so without the hint they
// were asked for only when it ran. t's run's tables serve its successors:
// they are of its graph, so of its run.
func (w *worker) warmClosures(t *node) {
	succ := t.successors()
	h := &t.frame.topo.hints // read by runGuarded just before: a hot line
	for _, s := range succ[:min(len(succ), warmMax)] {
		if s.static != nil {
			prefetch(*(*unsafe.Pointer)(unsafe.Pointer(&s.static)))
		}
		if s.nSucc > 1 {
			prefetch(s.succ) // its successors' array, which warm(s) reads first
		}
		if s.hint != 0 {
			if p := h.line(h.a, s.hint-1); p != nil {
				prefetch(p)
				if q := h.line(h.b, s.hint-1); q != nil {
					prefetch(q)
				}
			}
		}
	}
}

// callCarried calls carried task t's function with w's carry word
// (EmplaceCarried), its successors warmed before and their closures
// after (WithWarmSuccessors): out of runGuarded's loop, which plain
// static tasks run through as before.
//
//go:noinline
func (w *worker) callCarried(t *node) {
	if w.warmSucc {
		w.warm(t)
	}
	w.cur = t // a panic: runGuarded's recover
	(*(*func(*int64))(unsafe.Pointer(&t.static)))(&w.carry)
	w.cur = nil
	if w.warmSucc {
		w.warmClosures(t)
	}
}

// warmMax is the most successors warm asks for: a wide fan-out's complete
// walks its successors in order anyway, and the hardware prefetcher
// follows a walk.
const warmMax = 8

func (w *worker) rand() uint64 {
	// xorshift64*
	w.rng ^= w.rng >> 12
	w.rng ^= w.rng << 25
	w.rng ^= w.rng >> 27
	return w.rng * 2685821657736338717
}

// loop is a worker's goroutine: run local work, steal, park; until the
// executor stops.
func (w *worker) loop() {
	defer w.ex.wg.Done()
	if w.dom.kind == domGPU {
		// A CUDA context is current per OS thread, so a GPU worker keeps
		// its thread. The sim backend has no thread state, and a locked
		// thread makes every hand-off to the device's goroutines an OS
		// thread wake-up (a sim launch costs ~20× more), so it does not.
		if gpu.Backend() != "sim" {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		w.ex.bindDevice(w)
	}
	for {
		t := w.findWork()
		if t == nil {
			return
		}
		w.run(t)
	}
}

// run executes t and then, in turn, the successor each task hands over
// inline.
func (w *worker) run(t *node) {
	for t != nil {
		t = w.runGuarded(t)
	}
}

// runGuarded runs an inline sequence of tasks under one recover. Static and
// condition tasks, the common ones, call their function with no defer of
// their own: w.cur is set to the task for the length of the call, and a
// panic there unwinds to here, which fails that task's run as callStatic
// would and returns the task to continue with. A panic with w.cur nil is not
// a task's (a broken invariant, say): it is not recovered. A defer per inline
// run instead of per task is a third of a chain's cost per task.
func (w *worker) runGuarded(t *node) (next *node) {
	defer func() {
		if n := w.cur; n != nil {
			w.cur = nil
			w.carry = 0
			if r := recover(); r != nil {
				next = w.taskPanicked(n, newPanic(n, r))
			}
		}
	}()
	for t != nil {
		if (w.owed != 0 && t.frame != w.oweF) || (w.silentOwed != 0 && !t.kind.silent()) {
			// t is of another frame, or not a SilentAsync call:
			// what w owes must not wait for it (see giveBack and
			// runSilent). A frame that this finishes may hand back
			// a task: it is pushed, t runs now.
			if n := w.settle(); n != nil {
				w.push(n)
			}
		}
		if t.kind != kindStatic {
			t = w.invoke(t)
			w.carry = 0 // see EmplaceCarried
			continue
		}
		// A static task runs here, not in invoke (inlined: it is most
		// of every graph), with complete's path for one successor that t
		// alone releases: a chain's step. Static tasks belong to the CPU
		// domain, so w is a CPU worker.
		f := t.frame
		if f.topo.cancelled.Load() {
			t = w.schedule(f, nil)
			continue
		}
		obs := w.ex.observers.Load()
		if obs != nil {
			w.observe(*obs, t, true)
		}
		if t.carried {
			w.callCarried(t)
		} else if t.static != nil {
			w.cur = t
			t.static()
			w.cur = nil
		}
		w.executed++
		if obs != nil {
			w.observe(*obs, t, false)
		}
		if t.nSucc == 1 {
			// Handing s over even if the run was cancelled meanwhile is
			// what complete would do by other means: s's own cancel
			// check gives the count back.
			if s := (*node)(t.succ); s.nStrong == 1 && s.kind != kindGPU { // a CPU task, like t
				t = s
				continue
			}
		}
		t = w.complete(t)
	}
	return nil
}

// findWork returns the next task for w, parking as the essay describes, or
// nil when the executor stops.
func (w *worker) findWork() *node {
	d := w.dom
	for {
		if t := w.q.pop(); t != nil {
			return t // straight from the task before: w.carry stays
		}
		w.carry = 0 // w looks elsewhere, maybe for long (see EmplaceCarried)
		// Out of local work: pay what w owes its frame before looking
		// elsewhere (see giveBack).
		if t := w.settle(); t != nil {
			return t
		}
		t, spun := w.spin()
		if t != nil {
			return t
		}
		// Park, in two phases.
		d.notifier.prepare(w.parker)
		if w.ex.stopping.Load() {
			d.notifier.cancel(w.parker)
			return nil
		}
		if t := w.recheck(); t != nil {
			d.notifier.cancel(w.parker)
			if spun {
				// Rule 3 for work the re-check found: pushes made
				// while w still counted as the spinner woke
				// nobody, and w takes one task of them (see "The
				// spinner's last look"). After cancel, so that
				// w's own prepare does not make notifyOne take
				// its lock when nobody else waits.
				d.wake(w)
			}
			// The rest of a share of the shared queue that the
			// re-check took, now that w is no longer prepared:
			// pushed with one wake (rule 2), as the task that
			// w goes on to run would push its successors (the
			// order the park model checks).
			w.pushHeld()
			return t
		}
		if invariants && w.spinning {
			throw("worker parks while counted as spinning")
		}
		w.stats.parks.Add(1)
		d.notifier.commit(w.parker)
	}
}

// spin is rule 1 and 3: become the domain's spinner if nobody is, steal up
// to maxSteals times, and wake a successor spinner on success. spun reports
// whether w was the spinner (then findWork owes rule 3 for what its re-check
// finds).
func (w *worker) spin() (t *node, spun bool) {
	d := w.dom
	if d.nSpinning.Load() != 0 || !d.nSpinning.CompareAndSwap(0, 1) {
		return nil, false
	}
	w.spinning = true
	w.stats.spins.Add(1)
	for i := 0; i < d.maxSteals; i++ {
		if t := w.stealOnce(); t != nil {
			w.spinning = false
			if d.addSpinning(-1) == 0 {
				d.wake(w) // rule 3
			}
			return t, true
		}
		if i&7 == 7 {
			runtime.Gosched()
		}
	}
	w.spinning = false
	d.addSpinning(-1)
	return nil, true
}

// stealOnce makes one steal attempt: from the domain's shared queue when it
// holds work (one atomic load tells), else from a random other worker of
// w's domain.
func (w *worker) stealOnce() *node {
	d := w.dom
	w.stats.stealAttempts.Add(1)
	var t *node
	if k := d.shared.n.Load(); k != 0 {
		t = w.takeShared(k)
	}
	if n := len(d.workers); t == nil && n > 1 {
		v := int(w.rand() % uint64(n-1))
		if d.workers[v] == w {
			v = n - 1 // the others are uniform over [0, n) without w
		}
		t = d.workers[v].q.steal()
	}
	if t == nil {
		w.stats.failedSteals.Add(1)
	}
	return t
}

// takeShared takes work from w's domain's shared queue, which held k nodes
// a moment ago: one to run, and with many queued a share of the rest
// (k/workers, up to 64, as the Go runtime's globrunqget takes a share of
// the global run queue), which go to w's deque at once with one wake (rule
// 2: they are work made visible, like any push). It returns nil when the
// queue was emptied meanwhile.
func (w *worker) takeShared(k int64) *node {
	t := w.grabShared(k)
	w.pushHeld()
	return t
}

// maxShare is the most nodes a worker takes from its shared queue at once.
const maxShare = 64

// grabShared is takeShared but leaves the rest of the share in w.held, not
// yet visible: the re-check takes a share while w is prepared to park and
// publishes it after its cancel (findWork), as a task it runs would.
func (w *worker) grabShared(k int64) *node {
	d := w.dom
	share := 1
	if k > 1 {
		share = min(int(k)/len(d.workers)+1, maxShare)
	}
	if share == 1 {
		return d.shared.pop(&w.one)
	}
	b := d.shared.popBatch(w.batch[:0], share, &w.batches)
	w.batch = b
	if len(b) == 0 {
		return nil
	}
	// The rest reversed, so that w's pops (from the bottom) take them in
	// the order they were submitted: a 1-worker executor starts runs in
	// order, as before, and a task that waits for an earlier run is not
	// stacked above it.
	w.held = b[1:]
	slices.Reverse(w.held)
	return b[0]
}

// pushHeld makes the rest of a share that grabShared took visible in w's
// deque, with one wake (rule 2).
func (w *worker) pushHeld() {
	if rest := w.held; len(rest) > 0 {
		w.flush()
		w.q.pushN(rest)
		w.dom.wake(w)
	}
	w.held = nil
	clear(w.batch)
	w.batch = w.batch[:0]
}

// recheck is the re-check of the essay: with w prepared to park, look at
// every queue of the domain and take work if any is visible. A steal that
// fails while its victim still looks non-empty lost a race to another thief
// (or to the owner taking its last task) and is retried: giving up there
// would let w park beside a task that nobody else is bound to wake a worker
// for (see "The race"). Every retry follows a steal that succeeded
// elsewhere, so the loop ends.
func (w *worker) recheck() *node {
	d := w.dom
	w.stats.rechecks.Add(1)
	if k := d.shared.n.Load(); k != 0 {
		w.stats.stealAttempts.Add(1)
		if t := w.grabShared(k); t != nil {
			return t // with the rest of a share held (see findWork)
		}
		w.stats.failedSteals.Add(1)
	}
	for _, v := range d.workers {
		if v == w {
			continue
		}
		for !v.q.empty() {
			w.stats.stealAttempts.Add(1)
			if t := v.q.steal(); t != nil {
				return t
			}
			w.stats.failedSteals.Add(1)
		}
	}
	return nil
}

// push makes n visible to its domain: w's own deque when n belongs to w's
// domain, else the other domain's shared queue; then rule 2.
func (w *worker) push(n *node) {
	w.flush()
	d := w.ex.domainOf(n)
	if d == w.dom {
		w.q.push(n)
	} else {
		d.shared.push(n)
	}
	d.wake(w)
}

// pushMany is push for each of ns, in order, but a run of nodes of w's own
// domain goes into w's deque in batches, each published at once and
// followed by one wake (rule 2; if the batch holds more work than one thief
// takes, rule 3 wakes the next). A graph's thousand sources then cost a
// thousand slot writes, not a thousand publications each racing a thief.
func (w *worker) pushMany(ns []*node) {
	const batch = 256
	if len(ns) == 0 {
		return
	}
	w.flush()
	for len(ns) > 0 {
		k := 0
		for k < len(ns) && k < batch && w.ex.domainOf(ns[k]) == w.dom {
			k++
		}
		if k == 0 {
			d := w.ex.domainOf(ns[0])
			d.shared.push(ns[0])
			d.wake(w)
			ns = ns[1:]
			continue
		}
		w.q.pushN(ns[:k])
		w.dom.wake(w)
		ns = ns[k:]
	}
}

// pushOwn is pushMany for nodes all of w's own domain: the deque grows
// once to hold them all, then they are published in batches, each followed
// by one wake (rule 2).
func (w *worker) pushOwn(ns []*node) {
	const batch = 256
	if len(ns) == 0 {
		return
	}
	w.flush()
	w.q.reserve(int64(len(ns)))
	for len(ns) > 0 {
		k := min(len(ns), batch)
		w.q.pushN(ns[:k])
		w.dom.wake(w)
		ns = ns[k:]
	}
}

// flush publishes w's executed count (see worker.executed).
func (w *worker) flush() {
	if w.executed != 0 {
		w.stats.executed.Add(w.executed)
		w.executed = 0
	}
}

func throw(msg string) { panic("localexec: scheduler invariant broken: " + msg) }
