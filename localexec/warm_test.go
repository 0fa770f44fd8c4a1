package localexec

import (
	"math"
	"math/rand"
	"sync/atomic"
	"testing"
	"unsafe"
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

// TestHints: a carried task's hint names entry i of its run's tables
// (Taskflow.SetHints, copied into each run when it is submitted), none
// beyond them, and Hint(-1) clears it; a hint adds nothing to the node (one
// cache line), and tasks with hints, in range or not, run as any other. The
// successors warmClosures warms (the first warmMax) have hints inside the
// tables and beyond them (past n, and near math.MaxUint32), so the run's
// bound check is taken both ways (under -race, checkptr sees an address
// formed past a table). No test can see a prefetch missing or made: it
// changes nothing but the time.
func TestHints(t *testing.T) {
	if n := unsafe.Sizeof(node{}); n != 64 {
		t.Fatalf("node is %d bytes, not one cache line", n)
	}
	type entry [64]byte
	a, b := make([]entry, 10), make([]entry, 10)
	tf := NewTaskflow("hints")
	var ran atomic.Int32
	count := func(*int64) { ran.Add(1) }
	src := tf.EmplaceCarried(count).Hint(0)
	for i := range 3 * warmMax {
		hint := i // i%3 == 0: inside the tables up to 9
		switch i % 3 {
		case 1:
			hint = 10 + i // beyond them
		case 2:
			hint = math.MaxUint32 - 1 // the largest hint: entry MaxUint32-1
		}
		src.Precede(tf.EmplaceCarried(count).Hint(hint))
	}
	if got := src.n.hint; got != 1 {
		t.Fatalf("Hint(0) holds %d, want 1", got)
	}
	for _, i := range []int{-1, math.MaxUint32} {
		if got := NewTaskflow("cleared").EmplaceCarried(count).Hint(3).Hint(i).n.hint; got != 0 {
			t.Errorf("Hint(3).Hint(%d) holds %d, want 0 (none)", i, got)
		}
	}
	tf.SetHints(unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0]), len(a), unsafe.Sizeof(entry{}))
	h := tf.hints
	for i, want := range []unsafe.Pointer{unsafe.Pointer(&a[0]), unsafe.Pointer(&a[3]), unsafe.Pointer(&a[9]), nil, nil} {
		if got := h.line(h.a, []uint32{0, 3, 9, 10, math.MaxUint32}[i]); got != want {
			t.Errorf("case %d: line %p, want %p", i, got, want)
		}
	}
	if got := h.line(h.b, 9); got != unsafe.Pointer(&b[9]) {
		t.Errorf("b's line 9 is %p, want %p", got, &b[9])
	}
	ex := newEx(t, WithWarmSuccessors())
	fut := ex.Run(tf)
	if err := fut.Wait(); err != nil {
		t.Fatal(err)
	}
	if fut.topo.hints != h {
		t.Errorf("the run holds tables %+v, want its taskflow's %+v", fut.topo.hints, h)
	}
	tf.SetHints(nil, nil, 0, 0) // none: the next run's lines are nil
	fut = ex.Run(tf)
	if err := fut.Wait(); err != nil {
		t.Fatal(err)
	}
	if nh := fut.topo.hints; nh.line(nh.a, 0) != nil {
		t.Errorf("a run after SetHints(nil) has tables %+v", nh)
	}
	if got, want := ran.Load(), int32(2*(1+3*warmMax)); got != want {
		t.Fatalf("%d functions ran, want %d", got, want)
	}
}
