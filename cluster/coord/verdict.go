package coord

import (
	"fmt"
	mathbits "math/bits"
	"runtime"
	"slices"
	"strings"
	"sync"
	"weak"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// Owed is work a success verdict would leave undone: a task of the run's
// record that, by the graph's rules, still had to run (or finish) when the
// termination detector said the run was over.
type Owed struct {
	Task string
	Why  string
}

func (o Owed) String() string { return fmt.Sprintf("task %s: %s", o.Task, o.Why) }

// CheckSuccess checks a success verdict against the run's record (its
// folded TaskEvents): "succeeded" must mean every activation the graph asked
// for has completed. It returns what is owed; nil means the verdict stands.
// failed lists the tasks whose latest activation failed (their failure report
// never reached the leader, or the verdict raced it): such a run has failed.
//
// The rules follow from the join counter (docs/design.md, "The contract": a task's counter counts
// its strong predecessors; each completion of one decrements it; at zero the
// task runs and the counter is reset), and each is sound whatever the
// conditions picked:
//
//   - no task's latest activation is still running;
//   - every source of the flow (no predecessor at all, top level) ran;
//   - every source of a module instance ran once its module task ran;
//   - a task with strong predecessors that all ran, ran: had it never run,
//     no reset could have absorbed their decrements, and they reach zero;
//   - a task with one strong predecessor ran at least as often as it: each
//     completion of that predecessor takes a counter of one to zero. This one
//     is checked only where both ran without a re-execution, since a task
//     re-run after a node loss numbers its activations on its new owner.
//
// Subflow children (named "parent/child") are not vertices and are not
// checked here: their parent completes only after them.
//
// It examines only the vertices the fold has not proved to owe nothing as
// it folded (foldProof; every vertex for a fold of another graph), which
// finds what a pass over every vertex finds (verdictPlan.check), in the
// same order.
func CheckSuccess(g *spec.Graph, f *Fold) (owed []Owed, failed []string) {
	if g == nil || f == nil {
		return nil, nil
	}
	return verdictPlanOf(g).checkFold(g, f)
}

// CheckEveryRow is CheckSuccess as a pass over every vertex, whatever
// the fold proved as it folded: the check CheckSuccess stands for. The
// simulation (cluster/runsim) checks each verdict's CheckSuccess against
// it.
func CheckEveryRow(g *spec.Graph, f *Fold) (owed []Owed, failed []string) {
	if g == nil || f == nil {
		return nil, nil
	}
	return verdictPlanOf(g).check(g, f)
}

// verdictPlan is what CheckSuccess reads of a graph, in flat arrays (a
// pass over them reads no vertex, of ~1 KB each, but for the names of
// what it finds): the parent of each vertex, its kind for the check, and
// its strong predecessors; and, for the proof a fold keeps (foldProof),
// the vertices of one strong predecessor, by vertex and by predecessor.
type verdictPlan struct {
	parent   []int32
	kind     []uint8 // planSource, planCondOnly or planStrong
	strongAt []int32 // vertex v's strong predecessors are strong[strongAt[v]:strongAt[v+1]]
	strong   []int32
	onlyAt   []int32 // the vertices whose one strong predecessor is w are only[onlyAt[w]:onlyAt[w+1]]
	only     []int32
	single   []uint64 // vertex v has one strong predecessor: bit v%64 of single[v/64]
}

const (
	planSource   = iota // no predecessor at all
	planCondOnly        // predecessors, none strong: it runs when a condition picks it
	planStrong          // strong predecessors (StrongIn > 0)
)

func newVerdictPlan(g *spec.Graph) *verdictPlan {
	nv := len(g.Vertices)
	p := &verdictPlan{parent: make([]int32, nv), kind: make([]uint8, nv), strongAt: make([]int32, nv+1)}
	for i := range g.Vertices {
		v := &g.Vertices[i]
		p.parent[i] = int32(v.Parent)
		p.strongAt[i] = int32(len(p.strong))
		switch {
		case len(v.Pred) == 0:
			p.kind[i] = planSource
		case v.StrongIn == 0:
			p.kind[i] = planCondOnly
		default:
			p.kind[i] = planStrong
			for _, e := range v.Pred {
				if !e.Weak {
					p.strong = append(p.strong, int32(e.From))
				}
			}
		}
	}
	p.strongAt[nv] = int32(len(p.strong))
	// The vertices of one strong predecessor, by it: their proof (Fold.proof)
	// reads its row, so a change of it takes the proof back.
	p.onlyAt = make([]int32, nv+1)
	for v := range nv {
		if lo := p.strongAt[v]; p.strongAt[v+1]-lo == 1 {
			p.onlyAt[p.strong[lo]+1]++
		}
	}
	for w := range nv {
		p.onlyAt[w+1] += p.onlyAt[w]
	}
	p.only = make([]int32, p.onlyAt[nv])
	p.single = make([]uint64, (nv+63)/64)
	next := slices.Clone(p.onlyAt[:nv])
	for v := range nv {
		if lo := p.strongAt[v]; p.strongAt[v+1]-lo == 1 {
			w := p.strong[lo]
			p.only[next[w]] = int32(v)
			next[w]++
			p.single[v/64] |= 1 << (v % 64)
		}
	}
	return p
}

// verdictPlans keeps the verdict plans of the graphs the server checks
// runs of (its flow cache's, read-only), each while its graph lives: a run
// again is checked without a pass over its graph's vertices.
var verdictPlans sync.Map // weak.Pointer[spec.Graph] → *verdictPlan

// verdictPlanOf is read-only graph g's verdict plan, made once.
func verdictPlanOf(g *spec.Graph) *verdictPlan {
	k := weak.Make(g)
	if p, ok := verdictPlans.Load(k); ok {
		return p.(*verdictPlan)
	}
	p, loaded := verdictPlans.LoadOrStore(k, newVerdictPlan(g))
	if !loaded {
		runtime.AddCleanup(g, func(k weak.Pointer[spec.Graph]) { verdictPlans.Delete(k) }, k)
	}
	return p.(*verdictPlan)
}

// allRan reports whether every vertex of strong has a done activation.
func allRan(strong []int32, acts func(int) (*taskAgg, uint64)) bool {
	for _, q := range strong {
		pa, pact := acts(int(q))
		if pact == 0 || pa.state != transport.TaskDone {
			return false
		}
	}
	return true
}

// check is CheckEveryRow of g (p's graph) and f: a pass over every vertex.
func (p *verdictPlan) check(g *spec.Graph, f *Fold) (owed []Owed, failed []string) {
	for i := range p.kind {
		owed, failed = p.examine(g, f, i, owed, failed)
	}
	return owed, failed
}

// checkFold is check that examines only the vertices f has not proved to
// owe nothing (Fold.proof, kept as it folds): the same findings in the
// same order, as a proved vertex adds none. A fold that has no proof for
// p (it was folded against another graph, or p is not the graph's kept
// plan) is checked whole.
func (p *verdictPlan) checkFold(g *spec.Graph, f *Fold) (owed []Owed, failed []string) {
	pr := &f.proof
	if pr.plan != p || pr.g.Value() != g {
		return p.check(g, f)
	}
	if pr.n == len(p.kind) {
		return nil, nil // every vertex proved: the common success
	}
	for w, bits := range pr.bits {
		for bits = ^bits; bits != 0; bits &= bits - 1 {
			if i := w*64 + mathbits.TrailingZeros64(bits); i < len(p.kind) {
				owed, failed = p.examine(g, f, i, owed, failed)
			}
		}
	}
	return owed, failed
}

// examine appends what vertex i adds to the check's findings.
func (p *verdictPlan) examine(g *spec.Graph, f *Fold, i int, owed []Owed, failed []string) ([]Owed, []string) {
	acts := func(v int) (*taskAgg, uint64) {
		a := f.vertAgg(v)
		if a == nil {
			return nil, 0
		}
		return a, a.act
	}
	a, act := acts(i)
	if a != nil {
		switch a.state {
		case transport.TaskRunning:
			return append(owed, Owed{g.Vertices[i].Path, fmt.Sprintf("activation %d is still running on node %s", act, f.nodeOf(a))}), failed
		case transport.TaskFailed:
			return owed, append(failed, g.Vertices[i].Path)
		}
	}
	switch p.kind[i] {
	case planSource:
		parent := int(p.parent[i])
		switch {
		case parent < 0 && act == 0:
			owed = append(owed, Owed{g.Vertices[i].Path, "a source of the flow never ran"})
		case parent >= 0 && act == 0:
			if _, mact := acts(parent); mact > 0 {
				owed = append(owed, Owed{g.Vertices[i].Path, fmt.Sprintf("a source of module %s never ran although the module ran %d times", g.Vertices[parent].Path, mact)})
			}
		}
		return owed, failed
	case planCondOnly:
		return owed, failed // reached through conditions only: it runs when one picks it
	}
	strong := p.strong[p.strongAt[i]:p.strongAt[i+1]]
	// Whether its strong predecessors all ran matters only for a
	// vertex that never did: one that ran is not read through them
	// (a pass in vertex order, no predecessor's aggregate read at
	// random, for a run where every vertex ran).
	if act == 0 && allRan(strong, acts) {
		names := make([]string, len(strong))
		for k, q := range strong {
			names[k] = g.Vertices[q].Path
		}
		return append(owed, Owed{g.Vertices[i].Path, fmt.Sprintf("never ran although its strong predecessors (%s) all did", strings.Join(names, ", "))}), failed
	}
	if len(strong) == 1 {
		pa, pact := acts(int(strong[0]))
		if act < pact && f.clean(a) && f.clean(pa) {
			owed = append(owed, Owed{g.Vertices[i].Path, fmt.Sprintf("ran %d times, its strong predecessor %s %d times", act, g.Vertices[strong[0]].Path, pact)})
		}
	}
	return owed, failed
}
