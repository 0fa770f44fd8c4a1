package runproto

import (
	"slices"

	"github.com/hetflow/hetflow/cluster/spec"
)

// FreeJoins marks the joins of g whose strong predecessors' completions are
// not paired by activation: a task that no condition picks, with two or
// more distinct strong predecessors that are not all in its own loop (the
// component of Loops; all outside any loop counts as one). Such a join's
// predecessors may complete unequal numbers of times (a once, body four
// times in a do-while), so the k-th completion of each is no input of its
// activation k: it takes them as its join counter does on one node, in
// rounds of as many completions as it has strong in-edges, whichever
// predecessor gave them (localexec's releaseJoin), and the surplus stays in
// the counter. Config.Free: their Signals do not wait for the join's
// previous activation (Signal.DstAct), which a surplus could wait for for
// ever.
func FreeJoins(g *spec.Graph) []bool { return FreeJoinsOf(g, NewLoops(g)) }

// FreeJoinsOf is FreeJoins with g's Loops made already (NewLoops(g)).
func FreeJoinsOf(g *spec.Graph, l *Loops) []bool {
	out := make([]bool, len(g.Vertices))
	for v := range g.Vertices {
		if len(g.WeakPreds(v)) > 0 {
			continue
		}
		ps := slices.Compact(slices.Sorted(slices.Values(g.StrongPreds(v))))
		if len(ps) < 2 {
			continue
		}
		for _, p := range ps {
			if l.comp[p] != l.comp[v] {
				out[v] = true
			}
		}
	}
	return out
}
