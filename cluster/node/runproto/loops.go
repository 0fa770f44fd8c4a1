package runproto

import (
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// Loops numbers the activations a traversal starts (transport.Signal.DstAct)
// from what the source's activation knows, so that a task re-executed on a
// new owner, whose inputs come from the record and from live senders in any
// order, runs activation k on activation k's inputs, as the original did.
//
// The rule, for activation k of v traversing an edge to u:
//
//   - u is picked by a condition of the loop v is in (u and that condition
//     in one strongly connected component of the graph, v in it too): u's
//     next activation after the latest one in the causal past of v's
//     activation, which the loop context says (Ctx: for each such task of
//     the loop, its latest activation in the causal past);
//   - otherwise a strong edge: activation k of u (a join's j-th activation
//     takes the j-th completion of each strong predecessor; a free join's,
//     FreeJoins, takes them in rounds, and its receiver does not wait on
//     this number);
//   - otherwise a weak edge: u's activation that is the condition's n-th
//     pick of it (n counted by the sender).
//
// A task's context is the merge (elementwise max) of the contexts of its
// inputs from its own loop, with its own slot set to its activation. For
// the flows whose activations do not depend on timing (every strong
// predecessor of a join runs once per activation of the join, a task with
// strong predecessors picked only by the conditions of its own loop, every
// other pick target picked by one condition) this is the numbering any
// fault-free run has.
type Loops struct {
	comp  []int32 // vertex → its loop (a component with a cycle), -1
	slot  []int32 // vertex → its place in its loop's context, -1
	width []int   // loop → context length
	heads [][]int // loop → the task of each place of its context
}

// NewLoops finds the loops of g (spec.Graph.Cycles).
func NewLoops(g *spec.Graph) *Loops {
	n := len(g.Vertices)
	l := &Loops{comp: make([]int32, n), slot: make([]int32, n)}
	for i := range l.comp {
		l.comp[i], l.slot[i] = -1, -1
	}
	for c, comp := range g.Cycles() {
		for _, v := range comp {
			l.comp[v] = int32(c)
		}
		l.width = append(l.width, 0)
		l.heads = append(l.heads, nil)
	}
	// A loop's context: the tasks of the loop that a condition of the loop
	// picks, in vertex order.
	for u := range n {
		c := l.comp[u]
		if c < 0 {
			continue
		}
		for _, e := range g.Vertices[u].Pred {
			if e.Weak && l.comp[e.From] == c {
				l.slot[u] = int32(l.width[c])
				l.width[c]++
				l.heads[c] = append(l.heads[c], u)
				break
			}
		}
	}
	// A context longer than a Signal may carry is not kept: such a loop's
	// activations are numbered as outside a loop.
	for c, w := range l.width {
		if w > transport.MaxSignalCtx {
			for _, u := range l.heads[c] {
				l.slot[u] = -1
			}
			l.width[c], l.heads[c] = 0, nil
		}
	}
	return l
}

// Ctx is the context of activation act of v from its inputs' contexts:
// srcs[i] the task whose activation gave ctxs[i] (an input from another loop
// counts nothing). It returns nil when v is in no loop, or its loop has no
// task a condition of it picks.
func (l *Loops) Ctx(v int, act uint64, srcs []int, ctxs [][]uint64) []uint64 {
	c := l.comp[v]
	if c < 0 || l.width[c] == 0 {
		return nil
	}
	out := make([]uint64, l.width[c])
	for i, s := range srcs {
		if l.comp[s] != c || len(ctxs[i]) != len(out) {
			continue
		}
		for j, x := range ctxs[i] {
			out[j] = max(out[j], x)
		}
	}
	if s := l.slot[v]; s >= 0 {
		out[s] = act
	}
	return out
}

// DstAct is the activation of u that activation act of v starts through
// one of its edges to u: ctx is the activation's context (Ctx), strong
// whether the edge is strong, picks (weak edges) how many times v's
// activations so far, this one included, picked u.
func (l *Loops) DstAct(v int, act uint64, ctx []uint64, u int, strong bool, picks uint64) uint64 {
	if c := l.comp[u]; c >= 0 && c == l.comp[v] && l.slot[u] >= 0 && int(l.slot[u]) < len(ctx) {
		return ctx[l.slot[u]] + 1
	}
	if strong {
		return act
	}
	return picks
}

// HasCtx reports whether v's activations have a loop context (Ctx is not
// nil).
func (l *Loops) HasCtx(v int) bool {
	c := l.comp[v]
	return c >= 0 && l.width[c] > 0
}

// Head is the task of place j of v's loop context (-1: none).
func (l *Loops) Head(v, j int) int {
	if v < 0 || v >= len(l.comp) {
		return -1
	}
	c := l.comp[v]
	if c < 0 || j < 0 || j >= len(l.heads[c]) {
		return -1
	}
	return l.heads[c][j]
}
