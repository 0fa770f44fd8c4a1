package localexec_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/hetflow/hetflow/localexec"
)

// Listing 1: A runs before B and C; D runs after B and C.
func Example_listing1() {
	ex := localexec.NewExecutor(localexec.WithWorkers(2), localexec.WithGPUs(0))
	defer ex.Close()

	var mu sync.Mutex
	var log []string
	say := func(s string) func() { return func() { mu.Lock(); log = append(log, s); mu.Unlock() } }

	tf := localexec.NewTaskflow("listing1")
	A := tf.Emplace(say("A")).Name("A")
	B := tf.Emplace(say("B")).Name("B")
	C := tf.Emplace(say("C")).Name("C")
	D := tf.Emplace(say("D")).Name("D")
	A.Precede(B, C)
	D.Succeed(B, C)
	if err := ex.Run(tf).Wait(); err != nil {
		fmt.Println(err)
	}
	sort.Strings(log[1:3]) // B and C may run in either order
	fmt.Println(log)
	// Output: [A B C D]
}

// Listing 2: B spawns a subflow B1→B3, B2→B3 that joins B, so D waits for B3.
func Example_listing2Subflow() {
	ex := localexec.NewExecutor(localexec.WithWorkers(2), localexec.WithGPUs(0))
	defer ex.Close()

	var mu sync.Mutex
	var log []string
	say := func(s string) func() { return func() { mu.Lock(); log = append(log, s); mu.Unlock() } }

	tf := localexec.NewTaskflow("listing2")
	A := tf.Emplace(say("A")).Name("A")
	C := tf.Emplace(say("C")).Name("C")
	D := tf.Emplace(say("D")).Name("D")
	B := tf.EmplaceSubflow(func(sf *localexec.Subflow) {
		B1 := sf.Emplace(say("B1")).Name("B1")
		B2 := sf.Emplace(say("B2")).Name("B2")
		B3 := sf.Emplace(say("B3")).Name("B3")
		B3.Succeed(B1, B2)
	}).Name("B")
	A.Precede(B, C)
	D.Succeed(B, C)
	_ = ex.Run(tf).Wait()
	fmt.Println(log[0], log[len(log)-1], len(log))
	// Output: A D 6
}

// Listing 3: taskflow2 runs C, then D (a subflow D1→D2), then E, a module
// task over taskflow1 (A→B).
func Example_listing3Module() {
	ex := localexec.NewExecutor(localexec.WithWorkers(2), localexec.WithGPUs(0))
	defer ex.Close()

	var log []string // tasks here run one at a time, in order
	say := func(s string) func() { return func() { log = append(log, s) } }

	tf1 := localexec.NewTaskflow("taskflow1")
	A := tf1.Emplace(say("A")).Name("A")
	B := tf1.Emplace(say("B")).Name("B")
	A.Precede(B)

	tf2 := localexec.NewTaskflow("taskflow2")
	C := tf2.Emplace(say("C")).Name("C")
	D := tf2.EmplaceSubflow(func(sf *localexec.Subflow) {
		D1 := sf.Emplace(say("D1")).Name("D1")
		D2 := sf.Emplace(say("D2")).Name("D2")
		D1.Precede(D2)
	}).Name("D")
	E := tf2.ComposedOf(tf1).Name("E")
	C.Precede(D)
	D.Precede(E)
	_ = ex.Run(tf2).Wait()
	fmt.Println(log)
	// Output: [C D1 D2 A B]
}

// Listing 4: if-else. cond returns 0, which picks yes.
func Example_listing4IfElse() {
	ex := localexec.NewExecutor(localexec.WithWorkers(2), localexec.WithGPUs(0))
	defer ex.Close()

	tf := localexec.NewTaskflow("listing4")
	init := tf.Emplace(func() { fmt.Println("init") }).Name("init")
	cond := tf.EmplaceCondition(func() int { return 0 }).Name("cond")
	yes := tf.Emplace(func() { fmt.Println("yes") }).Name("yes")
	no := tf.Emplace(func() { fmt.Println("no") }).Name("no")
	init.Precede(cond)
	cond.Precede(yes, no) // 0 → yes, 1 → no
	_ = ex.Run(tf).Wait()
	// Output:
	// init
	// yes
}

// Listing 5: do-while. body runs 100 times, then done once.
func Example_listing5DoWhile() {
	ex := localexec.NewExecutor(localexec.WithWorkers(2), localexec.WithGPUs(0))
	defer ex.Close()

	i := 0
	tf := localexec.NewTaskflow("listing5")
	init := tf.Emplace(func() { i = 0 }).Name("init")
	body := tf.Emplace(func() { i++ }).Name("body")
	cond := tf.EmplaceCondition(func() int {
		if i < 100 {
			return 0
		}
		return 1
	}).Name("cond")
	done := tf.Emplace(func() { fmt.Println("done after", i, "iterations") }).Name("done")
	init.Precede(body)
	body.Precede(cond)
	cond.Precede(body, done)
	_ = ex.Run(tf).Wait()
	// Output: done after 100 iterations
}

// Listing 6: nested non-deterministic loops: F1, F2 and F3 each flip a
// fair coin, moving on or going back to F1. Averaged over many runs, F1
// runs about 8 times and 14 condition tasks run in all.
func Example_listing6NondeterministicLoops() {
	ex := localexec.NewExecutor(localexec.WithWorkers(2), localexec.WithGPUs(0))
	defer ex.Close()

	rng := rand.New(rand.NewSource(7))
	f1, conds := 0, 0
	coin := func(isF1 bool) func() int {
		return func() int {
			conds++
			if isF1 {
				f1++
			}
			return rng.Intn(2)
		}
	}
	tf := localexec.NewTaskflow("listing6")
	init := tf.Emplace(func() {}).Name("init")
	F1 := tf.EmplaceCondition(coin(true)).Name("F1")
	F2 := tf.EmplaceCondition(coin(false)).Name("F2")
	F3 := tf.EmplaceCondition(coin(false)).Name("F3")
	stop := tf.Emplace(func() {}).Name("stop")
	init.Precede(F1)
	F1.Precede(F2, F1)
	F2.Precede(F3, F1)
	F3.Precede(stop, F1)

	const runs = 10000
	_ = ex.RunN(tf, runs).Wait()
	fmt.Printf("F1 ≈ %.0f, conditions ≈ %.0f per run\n", float64(f1)/runs, float64(conds)/runs)
	// Output: F1 ≈ 8, conditions ≈ 14 per run
}

// Dump writes Graphviz DOT; condition edges are dashed.
func ExampleTaskflow_Dump() {
	tf := localexec.NewTaskflow("if-else")
	cond := tf.EmplaceCondition(func() int { return 0 }).Name("cond")
	yes := tf.Emplace(func() {}).Name("yes")
	no := tf.Emplace(func() {}).Name("no")
	cond.Precede(yes, no)
	_ = tf.Dump(os.Stdout)
	// Output:
	// digraph "Taskflow: if-else" {
	//   compound=true;
	//   n0 [label="cond", shape=diamond, color=black, fillcolor=aquamarine, style=filled];
	//   n1 [label="yes"];
	//   n2 [label="no"];
	//   n0 -> n1 [style=dashed, label="0"];
	//   n0 -> n2 [style=dashed, label="1"];
	// }
}

// Async runs a function on a worker; its Future reports a panic as an error.
func ExampleExecutor_Async() {
	ex := localexec.NewExecutor(localexec.WithWorkers(2), localexec.WithGPUs(0))
	defer ex.Close()
	f := ex.Async(func() { fmt.Println("hello from a worker") })
	_ = f.Wait()
	// Output: hello from a worker
}

// SilentAsync is Taskflow's silent_async: it runs a function on a worker and
// returns nothing to wait on, which makes it cheaper than Async; WaitForAll
// waits for every call.
func ExampleExecutor_SilentAsync() {
	ex := localexec.NewExecutor(localexec.WithWorkers(2), localexec.WithGPUs(0))
	defer ex.Close()
	var sum atomic.Int64
	for i := 1; i <= 100; i++ {
		ex.SilentAsync(func() { sum.Add(int64(i)) })
	}
	ex.WaitForAll()
	fmt.Println(sum.Load())
	// Output: 5050
}

// The zero Future is empty, as Taskflow's default future is: it refers to
// no work, so Wait returns at once and Cancel has nothing to cancel.
func ExampleFuture_zero() {
	var f localexec.Future
	fmt.Println(f.Wait(), f.Cancel())
	<-f.Done()
	// Output: <nil> false
}

// A task that can fail without panicking, shaped like a function given to
// errgroup's Go: its error fails the run, wrapped in a *TaskError that
// names the task, and tasks not yet started do not start. The context is
// cancelled with the run: a long task watches it to stop early.
func ExampleTaskflow_EmplaceContext() {
	ex := localexec.NewExecutor(localexec.WithWorkers(2), localexec.WithGPUs(0))
	defer ex.Close()

	errNotFound := errors.New("config not found")
	tf := localexec.NewTaskflow("load")
	load := tf.EmplaceContext(func(ctx context.Context) error {
		return fmt.Errorf("reading app.yaml: %w", errNotFound)
	}).Name("load")
	parse := tf.Emplace(func() { fmt.Println("parse never runs") }).Name("parse")
	load.Precede(parse)

	err := ex.Run(tf).Wait()
	var te *localexec.TaskError
	fmt.Println(errors.As(err, &te), te.Task, errors.Is(err, errNotFound))
	fmt.Println(err)
	// Output:
	// true load true
	// localexec: task "load": reading app.yaml: config not found
}

// Subflow.Join runs the children spawned so far and returns when they are
// done, so that the parent reads their results: recursive Fibonacci, each
// level a subflow that spawns two and adds what they computed.
func ExampleSubflow_Join() {
	ex := localexec.NewExecutor(localexec.WithWorkers(2), localexec.WithGPUs(0))
	defer ex.Close()

	var fib func(n int, sf *localexec.Subflow) int
	fib = func(n int, sf *localexec.Subflow) int {
		if n < 2 {
			return n
		}
		var a, b int
		sf.EmplaceSubflow(func(sf *localexec.Subflow) { a = fib(n-1, sf) })
		sf.EmplaceSubflow(func(sf *localexec.Subflow) { b = fib(n-2, sf) })
		if err := sf.Join(); err != nil {
			return 0
		}
		return a + b // both children have finished
	}
	var res int
	tf := localexec.NewTaskflow("fib")
	tf.EmplaceSubflow(func(sf *localexec.Subflow) { res = fib(20, sf) })
	if err := ex.Run(tf).Wait(); err != nil {
		fmt.Println(err)
	}
	fmt.Println(res)
	// Output: 6765
}

// DependentAsync is Taskflow's dependent async: C starts after both A and B
// have finished, D after C.
func ExampleExecutor_DependentAsync() {
	ex := localexec.NewExecutor(localexec.WithWorkers(2), localexec.WithGPUs(0))
	defer ex.Close()

	var mu sync.Mutex
	var log []string
	say := func(s string) func() { return func() { mu.Lock(); log = append(log, s); mu.Unlock() } }

	A := ex.Async(say("A"))
	B := ex.Async(say("B"))
	C := ex.DependentAsync(say("C"), A, B)
	D := ex.DependentAsync(say("D"), C)
	if err := D.Wait(); err != nil {
		fmt.Println(err)
	}
	sort.Strings(log[:2]) // A and B may run in either order
	fmt.Println(log)
	// Output: [A B C D]
}

// A graph in which every task has a predecessor (a cycle with no condition
// task) could never start: Run says so instead of running nothing.
func ExampleErrNoSource() {
	ex := localexec.NewExecutor(localexec.WithWorkers(2), localexec.WithGPUs(0))
	defer ex.Close()

	tf := localexec.NewTaskflow("cycle")
	a := tf.Emplace(func() {}).Name("a")
	b := tf.Emplace(func() {}).Name("b")
	a.Precede(b)
	b.Precede(a)
	err := ex.Run(tf).Wait()
	fmt.Println(errors.Is(err, localexec.ErrNoSource))
	fmt.Println(err)
	// Output:
	// true
	// localexec: no source task: every one of the 2 tasks of taskflow "cycle" has a predecessor, so none can start (a cycle needs a condition task and an entry task without predecessors)
}
