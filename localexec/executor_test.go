package localexec

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPanicFailsRunAndLaterTasksDoNotStart(t *testing.T) {
	ex := newEx(t)
	var after atomic.Int32
	tf := NewTaskflow("panicky")
	a := tf.Emplace(func() {}).Name("a")
	boom := tf.Emplace(func() { panic("kaboom") }).Name("boom")
	c := tf.Emplace(func() { after.Add(1) }).Name("c")
	a.Precede(boom)
	boom.Precede(c)
	err := ex.Run(tf).Wait()
	var pe *PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("want *PanicError, got %v", err)
	}
	if pe.Task != "boom" || pe.Value != "kaboom" || !strings.Contains(string(pe.Stack), "executor_test.go") {
		t.Fatalf("panic error %+v, stack:\n%s", pe, pe.Stack)
	}
	if !strings.Contains(err.Error(), `"boom"`) || after.Load() != 0 {
		t.Fatalf("err %q, successor ran %d", err, after.Load())
	}
	// the executor stays healthy
	ok := NewTaskflow("ok")
	ran := false
	ok.Emplace(func() { ran = true })
	if err := ex.Run(ok).Wait(); err != nil || !ran {
		t.Fatalf("healthy run: %v %v", err, ran)
	}
	// and the same taskflow can run again once the panic is gone
	boomed := 0
	tf2 := NewTaskflow("again")
	tf2.Emplace(func() {
		boomed++
		if boomed == 1 {
			panic(errors.New("first time"))
		}
	}).Name("x")
	err = ex.Run(tf2).Wait()
	if !errors.As(err, &pe) || errors.Unwrap(pe) == nil {
		t.Fatalf("error panic should unwrap: %v", err)
	}
	if err := ex.Run(tf2).Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestPanicInSubflowConditionAndAsync(t *testing.T) {
	ex := newEx(t)
	tf := NewTaskflow("sf")
	tf.EmplaceSubflow(func(sf *Subflow) {
		sf.Emplace(func() { panic("child") }).Name("child")
	}).Name("parent")
	var pe *PanicError
	if err := ex.Run(tf).Wait(); !errors.As(err, &pe) || pe.Task != "child" {
		t.Fatalf("got %v", err)
	}
	tc := NewTaskflow("cond")
	tc.EmplaceCondition(func() int { panic(3) }).Name("c")
	if err := ex.Run(tc).Wait(); !errors.As(err, &pe) || pe.Task != "c" || pe.Value != 3 {
		t.Fatalf("got %v", err)
	}
	if err := ex.Async(func() { panic("async") }).Wait(); !errors.As(err, &pe) || pe.Value != "async" {
		t.Fatalf("got %v", err)
	}
}

func TestCancelStopsRun(t *testing.T) {
	ex := newEx(t)
	started := make(chan struct{})
	release := make(chan struct{})
	var later atomic.Int32
	tf := NewTaskflow("long")
	first := tf.Emplace(func() { close(started); <-release }).Name("first")
	prev := first
	for i := 0; i < 100; i++ {
		n := tf.Emplace(func() { later.Add(1) })
		prev.Precede(n)
		prev = n
	}
	fut := ex.Run(tf)
	<-started
	if !fut.Cancel() {
		t.Fatal("Cancel of a running run returned false")
	}
	close(release)
	err := fut.Wait()
	if !errors.Is(err, ErrCancelled) || later.Load() != 0 {
		t.Fatalf("err %v, later tasks ran %d", err, later.Load())
	}
	if fut.Cancel() {
		t.Fatal("Cancel of a finished run returned true")
	}
}

func TestCancelAsyncBeforeStart(t *testing.T) {
	ex := newEx(t, WithWorkers(1))
	block := make(chan struct{})
	started := make(chan struct{})
	f1 := ex.Async(func() { close(started); <-block })
	<-started
	var ran atomic.Bool
	f2 := ex.Async(func() { ran.Store(true) })
	if !f2.Cancel() {
		t.Fatal("cancel before start should succeed")
	}
	close(block)
	if err := f1.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := f2.Wait(); !errors.Is(err, ErrCancelled) {
		t.Fatalf("got %v", err)
	}
	ex.WaitForAll()
	if ran.Load() {
		t.Fatal("cancelled Async ran")
	}
}

func TestRunsOfOneTaskflowQueueInOrder(t *testing.T) {
	ex := newEx(t)
	var mu sync.Mutex
	var log []int
	var inside atomic.Int32
	cur := 0
	tf := NewTaskflow("q")
	tf.Emplace(func() {
		if inside.Add(1) != 1 {
			t.Error("two runs of one taskflow overlapped")
		}
		time.Sleep(50 * time.Microsecond)
		mu.Lock()
		log = append(log, cur)
		cur++
		mu.Unlock()
		inside.Add(-1)
	})
	var futs []*Future
	for i := 0; i < 50; i++ {
		futs = append(futs, ex.Run(tf))
	}
	for i, f := range futs {
		if err := f.Wait(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(log) < i+1 {
			t.Fatalf("future %d done before its run", i)
		}
		mu.Unlock()
	}
	if len(log) != 50 {
		t.Fatalf("%d runs", len(log))
	}
}

func TestRunNAndRunUntil(t *testing.T) {
	ex := newEx(t)
	var n atomic.Int32
	tf := NewTaskflow("n")
	a := tf.Emplace(func() { n.Add(1) })
	b := tf.Emplace(func() { n.Add(1) })
	a.Precede(b)
	if err := ex.RunN(tf, 100).Wait(); err != nil || n.Load() != 200 {
		t.Fatalf("%v %d", err, n.Load())
	}
	if err := ex.RunN(tf, 0).Wait(); err != nil || n.Load() != 200 {
		t.Fatalf("RunN 0: %v %d", err, n.Load())
	}
	k := 0
	if err := ex.RunUntil(tf, func() bool { k++; return k > 5 }).Wait(); err != nil || n.Load() != 210 {
		t.Fatalf("RunUntil: %v %d", err, n.Load())
	}
	if err := ex.RunUntil(tf, func() bool { return true }).Wait(); err != nil || n.Load() != 210 {
		t.Fatalf("RunUntil true at once must run nothing: %d", n.Load())
	}
}

func TestWaitForAllAndClose(t *testing.T) {
	ex := NewExecutor(WithWorkers(2), WithGPUs(0))
	var n atomic.Int32
	for i := 0; i < 1000; i++ {
		ex.Async(func() { n.Add(1) })
	}
	tf := NewTaskflow("x")
	for i := 0; i < 100; i++ {
		tf.Emplace(func() { n.Add(1) })
	}
	ex.RunN(tf, 10)
	ex.WaitForAll()
	if n.Load() != 2000 {
		t.Fatalf("%d", n.Load())
	}
	ex.Close()
	ex.Close()
	if err := ex.Run(tf).Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("run after close: %v", err)
	}
	if err := ex.Async(func() {}).Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("async after close: %v", err)
	}
}

func TestCloseWaitsForRunsInFlight(t *testing.T) {
	ex := NewExecutor(WithWorkers(2), WithGPUs(0))
	var done atomic.Bool
	tf := NewTaskflow("slow")
	tf.Emplace(func() { time.Sleep(20 * time.Millisecond); done.Store(true) })
	f := ex.Run(tf)
	ex.Close()
	if !done.Load() {
		t.Fatal("Close returned before the run finished")
	}
	if err := f.Wait(); err != nil {
		t.Fatal(err)
	}
}

// fib builds fib(n) as nested subflows (the seed's recursive example).
func fib(n int, out *int, sf *Subflow) {
	if n < 2 {
		*out = n
		return
	}
	var a, b int
	A := sf.EmplaceSubflow(func(s *Subflow) { fib(n-1, &a, s) })
	B := sf.EmplaceSubflow(func(s *Subflow) { fib(n-2, &b, s) })
	sum := sf.Emplace(func() { *out = a + b })
	sum.Succeed(A, B)
}

func TestRecursiveFibThroughNestedSubflows(t *testing.T) {
	ex := newEx(t, WithWorkers(2))
	n := 25
	if testing.Short() {
		n = 20
	}
	var res int
	tf := NewTaskflow("fib")
	tf.EmplaceSubflow(func(sf *Subflow) { fib(n, &res, sf) })
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	want := []int{0, 1}
	for len(want) <= n {
		want = append(want, want[len(want)-1]+want[len(want)-2])
	}
	if res != want[n] {
		t.Fatalf("fib(%d) = %d, want %d", n, res, want[n])
	}
}

func TestModuleConflicts(t *testing.T) {
	ex := newEx(t)
	sub := NewTaskflow("sub")
	sub.Emplace(func() {}).Name("s")

	par := NewTaskflow("parallel")
	m1 := par.ComposedOf(sub).Name("m1")
	m2 := par.ComposedOf(sub).Name("m2")
	err := ex.Run(par).Wait()
	if !errors.Is(err, ErrModuleConflict) || !strings.Contains(err.Error(), `"m1"`) || !strings.Contains(err.Error(), `"sub"`) {
		t.Fatalf("got %v", err)
	}
	// ordering them by a strong path fixes it
	m1.Precede(m2)
	if err := ex.Run(par).Wait(); err != nil {
		t.Fatal(err)
	}

	// a path through a condition (weak) does not order
	weak := NewTaskflow("weak")
	w1 := weak.ComposedOf(sub).Name("w1")
	c := weak.EmplaceCondition(func() int { return 0 }).Name("c")
	w2 := weak.ComposedOf(sub).Name("w2")
	w1.Precede(c)
	c.Precede(w2)
	if err := ex.Run(weak).Wait(); !errors.Is(err, ErrModuleConflict) {
		t.Fatalf("weak path: got %v", err)
	}

	// conflicts through nesting: outer composes sub directly and through mid
	mid := NewTaskflow("mid")
	mid.ComposedOf(sub)
	outer := NewTaskflow("outer")
	outer.ComposedOf(sub).Name("direct")
	outer.ComposedOf(mid).Name("via-mid")
	if err := ex.Run(outer).Wait(); !errors.Is(err, ErrModuleConflict) {
		t.Fatalf("nested: got %v", err)
	}

	// cycles
	x := NewTaskflow("x")
	y := NewTaskflow("y")
	x.ComposedOf(y)
	y.ComposedOf(x)
	if err := ex.Run(x).Wait(); !errors.Is(err, ErrModuleConflict) || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("cycle: got %v", err)
	}
	// modules inside a subflow are checked when it spawns
	s := NewTaskflow("spawn")
	s.EmplaceSubflow(func(sf *Subflow) { sf.ComposedOf(sub); sf.ComposedOf(sub) }).Name("sp")
	if err := ex.Run(s).Wait(); !errors.Is(err, ErrModuleConflict) {
		t.Fatalf("subflow modules: got %v", err)
	}
}

func TestModuleReusedInLoopAndSequence(t *testing.T) {
	ex := newEx(t)
	var cnt atomic.Int32
	body := NewTaskflow("body")
	a := body.Emplace(func() { cnt.Add(1) })
	b := body.Emplace(func() { cnt.Add(1) })
	a.Precede(b)
	tf := NewTaskflow("loop")
	i := 0
	init := tf.Emplace(func() { i = 0 })
	m := tf.ComposedOf(body)
	cond := tf.EmplaceCondition(func() int {
		i++
		if i < 10 {
			return 0
		}
		return 1
	})
	done := tf.Placeholder()
	init.Precede(m)
	m.Precede(cond)
	cond.Precede(m, done)
	if err := ex.RunN(tf, 3).Wait(); err != nil {
		t.Fatal(err)
	}
	if cnt.Load() != 60 {
		t.Fatalf("module bodies ran %d times, want 60", cnt.Load())
	}
}

func TestRuntimeScheduleAndCorun(t *testing.T) {
	ex := newEx(t, WithWorkers(2))
	var got []string
	var mu sync.Mutex
	add := func(s string) func() { return func() { mu.Lock(); got = append(got, s); mu.Unlock() } }
	inner := NewTaskflow("inner")
	for i := 0; i < 100; i++ {
		inner.Emplace(add("inner"))
	}
	tf := NewTaskflow("rt")
	var skipped Task
	cond := tf.EmplaceCondition(func() int { return 5 }).Name("cond") // picks nothing
	r := tf.EmplaceRuntime(func(rt *Runtime) {
		if err := rt.Corun(inner); err != nil {
			t.Error(err)
		}
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n != 100 {
			t.Errorf("corun returned before inner finished: %d", n)
		}
		rt.Schedule(skipped)
		if rt.Cancelled() {
			t.Error("not cancelled")
		}
	}).Name("r")
	skipped = tf.Emplace(add("scheduled")).Name("skipped")
	cond.Precede(skipped)
	_ = r
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 101 || got[100] != "scheduled" {
		t.Fatalf("got %d entries, last %q", len(got), got[len(got)-1])
	}
}

// Corun inside every task of a wide graph on 2 workers must not deadlock.
func TestCorunDoesNotBlockWorkers(t *testing.T) {
	ex := newEx(t, WithWorkers(2))
	var n atomic.Int32
	tf := NewTaskflow("outer")
	for i := 0; i < 8; i++ {
		inner := NewTaskflow(fmt.Sprint("inner", i))
		for j := 0; j < 50; j++ {
			inner.Emplace(func() { n.Add(1) })
		}
		tf.EmplaceRuntime(func(rt *Runtime) {
			if err := rt.Corun(inner); err != nil {
				t.Error(err)
			}
		})
	}
	if err := ex.Run(tf).Wait(); err != nil || n.Load() != 400 {
		t.Fatalf("%v %d", err, n.Load())
	}
}

func TestAsyncFromTasks(t *testing.T) {
	ex := newEx(t)
	var n atomic.Int32
	tf := NewTaskflow("spawner")
	tf.Emplace(func() {
		for i := 0; i < 100; i++ {
			ex.Async(func() { n.Add(1) })
		}
	})
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	ex.WaitForAll()
	if n.Load() != 100 {
		t.Fatalf("%d", n.Load())
	}
}

// randomDAG builds a DAG with n tasks and edges only from lower to higher
// index, recording each task's strong predecessors.
func randomDAG(tf *Taskflow, rng *rand.Rand, n int, runs []atomic.Int32, order *[]int, mu *sync.Mutex, t *testing.T) {
	tasks := make([]Task, n)
	preds := make([][]int, n)
	for i := 0; i < n; i++ {
		i := i
		tasks[i] = tf.Emplace(func() {
			for _, p := range preds[i] {
				if runs[p].Load() <= runs[i].Load() {
					t.Errorf("task %d ran before its predecessor %d", i, p)
				}
			}
			runs[i].Add(1)
		}).Name(fmt.Sprint(i))
	}
	for i := 1; i < n; i++ {
		k := rng.Intn(4)
		for e := 0; e < k; e++ {
			p := rng.Intn(i)
			if !containsInt(preds[i], p) {
				preds[i] = append(preds[i], p)
				tasks[p].Precede(tasks[i])
			}
		}
	}
}

func containsInt(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func TestPropertyRandomDAGs(t *testing.T) {
	ex := newEx(t)
	rng := rand.New(rand.NewSource(42))
	for g := 0; g < 60; g++ {
		n := 1 + rng.Intn(300)
		runs := make([]atomic.Int32, n)
		tf := NewTaskflow("dag")
		randomDAG(tf, rng, n, runs, nil, nil, t)
		iters := 1 + rng.Intn(5)
		if err := ex.RunN(tf, iters).Wait(); err != nil {
			t.Fatal(err)
		}
		for i := range runs {
			if int(runs[i].Load()) != iters {
				t.Fatalf("graph %d: task %d ran %d times, want %d", g, i, runs[i].Load(), iters)
			}
		}
	}
}

// No lost wake-up: a task releasing 1,000 independent tasks gets every worker
// busy; repeated 1,000 times, it never hangs.
func TestNoLostWakeup(t *testing.T) {
	ex := newEx(t, WithWorkers(4))
	reps := 1000
	if testing.Short() {
		reps = 100
	}
	tf := NewTaskflow("burst")
	src := tf.Emplace(func() {})

	var ran atomic.Int32
	for i := 0; i < 1000; i++ {
		tf.Emplace(func() { ran.Add(1) }).Succeed(src)
	}

	for r := 0; r < reps; r++ {
		fut := ex.Run(tf)
		select {
		case <-fut.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("rep %d hung: %d of 1000 ran; stats %+v", r, ran.Load(), ex.Stats())
		}
	}
	if int(ran.Load()) != 1000*reps {
		t.Fatalf("ran %d", ran.Load())
	}
}

// Every worker takes part in a burst that is long enough to need them.
func TestBurstUsesEveryWorker(t *testing.T) {
	ex := newEx(t, WithWorkers(4))
	var seen sync.Map
	tf := NewTaskflow("burst")
	src := tf.EmplaceRuntime(func(rt *Runtime) {})
	for i := 0; i < 1000; i++ {
		tf.EmplaceRuntime(func(rt *Runtime) {
			seen.Store(rt.WorkerID(), true)
			deadline := time.Now().Add(200 * time.Microsecond)
			for time.Now().Before(deadline) {
			}
		}).Succeed(src)
	}
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	n := 0
	seen.Range(func(any, any) bool { n++; return true })
	if n != 4 {
		t.Fatalf("only %d of 4 workers ran tasks of a 200 ms burst", n)
	}
}

// A DAG cut short by a panic leaves partial join counters; the next run must
// reset them (the clean-run shortcut must not apply).
func TestRerunAfterPanicResetsCounters(t *testing.T) {
	ex := newEx(t, WithWorkers(2))
	var count atomic.Int32
	armed := true
	tf := NewTaskflow("wave")
	n := 30
	grid := make([]Task, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			i, j := i, j
			grid[i*n+j] = tf.Emplace(func() {
				if armed && i == n/2 && j == n/2 {
					panic("mid")
				}
				count.Add(1)
			})
			if i > 0 {
				grid[(i-1)*n+j].Precede(grid[i*n+j])
			}
			if j > 0 {
				grid[i*n+j-1].Precede(grid[i*n+j])
			}
		}
	}
	if err := ex.RunN(tf, 2).Wait(); err == nil {
		t.Fatal("want the panic")
	}
	armed = false
	for rep := 0; rep < 3; rep++ {
		count.Store(0)
		if err := ex.Run(tf).Wait(); err != nil {
			t.Fatal(err)
		}
		if int(count.Load()) != n*n {
			t.Fatalf("rep %d: %d of %d tasks ran", rep, count.Load(), n*n)
		}
	}
}

// A static task's panic unwinds to the worker's inline loop (runGuarded),
// not to a defer of its own: the panicking task must still be the one named,
// the run that held it must fail while other runs on the same workers go on,
// and a panic in a task co-run by a runtime task must fail the enclosing run
// through the inner loop's guard.
func TestPanicMidChainAndInCorun(t *testing.T) {
	ex := newEx(t, WithWorkers(2))
	const links = 200
	for round := 0; round < 50; round++ {
		bad := NewTaskflow("bad")
		var prev Task
		for i := 0; i < links; i++ {
			i := i
			cur := bad.Emplace(func() {
				if i == links/2 {
					panic(fmt.Sprintf("link %d", i))
				}
			}).Name(fmt.Sprintf("link%d", i))
			if i > 0 {
				prev.Precede(cur)
			}
			prev = cur
		}
		good := NewTaskflow("good")
		var ran atomic.Int32
		for i := 0; i < links; i++ {
			good.Emplace(func() { ran.Add(1) })
		}
		fb, fg := ex.Run(bad), ex.Run(good)
		var pe *PanicError
		if err := fb.Wait(); !errors.As(err, &pe) || pe.Task != fmt.Sprintf("link%d", links/2) || pe.Value != fmt.Sprintf("link %d", links/2) {
			t.Fatalf("round %d: bad run: %v", round, err)
		}
		if err := fg.Wait(); err != nil || ran.Load() != links {
			t.Fatalf("round %d: good run: %v, %d of %d tasks", round, err, ran.Load(), links)
		}
	}
	inner := NewTaskflow("inner")
	inner.Emplace(func() {}).Name("i0").Precede(inner.Emplace(func() { panic("inner") }).Name("i1"))
	outer := NewTaskflow("outer")
	after := false
	outer.EmplaceRuntime(func(rt *Runtime) { _ = rt.Corun(inner) }).Name("rt").
		Precede(outer.Emplace(func() { after = true }).Name("after"))
	var pe *PanicError
	if err := ex.Run(outer).Wait(); !errors.As(err, &pe) || pe.Task != "i1" || after {
		t.Fatalf("corun panic: %v (successor ran: %v)", err, after)
	}
	if err := ex.Run(inner).Wait(); !errors.As(err, &pe) || pe.Task != "i1" {
		t.Fatalf("inner alone: %v", err)
	}
}

// Successor arrays are carved from per-graph slabs and move when they fill
// up: edges added to several tasks in turn, past the slab-carved sizes into
// heap-allocated ones, must keep every task's successors whole and in
// Precede order (a condition's index depends on it).
func TestSuccessorArraysInterleavedAndGrown(t *testing.T) {
	ex := newEx(t, WithWorkers(2))
	tf := NewTaskflow("edges")
	const heads, fan = 3, 300
	var hits [heads][fan]atomic.Int32
	var srcs [heads]Task
	var picked [heads]atomic.Int32
	for h := range srcs {
		h := h
		srcs[h] = tf.EmplaceCondition(func() int { return int(picked[h].Load()) }).Name(fmt.Sprintf("c%d", h))
	}
	for i := 0; i < fan; i++ {
		for h := range srcs { // interleaved: each head's array grows in turn
			h, i := h, i
			srcs[h].Precede(tf.Emplace(func() { hits[h][i].Add(1) }).Name(fmt.Sprintf("s%d_%d", h, i)))
		}
	}
	for h := range srcs {
		if got := srcs[h].NumSuccessors(); got != fan {
			t.Fatalf("c%d has %d successors, want %d", h, got, fan)
		}
	}
	for _, pick := range []int{0, 1, 127, 128, 129, 255, 256, 299} {
		for h := range picked {
			picked[h].Store(int32((pick + h) % fan))
		}
		if err := ex.Run(tf).Wait(); err != nil {
			t.Fatal(err)
		}
		for h := range hits {
			for i := range hits[h] {
				want := int32(0)
				if i == (pick+h)%fan {
					want = 1
				}
				if got := hits[h][i].Swap(0); got != want {
					t.Fatalf("pick %d: c%d's successor %d ran %d times, want %d", pick, h, i, got, want)
				}
			}
		}
	}
}
