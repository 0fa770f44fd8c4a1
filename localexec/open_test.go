package localexec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// An open run: proxies (external tasks) are scheduled from outside, local
// edges run as usual, the run reports idle and ends only after Close.
func TestOpenRunDrivenFromOutside(t *testing.T) {
	ex := newEx(t, WithWorkers(2))
	tf := NewTaskflow("part")
	var got atomic.Int32
	proxy := tf.Emplace(func() {}).Name("proxy").External()
	local := tf.Emplace(func() { got.Add(1) }).Name("local")
	src := tf.Emplace(func() { got.Add(10) }).Name("src")
	proxy.Precede(local)
	idle, onIdle := idleSignal()
	o, err := ex.RunOpen(tf, onIdle)
	if err != nil {
		t.Fatal(err)
	}
	_ = src
	// src (a source) runs; the external proxy does not start by itself
	waitIdle := func() {
		t.Helper()
		select {
		case <-idle:
		case <-time.After(10 * time.Second):
			t.Fatal("no idle notification")
		}
	}
	waitIdle()
	if got.Load() != 10 {
		t.Fatalf("got %d: the external proxy must not start with the run", got.Load())
	}
	for i := 0; i < 3; i++ {
		if err := o.Schedule(proxy); err != nil {
			t.Fatal(err)
		}
		waitIdle()
	}
	if got.Load() != 13 {
		t.Fatalf("got %d", got.Load())
	}
	if !o.Idle() {
		t.Fatal("Idle() false after the idle callback")
	}
	select {
	case <-o.Done():
		t.Fatal("open run ended before Close")
	default:
	}
	o.Close()
	if err := o.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := o.Schedule(proxy); !errors.Is(err, ErrRunClosed) {
		t.Fatalf("schedule after close: %v", err)
	}
	// the taskflow is free again
	o2, err := ex.RunOpen(tf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := o2.Schedule(proxy); err != nil { // may land before the start: queued
		t.Fatal(err)
	}
	o2.Cancel()
	if err := o2.Wait(); !errors.Is(err, ErrCancelled) {
		t.Fatalf("cancelled open run: %v", err)
	}
}

// TestOpenRunScheduleAll: a batch scheduled at once runs each task as often
// as it appears, on every worker, and is refused once the run is closed.
func TestOpenRunScheduleAll(t *testing.T) {
	ex := newEx(t, WithWorkers(3))
	tf := NewTaskflow("batch")
	var got atomic.Int32
	var proxies []Task
	for i := range 100 {
		p := tf.Emplace(func() {}).Name(fmt.Sprint("proxy", i)).External()
		p.Precede(tf.Emplace(func() { got.Add(1) }).Name(fmt.Sprint("local", i)))
		proxies = append(proxies, p)
	}
	idle, onIdle := idleSignal()
	o, err := ex.RunOpen(tf, onIdle)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.ScheduleAll(append(proxies, proxies[:10]...)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() != 110 || !o.Idle() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 110 ran", got.Load())
		}
		select {
		case <-idle:
		case <-time.After(10 * time.Millisecond):
		}
	}
	o.Close()
	if err := o.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := o.ScheduleAll(proxies); !errors.Is(err, ErrRunClosed) {
		t.Fatalf("ScheduleAll after close: %v", err)
	}
}

func TestOpenRunClosedBeforeStart(t *testing.T) {
	ex := newEx(t, WithWorkers(1))
	tf := NewTaskflow("quick")
	var n atomic.Int32
	tf.Emplace(func() { n.Add(1) })
	for i := 0; i < 200; i++ {
		o, err := ex.RunOpen(tf, nil)
		if err != nil {
			t.Fatal(err)
		}
		o.Close()
		if err := o.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if n.Load() != 200 {
		t.Fatalf("%d", n.Load())
	}
}

// idleSignal is an open run's idle callback that never blocks, and the
// channel it signals.
func idleSignal() (chan struct{}, func()) {
	idle := make(chan struct{}, 16)
	return idle, func() {
		select {
		case idle <- struct{}{}:
		default:
		}
	}
}

// TestOpenRunRelease: a task that awaits outside predecessors (Await) runs
// once per round of releases, with its predecessors in the graph; releases
// before the run's start count once it starts; a task awaited once runs at
// each release; a task released twice in one call counts twice.
func TestOpenRunRelease(t *testing.T) {
	ex := newEx(t, WithWorkers(2))
	tf := NewTaskflow("part")
	var join, one, only atomic.Int32
	src := tf.Emplace(func() {}).Name("src")
	j := tf.Emplace(func() { join.Add(1) }).Name("join").Await(2)
	src.Precede(j) // three strong predecessors: src and two outside
	o1 := tf.Emplace(func() { one.Add(1) }).Name("one").Await(1)
	o2 := tf.Emplace(func() { only.Add(1) }).Name("only").Await(2)
	idle, onIdle := idleSignal()
	o, err := ex.RunOpen(tf, onIdle)
	if err != nil {
		t.Fatal(err)
	}
	// before the start (or just after: either way it counts)
	if err := o.Release([]Task{j, o1}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for one.Load() != 1 || !o.Idle() {
		if time.Now().After(deadline) {
			t.Fatalf("one ran %d times, want 1", one.Load())
		}
		awaitIdle(t, idle)
	}
	if join.Load() != 0 || only.Load() != 0 {
		t.Fatalf("join %d only %d: want 0 0 (join awaits one more, only two)", join.Load(), only.Load())
	}
	if err := o.Release([]Task{j, o2, o1, o2}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for join.Load() != 1 || one.Load() != 2 || only.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("join %d one %d only %d: want 1 2 1", join.Load(), one.Load(), only.Load())
		}
		awaitIdle(t, idle)
	}
	o.Close()
	if err := o.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := o.Release([]Task{o1}); !errors.Is(err, ErrRunClosed) {
		t.Fatalf("release after close: %v", err)
	}
}

// awaitIdle waits for the next idle notification of an open run.
func awaitIdle(t *testing.T, idle <-chan struct{}) {
	t.Helper()
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		t.Fatal("no idle notification")
	}
}

// TestOpenRunClosedIdleStaysClean: an open run of a plain DAG (no
// condition, External or awaiting task) that ran whole and was closed
// idle proves every join counter restarted, as a Run does, so the next run
// of the taskflow skips their reset (a cluster node closes a kept build's
// idle run for this); a cancelled one does not.
func TestOpenRunClosedIdleStaysClean(t *testing.T) {
	ex := newEx(t, WithWorkers(2))
	tf, ran, _, _ := joinDAG()
	for i, cancel := range []bool{false, true, false} {
		idle, onIdle := idleSignal()
		before := ex.Stats()
		o, err := ex.RunOpen(tf, onIdle)
		if err != nil {
			t.Fatal(err)
		}
		waitOpenIdle(t, o, idle)
		if cancel {
			o.Cancel()
		} else {
			o.Close()
		}
		_ = o.Wait()
		if got := int(ran.Load()); got != 3*(i+1) {
			t.Fatalf("run %d: %d tasks ran in all, want %d", i+1, got, 3*(i+1))
		}
		if clean := tf.graph.sched.clean; clean == cancel {
			t.Fatalf("run %d (cancelled %v): clean %v", i+1, cancel, clean)
		}
		// The first run resets (a new taskflow), so does the one after
		// the cancelled one; the one after the closed one skips it.
		wantSkip := i == 1
		checkJoinResets(t, ex, before, wantSkip)
	}
}

// joinDAG is a plain DAG with one join: a and b, then c. ran counts the
// tasks run.
func joinDAG() (tf *Taskflow, ran *atomic.Int32, a, c Task) {
	tf, ran = NewTaskflow("dag"), new(atomic.Int32)
	a = tf.Emplace(func() { ran.Add(1) }).Name("a")
	b := tf.Emplace(func() { ran.Add(1) }).Name("b")
	c = tf.Emplace(func() { ran.Add(1) }).Name("c")
	c.Succeed(a, b)
	return tf, ran, a, c
}

// checkJoinResets checks that the one run of a graph with joins since
// before reset its join counters (skipped false) or skipped the reset.
func checkJoinResets(t *testing.T, ex *Executor, before Stats, skipped bool) {
	t.Helper()
	s := ex.Stats()
	resets, skips := s.JoinResets-before.JoinResets, s.JoinResetsSkipped-before.JoinResetsSkipped
	if want := map[bool][2]uint64{false: {1, 0}, true: {0, 1}}[skipped]; resets != want[0] || skips != want[1] {
		t.Fatalf("%d resets and %d skipped, want %d and %d", resets, skips, want[0], want[1])
	}
}

// TestOpenRunScheduledOutOfTurnResets: a task of a plain DAG scheduled
// from outside (OpenRun.Schedule) counts one completion more into its
// successor's join counter than the graph's round; the run must not pass
// for clean, or the next run starts with that counter part-way and runs
// the successor before all its predecessors.
func TestOpenRunScheduledOutOfTurnResets(t *testing.T) {
	ex := newEx(t, WithWorkers(1)) // one worker: a released successor runs inline at once
	tf := NewTaskflow("dag")
	var mu sync.Mutex
	var order []string
	rec := func(name string) func() {
		return func() { mu.Lock(); order = append(order, name); mu.Unlock() }
	}
	a := tf.Emplace(rec("a")).Name("a")
	b := tf.Emplace(rec("b")).Name("b")
	c := tf.Emplace(rec("c")).Name("c")
	c.Succeed(a, b)
	idle, onIdle := idleSignal()
	o, err := ex.RunOpen(tf, onIdle)
	if err != nil {
		t.Fatal(err)
	}
	waitOpenIdle(t, o, idle)
	if err := o.Schedule(a); err != nil { // c's counter: one of two
		t.Fatal(err)
	}
	waitOpenIdle(t, o, idle)
	o.Close()
	if err := o.Wait(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	order = order[:0]
	mu.Unlock()
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 3 || order[2] != "c" {
		t.Fatalf("the run after: %v, want a and b, then c", order)
	}
}

// waitOpenIdle waits until o, opened with idle's callback (idleSignal),
// has nothing scheduled or running: each time it goes idle it notifies,
// so a run not idle now notifies once it is.
func waitOpenIdle(t *testing.T, o *OpenRun, idle <-chan struct{}) {
	t.Helper()
	for !o.Idle() {
		awaitIdle(t, idle)
	}
}

// TestOpenRunEndsWhenATaskFails: a task's panic or error cancels an open
// run, and the run ends with it, as a Close would end it, without its
// owner's Close: its owner learns of the failure by Done. Before, its hold
// kept it open and Idle (nothing scheduled or running) until the owner
// closed it, and the failure went unseen: a cluster node passed for idle,
// the failed task's successors never run. A proxy's panic (a task
// scheduled from outside) and a context task's error end it the same way.
func TestOpenRunEndsWhenATaskFails(t *testing.T) {
	for _, how := range []string{"source", "scheduled", "context"} {
		t.Run(how, func(t *testing.T) {
			ex := newEx(t, WithWorkers(2))
			tf := NewTaskflow("part")
			var after atomic.Int32
			var bad Task
			switch how {
			case "source":
				bad = tf.Emplace(func() { panic("injected") })
			case "scheduled":
				bad = tf.Emplace(func() { panic("injected") }).External()
			case "context":
				bad = tf.EmplaceContext(func(context.Context) error { return errors.New("injected") })
			}
			bad.Name("bad")
			succ := tf.Emplace(func() { after.Add(1) }).Name("succ")
			other := tf.Emplace(func() {}).Name("other")
			succ.Succeed(bad, other) // a join, as a kept build's
			o, err := ex.RunOpen(tf, nil)
			if err != nil {
				t.Fatal(err)
			}
			if how == "scheduled" {
				if err := o.Schedule(bad); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-o.Done():
			case <-time.After(10 * time.Second):
				idle := o.Idle()
				o.Close() // or the executor's close waits for it
				t.Fatalf("the open run did not end after its task failed (idle %v)", idle)
			}
			err = o.Wait()
			var pe *PanicError
			var te *TaskError
			switch {
			case errors.As(err, &pe):
				if pe.Task != "bad" || pe.Value != "injected" {
					t.Fatalf("ended with %v: want bad's panic", err)
				}
			case errors.As(err, &te):
				if te.Task != "bad" || how != "context" {
					t.Fatalf("ended with %v: want bad's failure", err)
				}
			default:
				t.Fatalf("ended with %v: want bad's failure", err)
			}
			if after.Load() != 0 {
				t.Fatal("succ ran after its predecessor failed")
			}
			if o.Idle() {
				t.Fatal("an ended open run reports idle")
			}
			if err := o.Schedule(other); !errors.Is(err, ErrRunClosed) {
				t.Fatalf("schedule after the run ended: %v", err)
			}
			if o.Cancel() { // the owner's, after the end: no effect
				t.Fatal("a cancel of the ended run took effect")
			}
			if again := o.Wait(); again != err {
				t.Fatalf("after a cancel the run's error is %v, was %v", again, err)
			}
		})
	}
}

// TestOpenRunCancelledIsNotIdle: between topology.cancel marking the run
// cancelled and its Close letting the hold go, the hold is still in place
// and nothing runs; Idle must not report the cut-short run as one waiting
// for outside work (a cluster node would pass for idle with successors
// never run). The gap is held open here by marking the run as cancel does
// before its Close.
func TestOpenRunCancelledIsNotIdle(t *testing.T) {
	ex := newEx(t, WithWorkers(2))
	tf := NewTaskflow("part")
	tf.Emplace(func() {}).Name("src")
	idle, onIdle := idleSignal()
	o, err := ex.RunOpen(tf, onIdle)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		o.Close()
		t.Fatal("no idle notification")
	}
	if !o.Idle() {
		o.Close()
		t.Fatal("Idle() false after the idle callback")
	}
	o.t.cancelled.Store(true) // cancel's first step, before its Close
	if o.Idle() {
		o.Close()
		t.Fatal("a cancelled open run, hold still in place, reports idle")
	}
	o.Cancel()
	if err := o.Wait(); !errors.Is(err, ErrCancelled) {
		t.Fatalf("cancelled open run: %v", err)
	}
}

// TestOpenRunSteeredIsDirty: a Release of a task that does not Await (its
// join counter then one completion ahead of the graph's round) and a
// Schedule made before the run's graph is scheduled (queued, run at the
// start) steer the run from outside just as a Schedule after the start
// does: the run is not clean, and the next run resets the join counters.
func TestOpenRunSteeredIsDirty(t *testing.T) {
	for _, how := range []string{"release", "schedule before the start"} {
		t.Run(how, func(t *testing.T) {
			ex := newEx(t, WithWorkers(1))
			tf, _, a, c := joinDAG()
			// a clean run first: the next would skip the reset
			if err := ex.Run(tf).Wait(); err != nil {
				t.Fatal(err)
			}
			if !tf.graph.sched.clean {
				t.Fatal("a whole run of a plain DAG is not clean")
			}
			idle, onIdle := idleSignal()
			gate := make(chan struct{})
			if how == "schedule before the start" {
				ex.Async(func() { <-gate }) // the one worker, busy: the run cannot start
			}
			o, err := ex.RunOpen(tf, onIdle)
			if err != nil {
				close(gate)
				t.Fatal(err)
			}
			if how == "schedule before the start" {
				err = o.Schedule(a)
				o.mu.Lock()
				started := o.start
				o.mu.Unlock()
				close(gate)
				if err != nil || started {
					t.Fatalf("schedule: %v, started %v: want it queued before the start", err, started)
				}
			} else {
				close(gate)
				waitOpenIdle(t, o, idle)
				if err := o.Release([]Task{c}); err != nil { // c's counter: one of two
					t.Fatal(err)
				}
			}
			waitOpenIdle(t, o, idle)
			o.Close()
			if err := o.Wait(); err != nil {
				t.Fatal(err)
			}
			if tf.graph.sched.clean {
				t.Fatal("a run steered from outside passes for clean")
			}
			before := ex.Stats()
			if err := ex.Run(tf).Wait(); err != nil {
				t.Fatal(err)
			}
			checkJoinResets(t, ex, before, false)
		})
	}
}
