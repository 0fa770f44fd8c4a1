package localexec

// A model of the parking protocol (the essay at the top of scheduler.go),
// checked exhaustively.
//
// The model is the spin/park/wake/steal protocol of the executor's domains
// as a state machine: each worker is a program counter over the atomic steps
// of findWork, spin, stealOnce, recheck, push and wake in scheduler.go and
// of prepare, cancel, commit and notifyOne in notifier.go (the comments on
// the pcs below name the line each mirrors); pushers from outside any
// domain (Run, Async: Executor.submit) are actors of their own. One step is
// one atomic operation, or one critical section of a mutex (the shared
// queue's, the notifier's). The checker explores every interleaving of the
// actors' steps and every choice of steal victim (depth-first, states
// deduplicated by hash), and after every step checks:
//
//   - nSpinning stays within [0, workers] and equals the number of workers
//     that count themselves as spinning, which is at most one (rule 1);
//   - no lost wake-up: a state in which every actor is parked or running a
//     task (a task may run for as long as it likes: the tasks of the
//     regression test wait until three run at once), while a task is queued
//     in a domain one of whose workers is parked, is a violation: nothing
//     is left to wake that worker, and the task waits beside it;
//   - in a final state (nothing left to do) every task ran exactly once.
//
// What is abstracted: tasks are kinds (what a task pushes when it ends and
// what it runs inline); the deque is linearizable (one step per push, pop
// and steal attempt) except that a steal reads top and then CASes it in a
// second step, which is how it fails by losing a race; victims are chosen
// by the checker, every one in turn, instead of at random; maxSteals is 2
// (the bug lies in how a spin ends, not in how long it lasts). Only
// equality matters for the notifier's epoch and a thief's read of top, so
// each is a flag cleared when the value moves, and locals a pc no longer
// uses are zeroed: histories that differ only there are one state. Steps
// that touch nothing shared (a branch on a local) are fused with the next.
// Workers start parked (an executor at rest) or, in some scenarios, in
// findWork, so that pushes also race their first park.
//
// The protocol variants are the mistakes the checker must find: the test
// TestParkModelFindsTheBugs runs them and expects a counterexample for
// each, so that the checker is shown able to find the lost wake-up of
// issue 13 when the fix is reverted. (A variant that wakes before it
// cancels its prepare was tried too: it is safe, the notify it may spend
// on the waker's own prepare happens only when nobody else waits, so the
// order after cancel is for cost only: notifyOne then skips its lock.)

import (
	"fmt"
	"hash/maphash"
	"strings"
	"testing"
)

// modelVariant selects a protocol; the zero value is scheduler.go's.
type modelVariant struct {
	// noRecheckWake is the protocol before issue 13's fix: a worker that
	// was the spinner and finds a task in its re-check runs it without
	// waking another (findWork: the d.wake(w) after cancel is missing).
	noRecheckWake bool
	// noRecheckRetry: the re-check gives up on a victim after one steal
	// that lost a race, though the victim still holds work.
	noRecheckRetry bool
}

// A kind of task: what it does when its body ends (complete, schedule).
type modelKind struct {
	pushes []modelPush // in order, each followed by a wake (worker.push, pushMany)
	inline int8        // the kind run inline afterwards, -1 none
}

type modelPush struct {
	kind  int8
	n     int8 // n tasks at once (pushMany's pushN); 0 means 1
	other bool // to the next domain's shared queue (a cross-domain push)
}

type modelSubmit struct {
	dom  int8
	kind int8
}

type modelConfig struct {
	name      string
	domains   []int // workers per domain
	maxSteals int
	kinds     []modelKind
	submits   []modelSubmit // one pusher from outside per submit
	// awake starts the workers in findWork rather than parked (an
	// executor at rest), which lets the pushes race their first park.
	awake   bool
	variant modelVariant
}

// modelStateLimit keeps a scenario that grew too big from running for
// minutes: reaching it fails the test.
const modelStateLimit = 5_000_000

const (
	mMaxActors = 6
	mMaxDom    = 2
	mQCap      = 8
)

// program counters
const (
	pcFwPop       uint8 = iota // findWork: w.q.pop()
	pcSpCAS                    // spin: nSpinning.Load() != 0 || !CompareAndSwap(0, 1)
	pcStShared                 // stealOnce: d.shared.n.Load() != 0
	pcStSharedPop              // stealOnce: takeShared (a share: one entry that pushes the rest)
	pcStVictim                 // stealOnce: v chosen; q.steal() reads top, bottom
	pcStCAS                    // stealOnce: q.steal()'s top.CompareAndSwap
	pcSpFound                  // spin: d.addSpinning(-1) after a successful steal; rule 3
	pcSpDone                   // spin: d.addSpinning(-1) after maxSteals failures
	pcPrEpoch                  // notifier.prepare: p.epoch = n.epoch.Load()
	pcPrWaiting                // notifier.prepare: n.waiting.Add(1)
	pcRcShared                 // recheck: d.shared.n.Load() != 0
	pcRcSharedPop              // recheck: grabShared (the rest of a share pushed after cancel: the entry's pushes)
	pcRcVictim                 // recheck: !v.q.empty(), then steal's loads
	pcRcCAS                    // recheck: steal's top.CompareAndSwap
	pcRcFound                  // findWork: notifier.cancel after recheck found work, then if spun { d.wake(w) }
	pcCmLocked                 // notifier.commit: under mu, epoch check, append to sleepers
	pcCmCancel                 // notifier.commit: waiting.Add(-1) when epoch moved
	pcParked                   // notifier.commit: <-p.ch
	pcRun                      // running a task's body (may last forever)
	pcRunEffect                // schedule: the next push of the finished task, or its inline successor
	pcWkSpin                   // domain.wake: nSpinning.Load() != 0
	pcWkWaiting                // notifier.notifyOne: waiting.Load() == 0
	pcWkLocked                 // notifier.notifyOne: under mu, epoch++, pop a sleeper, waiting--, signal
	pcSubmit                   // Executor.submit: d.shared.push(n)
	pcDone                     // a pusher that has submitted and woken
)

var modelPCNames = [...]string{"findWork.pop", "spin.cas", "steal.sharedEmpty", "steal.sharedPop", "steal.read", "steal.cas",
	"spin.found", "spin.giveUp", "prepare.epoch", "prepare.waiting", "recheck.sharedEmpty", "recheck.sharedPop",
	"recheck.read", "recheck.cas", "recheck.cancel", "commit", "commit.cancel", "parked",
	"run", "schedule", "wake.nSpinning", "wake.waiting", "wake.notify", "submit", "done"}

type modelActor struct {
	pc       uint8
	ret      uint8 // where wake returns to
	wd       int8  // the domain wake is waking
	dom      int8  // the worker's domain; a pusher's target
	task     int8  // the kind running, or taken (-1 none)
	eff      int8  // the next push of the finished task
	i        int8  // spin attempts; recheck victim
	v        int8  // steal victim
	fresh    bool  // steal read the victim's top, and top has not moved since
	epochOK  bool  // no notify since prepare read the epoch
	spun     bool  // spin made w the spinner (spin's result)
	spinning bool  // worker.spinning
	signal   bool  // p.ch holds a notification
	worker   bool
}

// modelDeque holds the kinds of its n tasks, items[0] at the top (where
// thieves steal), items[n-1] at the bottom (where the owner pushes and
// pops). Absolute top and bottom indices are left out (they would make
// every history a new state): a thief's read of top is the flag
// modelActor.fresh, cleared whenever top moves.
type modelDeque struct {
	n     int8
	items [mQCap]int8
}

type modelDomain struct {
	nSpinning int8
	waiting   int8
	nsleep    int8
	sleepers  [mMaxActors]int8 // LIFO
	nshared   int8
	shared    [mQCap]int8 // FIFO
}

type modelState struct {
	a        [mMaxActors]modelActor
	q        [mMaxActors]modelDeque
	d        [mMaxDom]modelDomain
	executed int8
}

type modelChecker struct {
	cfg     modelConfig
	nActors int
	members [mMaxDom][]int8 // workers of each domain
	total   int             // tasks in all
	seed    maphash.Seed
	seen    map[uint64]struct{}
	path    []modelStep
	states  int
	bad     string // the violation found, with its trace
}

func newModelChecker(cfg modelConfig) *modelChecker {
	if cfg.maxSteals == 0 {
		cfg.maxSteals = 2
	}
	m := &modelChecker{cfg: cfg, seed: maphash.MakeSeed(), seen: map[uint64]struct{}{}}
	for d, n := range cfg.domains {
		for j := 0; j < n; j++ {
			m.members[d] = append(m.members[d], int8(m.nActors))
			m.nActors++
		}
	}
	m.nActors += len(cfg.submits)
	if m.nActors > mMaxActors || len(cfg.domains) > mMaxDom {
		panic("model too large")
	}
	var count func(k int8) int
	count = func(k int8) int {
		c := 1
		kd := cfg.kinds[k]
		for _, p := range kd.pushes {
			c += max(1, int(p.n)) * count(p.kind)
		}
		if kd.inline >= 0 {
			c += count(kd.inline)
		}
		return c
	}
	for _, s := range cfg.submits {
		m.total += count(s.kind)
	}
	return m
}

func (m *modelChecker) initial() modelState {
	var s modelState
	i := 0
	for d, n := range m.cfg.domains {
		for j := 0; j < n; j++ {
			s.a[i] = modelActor{pc: pcFwPop, dom: int8(d), task: -1, v: -1, worker: true}
			if !m.cfg.awake { // committed: in the sleepers, counted in waiting
				s.a[i].pc = pcParked
				dm := &s.d[d]
				dm.sleepers[dm.nsleep] = int8(i)
				dm.nsleep++
				dm.waiting++
			}
			i++
		}
	}
	for _, sub := range m.cfg.submits {
		s.a[i] = modelActor{pc: pcSubmit, dom: sub.dom, task: sub.kind, v: -1}
		i++
	}
	return s
}

// run explores every state reachable from the initial one; it returns the
// first violation with the steps that led to it, or "".
func (m *modelChecker) run() string {
	m.explore(m.initial())
	return m.bad
}

func (m *modelChecker) explore(s modelState) {
	if m.bad != "" {
		return
	}
	if m.states >= modelStateLimit {
		m.bad = fmt.Sprintf("state limit %d reached", modelStateLimit)
		return
	}
	h := maphash.Comparable(m.seed, s)
	if _, ok := m.seen[h]; ok {
		return
	}
	m.seen[h] = struct{}{}
	m.states++
	if msg := m.check(&s); msg != "" {
		var b strings.Builder
		for _, st := range m.path {
			what := st.what
			if st.other >= 0 {
				what = fmt.Sprintf(what, m.actorName(st.other))
			}
			fmt.Fprintf(&b, "  %s: %s\n", m.actorName(st.actor), what)
		}
		m.bad = msg + "\nafter:\n" + b.String() + "state: " + m.describe(&s)
		return
	}
	for a := 0; a < m.nActors && m.bad == ""; a++ {
		m.step(s, a, func(next modelState, what string, other int) {
			m.path = append(m.path, modelStep{a, what, other})
			m.explore(next)
			m.path = m.path[:len(m.path)-1]
		})
	}
}

// modelStep is one step of the path explored: actor a did what (a format
// naming the actor other, when other >= 0).
type modelStep struct {
	actor int
	what  string
	other int
}

func (m *modelChecker) actorName(a int) string {
	for d := range m.cfg.domains {
		for j, w := range m.members[d] {
			if int(w) == a {
				return fmt.Sprintf("w%d.%d", d, j)
			}
		}
	}
	return fmt.Sprintf("pusher%d", a)
}

// check is the invariants, after every step.
func (m *modelChecker) check(s *modelState) string {
	quiet := true
	for a := 0; a < m.nActors; a++ {
		x := &s.a[a]
		if !(x.pc == pcRun || x.pc == pcParked && !x.signal || x.pc == pcDone) {
			quiet = false
		}
	}
	for d := range m.cfg.domains {
		dm := &s.d[d]
		spinning := int8(0)
		parked := 0
		queued := int(dm.nshared)
		for _, w := range m.members[d] {
			if s.a[w].spinning {
				spinning++
			}
			if s.a[w].pc == pcParked && !s.a[w].signal {
				parked++
			}
			queued += int(s.q[w].n)
		}
		if dm.nSpinning < 0 || int(dm.nSpinning) > len(m.members[d]) || dm.nSpinning != spinning || spinning > 1 {
			return fmt.Sprintf("domain %d: nSpinning %d, %d workers spinning", d, dm.nSpinning, spinning)
		}
		if quiet && parked > 0 && queued > 0 {
			return fmt.Sprintf("lost wake-up: domain %d has %d task(s) queued and %d parked worker(s), and every worker is parked or running a task", d, queued, parked)
		}
	}
	if quiet {
		done := true
		for a := 0; a < m.nActors; a++ {
			if s.a[a].pc != pcParked && s.a[a].pc != pcDone {
				done = false
			}
		}
		if done && int(s.executed) != m.total {
			return fmt.Sprintf("final state ran %d tasks of %d", s.executed, m.total)
		}
	}
	return ""
}

func (m *modelChecker) describe(s *modelState) string {
	var b strings.Builder
	for a := 0; a < m.nActors; a++ {
		x := &s.a[a]
		fmt.Fprintf(&b, "%s@%s", m.actorName(a), modelPCNames[x.pc])
		if x.worker {
			fmt.Fprintf(&b, "(deque %d)", s.q[a].n)
		}
		b.WriteString(" ")
	}
	for d := range m.cfg.domains {
		dm := &s.d[d]
		fmt.Fprintf(&b, "dom%d{nSpinning %d waiting %d sleepers %d shared %d} ", d, dm.nSpinning, dm.waiting, dm.nsleep, dm.nshared)
	}
	return b.String()
}

// wakeThen enters domain.wake(d), returning to ret.
func wakeThen(x *modelActor, d int8, ret uint8) {
	x.pc, x.wd, x.ret = pcWkSpin, d, ret
}

// topMoved clears every thief's read of deque v's top: their CAS will fail.
func (m *modelChecker) topMoved(s *modelState, v int8) {
	for a := 0; a < m.nActors; a++ {
		if s.a[a].v == v {
			s.a[a].fresh = false
		}
	}
}

// steal is the successful CAS of wsq.steal: the top task of v.
func (m *modelChecker) steal(s *modelState, v int8) int8 {
	q := &s.q[v]
	k := q.items[0]
	copy(q.items[:], q.items[1:q.n])
	q.n--
	q.items[q.n] = 0
	m.topMoved(s, v)
	return k
}

// normalize zeroes what a pc does not use, so that states differing only in
// dead locals are one state.
func (m *modelChecker) normalize(s *modelState) {
	for a := 0; a < m.nActors; a++ {
		x := &s.a[a]
		pc := x.pc
		if pc >= pcWkSpin && pc <= pcWkLocked {
			pc = x.ret // the locals of the caller stay live through wake
		} else {
			x.ret, x.wd = 0, 0
		}
		search := pc >= pcStShared && pc <= pcSpDone || pc >= pcPrEpoch && pc <= pcRcFound || pc == pcCmLocked
		if !(pc >= pcStShared && pc <= pcStCAS || pc >= pcRcShared && pc <= pcRcCAS) {
			x.i = 0
		}
		if pc != pcStCAS && pc != pcRcCAS {
			x.v, x.fresh = -1, false
		}
		if !(pc >= pcPrWaiting && pc <= pcRcCAS || pc == pcCmLocked) {
			x.epochOK = false
		}
		if !search {
			x.spun = false
		}
		if pc != pcRunEffect {
			x.eff = 0
		}
	}
}

// step calls emit with each state that one step of actor a leads to.
func (m *modelChecker) step(s modelState, a int, emit0 func(modelState, string, int)) {
	emit := func(s modelState, what string, other int) {
		m.normalize(&s)
		emit0(s, what, other)
	}
	x := &s.a[a]
	d := &s.d[x.dom]
	q := &s.q[a]
	v := m.cfg.variant
	switch x.pc {
	case pcFwPop: // findWork: if t := w.q.pop(); t != nil { return t }
		if q.n > 0 {
			q.n--
			x.task = q.items[q.n]
			q.items[q.n] = 0
			if q.n == 0 { // the last task: pop raced the thieves by CAS on top
				m.topMoved(&s, int8(a))
			}
			x.pc = pcRun
			emit(s, "pop: got a task", -1)
			return
		}
		x.pc = pcSpCAS
		emit(s, "pop: empty", -1)
	case pcSpCAS: // spin: if nSpinning != 0 || !CompareAndSwap(0, 1) { return nil, false }
		if d.nSpinning != 0 {
			x.spun = false
			x.pc = pcPrEpoch
			emit(s, "spin: another spins, go park", -1)
			return
		}
		d.nSpinning = 1
		x.spinning, x.spun, x.i = true, true, 0
		x.pc = pcStShared
		emit(s, "spin: became the spinner", -1)
	case pcStShared: // spin's loop; stealOnce: if d.shared.n.Load() != 0
		if x.i == int8(m.cfg.maxSteals) {
			x.pc = pcSpDone
			m.step(s, a, emit0) // a local decision: no step of its own
			return
		}
		if d.nshared > 0 {
			x.pc = pcStSharedPop
		} else {
			x.pc = pcStVictim
		}
		emit(s, "steal: shared queue empty? read", -1)
	case pcStSharedPop: // stealOnce: takeShared
		if d.nshared > 0 {
			x.task = m.sharedPop(d)
			x.pc = pcSpFound
			emit(s, "steal: took from the shared queue", -1)
			return
		}
		x.pc = pcStVictim
		emit(s, "steal: shared queue empty", -1)
	case pcStVictim: // stealOnce: a random victim; wsq.steal reads top and bottom
		others := 0
		for _, w := range m.members[x.dom] {
			if int(w) == a {
				continue
			}
			others++
			t := s
			y := &t.a[a]
			if n := t.q[w].n; n > 0 {
				y.v, y.fresh = w, true
				y.pc = pcStCAS
				emit(t, "steal: victim %s holds work, read its top", int(w))
			} else {
				y.i++
				y.pc = pcStShared
				emit(t, "steal: victim %s empty", int(w))
			}
		}
		if others == 0 {
			x.i++
			x.pc = pcStShared
			m.step(s, a, emit0) // no victim to read: no step of its own
		}
	case pcStCAS: // wsq.steal: top.CompareAndSwap(t, t+1)
		if x.fresh {
			x.task = m.steal(&s, x.v)
			x.pc = pcSpFound
			emit(s, "steal: CAS won", -1)
			return
		}
		x.i++
		x.pc = pcStShared
		emit(s, "steal: CAS lost", -1)
	case pcSpFound: // spin: if d.addSpinning(-1) == 0 { d.wake(w) } // rule 3
		x.spinning = false
		d.nSpinning--
		if d.nSpinning == 0 {
			wakeThen(x, x.dom, pcRun)
		} else {
			x.pc = pcRun
		}
		emit(s, "spin: found work, stop spinning (rule 3)", -1)
	case pcSpDone: // spin: w.spinning = false; d.addSpinning(-1)
		x.spinning = false
		d.nSpinning--
		x.pc = pcPrEpoch
		emit(s, "spin: maxSteals failed, stop spinning", -1)
	case pcPrEpoch: // prepare: p.epoch = n.epoch.Load()
		x.epochOK = true
		x.pc = pcPrWaiting
		emit(s, "prepare: read epoch", -1)
	case pcPrWaiting: // prepare: n.waiting.Add(1)
		d.waiting++
		x.pc, x.i = pcRcShared, 0
		emit(s, "prepare: waiting++", -1)
	case pcRcShared: // recheck: if d.shared.n.Load() != 0
		if d.nshared > 0 {
			x.pc = pcRcSharedPop
		} else {
			x.pc = pcRcVictim
		}
		emit(s, "recheck: shared queue empty? read", -1)
	case pcRcSharedPop: // recheck: grabShared
		if d.nshared > 0 {
			x.task = m.sharedPop(d)
			x.pc = pcRcFound
			emit(s, "recheck: took from the shared queue", -1)
			return
		}
		x.pc = pcRcVictim
		emit(s, "recheck: shared queue empty", -1)
	case pcRcVictim: // recheck: for _, v := range d.workers { for !v.q.empty() { v.q.steal() } }
		ms := m.members[x.dom]
		for x.i < int8(len(ms)) && int(ms[x.i]) == a {
			x.i++
		}
		if x.i == int8(len(ms)) {
			x.pc = pcCmLocked
			m.step(s, a, emit0) // a local decision: no step of its own
			return
		}
		w := ms[x.i]
		if n := s.q[w].n; n > 0 {
			x.v, x.fresh = w, true
			x.pc = pcRcCAS
			emit(s, "recheck: %s holds work, read its top", int(w))
			return
		}
		x.i++
		emit(s, "recheck: %s empty", int(w))
	case pcRcCAS: // wsq.steal: top.CompareAndSwap(t, t+1)
		if x.fresh {
			x.task = m.steal(&s, x.v)
			x.pc = pcRcFound
			emit(s, "recheck: CAS won", -1)
			return
		}
		if v.noRecheckRetry {
			x.i++
		}
		x.pc = pcRcVictim
		emit(s, "recheck: CAS lost", -1)
	case pcRcFound: // findWork: d.notifier.cancel(w.parker); if spun { d.wake(w) }; return t
		d.waiting--
		x.pc = pcRun
		if x.spun && !v.noRecheckWake {
			wakeThen(x, x.dom, pcRun)
		}
		emit(s, "recheck found work: cancel", -1)
	case pcCmLocked: // commit, under mu: if n.epoch.Load() != p.epoch { return }; sleep
		if !x.epochOK {
			x.pc = pcCmCancel
			emit(s, "commit: notified since prepare", -1)
			return
		}
		d.sleepers[d.nsleep] = int8(a)
		d.nsleep++
		x.pc = pcParked
		emit(s, "commit: parked", -1)
	case pcCmCancel: // commit: n.waiting.Add(-1)
		d.waiting--
		x.pc = pcFwPop
		emit(s, "commit: waiting--", -1)
	case pcParked: // commit: <-p.ch
		if !x.signal {
			return
		}
		x.signal = false
		x.pc = pcFwPop
		emit(s, "woken", -1)
	case pcRun: // the task's body ends; schedule follows at once (local)
		s.executed++
		x.eff = 0
		x.pc = pcRunEffect
		m.step(s, a, emit0)
	case pcRunEffect: // schedule: push each ready successor (w.push: push, d.wake); run the last inline
		k := m.cfg.kinds[x.task]
		if int(x.eff) == len(k.pushes) {
			if k.inline >= 0 {
				x.task = k.inline
				x.pc = pcRun
				emit(s, "ran a task; run its inline successor", -1)
			} else {
				x.task = -1
				x.pc = pcFwPop
				emit(s, "ran a task; find work", -1)
			}
			return
		}
		p := k.pushes[x.eff]
		x.eff++
		n := max(1, int(p.n))
		if p.other {
			od := (x.dom + 1) % int8(len(m.cfg.domains))
			for j := 0; j < n; j++ {
				m.sharedPush(&s.d[od], p.kind)
			}
			wakeThen(x, od, pcRunEffect)
			emit(s, "push to the other domain's shared queue", -1)
			return
		}
		for j := 0; j < n; j++ { // w.q.push, or pushN: one publication
			if q.n == mQCap {
				panic("model deque full")
			}
			q.items[q.n] = p.kind
			q.n++
		}
		wakeThen(x, x.dom, pcRunEffect)
		emit(s, "push to own deque", -1)
	case pcSubmit: // Executor.submit: d.shared.push(n); d.wake(nil)
		m.sharedPush(d, x.task)
		x.task = -1
		wakeThen(x, x.dom, pcDone)
		emit(s, "submit to a shared queue", -1)
	case pcWkSpin: // domain.wake: if d.nSpinning.Load() != 0 { return }
		wd := &s.d[x.wd]
		if wd.nSpinning != 0 {
			x.pc = x.ret
			emit(s, "wake: a thief spins, no wake", -1)
			return
		}
		x.pc = pcWkWaiting
		emit(s, "wake: nobody spins", -1)
	case pcWkWaiting: // notifyOne: if n.waiting.Load() == 0 { return false }
		if s.d[x.wd].waiting == 0 {
			x.pc = x.ret
			emit(s, "wake: nobody waiting", -1)
			return
		}
		x.pc = pcWkLocked
		emit(s, "wake: someone waiting", -1)
	case pcWkLocked: // notifyOne, under mu: epoch++; pop a sleeper, waiting--; p.ch <- struct{}{}
		wd := &s.d[x.wd]
		for b := 0; b < m.nActors; b++ {
			if s.a[b].worker && s.a[b].dom == x.wd {
				s.a[b].epochOK = false
			}
		}
		what, woke := "notify: epoch++ (no sleeper)", -1
		if wd.nsleep > 0 {
			wd.nsleep--
			p := wd.sleepers[wd.nsleep]
			wd.sleepers[wd.nsleep] = 0
			wd.waiting--
			s.a[p].signal = true
			what, woke = "notify: epoch++, woke %s", int(p)
		}
		x.pc = x.ret
		emit(s, what, woke)
	case pcDone:
	}
}

func (m *modelChecker) sharedPush(d *modelDomain, kind int8) {
	if d.nshared == mQCap {
		panic("model shared queue full")
	}
	d.shared[d.nshared] = kind
	d.nshared++
}

func (m *modelChecker) sharedPop(d *modelDomain) int8 {
	k := d.shared[0]
	copy(d.shared[:], d.shared[1:d.nshared])
	d.nshared--
	d.shared[d.nshared] = 0
	return k
}

// The scenarios. Kind 0 is a leaf.
var (
	modelLeaf = modelKind{inline: -1}
	// modelFan3 ends pushing two leaves one by one (w.push: push, wake)
	// and running a third inline: a chain task releasing a fan-out
	// (schedule), issue 13's shape.
	modelFan3 = modelKind{pushes: []modelPush{{kind: 0}, {kind: 0}}, inline: 0}
	// modelFan2 pushes one leaf and runs one inline.
	modelFan2 = modelKind{pushes: []modelPush{{kind: 0}}, inline: 0}
	// modelBatch3 ends publishing three leaves at once (pushMany's pushN,
	// one wake) and running a fourth inline: a graph's sources.
	modelBatch3 = modelKind{pushes: []modelPush{{kind: 0, n: 3}}, inline: 0}
	// modelCross ends pushing a leaf to the other domain's shared queue
	// and one to its own deque, and running one inline.
	modelCross = modelKind{pushes: []modelPush{{kind: 0, other: true}, {kind: 0}}, inline: 0}
	// modelCrossOnly pushes a leaf to the other domain and runs one inline.
	modelCrossOnly = modelKind{pushes: []modelPush{{kind: 0, other: true}}, inline: 0}
	// A graph's sources handed out as a range (rangeTask), in kinds 1-3
	// of the "source range" scenario: the starter pushes a range of four
	// and runs the first source inline; a range of four splits off its
	// upper half (a push, with its wake) and goes on with the lower; a
	// range at the grain runs its sources one after the other, which
	// is one leaf after another.
	modelRangeGrain = modelKind{inline: 0}
	modelRange4     = modelKind{pushes: []modelPush{{kind: 1}}, inline: 1}
	modelRangeStart = modelKind{pushes: []modelPush{{kind: 2}}, inline: 0}
	// SilentAsync calls taken from the shared queue as a batch
	// (silentBatch), in kinds 1-2 of the "silent batch" scenario: whoever
	// takes a batch of three pushes it back (a push, with its wake) and
	// runs one call; taken again, with two left, it is pushed back once
	// more and one runs; the last is a leaf. A holder's further claims
	// are more calls run inline, and a batch found empty a leaf.
	modelSilent2 = modelKind{pushes: []modelPush{{kind: 0}}, inline: 0}
	modelSilent3 = modelKind{pushes: []modelPush{{kind: 1}}, inline: 0}
)

// modelScenarios are small enough to explore in about a second each (tens
// to hundreds of thousands of states); larger ones (4 workers, more
// tasks) hold too but take minutes.
func modelScenarios() []modelConfig {
	leafs := []modelKind{modelLeaf}
	return []modelConfig{
		// Issue 13's shape: a burst released inside a run by a worker.
		{name: "fan-out, 3 workers", domains: []int{3}, kinds: append(leafs, modelFan3), submits: []modelSubmit{{0, 1}}},
		// A batch published at once.
		{name: "batch, 3 workers", domains: []int{3}, kinds: append(leafs, modelBatch3), submits: []modelSubmit{{0, 1}}},
		// A graph's sources as a range that the workers split.
		{name: "source range, 3 workers", domains: []int{3}, kinds: append(leafs, modelRangeGrain, modelRange4, modelRangeStart), submits: []modelSubmit{{0, 3}}},
		// A run of SilentAsync calls taken from the shared queue at once.
		{name: "silent batch, 3 workers", domains: []int{3}, kinds: append(leafs, modelSilent2, modelSilent3), submits: []modelSubmit{{0, 2}}},
		// Two pushes from outside the domain racing each other.
		{name: "two submits, 3 workers", domains: []int{3}, kinds: leafs, submits: []modelSubmit{{0, 0}, {0, 0}}},
		// Cross-domain pushes: a CPU task readies a GPU task while a
		// submit from outside reaches the GPU domain too.
		{name: "cross-domain, 2+1 workers", domains: []int{2, 1}, kinds: append(leafs, modelCross), submits: []modelSubmit{{0, 1}, {1, 0}}},
		{name: "cross-domain, 3+1 workers", domains: []int{3, 1}, kinds: append(leafs, modelCrossOnly), submits: []modelSubmit{{0, 1}, {1, 0}}},
		// Pushes racing the workers' first parks.
		{name: "awake workers, 2", domains: []int{2}, kinds: append(leafs, modelFan2), submits: []modelSubmit{{0, 1}}, awake: true},
		{name: "awake workers, 3", domains: []int{3}, kinds: leafs, submits: []modelSubmit{{0, 0}}, awake: true},
	}
}

// The protocol of scheduler.go keeps every invariant in every interleaving
// of every scenario.
func TestParkModel(t *testing.T) {
	for _, cfg := range modelScenarios() {
		t.Run(cfg.name, func(t *testing.T) {
			m := newModelChecker(cfg)
			if bad := m.run(); bad != "" {
				t.Fatalf("%s", bad)
			}
			t.Logf("%d states, every invariant holds", m.states)
		})
	}
}

// The checker finds each mistake: the bug of issue 13 (the fix reverted)
// and its neighbours.
func TestParkModelFindsTheBugs(t *testing.T) {
	for _, c := range []struct {
		name string
		v    modelVariant
	}{
		{"issue 13: no wake after a spinner's re-check finds work", modelVariant{noRecheckWake: true}},
		{"re-check gives up a steal that lost a race", modelVariant{noRecheckRetry: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			found := false
			for _, cfg := range modelScenarios() {
				cfg.variant = c.v
				m := newModelChecker(cfg)
				if bad := m.run(); bad != "" {
					t.Logf("scenario %q, found after %d states:\n%s", cfg.name, m.states, bad)
					found = true
					break
				}
			}
			if !found {
				t.Fatalf("the checker found no violation in a protocol that has one")
			}
		})
	}
}
