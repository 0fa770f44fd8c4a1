package coord

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// verdictFlow: a source, a fan of two into a join, a do-while loop, and a
// module whose instance has a source.
const verdictFlow = `
flows:
  - name: main
    tasks:
      - {name: src, func: noop}
      - {name: a, func: noop, succeed: [src]}
      - {name: b, func: noop, succeed: [src]}
      - {name: join, func: noop, succeed: [a, b]}
      - {name: body, func: noop, succeed: [join]}
      - {name: cond, kind: condition, func: loop, args: {n: 2}, succeed: [body], precede: [body, done]}
      - {name: done, func: noop}
      - {name: after, func: noop, succeed: [body]}
      - {name: mod, kind: module, flow: inner, succeed: [done]}
  - name: inner
    tasks:
      - {name: x, func: noop}
      - {name: y, func: noop, succeed: [x]}
`

// complete is the record of a correct run: every task done, the loop body
// and "after" three times.
func complete() map[string][2]uint64 { // name → {activations, executions}
	return map[string][2]uint64{"src": {1, 1}, "a": {1, 1}, "b": {1, 1}, "join": {1, 1}, "body": {3, 3},
		"cond": {3, 3}, "done": {1, 1}, "after": {3, 3}, "mod": {1, 1}, "mod/x": {1, 1}, "mod/y": {1, 1}}
}

func foldOf(g *spec.Graph, rec map[string][2]uint64, state map[string]transport.TaskState) *Fold {
	f := NewFold()
	f.KeepProof() // the leader's: CheckSuccess examines the rows not proved
	for name, ae := range rec {
		st := transport.TaskDone
		if s, ok := state[name]; ok {
			st = s
		}
		f.Add(g, &transport.TaskEvent{Run: "r", Gen: 1, Name: name, Node: "n1", Act: ae[0], Executions: ae[1], State: st})
	}
	return f
}

func TestCheckSuccess(t *testing.T) {
	g := expand(t, verdictFlow)
	cases := []struct {
		name   string
		edit   func(rec map[string][2]uint64)
		state  map[string]transport.TaskState
		owed   []string // substrings of the owed tasks' reports, in order
		failed []string
	}{
		{name: "a complete run stands"},
		{name: "a condition's branch not taken is not owed", edit: func(r map[string][2]uint64) {
			// the loop left at once: body and after once, done once
			r["body"], r["cond"], r["after"] = [2]uint64{1, 1}, [2]uint64{1, 1}, [2]uint64{1, 1}
		}},
		{name: "a task still running", state: map[string]transport.TaskState{"a": transport.TaskRunning},
			owed: []string{"task a: activation 1 is still running on node n1"}},
		{name: "the join skipped behind a fan that ran", edit: func(r map[string][2]uint64) {
			for _, k := range []string{"join", "body", "cond", "done", "after", "mod", "mod/x", "mod/y"} {
				delete(r, k)
			}
		}, owed: []string{"task join: never ran although its strong predecessors (a, b) all did"}},
		{name: "a fan task pending: the join is not owed yet, the fan task is", edit: func(r map[string][2]uint64) {
			for _, k := range []string{"b", "join", "body", "cond", "done", "after", "mod", "mod/x", "mod/y"} {
				delete(r, k)
			}
		}, owed: []string{"task b: never ran although its strong predecessors (src) all did"}},
		{name: "the source never ran", edit: func(r map[string][2]uint64) {
			for k := range r {
				delete(r, k)
			}
		}, owed: []string{"task src: a source of the flow never ran"}},
		{name: "a loop's strong successor ran fewer times than the body", edit: func(r map[string][2]uint64) {
			r["after"] = [2]uint64{2, 2}
		}, owed: []string{"task after: ran 2 times, its strong predecessor body 3 times"}},
		{name: "after a re-execution activations are not compared", edit: func(r map[string][2]uint64) {
			r["after"] = [2]uint64{2, 3}
		}},
		{name: "a module ran but its instance's source did not", edit: func(r map[string][2]uint64) {
			delete(r, "mod/x")
			delete(r, "mod/y")
		}, owed: []string{"task mod/x: a source of module mod never ran although the module ran 1 times"}},
		{name: "a task failed", state: map[string]transport.TaskState{"join": transport.TaskFailed}, failed: []string{"join"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := complete()
			if c.edit != nil {
				c.edit(rec)
			}
			f := foldOf(g, rec, c.state)
			owed, failed := CheckSuccess(g, f)
			if wo, wf := CheckEveryRow(g, f); !reflect.DeepEqual(owed, wo) || !reflect.DeepEqual(failed, wf) {
				t.Fatalf("the rows not proved show owed %v, failed %v; every row owed %v, failed %v", owed, failed, wo, wf)
			}
			if len(owed) != len(c.owed) {
				t.Fatalf("owed %v, want %d reports like %q", owed, len(c.owed), c.owed)
			}
			for i, o := range owed {
				if !strings.Contains(o.String(), c.owed[i]) {
					t.Errorf("owed[%d] = %q, want %q", i, o, c.owed[i])
				}
			}
			if strings.Join(failed, ",") != strings.Join(c.failed, ",") {
				t.Errorf("failed %v, want %v", failed, c.failed)
			}
		})
	}
}

// A failed task's error is said once: the node's text names the task and
// the registry's sentinel again, which the run's error drops.
func TestFailText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`task "b": funcs: task failed: boom`, "boom"},
		{`task "b": timed out after 50ms`, "timed out after 50ms"},
		{"boom", "boom"},
		{`task "other": boom`, `task "other": boom`},
	} {
		if got := failText("b", c.in); got != c.want {
			t.Errorf("failText(b, %q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The record check through a verdict plan (the graph read into flat
// arrays once, kept for the graph's runs) finds what the check over the
// graph's vertices (checkSuccessBefore, as CheckSuccess was) finds, on
// random records of a graph with loops, modules, joins and subflows: the
// same owed tasks, for the same reasons, and the same failed tasks.
func TestVerdictPlanChecksAsTheGraph(t *testing.T) {
	for _, g := range []*spec.Graph{expand(t, verdictFlow), subflowGraph(t)} {
		p := verdictPlanOf(g)
		if p != verdictPlanOf(g) {
			t.Fatal("a graph's verdict plan made again")
		}
		for seed := range uint64(500) {
			rng := rand.New(rand.NewPCG(seed, 5))
			f := NewFold()
			for range rng.IntN(3 * len(g.Vertices)) {
				f.Add(g, &transport.TaskEvent{Run: "r", Gen: 1, Task: uint32(rng.IntN(len(g.Vertices))), Node: []string{"n1", "n2"}[rng.IntN(2)],
					State: []transport.TaskState{transport.TaskDone, transport.TaskDone, transport.TaskRunning, transport.TaskFailed}[rng.IntN(4)],
					Act:   uint64(rng.IntN(4)), Executions: uint64(rng.IntN(4))})
			}
			wo, wf := checkSuccessBefore(g, f)
			for _, check := range []func() ([]Owed, []string){func() ([]Owed, []string) { return p.check(g, f) }, func() ([]Owed, []string) { return CheckSuccess(g, f) }} {
				if o, fl := check(); !reflect.DeepEqual(o, wo) || !reflect.DeepEqual(fl, wf) {
					t.Fatalf("seed %d: %v %v, want %v %v", seed, o, fl, wo, wf)
				}
			}
		}
	}
}

// checkSuccessBefore is CheckSuccess as it was, over the graph's vertices.
func checkSuccessBefore(g *spec.Graph, f *Fold) (owed []Owed, failed []string) {
	if g == nil || f == nil {
		return nil, nil
	}
	acts := func(v int) (*taskAgg, uint64) {
		a := f.vertAgg(v)
		if a == nil {
			return nil, 0
		}
		return a, a.act
	}
	var strong []int // of the vertex at hand (reused)
	for i := range g.Vertices {
		v := &g.Vertices[i]
		a, act := acts(i)
		if a != nil {
			switch a.state {
			case transport.TaskRunning:
				owed = append(owed, Owed{v.Path, fmt.Sprintf("activation %d is still running on node %s", act, f.nodeOf(a))})
				continue
			case transport.TaskFailed:
				failed = append(failed, v.Path)
				continue
			}
		}
		if len(v.Pred) == 0 {
			switch {
			case v.Parent < 0 && act == 0:
				owed = append(owed, Owed{v.Path, "a source of the flow never ran"})
			case v.Parent >= 0 && act == 0:
				if _, mact := acts(v.Parent); mact > 0 {
					owed = append(owed, Owed{v.Path, fmt.Sprintf("a source of module %s never ran although the module ran %d times", g.Vertices[v.Parent].Path, mact)})
				}
			}
			continue
		}
		if v.StrongIn == 0 {
			continue // reached through conditions only: it runs when one picks it
		}
		strong = strong[:0]
		for _, e := range v.Pred {
			if !e.Weak {
				strong = append(strong, e.From)
			}
		}
		all := true
		for _, p := range strong {
			pa, pact := acts(p)
			if pact == 0 || pa.state != transport.TaskDone {
				all = false
				break
			}
		}
		if all && act == 0 {
			names := make([]string, len(strong))
			for k, p := range strong {
				names[k] = g.Vertices[p].Path
			}
			owed = append(owed, Owed{v.Path, fmt.Sprintf("never ran although its strong predecessors (%s) all did", strings.Join(names, ", "))})
			continue
		}
		if len(strong) == 1 {
			pa, pact := acts(strong[0])
			if act < pact && f.clean(a) && f.clean(pa) {
				owed = append(owed, Owed{v.Path, fmt.Sprintf("ran %d times, its strong predecessor %s %d times", act, g.Vertices[strong[0]].Path, pact)})
			}
		}
	}
	return owed, failed
}
