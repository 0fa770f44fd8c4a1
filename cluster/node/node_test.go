package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

var jsonUnmarshal = json.Unmarshal

// mixedFlow has every kind of task: a do-while loop (body, cond), a
// multi-condition (pick), a subflow (fan), two instances of a module with a
// loop inside (mod, mod2), saxpy on a GPU and on the CPU, and a sink that
// hashes outputs that crossed nodes (b's 100-byte blob among them).
const mixedFlow = `
flows:
  - name: mixed
    tasks:
      - {name: init, func: hash}
      - {name: a, func: hash, succeed: [init]}
      - {name: b, func: blob, args: {n: 100}, succeed: [init]}
      - {name: body, func: hash, succeed: [a, b]}
      - {name: cond, kind: condition, func: loop, args: {n: 20}, succeed: [body], precede: [body, after]}
      - {name: after, func: hash}
      - {name: pick, kind: multicondition, func: pick, args: {choices: [0, 2]}, succeed: [after], precede: [x, y, z]}
      - {name: x, func: hash}
      - {name: y, func: hash}
      - {name: z, func: hash}
      - {name: fan, kind: subflow, func: fanout, args: {n: 3, us: 10}, succeed: [x]}
      - {name: mod, kind: module, flow: inner, succeed: [z]}
      - {name: mod2, kind: module, flow: inner, succeed: [x]}
      - {name: gsax, func: saxpy, domain: gpu, args: {n: 5000, a: 3}, succeed: [init]}
      - {name: csax, func: saxpy, args: {n: 5000, a: 3}, succeed: [init]}
      - {name: sink, func: hash, succeed: [fan, mod, mod2, x, z, a, b]}
  - name: inner
    tasks:
      - {name: p, func: hash}
      - {name: q, func: hash, succeed: [p]}
      - {name: c, kind: condition, func: loop, args: {n: 2}, succeed: [q], precede: [q, r]}
      - {name: r, func: hash, succeed: []}
`

func parseFlow(t testing.TB, text string) (*spec.File, *spec.Graph) {
	t.Helper()
	return parseFlowWith(t, "test.yaml", text, funcs.Default())
}

// parseFlowWith parses text as file name, validates it against reg's
// functions and expands it.
func parseFlowWith(t testing.TB, name, text string, reg *funcs.Registry) (*spec.File, *spec.Graph) {
	t.Helper()
	f, err := spec.Parse(name, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(spec.Options{Funcs: reg}); err != nil {
		t.Fatal(err)
	}
	g, err := f.Expand()
	if err != nil {
		t.Fatal(err)
	}
	return f, g
}

// placement gives every vertex an owner: place says where top-level tasks
// go, module instances follow their module task, and gpu tasks go to a node
// that has a GPU.
func placement(g *spec.Graph, k int, gpuNodes []int, place func(v int) int) []uint32 {
	own := make([]uint32, len(g.Vertices))
	for _, v := range g.Scope(-1) {
		o := place(v) % k
		if g.Vertices[v].Task.Domain.Or() == spec.DomainGPU && !contains(gpuNodes, o) {
			o = gpuNodes[v%len(gpuNodes)]
		}
		own[v] = uint32(o)
		for _, d := range g.Descendants(v) {
			own[d] = uint32(o)
		}
	}
	return own
}

func byName(g *spec.Graph, name string) int {
	v, ok := g.Lookup(name)
	if !ok {
		panic("no task " + name)
	}
	return v
}

// compare fails unless two folds agree on every task's state, activations,
// executions and output.
func compare(t *testing.T, label string, want, got map[string]*taskFold) {
	t.Helper()
	bad := len(want) != len(got)
	for name, w := range want {
		g := got[name]
		if g == nil || g.state != w.state || g.acts != w.acts || g.executions() != w.executions() || !bytes.Equal(g.output, w.output) {
			bad = true
		}
	}
	if bad {
		t.Fatalf("%s differs from the single-node run\nwant:\n%s\ngot:\n%s", label, summary(want), summary(got))
	}
}

func TestMixedFlowAcrossPlacements(t *testing.T) {
	c := newCluster(t, nodeSpec{gpus: 1}, nodeSpec{gpus: 1}, nodeSpec{})
	file, g := parseFlow(t, mixedFlow)
	ctx := testCtx(t, 120*time.Second)

	// the baseline: everything on n0 (the other nodes hold nothing)
	base := c.runFlow(ctx, file, placement(g, 3, []int{0}, func(int) int { return 0 }), runOpts{})
	if base.failed != nil {
		t.Fatalf("baseline failed: %+v", base.failed)
	}
	checkMixed(t, base.tasks)

	cases := map[string][]uint32{}
	cases["round-robin-2"] = placement(g, 2, []int{0, 1}, func(v int) int { return v })
	cases["round-robin-3"] = placement(g, 3, []int{0, 1}, func(v int) int { return v })
	// the loop's body and condition on different nodes, the exit on a third
	cases["loop-split"] = placement(g, 3, []int{0}, func(v int) int {
		switch v {
		case byName(g, "body"):
			return 0
		case byName(g, "cond"):
			return 1
		case byName(g, "after"):
			return 2
		}
		return v
	})
	// the multi-condition on one node, its three successors on three
	cases["multicondition-split"] = placement(g, 3, []int{1}, func(v int) int {
		switch v {
		case byName(g, "pick"):
			return 0
		case byName(g, "x"):
			return 1
		case byName(g, "y"):
			return 2
		case byName(g, "z"):
			return 0
		case byName(g, "mod"), byName(g, "fan"):
			return 2
		case byName(g, "mod2"):
			return 1
		}
		return v + 1
	})
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 7))
		cases[fmt.Sprintf("random-%d", seed)] = placement(g, 3, []int{0, 1}, func(int) int { return rng.IntN(3) })
	}
	for name, own := range cases {
		got := c.runFlow(ctx, file, own, runOpts{})
		if got.failed != nil {
			t.Fatalf("%s: failed: %+v", name, got.failed)
		}
		compare(t, name, base.tasks, got.tasks)
	}
	var sent, recv uint64
	for _, n := range c.nodes {
		s := n.Stats()
		sent += s.SignalsSent
		recv += s.SignalsReceived
		if s.RunsActive != 0 || s.SignalsDropped != 0 {
			t.Fatalf("%s: %+v", n.ID(), s)
		}
	}
	if sent == 0 || sent != recv {
		t.Fatalf("signals sent %d, received %d", sent, recv)
	}
	// A run placed as an earlier one has the same plans: each node shares
	// the part it compiled then (and the run still matches the baseline).
	before := make([]Stats, len(c.nodes))
	for i, n := range c.nodes {
		before[i] = n.Stats()
	}
	got := c.runFlow(ctx, file, cases["random-0"], runOpts{})
	if got.failed != nil {
		t.Fatalf("random-0 again: failed: %+v", got.failed)
	}
	compare(t, "random-0 again", base.tasks, got.tasks)
	for i, n := range c.nodes {
		s, b := n.Stats(), before[i]
		if s.Assignments == b.Assignments {
			continue
		}
		if s.PlansReused != b.PlansReused+1 || s.PlansCached != b.PlansCached {
			t.Fatalf("%s: a run placed as before: plans reused %d -> %d, cached %d -> %d; want the part compiled before", n.ID(),
				b.PlansReused, s.PlansReused, b.PlansCached, s.PlansCached)
		}
	}
}

// checkMixed checks the single-node run against what the flow defines.
func checkMixed(t *testing.T, m map[string]*taskFold) {
	t.Helper()
	acts := map[string]uint64{
		"init": 1, "a": 1, "b": 1, "body": 21, "cond": 21, "after": 1, "pick": 1, "x": 1, "z": 1,
		"fan": 1, "fan/0": 1, "fan/1": 1, "fan/2": 1, "mod": 1, "mod2": 1, "mod/p": 1, "mod/q": 3,
		"mod/c": 3, "mod/r": 1, "mod2/p": 1, "mod2/q": 3, "mod2/c": 3, "mod2/r": 1, "gsax": 1, "csax": 1, "sink": 1,
	}
	for name, want := range acts {
		f := m[name]
		if f == nil || f.state != transport.TaskDone || f.acts != want || f.executions() != want {
			t.Fatalf("task %s: %v, want done with %d activations and executions\n%s", name, f, want, summary(m))
		}
	}
	if len(m) != len(acts) {
		t.Fatalf("tasks reported: %d, want %d (y never runs)\n%s", len(m), len(acts), summary(m))
	}
	// the sink's hash from first principles
	h := func(name string, in map[string][]byte) []byte { s := funcs.HashOf(name, in); return s[:] }
	blob := make([]byte, 100)
	for i := range blob {
		blob[i] = byte(i)
	}
	init := h("init", nil)
	want := h("sink", map[string][]byte{"a": h("a", map[string][]byte{"init": init}), "b": blob, "x": h("x", nil), "z": h("z", nil)})
	if !bytes.Equal(m["sink"].output, want) {
		t.Fatalf("sink output %x, want %x", m["sink"].output, want)
	}
	if len(m["gsax"].output) != 8 || !bytes.Equal(m["gsax"].output, m["csax"].output) {
		t.Fatalf("gpu saxpy %x, cpu saxpy %x", m["gsax"].output, m["csax"].output)
	}
	if !bytes.Equal(m["mod/r"].output, h("r", nil)) {
		t.Fatalf("module sink output %x", m["mod/r"].output)
	}
}

// Listing 5 (do-while, body 100 times) with the body and the condition on
// two nodes: every iteration crosses twice.
func TestDoWhileAcrossNodes(t *testing.T) {
	c := newCluster(t, nodeSpec{}, nodeSpec{})
	var ex spec.Example
	for _, e := range spec.Examples() {
		if strings.HasPrefix(e.Name, "listing5") {
			ex = e
		}
	}
	file, err := ex.Parse()
	if err != nil {
		t.Fatal(err)
	}
	g, err := file.Expand()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 60*time.Second)
	one := c.runFlow(ctx, file, make([]uint32, len(g.Vertices)), runOpts{})
	own := placement(g, 2, []int{0}, func(v int) int {
		if v == byName(g, "cond") {
			return 1
		}
		return 0
	})
	two := c.runFlow(ctx, file, own, runOpts{})
	compare(t, "split", one.tasks, two.tasks)
	if b := two.tasks["body"]; b.acts != 100 || b.executions() != 100 || b.node != "n0" {
		t.Fatalf("body: %v on %s", b, b.node)
	}
	if cd := two.tasks["cond"]; cd.acts != 100 || cd.node != "n1" {
		t.Fatalf("cond: %v on %s", cd, cd.node)
	}
	if d := two.tasks["done"]; d.acts != 1 {
		t.Fatalf("done: %v", d)
	}
	// 100 body→cond edges, 99 cond→body picks and 1 cond→done pick
	s0, s1 := c.nodes[0].Stats(), c.nodes[1].Stats()
	if s0.SignalsSent != 100 || s1.SignalsSent != 100 || s0.SignalsReceived != 100 || s1.SignalsReceived != 100 {
		t.Fatalf("signals: n0 %+v, n1 %+v", s0, s1)
	}
}

// A function that may read Inputs gets them (a predecessor without output
// as nil), whatever its predecessors are; one registered NoInputs gets
// neither Inputs nor State, in a first run and in one that reuses its
// build.
func TestInputsAndStateOnlyForFunctionsThatReadThem(t *testing.T) {
	type seen struct {
		inputs map[string][]byte
		state  []byte
	}
	var mu sync.Mutex
	got := map[string][]seen{}
	body := func(_ context.Context, c *funcs.Call) (funcs.Result, error) {
		mu.Lock()
		got[c.Task] = append(got[c.Task], seen{c.Inputs, c.State})
		mu.Unlock()
		return funcs.Result{Output: []byte("o-" + c.Task), State: []byte(fmt.Sprint(c.Activation))}, nil
	}
	reg := funcs.Default()
	reg.MustRegister(funcs.Entry{Name: "reads", CPU: body})
	reg.MustRegister(funcs.Entry{Name: "blind", CPU: body, NoInputs: true})
	c := newCluster(t, nodeSpec{reg: reg})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlowWith(t, "inputs.yaml", `
name: inputs
tasks:
  - {name: a, func: noop}
  - {name: b, func: reads}
  - {name: r, func: reads, succeed: [a, b]}
  - {name: x, func: blind, succeed: [a, b]}
`, reg)
	for range 2 { // the second run reuses the first's build
		mu.Lock()
		clear(got)
		mu.Unlock()
		if out := c.runFlow(ctx, file, make([]uint32, len(g.Vertices)), runOpts{}); out.failed != nil {
			t.Fatalf("failed: %+v", out.failed)
		}
		mu.Lock()
		r, x := got["r"], got["x"]
		mu.Unlock()
		if len(r) != 1 || len(x) != 1 {
			t.Fatalf("r ran %d times, x %d", len(r), len(x))
		}
		if want := map[string][]byte{"a": nil, "b": []byte("o-b")}; !reflect.DeepEqual(r[0].inputs, want) {
			t.Fatalf("r's inputs %q, want %q", r[0].inputs, want)
		}
		if _, ok := r[0].inputs["a"]; !ok {
			t.Fatal("r's inputs lack a, a predecessor that ran without output")
		}
		if x[0].inputs != nil || x[0].state != nil {
			t.Fatalf("x, registered NoInputs, got inputs %q and state %q", x[0].inputs, x[0].state)
		}
	}
}

// A function may keep its Call after it returns, and it stays its own; one
// registered Transient that keeps it anyway finds it taken back
// (funcs.Release): Activation 0 and Task Released, nothing of the run.
func TestCallKeptOnlyByNonTransientFunctions(t *testing.T) {
	var mu sync.Mutex
	kept := map[string]*funcs.Call{}
	body := func(_ context.Context, c *funcs.Call) (funcs.Result, error) {
		mu.Lock()
		kept[c.Task] = c
		mu.Unlock()
		return funcs.Result{Output: []byte("o")}, nil
	}
	reg := funcs.Default()
	reg.MustRegister(funcs.Entry{Name: "keeps", CPU: body})
	reg.MustRegister(funcs.Entry{Name: "lends", CPU: body, Transient: true})
	c := newCluster(t, nodeSpec{reg: reg})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlowWith(t, "keep.yaml", `
name: keep
tasks:
  - {name: a, func: noop}
  - {name: k, func: keeps, succeed: [a]}
  - {name: l, func: lends, succeed: [a]}
`, reg)
	for run := range 2 { // the second run reuses the first's build
		if out := c.runFlow(ctx, file, make([]uint32, len(g.Vertices)), runOpts{}); out.failed != nil {
			t.Fatalf("failed: %+v", out.failed)
		}
		mu.Lock()
		k, l := *kept["k"], *kept["l"]
		mu.Unlock()
		if k.Task != "k" || k.Path != "k" || k.Activation != 1 || k.Inputs == nil {
			t.Fatalf("run %d: the Call k kept reads %+v, not its own", run, k)
		}
		if l.Task != funcs.Released || l.Path != funcs.Released || l.Activation != 0 || l.Inputs != nil || l.Args != nil {
			t.Fatalf("run %d: the Call l (Transient) kept reads %+v, not taken back", run, l)
		}
	}
}
