package runproto

import (
	"slices"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// Joins lists, for each vertex of g whose join counter counts two or more
// distinct strong predecessors and that no condition picks, those
// predecessors (in vertex order); nil for every other vertex. Such a join's
// activation k takes the k-th completion of each of them (Loops.DstAct):
// when they complete unequal numbers of times, the surplus stays in a
// partially filled activation that never starts (Config.Joins).
func Joins(g *spec.Graph) [][]int {
	out := make([][]int, len(g.Vertices))
	for v := range g.Vertices {
		if len(g.WeakPreds(v)) > 0 {
			continue
		}
		var ps []int
		for _, p := range g.StrongPreds(v) {
			if !slices.Contains(ps, p) {
				ps = append(ps, p)
			}
		}
		if len(ps) >= 2 {
			slices.Sort(ps)
			out[v] = ps
		}
	}
	return out
}

// leftover reports whether s, which waits, is a surplus input of a join
// (Joins) that no completion here can let in now: s counts towards
// activation DstAct of its destination d, a join that runs here, whose
// activation next = Done(d)+1 has not been filled — some strong
// predecessor of d has given fewer than next completions, as far as this
// node knows (a local one: its completions here; another node's: the
// highest activation its Signals to d said they count towards, never
// forgotten, so that it errs towards owed) — and
// whose loop context, if any, has happened here. A node whose parts are
// idle can then never start activation next of d from what it holds: such
// a Signal is idle state, as a partly decremented join counter is on one
// node, not work owed. Anything else that waits is owed (a Signal whose
// destination's activation next is filled — all its inputs are here, so
// it must run — or whose causal past has yet to run here).
func (r *Run) leftover(s *transport.Signal) bool {
	d := int(s.Dst)
	tab := r.tab.Load()
	if s.Kind != transport.SignalEdge || d >= len(r.joins) || r.joins[d] == nil || tab.NodeOf(d) != r.self {
		return false
	}
	next := r.done(d) + 1
	if s.DstAct <= next { // waits for nothing of d: it is owed
		return false
	}
	if r.loops != nil {
		for j, k := range s.Ctx {
			if u := r.loops.Head(int(s.Src), j); k > 0 && u >= 0 && u < r.n && tab.NodeOf(u) == r.self && r.done(u) < k {
				return false
			}
		}
	}
	for _, p := range r.joins[d] {
		given := r.given[[2]int{p, d}]
		if tab.NodeOf(p) == r.self {
			given = max(given, r.done(p))
		}
		if given < next {
			return true
		}
	}
	return false
}

// noteGiven records that a Signal admitted here counts towards activation
// s.DstAct of a join (Joins).
func (r *Run) noteGiven(s *transport.Signal) {
	d := int(s.Dst)
	if s.Kind != transport.SignalEdge || d >= len(r.joins) || r.joins[d] == nil {
		return
	}
	if r.given == nil {
		r.given = map[[2]int]uint64{}
	}
	k := [2]int{int(s.Src), d}
	r.given[k] = max(r.given[k], s.DstAct)
}

// owed reports whether a Signal that waits is work owed (not a join's
// surplus: leftover).
func (r *Run) owed() bool {
	for _, hs := range r.waiting {
		for i := range hs {
			if !r.leftover(&hs[i].s) {
				return true
			}
		}
	}
	return false
}

// Surplus is how many Signals wait as a join's surplus (leftover): they
// keep no report from being idle.
func (r *Run) Surplus() int {
	n := 0
	for _, hs := range r.waiting {
		for i := range hs {
			if r.leftover(&hs[i].s) {
				n++
			}
		}
	}
	return n
}
