package localexec

import (
	"math/rand"
	"sync/atomic"
	"testing"
)

// TestWarmSuccessors: with WithWarmSuccessors a worker asks for the lines
// of a carried task's successors before it runs the task, and of their
// closures after, and nothing else changes (prefetches: nothing to see but
// the time): random DAGs, a carried source's fan-out, wider
// than warmMax, and successors of every kind (a condition, whose node has
// no static function, a subflow, a module) run each task once per
// iteration, in order.
func TestWarmSuccessors(t *testing.T) {
	ex := newEx(t, WithWarmSuccessors())
	rng := rand.New(rand.NewSource(7))
	for g := 0; g < 40; g++ {
		n := 1 + rng.Intn(300)
		runs := make([]atomic.Int32, n)
		tf := NewTaskflow("dag")
		randomDAG(tf, rng, n, runs, nil, nil, t)
		iters := 1 + rng.Intn(4)
		if err := ex.RunN(tf, iters).Wait(); err != nil {
			t.Fatal(err)
		}
		for i := range runs {
			if int(runs[i].Load()) != iters {
				t.Fatalf("graph %d: task %d ran %d times, want %d", g, i, runs[i].Load(), iters)
			}
		}
	}

	// A fan-out of 3*warmMax static tasks, a condition, a subflow and a
	// module after one source, all before one sink.
	var ran atomic.Int32
	tf := NewTaskflow("kinds")
	count := func(*int64) { ran.Add(1) }
	src := tf.EmplaceCarried(count)
	sink := tf.EmplaceCarried(count)
	for i := range 3 * warmMax {
		if i%2 == 0 {
			src.Precede(tf.EmplaceCarried(count).Precede(sink))
		} else {
			src.Precede(tf.Emplace(func() { ran.Add(1) }).Precede(sink))
		}
	}
	cond := tf.EmplaceCondition(func() int { ran.Add(1); return 0 })
	after := tf.Emplace(func() { ran.Add(1) })
	cond.Precede(after)
	sf := tf.EmplaceSubflow(func(sf *Subflow) { sf.Emplace(func() { ran.Add(1) }); ran.Add(1) })
	inner := NewTaskflow("inner")
	inner.Emplace(func() { ran.Add(1) })
	mod := tf.ComposedOf(inner)
	src.Precede(cond, sf, mod)
	sf.Precede(sink)
	mod.Precede(sink)
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	// src, sink, the fan, cond, after, the subflow and its child, the module's task
	if got, want := ran.Load(), int32(2+3*warmMax+2+2+1); got != want {
		t.Fatalf("%d functions ran, want %d", got, want)
	}
}
