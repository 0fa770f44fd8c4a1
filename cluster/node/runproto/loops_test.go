package runproto

import (
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
)

// nestedFlow: an outer loop (H … C) around an inner one (h, b, c), a join
// (j) of the inner loop's exit and the outer head, and an if/else (d) in
// the outer loop.
const nestedFlow = `
name: nested
tasks:
  - {name: t0, func: hash}
  - {name: H, func: hash, succeed: [t0]}
  - {name: h, func: hash, succeed: [H]}
  - {name: b, func: hash, succeed: [h]}
  - {name: c, kind: condition, func: loop, args: {n: 2}, succeed: [b], precede: [h, x]}
  - {name: x, func: hash}
  - {name: j, func: hash, succeed: [x, H]}
  - {name: d, kind: condition, func: loop, args: {n: 1}, succeed: [j], precede: [e, f]}
  - {name: e, func: hash}
  - {name: f, func: hash}
  - {name: C, kind: condition, func: loop, args: {n: 3}, succeed: [j], precede: [H, X]}
  - {name: X, func: hash}
`

// TestLoopsNumberAsASequentialRun runs nestedFlow on a sequential executor
// (Taskflow's join counters, loop conditions) and checks that every
// traversal's DstAct is the activation of its destination it starts or
// joins there.
func TestLoopsNumberAsASequentialRun(t *testing.T) {
	f, err := spec.Parse("nested.yaml", []byte(nestedFlow))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(spec.Options{Funcs: funcs.Default()}); err != nil {
		t.Fatal(err)
	}
	g, err := f.Expand()
	if err != nil {
		t.Fatal(err)
	}
	l := NewLoops(g)
	n := len(g.Vertices)
	type trav struct {
		src    int
		ctx    []uint64
		dstAct uint64
	}
	type act struct {
		v  int
		in []trav
	}
	acts := make([]uint64, n)
	cnt := make([]int, n)
	pend := make([][]trav, n)
	since := make([]int64, n) // loop: activations since it last returned 1
	picks := make([]map[int]uint64, n)
	queue := []act{{v: 0}}
	checked := 0
	for steps := 0; len(queue) > 0; steps++ {
		if steps > 10000 {
			t.Fatal("the run does not end")
		}
		a := queue[0]
		queue = queue[1:]
		v := a.v
		acts[v]++
		k := acts[v]
		srcs := make([]int, len(a.in))
		ctxs := make([][]uint64, len(a.in))
		for i, x := range a.in {
			srcs[i], ctxs[i] = x.src, x.ctx
			if x.dstAct != k {
				t.Errorf("%s#%d started by %s said it starts activation %d", g.Vertices[v].Path, k, g.Vertices[x.src].Path, x.dstAct)
			}
			checked++
		}
		ctx := l.Ctx(v, k, srcs, ctxs)
		vx := &g.Vertices[v]
		if vx.Task.Kind.IsCondition() {
			pick := 1
			lim, err := funcs.Args(vx.Task.Args).Int("n", 0)
			if err != nil {
				t.Fatal(err)
			}
			if since[v]++; since[v] <= lim {
				pick = 0
			} else {
				since[v] = 0
			}
			u := vx.Succ[pick].To
			if picks[v] == nil {
				picks[v] = map[int]uint64{}
			}
			picks[v][u]++
			queue = append(queue, act{u, []trav{{v, ctx, l.DstAct(v, k, ctx, u, false, picks[v][u])}}})
			continue
		}
		for _, e := range vx.Succ {
			u := e.To
			pend[u] = append(pend[u], trav{v, ctx, l.DstAct(v, k, ctx, u, true, 0)})
			if cnt[u]++; cnt[u] == g.Vertices[u].StrongIn {
				queue = append(queue, act{u, pend[u]})
				cnt[u], pend[u] = 0, nil
			}
		}
	}
	by := func(name string) uint64 {
		v, _ := g.Lookup(name)
		return acts[v]
	}
	// 4 outer rounds of 3 inner ones
	if by("H") != 4 || by("h") != 12 || by("x") != 4 || by("j") != 4 || by("X") != 1 || by("e")+by("f") != 4 {
		t.Fatalf("activations H %d h %d x %d j %d X %d e %d f %d", by("H"), by("h"), by("x"), by("j"), by("X"), by("e"), by("f"))
	}
	if checked < 40 {
		t.Fatalf("only %d traversals checked", checked)
	}
}
