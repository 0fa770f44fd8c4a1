package coord

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// chainFlow: chains of one strong predecessor (the count check's), a join
// of two, a module of a chain after one, and a task after the module.
const chainFlow = `
flows:
  - name: main
    tasks:
      - {name: s, func: noop}
      - {name: c1, func: noop, succeed: [s]}
      - {name: c2, func: noop, succeed: [c1]}
      - {name: c3, func: noop, succeed: [c2]}
      - {name: j, func: noop, succeed: [c1, c3]}
      - {name: m, kind: module, flow: inner, succeed: [c3]}
      - {name: k, func: noop, succeed: [m]}
  - name: inner
    tasks:
      - {name: x, func: noop}
      - {name: y, func: noop, succeed: [x]}
      - {name: z, func: noop, succeed: [y]}
`

// chainAgain is chainFlow's tasks with other edges: a graph of as many
// vertices, other rules.
const chainAgain = `
flows:
  - name: main
    tasks:
      - {name: s, func: noop}
      - {name: c1, func: noop, succeed: [s]}
      - {name: c2, func: noop, succeed: [s]}
      - {name: c3, func: noop, succeed: [c1, c2]}
      - {name: j, func: noop, succeed: [c2]}
      - {name: m, kind: module, flow: inner, succeed: [j]}
      - {name: k, func: noop, succeed: [c1]}
  - name: inner
    tasks:
      - {name: x, func: noop}
      - {name: y, func: noop, succeed: [x]}
      - {name: z, func: noop, succeed: [x]}
`

// backFlow is a flow of n tasks written in an order of the seed's: a
// vertex's index is its place in the text, so a strong predecessor may come
// after its successor. Task i but the first has one strong predecessor
// among tasks 0 to i-1 (a chain: i-1; a fan: a root of the seed's; now
// and then two); order "back" writes task n-1 first and task 0 last (every
// predecessor after its successors), "mixed" in an order of the seed's.
func backFlow(n int, shape, order string, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	b.WriteString("flows:\n  - name: main\n    tasks:\n")
	line := make([]string, n)
	for i := range n {
		var pre []string
		switch {
		case i == 0:
		case shape == "chain":
			pre = []string{fmt.Sprint("t", i-1)}
		case shape == "fan":
			pre = []string{fmt.Sprint("t", rng.IntN(min(i, 3)))} // fans of up to 3 roots
		default: // random: one predecessor mostly, now and then two
			pre = []string{fmt.Sprint("t", rng.IntN(i))}
			if rng.IntN(6) == 0 {
				if q := fmt.Sprint("t", rng.IntN(i)); q != pre[0] {
					pre = append(pre, q)
				}
			}
		}
		line[i] = fmt.Sprintf("      - {name: t%d, func: noop", i)
		if len(pre) > 0 {
			line[i] += ", succeed: [" + strings.Join(pre, ", ") + "]"
		}
		line[i] += "}\n"
	}
	switch order {
	case "back":
		for i := n - 1; i >= 0; i-- {
			b.WriteString(line[i])
		}
	default:
		for _, i := range rng.Perm(n) {
			b.WriteString(line[i])
		}
	}
	return b.String()
}

// backGraph is backFlow expanded; it fails tb unless some vertex's one
// strong predecessor has a higher index (the order the text was written
// in), which a proof that reads only lower vertices would miss.
func backGraph(tb testing.TB, n int, shape, order string, seed uint64) *spec.Graph {
	tb.Helper()
	g := expand(tb, backFlow(n, shape, order, seed))
	p := verdictPlanOf(g)
	for v := range p.kind {
		if lo := p.strongAt[v]; p.strongAt[v+1]-lo == 1 && int(p.strong[lo]) > v {
			return g
		}
	}
	tb.Fatalf("%s %s graph of %d tasks, seed %d: no predecessor after its successor", shape, order, n, seed)
	return nil
}

// The check of the rows a fold has not proved (checkFold, the leader's)
// finds what the pass over every row finds (verdictPlan.check): the
// same owed tasks for the same reasons and the same failed tasks, in the
// same order, after every step of random records folded as the leader
// folds them (proofRecord).
func TestCheckFoldIsCheck(t *testing.T) {
	graphs := []struct {
		text  string // the flow folded against now and then as another graph
		g     *spec.Graph
		seeds uint64
	}{
		{verdictFlow, expand(t, verdictFlow), 400},
		{chainFlow, expand(t, chainFlow), 400},
		{chainAgain, expand(t, chainFlow), 200}, // the run's flow expanded again, other rules (a fold's proof is of one graph)
		{"", subflowGraph(t), 200},
		{"", layeredGraph(t, 4, 20), 100},
		{"", layeredGraph(t, 3, 1500), 6}, // past minPooledAgg: packed and unpacked between steps
		// predecessors written after their successors (a vertex's index is
		// its place in the text): chains, fans and random graphs
		{"", backGraph(t, 12, "chain", "back", 0), 300},
		{"", backGraph(t, 12, "fan", "back", 0), 300},
		{"", backGraph(t, 16, "random", "mixed", 1), 200},
		{"", backGraph(t, 16, "chain", "mixed", 2), 200},
		{"", backGraph(t, 4200, "chain", "back", 0), 4}, // past minPooledAgg
		{"", backGraph(t, 4200, "fan", "back", 0), 4},
	}
	for gi, c := range graphs {
		packed := 0
		for seed := range c.seeds {
			packed += proofRecord(t, fmt.Sprintf("graph %d, seed %d", gi, seed), c.g, c.text, rand.New(rand.NewPCG(seed, uint64(gi))))
		}
		if len(c.g.Vertices) >= minPooledAgg && packed == 0 {
			t.Errorf("graph %d: no step found its fold packed", gi)
		}
	}
}

// FuzzCheckFoldIsCheck is TestCheckFoldIsCheck's records from the
// fuzzer's seeds.
// Its graphs: the flows with loops and modules, and graphs written
// predecessors after successors (chains, fans, random), of a few vertices
// or of more than minPooledAgg (a fold packed and unpacked between steps).
func FuzzCheckFoldIsCheck(f *testing.F) {
	type graph struct {
		g    *spec.Graph
		text string
	}
	graphs := []graph{
		{expand(f, verdictFlow), verdictFlow},
		{expand(f, chainFlow), chainFlow},
		{backGraph(f, 12, "chain", "back", 0), ""},
		{backGraph(f, 12, "fan", "back", 0), ""},
		{backGraph(f, 16, "random", "mixed", 1), ""},
		{backGraph(f, 4200, "chain", "back", 0), ""},
		{backGraph(f, 4200, "random", "mixed", 3), ""},
	}
	for i := range graphs {
		f.Add(uint64(1), uint64(2), uint8(i))
	}
	f.Fuzz(func(t *testing.T, s1, s2 uint64, which uint8) {
		c := graphs[int(which)%len(graphs)]
		proofRecord(t, "fuzz", c.g, c.text, rand.New(rand.NewPCG(s1, s2)))
	})
}

// proofRecord folds a random record of a run of graph g into a fold, as
// the leader's status cache does (node reports through addReport, under a
// run's rule: owners, a lost node, past and coming generations; events of
// an earlier build through Add; the run's state changed, Touch; a finished
// run's fold packed, then folded again), and after each step checks that
// checkFold finds what check finds, and that the proof's count is its
// bits'. Rows come running, failed, done, skipped; 0 to 3 activations,
// their executions often as many (clean: the one-predecessor count check
// reads them), on one node mostly. When text is set, a step now and then
// folds against the graph expanded again from it (a graph let go and taken
// back as a new one, or a graph of other rules): the fold then keeps no
// proof, and the check of either graph still answers as its pass. Now and
// then the fold keeps a proof only from a later step on (a follower that
// became leader): the rows folded before are examined.
// It returns the steps that found the fold packed.
func proofRecord(t *testing.T, what string, g *spec.Graph, text string, rng *rand.Rand) (packed int) {
	t.Helper()
	nv := len(g.Vertices)
	nodes := []string{"n1", "n2", "n3"}
	node := func() string {
		if rng.IntN(4) == 0 {
			return nodes[rng.IntN(3)]
		}
		return "n1"
	}
	r := &Run{ID: "r1", Gen: uint64(1 + rng.IntN(2)), Assignment: make([]string, nv)}
	if rng.IntN(2) == 0 {
		r.Lost = []string{"n3"}
	}
	// A fold past minPooledAgg packs only when its rows are few runs: its
	// tasks are owned by n1 but for a few, all done once from the start,
	// and the steps are fewer and narrower.
	large := nv >= minPooledAgg
	for i := range r.Assignment {
		r.Assignment[i] = node()
		if large && rng.IntN(500) != 0 {
			r.Assignment[i] = "n1"
		}
	}
	if rng.IntN(5) == 0 {
		r = nil // every delta let in
	}
	states := []transport.TaskState{transport.TaskDone, transport.TaskDone, transport.TaskDone, transport.TaskDone,
		transport.TaskRunning, transport.TaskFailed, transport.TaskSkipped, transport.TaskPending}
	delta := func() (d transport.TaskDelta) {
		d = transport.TaskDelta{Task: uint32(rng.IntN(nv + 2)), State: states[rng.IntN(len(states))], Act: uint64(rng.IntN(4))}
		if d.Executions = d.Act; rng.IntN(3) == 0 {
			d.Executions = uint64(rng.IntN(4))
		}
		if rng.IntN(10) == 0 {
			d.Output = []byte{byte(rng.IntN(2))}
		}
		return d
	}
	var g2 *spec.Graph // g expanded again
	f := proofFold()
	keepAt := -1 // the step from which the fold keeps a proof (-1: from the start)
	if rng.IntN(4) == 0 {
		f, keepAt = NewFold(), rng.IntN(8) // a follower that becomes leader mid-run
	}
	p := verdictPlanOf(g)
	steps, deltas := 2+rng.IntN(min(4*nv+8, 120)), 8
	if large {
		steps, deltas = 2+rng.IntN(16), 3
		tr := &transport.TaskReport{Run: "r1", Gen: 1, Node: "n1", Tasks: []transport.TaskDelta{{State: transport.TaskDone, Act: 1, Executions: 1}}}
		f.addReport(g, tr, []uint32{uint32(nv)}, r)
	}
	for step := range steps {
		if step == keepAt {
			f.KeepProof()
		}
		fg := g
		if text != "" && rng.IntN(60) == 0 {
			if g2 == nil {
				g2 = expand(t, text)
			}
			fg = g2
		}
		k := rng.IntN(20)
		if large && rng.IntN(4) == 0 {
			k = 19 // packed more often
		}
		switch {
		case k < 12: // a node's report, ranges or single deltas
			tr := &transport.TaskReport{Run: "r1", Gen: uint64(1 + rng.IntN(3)), Node: node()}
			var runs []uint32
			for range 1 + rng.IntN(deltas) {
				d := delta()
				n := uint32(1)
				if rng.IntN(2) == 0 {
					n = uint32(1 + rng.IntN(max(2, nv/4)))
				}
				if d.Output != nil {
					n = 1
				}
				tr.Tasks, runs = append(tr.Tasks, d), append(runs, n)
			}
			if rng.IntN(3) == 0 {
				runs = runs[:0]
				for range tr.Tasks {
					runs = append(runs, 1)
				}
			}
			f.addReport(fg, tr, runs, r)
		case k < 17: // an event of an earlier build, by index or by name
			d := delta()
			e := &transport.TaskEvent{Run: "r1", Gen: uint64(1 + rng.IntN(2)), Task: d.Task, Node: node(),
				State: d.State, Act: d.Act, Executions: d.Executions, Output: d.Output}
			if rng.IntN(3) == 0 && int(d.Task) < nv {
				e.Name = g.Vertices[d.Task].Path
			}
			f.Add(fg, e)
		case k < 19: // the run's state changed
			f.Touch()
		default: // a finished run's fold, packed (when large and untouched since)
			f.Touch()
			f.pack()
		}
		if f.packed != nil {
			packed++
		}
		checkProofMatches(t, fmt.Sprintf("%s, step %d", what, step), g, p, f)
		if g2 != nil {
			checkProofMatches(t, fmt.Sprintf("%s, step %d, graph again", what, step), g2, verdictPlanOf(g2), f)
		}
	}
	return packed
}

// checkProofMatches fails t unless p.checkFold(g, f) is p.check(g, f) and
// f's proof counts its bits.
func checkProofMatches(t *testing.T, what string, g *spec.Graph, p *verdictPlan, f *Fold) {
	t.Helper()
	wo, wf := p.check(g, f)
	o, fl := p.checkFold(g, f)
	if !reflect.DeepEqual(o, wo) || !reflect.DeepEqual(fl, wf) {
		t.Fatalf("%s: checkFold found %v %v, the pass %v %v", what, o, fl, wo, wf)
	}
	n := 0
	for _, w := range f.proof.bits {
		n += bits.OnesCount64(w)
	}
	if n != f.proof.n {
		t.Fatalf("%s: the proof counts %d vertices, its bits %d", what, f.proof.n, n)
	}
}

// A run where every task is done once is proved whole as it is folded:
// the check at its end examines no row.
func TestFoldProvesACompleteRun(t *testing.T) {
	g := layeredGraph(t, 10, 100)
	nv := len(g.Vertices)
	r := &Run{ID: "r1", Gen: 1, Assignment: make([]string, nv)}
	for i := range r.Assignment {
		r.Assignment[i] = "n1"
	}
	f := proofFold()
	// reported out of order: the second half first
	for _, lo := range []int{nv / 2, 0} {
		tr := &transport.TaskReport{Run: "r1", Gen: 1, Node: "n1", Tasks: []transport.TaskDelta{{Task: uint32(lo), State: transport.TaskDone, Act: 1, Executions: 1}}}
		f.addReport(g, tr, []uint32{uint32(nv / 2)}, r)
	}
	if f.proof.n != nv {
		t.Fatalf("%d of %d vertices proved", f.proof.n, nv)
	}
	if o, fl := verdictPlanOf(g).checkFold(g, f); o != nil || fl != nil {
		t.Fatalf("owed %v, failed %v", o, fl)
	}
}

// A row or span past the graph a fold's proof is of drops the proof (the
// check then reads every row) rather than leave its marks as they were.
func TestProofPastItsGraphDrops(t *testing.T) {
	g := expand(t, chainFlow)
	nv := len(g.Vertices)
	for _, past := range []func(f *Fold){
		func(f *Fold) { f.prove(nv) },
		func(f *Fold) { f.proveSpan(nv-1, nv+1, true, transport.TaskDone, 1, 1) },
	} {
		f := proofFold()
		f.Add(g, &transport.TaskEvent{Run: "r1", Gen: 1, Task: 0, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1})
		if f.proof.n != 1 {
			t.Fatalf("%d vertices proved, want 1", f.proof.n)
		}
		f.grow(nv + 1)
		past(f)
		if !f.proof.off || f.proof.plan != nil || f.proof.n != 0 {
			t.Fatalf("the proof stays: off %v, %d vertices proved", f.proof.off, f.proof.n)
		}
	}
}

// proofFold is a new fold that keeps the record check's proof (the
// leader's).
func proofFold() *Fold {
	f := NewFold()
	f.KeepProof()
	return f
}

// A fold keeps no proof unless it is asked to (KeepProof: the leader's
// status caches): a follower's fold builds no verdict plan and holds no
// marks, and its check is the pass over every row.
func TestFoldKeepsNoProofUnlessAsked(t *testing.T) {
	g := layeredGraph(t, 4, 20)
	f := NewFold()
	tr := &transport.TaskReport{Run: "r1", Gen: 1, Node: "n1", Tasks: []transport.TaskDelta{{State: transport.TaskDone, Act: 1, Executions: 1}}}
	f.addReport(g, tr, []uint32{uint32(len(g.Vertices))}, nil)
	f.Add(g, &transport.TaskEvent{Run: "r1", Gen: 1, Task: 3, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1})
	if f.proof.plan != nil || f.proof.bits != nil {
		t.Fatal("a fold not asked to keeps a proof, and the graph's verdict plan with it")
	}
	if o, fl := CheckSuccess(g, f); o != nil || fl != nil {
		t.Fatalf("owed %v, failed %v", o, fl)
	}
}
