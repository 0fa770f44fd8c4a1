// Command listings runs the seed paper's Listings 1–6 on the local executor
// and prints what each computes, checking each against what the graph
// promises; it exits non-zero on a mismatch.
package main

import (
	"flag"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/hetflow/hetflow/localexec"
)

func main() {
	workers := flag.Int("workers", 4, "CPU workers")
	dot := flag.Bool("dot", false, "also print each graph as Graphviz DOT")
	flag.Parse()
	ex := localexec.NewExecutor(localexec.WithWorkers(*workers), localexec.WithGPUs(0))
	defer ex.Close()

	ok := true
	for _, l := range []struct {
		name string
		run  func(*localexec.Executor) (*localexec.Taskflow, string, error)
	}{
		{"Listing 1 (static: A→B, A→C, B→D, C→D)", listing1},
		{"Listing 2 (subflow: B spawns B1→B3, B2→B3, joined)", listing2},
		{"Listing 3 (module: C→D→E, D a subflow, E runs taskflow1)", listing3},
		{"Listing 4 (if-else: cond→[yes, no])", listing4},
		{"Listing 5 (do-while: init→body→cond→[body, done])", listing5},
		{"Listing 6 (nested non-deterministic loops F1, F2, F3)", listing6},
	} {
		tf, out, err := l.run(ex)
		status := "ok"
		if err != nil {
			status, ok = "FAIL: "+err.Error(), false
		}
		fmt.Printf("%-58s %s\n    %s\n", l.name, status, out)
		if *dot {
			_ = tf.Dump(os.Stdout)
		}
	}
	if !ok {
		os.Exit(1)
	}
}

type logger struct {
	mu  sync.Mutex
	log []string
}

func (l *logger) task(s string) func() {
	return func() { l.mu.Lock(); l.log = append(l.log, s); l.mu.Unlock() }
}

func precedes(log []string, pairs ...[2]string) error {
	for _, p := range pairs {
		a, b := slices.Index(log, p[0]), slices.Index(log, p[1])
		if a < 0 || b < 0 || a > b {
			return fmt.Errorf("%s must run before %s (ran %v)", p[0], p[1], log)
		}
	}
	return nil
}

func listing1(ex *localexec.Executor) (*localexec.Taskflow, string, error) {
	l := &logger{}
	tf := localexec.NewTaskflow("listing1")
	A := tf.Emplace(l.task("A")).Name("A")
	B := tf.Emplace(l.task("B")).Name("B")
	C := tf.Emplace(l.task("C")).Name("C")
	D := tf.Emplace(l.task("D")).Name("D")
	A.Precede(B, C)
	D.Succeed(B, C)
	if err := ex.Run(tf).Wait(); err != nil {
		return tf, "", err
	}
	return tf, "ran " + strings.Join(l.log, " "), precedes(l.log, [2]string{"A", "B"}, [2]string{"A", "C"}, [2]string{"B", "D"}, [2]string{"C", "D"})
}

func listing2(ex *localexec.Executor) (*localexec.Taskflow, string, error) {
	l := &logger{}
	tf := localexec.NewTaskflow("listing2")
	A := tf.Emplace(l.task("A")).Name("A")
	C := tf.Emplace(l.task("C")).Name("C")
	D := tf.Emplace(l.task("D")).Name("D")
	B := tf.EmplaceSubflow(func(sf *localexec.Subflow) {
		l.task("B")()
		B1 := sf.Emplace(l.task("B1")).Name("B1")
		B2 := sf.Emplace(l.task("B2")).Name("B2")
		B3 := sf.Emplace(l.task("B3")).Name("B3")
		B3.Succeed(B1, B2)
		sf.Retain(true) // keep the children for -dot
	}).Name("B")
	A.Precede(B, C)
	D.Succeed(B, C)
	if err := ex.Run(tf).Wait(); err != nil {
		return tf, "", err
	}
	return tf, "ran " + strings.Join(l.log, " "), precedes(l.log, [2]string{"A", "B"}, [2]string{"B1", "B3"}, [2]string{"B2", "B3"}, [2]string{"B3", "D"}, [2]string{"C", "D"})
}

func listing3(ex *localexec.Executor) (*localexec.Taskflow, string, error) {
	l := &logger{}
	tf1 := localexec.NewTaskflow("taskflow1")
	A := tf1.Emplace(l.task("A")).Name("A")
	B := tf1.Emplace(l.task("B")).Name("B")
	A.Precede(B)
	tf2 := localexec.NewTaskflow("taskflow2")
	C := tf2.Emplace(l.task("C")).Name("C")
	D := tf2.EmplaceSubflow(func(sf *localexec.Subflow) {
		D1 := sf.Emplace(l.task("D1")).Name("D1")
		D2 := sf.Emplace(l.task("D2")).Name("D2")
		D1.Precede(D2)
		sf.Retain(true)
	}).Name("D")
	E := tf2.ComposedOf(tf1).Name("E")
	C.Precede(D)
	D.Precede(E)
	if err := ex.Run(tf2).Wait(); err != nil {
		return tf2, "", err
	}
	want := []string{"C", "D1", "D2", "A", "B"}
	var err error
	if !slices.Equal(l.log, want) {
		err = fmt.Errorf("ran %v, want %v", l.log, want)
	}
	return tf2, "ran " + strings.Join(l.log, " "), err
}

func listing4(ex *localexec.Executor) (*localexec.Taskflow, string, error) {
	var out []string
	var tf *localexec.Taskflow
	for _, pick := range []int{0, 1} {
		l := &logger{}
		tf = localexec.NewTaskflow("listing4")
		init := tf.Emplace(l.task("init")).Name("init")
		cond := tf.EmplaceCondition(func() int { return pick }).Name("cond")
		yes := tf.Emplace(l.task("yes")).Name("yes")
		no := tf.Emplace(l.task("no")).Name("no")
		init.Precede(cond)
		cond.Precede(yes, no)
		if err := ex.Run(tf).Wait(); err != nil {
			return tf, "", err
		}
		want := map[int]string{0: "init yes", 1: "init no"}[pick]
		got := strings.Join(l.log, " ")
		if got != want {
			return tf, got, fmt.Errorf("cond=%d ran %q, want %q", pick, got, want)
		}
		out = append(out, fmt.Sprintf("cond returns %d: %s", pick, got))
	}
	return tf, strings.Join(out, "; "), nil
}

func listing5(ex *localexec.Executor) (*localexec.Taskflow, string, error) {
	i, bodies, dones := 0, 0, 0
	tf := localexec.NewTaskflow("listing5")
	init := tf.Emplace(func() { i = 0 }).Name("init")
	body := tf.Emplace(func() { i++; bodies++ }).Name("body")
	cond := tf.EmplaceCondition(func() int {
		if i < 100 {
			return 0
		}
		return 1
	}).Name("cond")
	done := tf.Emplace(func() { dones++ }).Name("done")
	init.Precede(body)
	body.Precede(cond)
	cond.Precede(body, done)
	if err := ex.Run(tf).Wait(); err != nil {
		return tf, "", err
	}
	out := fmt.Sprintf("body ran %d times, done %d time(s), i = %d", bodies, dones, i)
	if bodies != 100 || dones != 1 {
		return tf, out, fmt.Errorf("want body 100 times and done once")
	}
	return tf, out, nil
}

func listing6(ex *localexec.Executor) (*localexec.Taskflow, string, error) {
	rng := rand.New(rand.NewSource(2021))
	f1, conds, stops := 0, 0, 0
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
	stop := tf.Emplace(func() { stops++ }).Name("stop")
	init.Precede(F1)
	F1.Precede(F2, F1)
	F2.Precede(F3, F1)
	F3.Precede(stop, F1)
	const runs = 10000
	if err := ex.RunN(tf, runs).Wait(); err != nil {
		return tf, "", err
	}
	a, c := float64(f1)/runs, float64(conds)/runs
	out := fmt.Sprintf("over %d runs: F1 ran %.2f times and %.2f condition tasks ran per run (expected 8 and 14); stop ran %d times", runs, a, c, stops)
	var err error
	if stops != runs || a < 7.5 || a > 8.5 || c < 13.3 || c > 14.7 {
		err = fmt.Errorf("averages far from the expectation")
	}
	return tf, out, err
}
