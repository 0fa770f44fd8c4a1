package coord

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
)

func offeredOf(nodes map[string][]string) *funcs.Offered {
	var ns []proto.NodeFuncs
	for id, fs := range nodes {
		nf := proto.NodeFuncs{Node: id}
		for _, f := range fs {
			nf.Funcs = append(nf.Funcs, proto.FuncInfo{Name: f, Kind: "static", Domains: []string{"cpu"}})
		}
		ns = append(ns, nf)
	}
	return funcs.NewOffered(ns, nil)
}

func graphOf(t *testing.T, text string, o *funcs.Offered) *spec.Graph {
	t.Helper()
	f, err := spec.Parse("f.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	g, err := f.Compile(spec.Options{Funcs: o})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Every task lands on a node that has its function: the nodes with all of
// the flow's functions when there are some, else a pin per task.
func TestPlaceByFunction(t *testing.T) {
	alive := []Node{{ID: "a", CPUs: 2}, {ID: "b", CPUs: 2}, {ID: "c", CPUs: 2}}
	o := offeredOf(map[string][]string{"a": {"x", "y"}, "b": {"x", "y", "z"}, "c": {"x", "z"}})
	flow := "name: f\ntasks:\n  - {name: t1, func: x}\n  - {name: t2, func: y}\n  - {name: t3, func: x, succeed: [t1]}\n"
	g := graphOf(t, flow, o)
	nodes, err := placeByFunction(g, alive, o, 1)
	if err != nil || len(nodes) != 2 || nodes[0].ID != "a" || nodes[1].ID != "b" {
		t.Errorf("x and y: nodes %v %v, want a and b", nodes, err)
	}
	// y (a, b) and z (b, c): b has both.
	g = graphOf(t, "name: f\ntasks:\n  - {name: t1, func: y}\n  - {name: t2, func: z}\n", o)
	if nodes, err := placeByFunction(g, alive, o, 1); err != nil || len(nodes) != 1 || nodes[0].ID != "b" {
		t.Errorf("y and z: %v %v, want b", nodes, err)
	}
	// No node has both y and w: each task is pinned to a holder of its function.
	o2 := offeredOf(map[string][]string{"a": {"y"}, "b": {"w"}, "c": {"y", "x"}})
	g = graphOf(t, "name: f\ntasks:\n  - {name: t1, func: y}\n  - {name: t2, func: w}\n  - {name: t3, func: y}\n", o2)
	nodes, err = placeByFunction(g, alive, o2, 7)
	if err != nil || len(nodes) != 3 {
		t.Fatalf("no node with all: %v %v", nodes, err)
	}
	for _, vx := range g.Vertices {
		h := map[string]bool{}
		for _, n := range o2.Holders(vx.Task.Func) {
			h[n] = true
		}
		if !h[vx.Task.Node] {
			t.Errorf("task %s (func %s) pinned to %q", vx.Path, vx.Task.Func, vx.Task.Node)
		}
	}
	assign, err := Plan(g, nodes, 7)
	if err != nil || assign[1] != "b" {
		t.Errorf("plan: %v %v", assign, err)
	}
	// A pin to a node without the function.
	g = graphOf(t, "name: f\ntasks:\n  - {name: t1, func: w, node: a}\n", o2)
	_, err = placeByFunction(g, alive, o2, 1)
	var inv *InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), `task "t1" is pinned to node a, which does not have function "w" (nodes with it: b)`) {
		t.Errorf("pin without the function: %v", err)
	}
	// Every node has every function: nothing changes.
	g = graphOf(t, "name: f\ntasks:\n  - {name: t1, func: x}\n", o)
	if nodes, err := placeByFunction(g, alive, o, 1); err != nil || len(nodes) != 3 || g.Vertices[0].Task.Node != "" {
		t.Errorf("x everywhere: %v %v pin %q", nodes, err, g.Vertices[0].Task.Node)
	}
}

// A reassignment moves a lost node's tasks to takers that have their
// functions, even when balance alone would put them elsewhere (d, the
// only taker with y, is the busiest); tasks of live nodes stay.
func TestReassignPlacesMovedTasksByFunction(t *testing.T) {
	o := offeredOf(map[string][]string{"a": {"x"}, "b": {"x", "y"}, "c": {"x"}, "d": {"x", "y"}})
	var b strings.Builder
	b.WriteString("name: f\ntasks:\n  - {name: y1, func: y}\n  - {name: y2, func: y}\n")
	prev := []string{"b", "b"}
	for i := 0; i < 10; i++ {
		fmt.Fprintf(&b, "  - {name: x%d, func: x}\n", i)
		prev = append(prev, "d")
	}
	flow := b.String()
	takers := []Node{{ID: "a", CPUs: 8}, {ID: "c", CPUs: 8}, {ID: "d", CPUs: 1}}
	for _, pin := range []bool{true, false} {
		wrong := 0
		for seed := uint64(1); seed <= 8; seed++ {
			g := graphOf(t, flow, o)
			if pin {
				pinMoved(g, prev, takers, o, seed)
			}
			assign, _, err := PlanReassign(g, prev, takers, seed)
			if err != nil {
				t.Fatal(err)
			}
			if assign[0] != "d" || assign[1] != "d" {
				wrong++
			}
			for v := 2; v < len(assign); v++ {
				if assign[v] != "d" {
					t.Errorf("seed %d: task %d moved from live d to %s", seed, v, assign[v])
				}
			}
		}
		switch {
		case pin && wrong > 0:
			t.Errorf("with pinMoved, %d of 8 seeds put a y task on a node without y", wrong)
		case !pin && wrong == 0:
			t.Errorf("without pinMoved the y tasks went to d anyway: the test shows nothing")
		}
	}
	// nil (no catalogs known): nothing pinned.
	g := graphOf(t, flow, o)
	pinMoved(g, prev, takers, nil, 1)
	for _, vx := range g.Vertices {
		if vx.Task.Node != "" {
			t.Errorf("pinned %s without catalogs", vx.Path)
		}
	}
}
