package coord

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/spec"
)

func expand(tb testing.TB, text string) *spec.Graph {
	tb.Helper()
	f, err := spec.Parse("flow.yaml", []byte(text))
	if err != nil {
		tb.Fatal(err)
	}
	g, err := f.Expand()
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

func onNode(t *testing.T, g *spec.Graph, assign []string, path string) string {
	t.Helper()
	v, ok := g.Lookup(path)
	if !ok {
		t.Fatalf("no vertex %s", path)
	}
	return assign[v]
}

var threeNodes = []Node{{ID: "n1", CPUs: 2}, {ID: "n2", CPUs: 2}, {ID: "n3", CPUs: 2, GPUs: 1}}

const modulesFlow = `
flows:
  - name: main
    tasks:
      - {name: a, func: spin, args: {us: 100}, node: n1}
      - {name: m1, kind: module, flow: inner, succeed: [a]}
      - {name: m2, kind: module, flow: inner, succeed: [a]}
      - {name: m3, kind: module, flow: outer, succeed: [a]}
      - {name: z, func: hash, succeed: [m1, m2, m3], node: n2}
  - name: inner
    tasks:
      - {name: x, func: spin, args: {us: 5000}}
      - {name: y, func: spin, args: {us: 5000}, succeed: [x]}
      - {name: w, func: spin, args: {us: 5000}, succeed: [x]}
  - name: outer
    tasks:
      - {name: p, func: spin, args: {us: 3000}}
      - {name: q, kind: module, flow: inner, succeed: [p]}
`

func TestPlanKeepsModuleInstancesWhole(t *testing.T) {
	g := expand(t, modulesFlow)
	for seed := uint64(0); seed < 20; seed++ {
		assign, err := Plan(g, threeNodes, seed)
		if err != nil {
			t.Fatal(err)
		}
		if onNode(t, g, assign, "a") != "n1" || onNode(t, g, assign, "z") != "n2" {
			t.Fatalf("seed %d: pins not honoured: %v", seed, assign)
		}
		for _, m := range []string{"m1", "m2", "m3"} {
			mv, _ := g.Lookup(m)
			for _, d := range g.Descendants(mv) {
				if assign[d] != assign[mv] {
					t.Fatalf("seed %d: %s is on %s, its module %s on %s", seed, g.Vertices[d].Path, assign[d], m, assign[mv])
				}
			}
		}
	}
}

func TestPlanPinsAndGPUInsideAnInstance(t *testing.T) {
	g := expand(t, `
flows:
  - name: main
    tasks:
      - {name: a, func: noop}
      - {name: m, kind: module, flow: inner, succeed: [a]}
      - {name: k, kind: module, flow: gpu, succeed: [a]}
  - name: inner
    tasks:
      - {name: x, func: noop, node: n2}
      - {name: y, func: spin, args: {us: 100000}, succeed: [x]}
  - name: gpu
    tasks:
      - {name: s, func: saxpy, args: {n: 1000}, domain: gpu}
      - {name: t, func: spin, args: {us: 100000}, succeed: [s]}
`)
	for seed := uint64(0); seed < 10; seed++ {
		assign, err := Plan(g, threeNodes, seed)
		if err != nil {
			t.Fatal(err)
		}
		if n := onNode(t, g, assign, "m/y"); n != "n2" || onNode(t, g, assign, "m") != "n2" {
			t.Fatalf("the instance with a pin to n2 is on %s", n)
		}
		if n := onNode(t, g, assign, "k"); n != "n3" || onNode(t, g, assign, "k/t") != "n3" {
			t.Fatalf("the instance with a GPU task is on %s, the GPU node is n3", n)
		}
	}

	conflict := expand(t, `
flows:
  - name: main
    tasks:
      - {name: m, kind: module, flow: inner}
  - name: inner
    tasks:
      - {name: x, func: noop, node: n1}
      - {name: y, func: noop, node: n2, succeed: [x]}
`)
	if _, err := Plan(conflict, threeNodes, 1); !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), `module instance "m"`) {
		t.Fatalf("conflicting pins: %v", err)
	}
}

func TestPlanLoopsStayTogether(t *testing.T) {
	g := expand(t, `
name: loops
tasks:
  - {name: init, func: noop}
  - {name: body, func: spin, args: {us: 10}, succeed: [init]}
  - {name: cond, kind: condition, func: loop, args: {n: 3}, succeed: [body], precede: [body, done]}
  - {name: done, func: hash}
  - {name: other1, func: spin, args: {us: 10}, succeed: [init]}
  - {name: other2, func: spin, args: {us: 10}, succeed: [init]}
`)
	assign, err := Plan(g, threeNodes, 7)
	if err != nil {
		t.Fatal(err)
	}
	if onNode(t, g, assign, "body") != onNode(t, g, assign, "cond") {
		t.Fatalf("the loop was split: %v", assign)
	}
}

func TestPlanErrors(t *testing.T) {
	g := expand(t, "name: f\ntasks:\n  - {name: a, func: noop, node: n9}\n")
	if _, err := Plan(g, threeNodes, 1); !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), `"n9"`) {
		t.Fatalf("pin to a missing node: %v", err)
	}
	if _, err := Plan(g, nil, 1); !errors.Is(err, ErrPlan) {
		t.Fatalf("no nodes: %v", err)
	}
	gpu := expand(t, "name: f\ntasks:\n  - {name: a, func: saxpy, domain: gpu}\n")
	if _, err := Plan(gpu, threeNodes[:2], 1); !errors.Is(err, ErrPlan) {
		t.Fatalf("GPU task without a GPU node: %v", err)
	}
}

func TestPlanSpreadsWork(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: wide\ntasks:\n  - {name: s, func: noop}\n")
	for i := range 30 {
		b.WriteString("  - {name: t" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ", func: spin, args: {us: 1000}, succeed: [s]}\n")
	}
	g := expand(t, b.String())
	assign, err := Plan(g, threeNodes, 3)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, n := range assign {
		count[n]++
	}
	if len(count) != 3 {
		t.Fatalf("30 independent tasks on %d nodes: %v", len(count), count)
	}
}

const reassignFlow = `
flows:
  - name: main
    tasks:
      - {name: init, func: noop}
      - {name: body, func: spin, args: {us: 10}, succeed: [init]}
      - {name: cond, kind: condition, func: loop, args: {n: 3}, succeed: [body], precede: [body, done]}
      - {name: done, func: hash}
      - {name: m1, kind: module, flow: inner, succeed: [init]}
      - {name: m2, kind: module, flow: inner, succeed: [init]}
      - {name: w1, func: spin, args: {us: 1000}, succeed: [init]}
      - {name: w2, func: spin, args: {us: 1000}, succeed: [init]}
      - {name: w3, func: spin, args: {us: 1000}, succeed: [init]}
      - {name: sink, func: hash, succeed: [done, m1, m2, w1, w2, w3]}
  - name: inner
    tasks:
      - {name: x, func: spin, args: {us: 500}}
      - {name: y, func: spin, args: {us: 500}, succeed: [x]}
`

func TestPlanReassignKeepsLiveTasksAndMovesGroupsWhole(t *testing.T) {
	g := expand(t, reassignFlow)
	for seed := uint64(0); seed < 10; seed++ {
		// The lost node n2 held the loop and the instance m1.
		prev := make([]string, len(g.Vertices))
		for v := range prev {
			prev[v] = []string{"n1", "n3"}[v%2]
		}
		for _, p := range []string{"body", "cond", "m1", "m1/x", "m1/y", "w2"} {
			v, _ := g.Lookup(p)
			prev[v] = "n2"
		}
		m2, _ := g.Lookup("m2")
		for _, d := range g.Descendants(m2) {
			prev[d] = prev[m2] // an instance is whole
		}
		alive := []Node{threeNodes[0], threeNodes[2]}
		assign, lost, err := PlanReassign(g, prev, alive, seed)
		if err != nil {
			t.Fatal(err)
		}
		if len(lost) != 1 || lost[0] != "n2" {
			t.Fatalf("lost %v, want [n2]", lost)
		}
		for v, n := range prev {
			if n != "n2" && assign[v] != n {
				t.Fatalf("seed %d: %s moved from live %s to %s", seed, g.Vertices[v].Path, n, assign[v])
			}
			if assign[v] != "n1" && assign[v] != "n3" {
				t.Fatalf("seed %d: %s placed on %q", seed, g.Vertices[v].Path, assign[v])
			}
		}
		if onNode(t, g, assign, "body") != onNode(t, g, assign, "cond") {
			t.Fatalf("seed %d: the loop was split on the move", seed)
		}
		m := onNode(t, g, assign, "m1")
		if onNode(t, g, assign, "m1/x") != m || onNode(t, g, assign, "m1/y") != m {
			t.Fatalf("seed %d: the instance m1 was split on the move", seed)
		}
	}
	// Nothing lost: the assignment stands.
	prev := make([]string, len(g.Vertices))
	for v := range prev {
		prev[v] = "n1"
	}
	assign, lost, err := PlanReassign(g, prev, threeNodes, 1)
	if err != nil || lost != nil || &assign[0] != &prev[0] {
		t.Fatalf("nothing lost: %v %v %v", assign, lost, err)
	}
}

func TestPlanReassignImpossibleMoves(t *testing.T) {
	pinned := expand(t, "name: f\ntasks:\n  - {name: a, func: noop}\n  - {name: b, func: noop, node: n2, succeed: [a]}\n")
	_, _, err := PlanReassign(pinned, []string{"n1", "n2"}, threeNodes[:1], 1)
	if !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), `task "b"`) || !strings.Contains(err.Error(), "n2") {
		t.Fatalf("a task pinned to the lost node: %v", err)
	}
	gpu := expand(t, "name: f\ntasks:\n  - {name: a, func: noop}\n  - {name: g, func: saxpy, domain: gpu, succeed: [a]}\n")
	_, _, err = PlanReassign(gpu, []string{"n1", "n3"}, threeNodes[:2], 1)
	if !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), `task "g"`) || !strings.Contains(err.Error(), "n3") || !strings.Contains(err.Error(), "GPU") {
		t.Fatalf("a GPU task and no live GPU node: %v", err)
	}
	_, _, err = PlanReassign(gpu, []string{"n1"}, threeNodes, 1)
	if !errors.Is(err, ErrPlan) {
		t.Fatalf("an assignment of the wrong length: %v", err)
	}
	_, _, err = PlanReassign(gpu, []string{"n1", "n9"}, nil, 1)
	if !errors.Is(err, ErrPlan) {
		t.Fatalf("no node alive: %v", err)
	}
}

// layered is a flow of layers × width tasks of func with args, each after
// two random tasks of the layer before, as the seed's HTDGs.
func layered(layers, width int, task string) string {
	var sb strings.Builder
	sb.WriteString("name: layers\ntasks:\n")
	rng := rand.New(rand.NewPCG(1, 2))
	for l := 0; l < layers; l++ {
		for i := 0; i < width; i++ {
			fmt.Fprintf(&sb, "  - {name: t%d_%d, %s", l, i, task)
			if l > 0 {
				a := rng.IntN(width)
				fmt.Fprintf(&sb, ", succeed: [t%d_%d, t%d_%d]", l-1, a, l-1, (a+1+rng.IntN(width-1))%width)
			}
			sb.WriteString("}\n")
		}
	}
	return sb.String()
}

// TestPlanBalancesEachLevel: a layered DAG (12 layers of 12 tasks of 2 ms,
// work worth the hops) on three nodes: every layer is spread over the
// nodes, not given to one node as a band of layers.
func TestPlanBalancesEachLevel(t *testing.T) {
	const layers, width = 12, 12
	g := expand(t, layered(layers, width, "func: spin, args: {us: 2000}"))
	nodes := []Node{{ID: "n1", CPUs: 2}, {ID: "n2", CPUs: 2}, {ID: "n3", CPUs: 2}}
	assign, err := Plan(g, nodes, 1)
	if err != nil {
		t.Fatal(err)
	}
	for l := 0; l < layers; l++ {
		count := map[string]int{}
		for i := 0; i < width; i++ {
			count[onNode(t, g, assign, fmt.Sprintf("t%d_%d", l, i))]++
		}
		for _, n := range nodes {
			// 4 a node, at most ceil(4 × 1.03) = 5
			if c := count[n.ID]; c < 3 || c > 5 {
				t.Errorf("layer %d: %v, want 3 to 5 tasks on each node", l, count)
				break
			}
		}
	}
}

func usedNodes(assign []string) map[string]int {
	count := map[string]int{}
	for _, n := range assign {
		count[n]++
	}
	return count
}

// TestPlanKeepsListing5LoopWhole: listing 5's do-while (init, a 10 µs body,
// the condition looping back to it, done) on three nodes. Its loop is one
// group of 11 µs in a flow of 14 µs, over a node's share: the partitioner
// split it (body and cond ran on different nodes in dev, one hop an
// iteration), against the README's "whole loops". Now it never splits,
// with or without the cost model, nor on the move after a node is lost.
func TestPlanKeepsListing5LoopWhole(t *testing.T) {
	raw, err := os.ReadFile("../spec/examples/listing5-dowhile.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := expand(t, string(raw))
	for _, pl := range []Placement{{}, {Spread: true}} {
		for seed := uint64(0); seed < 50; seed++ {
			for _, run := range []string{"", "r-20261203-161500-0001"} {
				s := seed
				if run != "" {
					s = Seed(run) + seed
				}
				assign, err := PlanWith(g, threeNodes, s, pl)
				if err != nil {
					t.Fatal(err)
				}
				if b, c := onNode(t, g, assign, "body"), onNode(t, g, assign, "cond"); b != c {
					t.Fatalf("%+v seed %d: body on %s, cond on %s: the loop was split", pl, s, b, c)
				}
			}
		}
		// moving the loop off a lost node keeps it whole too
		prev := []string{"n1", "n2", "n3", "n1"}
		v, _ := g.Lookup("body")
		c, _ := g.Lookup("cond")
		prev[v], prev[c] = "n2", "n2"
		assign, _, err := PlanReassignWith(g, prev, []Node{threeNodes[0], threeNodes[2]}, 9, pl)
		if err != nil {
			t.Fatal(err)
		}
		if assign[v] != assign[c] || assign[v] == "n2" {
			t.Fatalf("%+v: after losing n2 body is on %s, cond on %s", pl, assign[v], assign[c])
		}
	}
}

// TestPlanLoopsPinnedApartOrOnGPU: a loop whose tasks the flow pins to two
// nodes is split as its pins say (the loopback e2e flow does that on
// purpose); a loop with a GPU task runs whole on a GPU node.
func TestPlanLoopsPinnedApartOrOnGPU(t *testing.T) {
	g := expand(t, `
name: loops
tasks:
  - {name: init, func: noop}
  - {name: body, func: spin, args: {us: 50000}, succeed: [init], node: n1}
  - {name: cond, kind: condition, func: loop, args: {n: 3}, succeed: [body], precede: [body, gbody], node: n2}
  - {name: gbody, func: saxpy, args: {n: 1000000}, domain: gpu}
  - {name: gmid, func: spin, args: {us: 90000}, succeed: [gbody]}
  - {name: gcond, kind: condition, func: loop, args: {n: 3}, succeed: [gmid], precede: [gbody, done]}
  - {name: done, func: hash}
  - {name: w1, func: spin, args: {us: 90000}, succeed: [init]}
  - {name: w2, func: spin, args: {us: 90000}, succeed: [init]}
`)
	for _, pl := range []Placement{{}, {Spread: true}} {
		for seed := uint64(0); seed < 20; seed++ {
			assign, err := PlanWith(g, threeNodes, seed, pl)
			if err != nil {
				t.Fatal(err)
			}
			if onNode(t, g, assign, "body") != "n1" || onNode(t, g, assign, "cond") != "n2" {
				t.Fatalf("seed %d: pins not kept: %v", seed, assign)
			}
			for _, p := range []string{"gbody", "gmid", "gcond"} {
				if n := onNode(t, g, assign, p); n != "n3" {
					t.Fatalf("%+v seed %d: %s of the GPU loop on %s, want the GPU node n3", pl, seed, p, n)
				}
			}
		}
	}
}

// TestPlanCostModel: 1 µs tasks in 30 layers of 300 stay on one node (no
// cross-node edge, no hop a layer) and only the Spread placement splits
// them; a dozen 1–3 s spins fanning out spread over the three nodes; a
// cost declared for the function (Placement.Funcs) makes the no-op layers
// worth spreading; a GPU task still goes to the GPU node and a pin holds.
func TestPlanCostModel(t *testing.T) {
	g := expand(t, layered(30, 300, "func: noop"))
	for seed := uint64(0); seed < 3; seed++ {
		assign, err := Plan(g, threeNodes, seed)
		if err != nil {
			t.Fatal(err)
		}
		if c := usedNodes(assign); len(c) != 1 {
			t.Errorf("seed %d: no-op layers on %v, want one node", seed, c)
		}
	}
	spread, err := PlanWith(g, threeNodes, 1, Placement{Spread: true})
	if err != nil {
		t.Fatal(err)
	}
	if c := usedNodes(spread); len(c) != 3 {
		t.Errorf("Spread: no-op layers on %v, want three nodes", c)
	}
	declared, err := PlanWith(g, threeNodes, 1, Placement{Funcs: map[string]time.Duration{"noop": 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if c := usedNodes(declared); len(c) != 3 {
		t.Errorf("noop declared 5 ms: on %v, want three nodes", c)
	}
	// a slow network: hops of 1 s outweigh even 5 ms tasks
	slow, err := PlanWith(g, threeNodes, 1, Placement{Hop: time.Second, Funcs: map[string]time.Duration{"noop": 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if c := usedNodes(slow); len(c) != 1 {
		t.Errorf("5 ms tasks, 1 s hops: on %v, want one node", c)
	}

	var sb strings.Builder
	sb.WriteString("name: fan\ntasks:\n  - {name: s, func: noop}\n  - {name: g, func: saxpy, domain: gpu, succeed: [s]}\n  - {name: p, func: hash, succeed: [s], node: n2}\n")
	for i := range 12 {
		fmt.Fprintf(&sb, "  - {name: w%d, func: spin, args: {us: %d}, succeed: [s]}\n", i, (1+i%3)*1_000_000)
	}
	fan := expand(t, sb.String())
	for seed := uint64(0); seed < 10; seed++ {
		assign, err := Plan(fan, threeNodes, seed)
		if err != nil {
			t.Fatal(err)
		}
		load := map[string]time.Duration{}
		for v, n := range assign {
			load[n] += TaskCost(fan.Vertices[v].Task, nil)
		}
		if len(load) != 3 || slices.Max(slices.Collect(maps.Values(load))) > 9*time.Second {
			t.Errorf("seed %d: 24 s of spins placed %v, want spread, ≤ 9 s a node", seed, load)
		}
		if onNode(t, fan, assign, "g") != "n3" || onNode(t, fan, assign, "p") != "n2" {
			t.Errorf("seed %d: the GPU task on %s (want n3), the pinned one on %s (want n2)", seed, onNode(t, fan, assign, "g"), onNode(t, fan, assign, "p"))
		}
	}
}

func TestTaskCost(t *testing.T) {
	declared := map[string]time.Duration{"mine": 3 * time.Millisecond, "hash": 0}
	const most = (1 << 40) * time.Microsecond
	for _, tc := range []struct {
		task string
		want time.Duration
	}{
		{"{name: a, func: noop}", DefaultTaskCost},
		{"{name: a, func: hash}", time.Microsecond}, // declared 0: at least 1 µs
		{"{name: a, func: spin, args: {us: 250}}", 250 * time.Microsecond},
		{"{name: a, func: spin, args: {us: 1099511627777}}", most},
		{"{name: a, func: sleep, args: {ms: 4294967296}}", most},
		{"{name: a, func: sleep, args: {ms: 20}}", 20 * time.Millisecond},
		{"{name: a, func: saxpy, args: {n: 4000}}", 4 * time.Microsecond},
		{"{name: a, func: saxpy}", time.Microsecond},
		{"{name: a, kind: subflow, func: fanout, args: {n: 4, us: 10}}", 40 * time.Microsecond},
		{"{name: a, kind: subflow, func: fanout, args: {n: 4}}", time.Microsecond},
		{"{name: a, func: mine}", 3 * time.Millisecond},
	} {
		g := expand(t, "name: f\ntasks:\n  - "+tc.task+"\n")
		if got := TaskCost(g.Vertices[0].Task, declared); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.task, got, tc.want)
		}
	}
}

func TestPlacementCheck(t *testing.T) {
	if err := (Placement{Hop: time.Millisecond, Funcs: map[string]time.Duration{"mine": 0}}).Check(); err != nil {
		t.Errorf("a good placement: %v", err)
	}
	for _, p := range []Placement{
		{Hop: -1},
		{EdgeCost: -time.Second},
		{Funcs: map[string]time.Duration{"": time.Millisecond}},
		{Funcs: map[string]time.Duration{"mine": -time.Millisecond}},
	} {
		if err := p.Check(); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if _, err := New(Config{ID: "c1", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0",
		Placement: Placement{Hop: -1}}); !errors.Is(err, ErrConfig) {
		t.Errorf("New with a negative hop: %v", err)
	}
}

// TestPlanWeighsLoopsByIterations: a loop of 100 iterations of a 1 ms body
// is 100 ms of work on its node, not 1 ms: the six 20 ms tasks beside it
// go to the other nodes (weighed once, two of them would join the loop).
func TestPlanWeighsLoopsByIterations(t *testing.T) {
	g := expand(t, `
name: loops
tasks:
  - {name: init, func: noop}
  - {name: body, func: spin, args: {us: 1000}, succeed: [init]}
  - {name: cond, kind: condition, func: loop, args: {n: 99}, succeed: [body], precede: [body, done]}
  - {name: done, func: hash}
  - {name: w1, func: spin, args: {us: 20000}, succeed: [init]}
  - {name: w2, func: spin, args: {us: 20000}, succeed: [init]}
  - {name: w3, func: spin, args: {us: 20000}, succeed: [init]}
  - {name: w4, func: spin, args: {us: 20000}, succeed: [init]}
  - {name: w5, func: spin, args: {us: 20000}, succeed: [init]}
  - {name: w6, func: spin, args: {us: 20000}, succeed: [init]}
`)
	for seed := uint64(0); seed < 10; seed++ {
		assign, err := Plan(g, threeNodes, seed)
		if err != nil {
			t.Fatal(err)
		}
		loop := onNode(t, g, assign, "body")
		beside := 0
		for _, w := range []string{"w1", "w2", "w3", "w4", "w5", "w6"} {
			if onNode(t, g, assign, w) == loop {
				beside++
			}
		}
		if beside > 1 || onNode(t, g, assign, "cond") != loop {
			t.Errorf("seed %d: %d of the 20 ms tasks beside the 100 ms loop on %s: %v", seed, beside, loop, assign)
		}
	}
	for text, want := range map[string]int64{
		"{name: c, kind: condition, func: loop, args: {n: 9}, succeed: [s], precede: [c, d]}":           10,
		"{name: c, kind: condition, func: coin, args: {p: 0.75}, succeed: [s], precede: [c, d]}":        4,
		"{name: c, kind: condition, func: coin, args: {p: 1}, succeed: [s], precede: [c, d]}":           maxIterations,
		"{name: c, kind: condition, func: coin, args: {p: 0}, succeed: [s], precede: [c, d]}":           1,
		"{name: c, kind: condition, func: loop, args: {n: 99999999999}, succeed: [s], precede: [c, d]}": maxIterations,
		"{name: c, kind: condition, func: mine, succeed: [s], precede: [c, d]}":                         1,
	} {
		g := expand(t, "name: f\ntasks:\n  - {name: s, func: noop}\n  - "+text+"\n  - {name: d, func: noop}\n")
		if got := iterations(g, g.LoopGroups()[0]); got != want {
			t.Errorf("%s: %d iterations, want %d", text, got, want)
		}
	}
}

// owners maps an assignment to the nodes' places run by run as a lookup a
// task would, and names the first task of a node not among them.
func TestOwners(t *testing.T) {
	nodes := []string{"a", "b", "c"}
	assign := []string{"b", "b", "a", "c", "c", "c", "a", "b"}
	owner, bad := owners(nodes, assign)
	if want := []uint32{1, 1, 0, 2, 2, 2, 0, 1}; !slices.Equal(owner, want) || bad != -1 {
		t.Fatalf("owners %v (bad %d), want %v", owner, bad, want)
	}
	if _, bad := owners(nodes, []string{"a", "x", "x", "y"}); bad != 1 {
		t.Fatalf("first task of no node: %d, want 1", bad)
	}
	var runs [][2]int
	for lo, hi := range nodeRuns(assign) {
		runs = append(runs, [2]int{lo, hi})
	}
	if fmt.Sprint(runs) != "[[0 2] [2 3] [3 6] [6 7] [7 8]]" {
		t.Fatalf("runs %v", runs)
	}
	for range nodeRuns(nil) {
		t.Fatal("a run of an empty assignment")
	}
}
