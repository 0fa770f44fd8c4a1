package funcs_test

import (
	"context"
	"math"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
)

// simulate runs a graph (no modules) one task at a time with Taskflow's
// rules: a strong edge decrements its target's join counter, which runs and
// resets at zero; a condition schedules the successor its index selects.
// It returns each task's activations and outputs. It stands in for the
// node's runtime to check that the built-ins give the documented runs.
func simulate(t *testing.T, g *spec.Graph, r *funcs.Registry) (acts []uint64, outs [][]byte) {
	t.Helper()
	n := g.Len()
	acts, outs = make([]uint64, n), make([][]byte, n)
	states := make([][]byte, n)
	counter := make([]int, n)
	for i := range counter {
		counter[i] = g.StrongPredCount(i)
	}
	queue := g.Sources()
	for steps := 0; len(queue) > 0; steps++ {
		if steps > 1e6 {
			t.Fatal("run does not end")
		}
		v := queue[0]
		queue = queue[1:]
		vx := &g.Vertices[v]
		acts[v]++
		inputs := map[string][]byte{}
		for _, p := range g.StrongPreds(v) {
			if acts[p] > 0 {
				inputs[g.Vertices[p].Name()] = outs[p]
			}
		}
		res, err := r.Invoke(context.Background(), vx.Task.Func, &funcs.Call{Task: vx.Name(), Path: vx.Path, Args: vx.Task.Args, Inputs: inputs, Activation: acts[v], Domain: vx.Task.Domain, State: states[v]})
		if err != nil {
			t.Fatal(err)
		}
		outs[v], states[v] = res.Output, res.State
		succ := vx.Succ
		switch vx.Task.Kind {
		case spec.KindCondition:
			if res.Choice >= 0 && res.Choice < len(succ) {
				queue = append(queue, succ[res.Choice].To)
			}
		case spec.KindMultiCondition:
			for _, c := range res.Choices {
				if c >= 0 && c < len(succ) {
					queue = append(queue, succ[c].To)
				}
			}
		default:
			for _, ch := range res.Children {
				if _, err := r.Invoke(context.Background(), ch.Func, &funcs.Call{Task: ch.Name, Args: ch.Args, Activation: acts[v]}); err != nil {
					t.Fatal(err)
				}
			}
			for _, e := range succ {
				if counter[e.To]--; counter[e.To] == 0 {
					counter[e.To] = g.StrongPredCount(e.To)
					queue = append(queue, e.To)
				}
			}
		}
	}
	return acts, outs
}

func example(t *testing.T, name string) *spec.Graph {
	t.Helper()
	for _, ex := range spec.Examples() {
		if ex.Name == name {
			f, err := ex.Parse()
			if err != nil {
				t.Fatal(err)
			}
			g, err := f.Expand()
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
	}
	t.Fatalf("no example %s", name)
	return nil
}

func TestSimDoWhile(t *testing.T) {
	g := example(t, "listing5-dowhile")
	acts, outs := simulate(t, g, funcs.Default())
	body, _ := g.Lookup("body")
	cond, _ := g.Lookup("cond")
	done, _ := g.Lookup("done")
	if acts[body] != 100 || acts[cond] != 100 || acts[done] != 1 {
		t.Errorf("body %d, cond %d, done %d; want 100, 100, 1", acts[body], acts[cond], acts[done])
	}
	if want := funcs.HashOf("done", nil); string(outs[done]) != string(want[:]) {
		t.Error("done's output")
	}
}

func TestSimNestedLoops(t *testing.T) {
	// An outer do-while (n=1) around an inner one (n=2): the inner body runs
	// 3 times per outer iteration, because loop restarts its count after
	// returning 1.
	f, err := spec.Parse("nested.yaml", []byte(`
name: nested
tasks:
  - {name: init, func: noop}
  - {name: inner, func: noop, succeed: [init]}
  - {name: icond, kind: condition, func: loop, args: {n: 2}, succeed: [inner], precede: [inner, outer]}
  - {name: outer, kind: condition, func: loop, args: {n: 1}, precede: [inner, done]}
  - {name: done, func: noop}
`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := f.Expand()
	if err != nil {
		t.Fatal(err)
	}
	acts, _ := simulate(t, g, funcs.Default())
	want := map[string]uint64{"init": 1, "inner": 6, "icond": 6, "outer": 2, "done": 1}
	for name, w := range want {
		if i, _ := g.Lookup(name); acts[i] != w {
			t.Errorf("%s ran %d times, want %d", name, acts[i], w)
		}
	}
}

func TestSimStaticHashes(t *testing.T) {
	g := example(t, "listing1-static")
	_, outs := simulate(t, g, funcs.Default())
	a := funcs.HashOf("A", nil)
	b := funcs.HashOf("B", map[string][]byte{"A": a[:]})
	c := funcs.HashOf("C", map[string][]byte{"A": a[:]})
	d := funcs.HashOf("D", map[string][]byte{"B": b[:], "C": c[:]})
	if i, _ := g.Lookup("D"); string(outs[i]) != string(d[:]) {
		t.Errorf("D = %x, want %x", outs[i], d)
	}
}

// TestSimFigure5 runs the seed's Figure 5 for 2000 seed triples: F1 runs 8
// times on average and 14 condition tasks run in all (each pass from F1
// reaches stop with probability 1/8).
func TestSimFigure5(t *testing.T) {
	g := example(t, "listing6-nested-loops")
	f1, _ := g.Lookup("F1")
	stop, _ := g.Lookup("stop")
	conds := []int{f1}
	for _, n := range []string{"F2", "F3"} {
		i, _ := g.Lookup(n)
		conds = append(conds, i)
	}
	const runs = 2000
	var sumF1, sumConds float64
	for s := int64(0); s < runs; s++ {
		for k, c := range conds {
			g.Vertices[c].Task.Args = map[string]any{"p": 0.5, "seed": s*3 + int64(k)}
		}
		acts, _ := simulate(t, g, funcs.Default())
		if acts[stop] != 1 {
			t.Fatalf("seed %d: stop ran %d times", s, acts[stop])
		}
		sumF1 += float64(acts[f1])
		for _, c := range conds {
			sumConds += float64(acts[c])
		}
	}
	// F1's count is geometric with p = 1/8: sd sqrt(56), so the mean of 2000
	// has sd 0.17; allow 6 of them.
	if m := sumF1 / runs; math.Abs(m-8) > 1 {
		t.Errorf("F1 ran %.2f times on average, want 8", m)
	}
	if m := sumConds / runs; math.Abs(m-14) > 2 {
		t.Errorf("%.2f condition tasks ran on average, want 14", m)
	}
}
