package localexec

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitOrFail waits for f with a deadline instead of hanging the test.
func waitOrFail(t *testing.T, f *Future, what string) error {
	t.Helper()
	select {
	case <-f.Done():
		return f.Wait()
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not done after 20s", what)
		return nil
	}
}

func TestZeroFuture(t *testing.T) {
	var f Future
	done := make(chan error, 1)
	go func() { done <- f.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Wait on the zero Future blocks")
	}
	if f.Cancel() {
		t.Fatal("Cancel of the zero Future returned true")
	}
	select {
	case <-f.Done():
	default:
		t.Fatal("Done of the zero Future is not closed")
	}
	if err := f.Wait(); err != nil {
		t.Fatalf("Wait after Cancel = %v", err)
	}
}

func TestEmplaceContext(t *testing.T) {
	ex := newEx(t, WithWorkers(4))
	boom := errors.New("boom")

	t.Run("error fails the run and later tasks do not start", func(t *testing.T) {
		var after atomic.Int32
		tf := NewTaskflow("err")
		a := tf.EmplaceContext(func(ctx context.Context) error { return boom }).Name("A")
		b := tf.Emplace(func() { after.Add(1) }).Name("B")
		a.Precede(b)
		err := waitOrFail(t, ex.Run(tf), "run")
		var te *TaskError
		if !errors.As(err, &te) || te.Task != "A" || !errors.Is(err, boom) {
			t.Fatalf("err = %v, want a *TaskError naming A wrapping boom", err)
		}
		if after.Load() != 0 {
			t.Fatal("a successor of the failed task ran")
		}
	})

	t.Run("success and the context ends with the run", func(t *testing.T) {
		var got context.Context
		tf := NewTaskflow("ok")
		tf.EmplaceContext(func(ctx context.Context) error {
			if ctx.Err() != nil {
				t.Error("context cancelled while the run is going")
			}
			got = ctx
			return nil
		})
		if err := waitOrFail(t, ex.Run(tf), "run"); err != nil {
			t.Fatal(err)
		}
		if got.Err() == nil {
			t.Fatal("the run's context is not cancelled after the run")
		}
	})

	t.Run("another task's failure cancels the context", func(t *testing.T) {
		started := make(chan struct{})
		var cause error
		tf := NewTaskflow("cancel")
		tf.EmplaceContext(func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		}).Name("waiter")
		tf.EmplaceContext(func(ctx context.Context) error {
			<-started
			return boom
		}).Name("failer")
		err := waitOrFail(t, ex.Run(tf), "run")
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v, want the failer's", err)
		}
		if !errors.Is(cause, boom) {
			t.Fatalf("context cause = %v, want the run's error", cause)
		}
	})

	t.Run("Cancel cancels the context", func(t *testing.T) {
		started := make(chan struct{})
		tf := NewTaskflow("cancel")
		tf.EmplaceContext(func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return nil
		})
		f := ex.Run(tf)
		<-started
		f.Cancel()
		if err := waitOrFail(t, f, "run"); !errors.Is(err, ErrCancelled) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("panic", func(t *testing.T) {
		tf := NewTaskflow("panic")
		tf.EmplaceContext(func(ctx context.Context) error { panic("p") }).Name("P")
		var pe *PanicError
		if err := waitOrFail(t, ex.Run(tf), "run"); !errors.As(err, &pe) || pe.Task != "P" {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("in a subflow and a loop", func(t *testing.T) {
		var n atomic.Int32
		tf := NewTaskflow("loop")
		init := tf.Emplace(func() {})
		body := tf.EmplaceSubflow(func(sf *Subflow) {
			sf.EmplaceContext(func(ctx context.Context) error {
				if n.Add(1) == 5 {
					return boom
				}
				return nil
			})
		})
		cond := tf.EmplaceCondition(func() int { return 0 })
		init.Precede(body)
		body.Precede(cond)
		cond.Precede(body)
		if err := waitOrFail(t, ex.Run(tf), "run"); !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
		if n.Load() != 5 {
			t.Fatalf("the loop ran %d times after the failure", n.Load())
		}
	})
}

func TestNoSourceFailsTheRun(t *testing.T) {
	ex := newEx(t, WithWorkers(2))
	var ran atomic.Int32
	work := func() { ran.Add(1) }

	cycle := NewTaskflow("cycle")
	a := cycle.Emplace(work).Name("a")
	b := cycle.Emplace(work).Name("b")
	c := cycle.Emplace(work).Name("c")
	a.Precede(b)
	b.Precede(c)
	c.Precede(a)
	if err := waitOrFail(t, ex.Run(cycle), "run"); !errors.Is(err, ErrNoSource) || !strings.Contains(err.Error(), `"cycle"`) {
		t.Fatalf("err = %v, want ErrNoSource naming the taskflow", err)
	}
	// A loop through a condition task with no entry task cannot start either.
	loop := NewTaskflow("loop")
	x := loop.Emplace(work)
	cond := loop.EmplaceCondition(func() int { return 0 })
	x.Precede(cond)
	cond.Precede(x)
	if err := waitOrFail(t, ex.Run(loop), "run"); !errors.Is(err, ErrNoSource) {
		t.Fatalf("err = %v", err)
	}
	// In a module.
	outer := NewTaskflow("outer")
	outer.Emplace(work).Precede(outer.ComposedOf(cycle))
	if err := waitOrFail(t, ex.Run(outer), "run"); !errors.Is(err, ErrNoSource) {
		t.Fatalf("module: err = %v", err)
	}
	// In a subflow.
	sub := NewTaskflow("sub")
	sub.EmplaceSubflow(func(sf *Subflow) {
		p, q := sf.Emplace(work), sf.Emplace(work)
		p.Precede(q)
		q.Precede(p)
	}).Name("spawner")
	if err := waitOrFail(t, ex.Run(sub), "run"); !errors.Is(err, ErrNoSource) || !strings.Contains(err.Error(), "spawner") {
		t.Fatalf("subflow: err = %v", err)
	}
	if ran.Load() != 0 { // a composed graph is checked before the run starts
		t.Fatalf("%d tasks ran", ran.Load())
	}
	// Adding an entry task fixes it.
	e := cycle.Emplace(work)
	cycle.Placeholder().Succeed(e) // a second task, so e is the only source
	d := cycle.EmplaceCondition(func() int { return 1 })
	e.Precede(d)
	d.Precede(a)
	if err := waitOrFail(t, ex.Run(cycle), "run"); err != nil {
		t.Fatal(err)
	}
}

func TestSubflowJoin(t *testing.T) {
	ex := newEx(t, WithWorkers(4))

	t.Run("fib", func(t *testing.T) {
		var fibJ func(n int, sf *Subflow) int
		fibJ = func(n int, sf *Subflow) int {
			if n < 2 {
				return n
			}
			var a, b int
			sf.EmplaceSubflow(func(sf *Subflow) { a = fibJ(n-1, sf) })
			sf.EmplaceSubflow(func(sf *Subflow) { b = fibJ(n-2, sf) })
			if err := sf.Join(); err != nil {
				t.Error(err)
			}
			return a + b
		}
		var res int
		tf := NewTaskflow("fib")
		tf.EmplaceSubflow(func(sf *Subflow) { res = fibJ(22, sf) })
		if err := waitOrFail(t, ex.RunN(tf, 3), "run"); err != nil {
			t.Fatal(err)
		}
		if res != 17711 {
			t.Fatalf("fib(22) = %d", res)
		}
	})

	t.Run("children finish before Join returns; successors after the parent", func(t *testing.T) {
		var mu sync.Mutex
		var log []string
		say := func(s string) func() { return func() { mu.Lock(); log = append(log, s); mu.Unlock() } }
		tf := NewTaskflow("order")
		p := tf.EmplaceSubflow(func(sf *Subflow) {
			c1, c2 := sf.Emplace(say("c1")), sf.Emplace(say("c2"))
			c1.Precede(c2)
			if err := sf.Join(); err != nil {
				t.Error(err)
			}
			say("joined")()
			if err := sf.Join(); err != nil { // a second Join returns at once
				t.Error(err)
			}
		})
		p.Precede(tf.Emplace(say("after")))
		if err := waitOrFail(t, ex.Run(tf), "run"); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(log, " "); got != "c1 c2 joined after" {
			t.Fatalf("order: %s", got)
		}
	})

	t.Run("a failing child", func(t *testing.T) {
		var joinErr error
		tf := NewTaskflow("fail")
		tf.EmplaceSubflow(func(sf *Subflow) {
			sf.Emplace(func() { panic("child") }).Name("child")
			joinErr = sf.Join()
		})
		err := waitOrFail(t, ex.Run(tf), "run")
		var pe *PanicError
		if !errors.As(err, &pe) || pe.Task != "child" || joinErr != err {
			t.Fatalf("run err = %v, Join err = %v", err, joinErr)
		}
	})

	t.Run("misuse panics name it", func(t *testing.T) {
		for name, fn := range map[string]func(sf *Subflow){
			"after Join": func(sf *Subflow) { sf.Join(); sf.Emplace(func() {}) },
			"detached":   func(sf *Subflow) { sf.Detach(); sf.Join() },
			"detach":     func(sf *Subflow) { sf.Join(); sf.Detach() },
		} {
			tf := NewTaskflow(name)
			tf.EmplaceSubflow(fn).Name("S")
			var pe *PanicError
			if err := waitOrFail(t, ex.Run(tf), name); !errors.As(err, &pe) || pe.Task != "S" {
				t.Fatalf("%s: err = %v", name, err)
			}
		}
	})

	t.Run("retained children stay for Dump", func(t *testing.T) {
		tf := NewTaskflow("retain")
		tf.EmplaceSubflow(func(sf *Subflow) {
			sf.Retain(true)
			sf.Emplace(func() {}).Name("kept")
			sf.Join()
		})
		if err := waitOrFail(t, ex.RunN(tf, 2), "run"); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := tf.Dump(&b); err != nil || !strings.Contains(b.String(), "kept") {
			t.Fatalf("dump (%v): %s", err, b.String())
		}
	})
}

func TestDependentAsync(t *testing.T) {
	ex := newEx(t, WithWorkers(4))

	t.Run("order", func(t *testing.T) {
		// A diamond of layers: each task of layer i+1 depends on every
		// task of layer i.
		const layers, width = 20, 8
		var layer [layers]atomic.Int32
		prev := []*Future{}
		for i := 0; i < layers; i++ {
			var cur []*Future
			for j := 0; j < width; j++ {
				cur = append(cur, ex.DependentAsync(func() {
					if i > 0 && layer[i-1].Load() != width {
						t.Errorf("a task of layer %d started before layer %d finished", i, i-1)
					}
					layer[i].Add(1)
				}, prev...))
			}
			prev = cur
		}
		for _, f := range prev {
			if err := waitOrFail(t, f, "last layer"); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("after failures, cancels, runs and nothing", func(t *testing.T) {
		release := make(chan struct{})
		blocker := ex.Async(func() { <-release })
		failed := ex.Async(func() { panic("x") })
		var zero Future
		tf := NewTaskflow("run")
		tf.Emplace(func() {})
		run := ex.Run(tf)

		var ran, cancelledRan atomic.Bool
		cancelled := ex.DependentAsync(func() { cancelledRan.Store(true) }, blocker)
		after := ex.DependentAsync(func() {
			if !blocker.done() || !failed.done() || !run.done() {
				t.Error("started before its dependencies finished")
			}
			ran.Store(true)
		}, blocker, failed, nil, &zero, run, cancelled)
		if !cancelled.Cancel() {
			t.Fatal("Cancel of a waiting dependent async returned false")
		}
		if after.done() {
			t.Fatal("ran before blocker finished")
		}
		close(release)
		if err := waitOrFail(t, after, "after"); err != nil {
			t.Fatal(err)
		}
		if !ran.Load() || cancelledRan.Load() {
			t.Fatalf("ran %v, cancelled one ran %v", ran.Load(), cancelledRan.Load())
		}
		if err := cancelled.Wait(); !errors.Is(err, ErrCancelled) {
			t.Fatalf("cancelled: %v", err)
		}
		ex.WaitForAll()
	})

	t.Run("no dependencies", func(t *testing.T) {
		if err := waitOrFail(t, ex.DependentAsync(func() {}), "async"); err != nil {
			t.Fatal(err)
		}
	})
}
