package node

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// The graph cache shares one compiled plan between runs with the same
// plan, evicts the least recently used plan to stay within its vertex
// bound (internal/wlru), and never caches a refusal.
func TestGraphCache(t *testing.T) {
	flow := func(name string, n int) []byte {
		var b strings.Builder
		b.WriteString("name: " + name + "\ntasks:\n")
		for i := range n {
			b.WriteString("  - {name: " + name + string(rune('a'+i)) + ", func: noop}\n")
		}
		f, err := spec.Parse(name+".yaml", []byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		js, err := spec.Marshal(f, spec.FormatJSON)
		if err != nil {
			t.Fatal(err)
		}
		return planned(t, js, &transport.Assignment{Run: "r", Nodes: []string{"n0"}, Owner: make([]uint32, n)}, "n0").Plan
	}
	gc := newGraphCache(5)
	a, b, c := flow("a", 3), flow("b", 2), flow("c", 2)
	ca, err := gc.compile(a, nil, 3, transport.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gc.compile(b, nil, 2, transport.Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	again, err := gc.compile(a, nil, 3, transport.Limits{}, nil) // a is now the most recently used
	if err != nil || again != ca {
		t.Fatalf("a second compile of a's text: %p %v, want the first (%p)", again, err, ca)
	}
	if _, err := gc.compile(c, nil, 2, transport.Limits{}, nil); err != nil { // 3+2+2 > 5: b goes
		t.Fatal(err)
	}
	if flows, hits := gc.stats(); flows != 2 || hits != 1 {
		t.Fatalf("after a, b, a, c: %d flows, %d hits; want 2, 1", flows, hits)
	}
	if got, _ := gc.compile(a, nil, 3, transport.Limits{}, nil); got != ca {
		t.Fatal("a was evicted, not b")
	}
	if _, err := gc.compile(flow("big", 6), nil, 6, transport.Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	if flows, _ := gc.stats(); flows != 2 {
		t.Fatalf("a flow over the bound was kept: %d flows", flows)
	}
	// A task whose function this node's registry lacks, and bytes that
	// are no plan.
	unknown := bytes.Replace(flow("u", 2), []byte("noop"), []byte("nope"), 1)
	for range 2 {
		if _, err := gc.compile(unknown, nil, 2, transport.Limits{}, funcs.Default()); !errors.Is(err, spec.ErrUnknownFunc) || !strings.Contains(err.Error(), `task "ua": `) {
			t.Fatalf("a plan with an unknown function: %v", err)
		}
		if _, err := gc.compile([]byte("{not a plan"), nil, 1, transport.Limits{}, nil); !errors.Is(err, transport.ErrMalformed) {
			t.Fatalf("no plan: %v", err)
		}
	}
	if _, hits := gc.stats(); hits != 2 {
		t.Fatalf("hits %d: a refusal was cached", hits)
	}
}

// A plan that does not fit its Assignment is refused: one of another
// size, or one that does not hold a task the Assignment gives the node
// (the plan of another node's part).
func TestPlanFits(t *testing.T) {
	f, err := spec.Parse("two.yaml", []byte("name: two\ntasks:\n  - {name: a, func: noop}\n  - {name: b, func: hash, succeed: [a]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := spec.Marshal(f, spec.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	a := &transport.Assignment{Run: "r", Nodes: []string{"n0", "n1"}, Owner: []uint32{0, 1}}
	gc := newGraphCache(100)
	pt, err := gc.compile(planned(t, js, a, "n0").Plan, nil, 2, transport.Limits{}, funcs.Default())
	if err != nil {
		t.Fatal(err)
	}
	if in, err := planFits(pt, a, "n0", true, nil); err != nil || !slices.Equal(in, []bool{true, false}) {
		t.Fatalf("n0's own plan: %v, its tasks %v", err, in)
	}
	// A mask equal to the one it is like is that one (a run again's, the
	// kept build's mask); any other is made, like left as it was.
	like := []bool{true, false}
	if in, err := planFits(pt, a, "n0", true, like); err != nil || &in[0] != &like[0] {
		t.Fatalf("n0's tasks like a mask equal to them: %v, not that mask (%v)", in, err)
	}
	for _, like := range [][]bool{{true, true}, {false, false}, {false, true}, {true}} {
		was := slices.Clone(like)
		if in, err := planFits(pt, a, "n0", true, like); err != nil || !slices.Equal(in, []bool{true, false}) || &in[0] == &like[0] || !slices.Equal(like, was) {
			t.Fatalf("n0's tasks like %v: %v (%v); like now %v", was, in, err, like)
		}
	}
	if sm, err := runproto.New(runproto.Config{Self: "n0", Run: "r", Gen: 1, Nodes: a.Nodes, Owner: a.Owner}); err != nil || !slices.Equal(sm.Mine(), []bool{true, false}) {
		t.Fatalf("the SM's tasks of n0: %v", err)
	}
	if _, err := planFits(pt, a, "n1", false, nil); !errors.Is(err, runproto.ErrPlan) || !strings.Contains(err.Error(), "task 1") {
		t.Fatalf("n0's plan taken for n1's: %v", err)
	}
	if _, err := planFits(pt, &transport.Assignment{Run: "r", Nodes: []string{"n0"}, Owner: []uint32{0, 0, 0}}, "n0", true, nil); !errors.Is(err, runproto.ErrPlan) {
		t.Fatalf("a plan of 2 tasks for a run of 3: %v", err)
	}
	// A plan of another size is refused before a graph of its size is
	// made (here, the same plan bytes again: not from the cache either),
	// and so is a run larger than any flow expands to.
	plan := planned(t, js, a, "n0").Plan
	if _, err := gc.compile(plan, nil, 3, transport.Limits{}, nil); !errors.Is(err, runproto.ErrPlan) || !strings.Contains(err.Error(), "places 3 tasks, its plan has 2") {
		t.Fatalf("a plan of 2 tasks for a run of 3: %v", err)
	}
	if _, err := gc.compile(plan, nil, spec.MaxVertices+1, transport.Limits{}, nil); !errors.Is(err, runproto.ErrPlan) {
		t.Fatalf("a run of %d tasks: %v", spec.MaxVertices+1, err)
	}
	if _, err := gc.compile(nil, nil, 2, transport.Limits{}, nil); !errors.Is(err, ErrNoPlan) {
		t.Fatalf("no plan: %v", err)
	}
}

// The tasks planFits marks for a run's first build are the SM's (Mine),
// for any owners the SM takes: a node named more than once in Nodes owns
// the tasks of each of its places. Owners past Nodes the SM refuses, as
// before, and planFits does not fail on them.
func TestPlanFitsMarksMine(t *testing.T) {
	const n = 64
	var y strings.Builder
	y.WriteString("name: wide\ntasks:\n")
	for v := range n {
		fmt.Fprintf(&y, "  - {name: t%d, func: noop}\n", v)
	}
	f, err := spec.Parse("wide.yaml", []byte(y.String()))
	if err != nil {
		t.Fatal(err)
	}
	js, err := spec.Marshal(f, spec.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	// a part that holds every task: the plan of a placement all on n0
	all := &transport.Assignment{Run: "r", Nodes: []string{"n0"}, Owner: make([]uint32, n)}
	pt, err := newGraphCache(10).compile(planned(t, js, all, "n0").Plan, nil, n, transport.Limits{}, funcs.Default())
	if err != nil {
		t.Fatal(err)
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	names := []string{"n0", "n1", "n2"}
	for i := range 200 {
		nodes := make([]string, 1+rng.IntN(5)) // with repeats, n0 among them or not
		for k := range nodes {
			nodes[k] = names[rng.IntN(len(names))]
		}
		owner := make([]uint32, n)
		for v := range owner {
			owner[v] = uint32(rng.IntN(len(nodes)))
		}
		a := &transport.Assignment{Run: "r", Nodes: nodes, Owner: owner}
		in, err := planFits(pt, a, "n0", true, nil)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		sm, err := runproto.New(runproto.Config{Self: "n0", Run: "r", Gen: 1, Nodes: nodes, Owner: owner})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !slices.Equal(in, sm.Mine()) {
			t.Fatalf("case %d (nodes %q, owners %v): planFits marked %v, Mine %v", i, nodes, owner, in, sm.Mine())
		}
		if fits, err := planFits(pt, a, "n0", false, nil); err != nil || fits != nil {
			t.Fatalf("case %d: unmarked check %v %v", i, fits, err)
		}
		owner[rng.IntN(n)] = uint32(len(nodes) + rng.IntN(3)) // past Nodes
		if _, err := planFits(pt, a, "n0", true, nil); err != nil {
			t.Fatalf("case %d: an owner past Nodes failed the plan's check: %v", i, err)
		}
		if _, err := runproto.New(runproto.Config{Self: "n0", Run: "r", Gen: 1, Nodes: nodes, Owner: owner}); err == nil {
			t.Fatalf("case %d: the SM took an owner past Nodes", i)
		}
	}
}

// A plan is served only the Part compiled from its own bytes: two plans
// whose hashes collide (forced here) each get their own, every time.
func TestGraphCacheCollision(t *testing.T) {
	flow := func(name string) []byte {
		f, err := spec.Parse(name+".yaml", []byte("name: "+name+"\ntasks:\n  - {name: "+name+"a, func: noop}\n  - {name: "+name+"b, func: noop}\n"))
		if err != nil {
			t.Fatal(err)
		}
		js, err := spec.Marshal(f, spec.FormatJSON)
		if err != nil {
			t.Fatal(err)
		}
		return planned(t, js, &transport.Assignment{Run: "r", Nodes: []string{"n0"}, Owner: make([]uint32, 2)}, "n0").Plan
	}
	gc := newGraphCache(100)
	gc.sum = func(maphash.Seed, []byte) uint64 { return 7 } // every plan collides
	a, b := flow("x"), flow("y")
	if len(a) != len(b) {
		t.Fatalf("plans of %d and %d bytes: the test needs one length", len(a), len(b))
	}
	for range 2 {
		for _, plan := range [][]byte{a, b} {
			pt, err := gc.compile(plan, nil, 2, transport.Limits{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := "x"
			if &plan[0] == &b[0] {
				want = "y"
			}
			if got := pt.G.Vertices[0].Path; !strings.HasPrefix(got, want) {
				t.Fatalf("plan of flow %s served a Part whose first task is %q", want, got)
			}
		}
	}
	// The Assignment's buffer may be reused: the cache keeps its own copy.
	c := bytes.Clone(a)
	if _, err := gc.compile(c, nil, 2, transport.Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	copy(c, b)
	if pt, err := gc.compile(b, nil, 2, transport.Limits{}, nil); err != nil || !strings.HasPrefix(pt.G.Vertices[0].Path, "y") {
		t.Fatalf("after the buffer was overwritten: %v", err)
	}
}
