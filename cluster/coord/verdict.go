package coord

import (
	"fmt"
	"strings"

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
func CheckSuccess(g *spec.Graph, f *Fold) (owed []Owed, failed []string) {
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
	clean := func(a *taskAgg) bool { // ran on one node, each activation once
		return a != nil && len(a.execs) == 1 && a.execs[0].n == a.act
	}
	var strong []int // of the vertex at hand (reused)
	for i := range g.Vertices {
		v := &g.Vertices[i]
		a, act := acts(i)
		if a != nil {
			switch a.state {
			case transport.TaskRunning:
				owed = append(owed, Owed{v.Path, fmt.Sprintf("activation %d is still running on node %s", act, a.node)})
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
			if act < pact && clean(a) && clean(pa) {
				owed = append(owed, Owed{v.Path, fmt.Sprintf("ran %d times, its strong predecessor %s %d times", act, g.Vertices[strong[0]].Path, pact)})
			}
		}
	}
	return owed, failed
}
