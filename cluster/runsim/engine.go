package runsim

import (
	"github.com/hetflow/hetflow/cluster/spec"
)

// job is one activation of a task, scheduled to run.
type job struct {
	v    int
	act  uint64
	in   []input
	part int
}

// engine is the simulated executor of one node's share of a run (and, with
// every task in one part, the reference executor): Taskflow's rules over
// the expanded graph. A task runs when its join counter (its strong
// in-edges) is full, or at once when a condition picks it; the counter
// starts again after each activation, so loops through conditions
// re-activate their tasks. A module task's activation starts its instance's
// sources and completes when the instance has nothing left to run. Tasks of
// one part talk directly; an edge to a task of another part, or of another
// node, leaves through emit (a Signal in the simulation).
type engine struct {
	g    *spec.Graph
	part []int // the part a task runs in here; -1: not here
	cnt  []int
	in   [][]input
	acts []uint64
	// module vertex → member activations of its running instance not
	// finished; its activation and output while the instance runs
	inst    []int
	modAct  []uint64
	modOut  []uint64
	pending int // activations scheduled and not finished (modules until their instance ends)

	schedule func(job)
	emit     func(from, to int, act uint64, choice bool, out uint64)
}

func newEngine(g *spec.Graph) *engine {
	n := len(g.Vertices)
	e := &engine{g: g, part: make([]int, n), cnt: make([]int, n), in: make([][]input, n),
		acts: make([]uint64, n), inst: make([]int, n), modAct: make([]uint64, n), modOut: make([]uint64, n)}
	for i := range e.part {
		e.part[i] = -1
	}
	return e
}

// busy reports whether an activation is scheduled or running.
func (e *engine) busy() bool { return e.pending > 0 }

// open builds the tasks in as part p (fresh: a moved task runs again from
// its inputs) and starts the top-level sources among them.
func (e *engine) open(in []bool, p int) {
	for v, ok := range in {
		if ok {
			e.part[v], e.cnt[v], e.in[v], e.acts[v], e.inst[v] = p, 0, nil, 0, 0
		}
	}
	for v, ok := range in {
		vx := &e.g.Vertices[v]
		if ok && vx.Parent < 0 && len(vx.Pred) == 0 {
			e.activate(v, nil)
		}
	}
}

func (e *engine) activate(v int, in []input) {
	e.acts[v]++
	if p := e.g.Vertices[v].Parent; p >= 0 {
		e.inst[p]++
	}
	e.pending++
	e.schedule(job{v: v, act: e.acts[v], in: in, part: e.part[v]})
}

// strong counts a strong predecessor's completion into v's join counter.
func (e *engine) strong(v int, x input) {
	e.cnt[v]++
	e.in[v] = append(e.in[v], x)
	if e.cnt[v] >= e.g.Vertices[v].StrongIn {
		in := e.in[v]
		e.cnt[v], e.in[v] = 0, nil
		e.activate(v, in)
	}
}

// finish runs a scheduled activation (its effect) and returns its output.
func (e *engine) finish(j job) uint64 {
	out := output(j.v, j.act, j.in)
	vx := &e.g.Vertices[j.v]
	if vx.Task.Kind == spec.KindModule {
		e.modAct[j.v], e.modOut[j.v] = j.act, out
		srcs := e.g.ScopeSources(j.v)
		for _, s := range srcs {
			e.activate(s, nil)
		}
		if len(srcs) == 0 {
			e.complete(j.v, j.act, out)
		}
		return out
	}
	e.complete(j.v, j.act, out)
	return out
}

func (e *engine) complete(v int, act uint64, out uint64) {
	vx := &e.g.Vertices[v]
	if vx.Task.Kind.IsCondition() {
		if len(vx.Succ) > 0 {
			t := vx.Succ[pick(e.g, v, act)].To
			if e.part[t] == e.part[v] {
				e.activate(t, []input{{src: v, act: act}})
			} else {
				e.emit(v, t, act, true, 0)
			}
		}
	} else {
		for _, s := range vx.Succ {
			if e.part[s.To] == e.part[v] {
				e.strong(s.To, input{v, act, out})
			} else {
				e.emit(v, s.To, act, false, out)
			}
		}
	}
	e.pending--
	if p := vx.Parent; p >= 0 {
		e.inst[p]--
		if e.inst[p] == 0 {
			e.complete(p, e.modAct[p], e.modOut[p])
		}
	}
}

// deliver takes an input from another part or node.
func (e *engine) deliver(src, dst int, act uint64, choice bool, out uint64) {
	if choice {
		e.activate(dst, []input{{src: src, act: act}})
		return
	}
	e.strong(dst, input{src, act, out})
}
