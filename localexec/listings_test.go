package localexec

import (
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// recorder logs task names in execution order, safely across workers.
type recorder struct {
	mu  sync.Mutex
	log []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

func (r *recorder) task(s string) func() { return func() { r.add(s) } }

func (r *recorder) index(s string) int { return slices.Index(r.log, s) }

func before(t *testing.T, r *recorder, a, b string) {
	t.Helper()
	ia, ib := r.index(a), r.index(b)
	if ia < 0 || ib < 0 || ia > ib {
		t.Fatalf("want %s before %s; log %v", a, b, r.log)
	}
}

func newEx(t *testing.T, opts ...Option) *Executor {
	t.Helper()
	ex := NewExecutor(append([]Option{WithWorkers(4), WithGPUs(0)}, opts...)...)
	t.Cleanup(func() { ex.Close() })
	return ex
}

func TestListing1Static(t *testing.T) {
	ex := newEx(t)
	for rep := 0; rep < 200; rep++ {
		r := &recorder{}
		tf := NewTaskflow("listing1")
		A := tf.Emplace(r.task("A")).Name("A")
		B := tf.Emplace(r.task("B")).Name("B")
		C := tf.Emplace(r.task("C")).Name("C")
		D := tf.Emplace(r.task("D")).Name("D")
		A.Precede(B, C)
		D.Succeed(B, C)
		if err := ex.Run(tf).Wait(); err != nil {
			t.Fatal(err)
		}
		if len(r.log) != 4 {
			t.Fatalf("ran %v", r.log)
		}
		before(t, r, "A", "B")
		before(t, r, "A", "C")
		before(t, r, "B", "D")
		before(t, r, "C", "D")
		if A.String() != "A" || D.NumStrongPredecessors() != 2 {
			t.Fatalf("names/preds wrong")
		}
	}
}

func TestListing2Subflow(t *testing.T) {
	ex := newEx(t)
	for rep := 0; rep < 200; rep++ {
		r := &recorder{}
		tf := NewTaskflow("listing2")
		A := tf.Emplace(r.task("A")).Name("A")
		C := tf.Emplace(r.task("C")).Name("C")
		D := tf.Emplace(r.task("D")).Name("D")
		B := tf.EmplaceSubflow(func(sf *Subflow) {
			r.add("B")
			B1 := sf.Emplace(r.task("B1")).Name("B1")
			B2 := sf.Emplace(r.task("B2")).Name("B2")
			B3 := sf.Emplace(r.task("B3")).Name("B3")
			B3.Succeed(B1, B2)
		}).Name("B")
		A.Precede(B, C)
		D.Succeed(B, C)
		if err := ex.Run(tf).Wait(); err != nil {
			t.Fatal(err)
		}
		if len(r.log) != 7 {
			t.Fatalf("ran %v", r.log)
		}
		before(t, r, "A", "B")
		before(t, r, "B", "B1")
		before(t, r, "B1", "B3")
		before(t, r, "B2", "B3")
		before(t, r, "B3", "D") // joined: D waits for B3
		before(t, r, "C", "D")
	}
}

func TestDetachedSubflowFinishesBeforeRunEnds(t *testing.T) {
	ex := newEx(t)
	for rep := 0; rep < 100; rep++ {
		var children atomic.Int32
		gate := make(chan struct{})
		var dRan atomic.Bool
		tf := NewTaskflow("detach")
		B := tf.EmplaceSubflow(func(sf *Subflow) {
			for i := 0; i < 3; i++ {
				sf.Emplace(func() { <-gate; children.Add(1) })
			}
			sf.Detach()
		}).Name("B")
		D := tf.Emplace(func() { dRan.Store(true); close(gate) }).Name("D")
		B.Precede(D)
		// D runs while the detached children are still blocked on gate:
		// proof that D did not wait for them.
		if err := ex.Run(tf).Wait(); err != nil {
			t.Fatal(err)
		}
		if !dRan.Load() || children.Load() != 3 {
			t.Fatalf("d=%v children=%d: run ended before detached children", dRan.Load(), children.Load())
		}
	}
}

func TestListing3Module(t *testing.T) {
	ex := newEx(t)
	r := &recorder{}
	tf1 := NewTaskflow("taskflow1")
	a := tf1.Emplace(r.task("A")).Name("A")
	b := tf1.Emplace(r.task("B")).Name("B")
	a.Precede(b)
	tf2 := NewTaskflow("taskflow2")
	C := tf2.Emplace(r.task("C")).Name("C")
	D := tf2.EmplaceSubflow(func(sf *Subflow) {
		r.add("D")
		d1 := sf.Emplace(r.task("D1")).Name("D1")
		d2 := sf.Emplace(r.task("D2")).Name("D2")
		d1.Precede(d2)
	}).Name("D")
	E := tf2.ComposedOf(tf1).Name("E")
	C.Precede(D)
	D.Precede(E)
	for rep := 0; rep < 100; rep++ {
		r.log = nil
		if err := ex.Run(tf2).Wait(); err != nil {
			t.Fatal(err)
		}
		want := []string{"C", "D", "D1", "D2", "A", "B"}
		if !slices.Equal(r.log, want) {
			t.Fatalf("got %v want %v", r.log, want)
		}
	}
}

func TestListing4IfElse(t *testing.T) {
	ex := newEx(t)
	for _, pick := range []int{0, 1, 2} {
		r := &recorder{}
		tf := NewTaskflow("listing4")
		init := tf.Emplace(r.task("init")).Name("init")
		cond := tf.EmplaceCondition(func() int { return pick }).Name("cond")
		yes := tf.Emplace(r.task("yes")).Name("yes")
		no := tf.Emplace(r.task("no")).Name("no")
		init.Precede(cond)
		cond.Precede(yes, no)
		if err := ex.Run(tf).Wait(); err != nil {
			t.Fatal(err)
		}
		want := map[int][]string{0: {"init", "yes"}, 1: {"init", "no"}, 2: {"init"}}[pick]
		if !slices.Equal(r.log, want) {
			t.Fatalf("pick %d: got %v want %v", pick, r.log, want)
		}
	}
}

func TestListing5DoWhile(t *testing.T) {
	ex := newEx(t)
	tf := NewTaskflow("listing5")
	i := 0
	var body, done int
	init := tf.Emplace(func() { i = 0 }).Name("init")
	b := tf.Emplace(func() { i++; body++ }).Name("body")
	cond := tf.EmplaceCondition(func() int {
		if i < 100 {
			return 0
		}
		return 1
	}).Name("cond")
	d := tf.Emplace(func() { done++ }).Name("done")
	init.Precede(b)
	b.Precede(cond)
	cond.Precede(b, d)
	for rep := 1; rep <= 20; rep++ {
		if err := ex.Run(tf).Wait(); err != nil {
			t.Fatal(err)
		}
		if body != 100*rep || done != rep {
			t.Fatalf("rep %d: body %d done %d", rep, body, done)
		}
	}
}

// figure5 builds Listing 6: init→F1, F1→[F2,F1], F2→[F3,F1], F3→[stop,F1],
// each condition a fair coin drawn from rng.
func figure5(tf *Taskflow, rng *rand.Rand, f1runs, conds, stops *int) {
	coin := func(counter *int) func() int {
		return func() int {
			*conds++
			if counter != nil {
				*counter++
			}
			return rng.Intn(2)
		}
	}
	init := tf.Emplace(func() {}).Name("init")
	F1 := tf.EmplaceCondition(coin(f1runs)).Name("F1")
	F2 := tf.EmplaceCondition(coin(nil)).Name("F2")
	F3 := tf.EmplaceCondition(coin(nil)).Name("F3")
	stop := tf.Emplace(func() { *stops++ }).Name("stop")
	init.Precede(F1)
	// index 0 moves on, index 1 loops back to F1
	F1.Precede(F2, F1)
	F2.Precede(F3, F1)
	F3.Precede(stop, F1)
}

func TestListing6NestedNondeterministicLoops(t *testing.T) {
	ex := newEx(t)
	rng := rand.New(rand.NewSource(1))
	tf := NewTaskflow("listing6")
	var f1, conds, stops int
	figure5(tf, rng, &f1, &conds, &stops)
	const runs = 4000
	if err := ex.RunN(tf, runs).Wait(); err != nil {
		t.Fatal(err)
	}
	if stops != runs {
		t.Fatalf("stop ran %d times, want %d", stops, runs)
	}
	// F1 runs 8 times on average, 14 condition tasks in all (the seed's Figure 5).
	avgF1 := float64(f1) / runs
	avgConds := float64(conds) / runs
	if avgF1 < 7.3 || avgF1 > 8.7 || avgConds < 12.8 || avgConds > 15.2 {
		t.Fatalf("F1 %.2f (want ≈8), conditions %.2f (want ≈14) per run", avgF1, avgConds)
	}
}

func TestMultiCondition(t *testing.T) {
	ex := newEx(t)
	r := &recorder{}
	tf := NewTaskflow("multi")
	m := tf.EmplaceMultiCondition(func() []int { return []int{0, 2, 2, 7, -1} }).Name("m")
	a := tf.Emplace(r.task("a"))
	b := tf.Emplace(r.task("b"))
	c := tf.Emplace(r.task("c"))
	join := tf.Emplace(r.task("join"))
	m.Precede(a, b, c)
	join.Succeed(a, c) // strong preds a and c; both picked
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(r.log)
	if !slices.Equal(r.log, []string{"a", "c", "join"}) {
		t.Fatalf("got %v", r.log)
	}
}

// Figure 6: three condition loops; the first independent of the other two,
// which run one after the other.
func TestFigure6ThreeLoops(t *testing.T) {
	ex := newEx(t)
	tf := NewTaskflow("figure6")
	loop := func(name string, n int, counter *atomic.Int32) (entry, exit Task) {
		i := 0
		init := tf.Emplace(func() { i = 0 }).Name(name + "_init")
		body := tf.Emplace(func() { i++; counter.Add(1) }).Name(name + "_body")
		cond := tf.EmplaceCondition(func() int {
			if i < n {
				return 0
			}
			return 1
		}).Name(name + "_cond")
		out := tf.Placeholder().Name(name + "_out")
		init.Precede(body)
		body.Precede(cond)
		cond.Precede(body, out)
		return init, out
	}
	var c1, c2, c3 atomic.Int32
	var order []string
	var mu sync.Mutex
	note := func(s string) func() { return func() { mu.Lock(); order = append(order, s); mu.Unlock() } }
	start := tf.Emplace(func() {}).Name("start")
	e1, x1 := loop("c1", 50, &c1)
	e2, x2 := loop("c2", 30, &c2)
	e3, x3 := loop("c3", 40, &c3)
	x2.Work(note("c2 done"))
	b3 := tf.Emplace(note("c3 start")).Name("c3_gate")
	b3.Precede(e3)
	start.Precede(e1, e2)
	x2.Precede(b3)
	end := tf.Emplace(func() {}).Name("end")
	end.Succeed(x1, x3)
	if err := ex.RunN(tf, 10).Wait(); err != nil {
		t.Fatal(err)
	}
	if c1.Load() != 500 || c2.Load() != 300 || c3.Load() != 400 {
		t.Fatalf("loop bodies: %d %d %d", c1.Load(), c2.Load(), c3.Load())
	}
	for i := 0; i < len(order); i += 2 {
		if order[i] != "c2 done" || order[i+1] != "c3 start" {
			t.Fatalf("c3 must start after c2: %v", order)
		}
	}
}
