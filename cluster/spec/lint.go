package spec

import (
	"fmt"
	"sort"
)

// Warning is something valid but almost certainly not what the author
// meant: the flow runs, but not as it reads.
type Warning struct {
	File, Flow, Task string
	Msg              string
}

func (w Warning) String() string {
	return fmt.Sprintf("%s: flow %q task %q: %s", w.File, w.Flow, w.Task, w.Msg)
}

// Warnings lints a valid file (call it after Validate). It reports
// Taskflow's documented pitfall: a task that joins, with strong edges, work
// from two branches of one condition. A condition runs one branch per
// activation, so the join's counter never reaches zero from that
// condition's branches alone, and the run can end with the join skipped.
func (f *File) Warnings() []Warning {
	var out []Warning
	for i := range f.Flows {
		fl := &f.Flows[i]
		g, err := f.Graph(fl.Name)
		if err != nil {
			continue // Validate reports it
		}
		out = append(out, branchJoins(f.Path, fl.Name, g)...)
	}
	return out
}

// branchJoins finds tasks with strong predecessors that are reached, by
// strong edges alone, from different successors of one condition and not
// from both.
func branchJoins(file, flow string, g *Graph) []Warning {
	var out []Warning
	seen := map[[2]int]bool{} // (join, condition) reported
	for c := range g.Vertices {
		cv := &g.Vertices[c]
		if !cv.Task.Kind.IsCondition() {
			continue
		}
		// reach[v] = the set of distinct branch targets of c that reach v.
		reach := map[int]map[int]bool{}
		for _, e := range cv.Succ {
			stack := []int{e.To}
			mark := map[int]bool{e.To: true}
			for len(stack) > 0 {
				v := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if reach[v] == nil {
					reach[v] = map[int]bool{}
				}
				reach[v][e.To] = true
				if v == c || g.Vertices[v].Task.Kind.IsCondition() {
					continue // a nested condition starts branches of its own
				}
				for _, s := range g.Vertices[v].Succ {
					if !s.Weak && !mark[s.To] {
						mark[s.To] = true
						stack = append(stack, s.To)
					}
				}
			}
		}
		for u := range g.Vertices {
			uv := &g.Vertices[u]
			if uv.StrongIn < 2 || seen[[2]int{u, c}] {
				continue
			}
			var branches []string
			by := map[int]string{} // branch target → one predecessor it reaches alone
			for _, e := range uv.Pred {
				r := reach[e.From]
				if e.Weak || len(r) != 1 {
					continue // not on one branch only
				}
				for b := range r {
					if _, ok := by[b]; !ok {
						by[b] = g.Vertices[e.From].Name()
					}
				}
			}
			if len(by) < 2 {
				continue
			}
			for b, p := range by {
				branches = append(branches, fmt.Sprintf("%s (branch %s)", p, g.Vertices[b].Name()))
			}
			sort.Strings(branches)
			seen[[2]int{u, c}] = true
			out = append(out, Warning{File: file, Flow: flow, Task: uv.Name(), Msg: fmt.Sprintf(
				"joins two branches of condition %q with strong edges (from %s): the condition runs one branch at a time, so this task never runs through it; "+
					"make the branches precede it through a condition, or join them before the condition", cv.Name(), joinAnd(branches))})
		}
	}
	return out
}

func joinAnd(xs []string) string {
	switch len(xs) {
	case 0:
		return ""
	case 1:
		return xs[0]
	}
	s := xs[0]
	for _, x := range xs[1 : len(xs)-1] {
		s += ", " + x
	}
	return s + " and " + xs[len(xs)-1]
}
