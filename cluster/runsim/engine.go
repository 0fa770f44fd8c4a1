package runsim

import (
	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/spec"
)

// job is one activation of a task, scheduled to run: ctx is its loop
// context (runproto.Loops).
type job struct {
	v    int
	act  uint64
	in   []input
	part int
	ctx  []uint64
}

// engine is the simulated executor of one node's share of a run (and, with
// every task in one part, the reference executor): Taskflow's rules over
// the expanded graph. A task runs when its join counter (its strong
// in-edges) is full, or at once when a condition picks it; the counter
// starts again after each activation, so loops through conditions
// re-activate their tasks. A module task's activation starts its instance's
// sources and completes when the instance has nothing left to run. Tasks of
// one part talk directly; an edge to a task of another part, or of another
// node, leaves through emit (a Signal in the simulation), stamped with the
// activation of its destination it starts (runproto.Loops, as cluster/node
// does).
type engine struct {
	g     *spec.Graph
	loops *runproto.Loops
	part  []int // the part a task runs in here; -1: not here
	cnt   []int
	in    [][]input
	acts  []uint64
	done  []uint64         // activations completed
	picks []map[int]uint64 // condition → target → times picked
	ctx   [][]uint64       // the loop context of each task's latest activation
	// module vertex → member activations of its running instance not
	// finished; its activation and output while the instance runs
	inst    []int
	modAct  []uint64
	modOut  []uint64
	pending int // activations scheduled and not finished (modules until their instance ends)

	schedule func(job)
	emit     func(from, to int, act, dstAct uint64, ctx []uint64, choice bool, out uint64)
	// choose is a condition's pick for an activation (nil: pick)
	choose func(v int, act uint64) int
	// picked: activation act of condition v picked t, a task of its part
	// (nil: nobody is told)
	picked func(v, t int, act uint64)
	// completed: an activation of v completed
	completed func(v int)
}

func newEngine(g *spec.Graph) *engine {
	n := len(g.Vertices)
	e := &engine{g: g, loops: runproto.NewLoops(g), part: make([]int, n), cnt: make([]int, n), in: make([][]input, n),
		acts: make([]uint64, n), done: make([]uint64, n), picks: make([]map[int]uint64, n), ctx: make([][]uint64, n),
		inst: make([]int, n), modAct: make([]uint64, n), modOut: make([]uint64, n)}
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
			e.done[v], e.picks[v], e.ctx[v] = 0, nil, nil
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
	act := e.acts[v]
	srcs := make([]int, len(in))
	ctxs := make([][]uint64, len(in))
	for i, x := range in {
		srcs[i], ctxs[i] = x.src, x.ctx
	}
	e.schedule(job{v: v, act: act, in: in, part: e.part[v], ctx: e.loops.Ctx(v, act, srcs, ctxs)})
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
	e.ctx[j.v] = j.ctx
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
	ctx := e.ctx[v]
	if vx.Task.Kind.IsCondition() {
		if len(vx.Succ) > 0 {
			k := pick(e.g, v, act)
			if e.choose != nil {
				k = e.choose(v, act)
			}
			t := vx.Succ[k].To
			if e.part[t] == e.part[v] {
				if e.picked != nil {
					e.picked(v, t, act)
				}
				e.activate(t, []input{{src: v, act: act, ctx: ctx}})
			} else {
				if e.picks[v] == nil {
					e.picks[v] = map[int]uint64{}
				}
				e.picks[v][t]++
				e.emit(v, t, act, e.loops.DstAct(v, act, ctx, t, false, e.picks[v][t]), ctx, true, 0)
			}
		}
	} else {
		for _, s := range vx.Succ {
			if e.part[s.To] == e.part[v] {
				e.strong(s.To, input{v, act, out, ctx})
			} else {
				e.emit(v, s.To, act, e.loops.DstAct(v, act, ctx, s.To, true, 0), ctx, false, out)
			}
		}
	}
	e.pending--
	e.done[v]++
	if e.completed != nil {
		e.completed(v)
	}
	if p := vx.Parent; p >= 0 {
		e.inst[p]--
		if e.inst[p] == 0 {
			e.complete(p, e.modAct[p], e.modOut[p])
		}
	}
}

// deliver takes an input from another part or node (ctx: the source
// activation's loop context).
func (e *engine) deliver(src, dst int, act uint64, ctx []uint64, choice bool, out uint64) {
	if choice {
		e.activate(dst, []input{{src: src, act: act, ctx: ctx}})
		return
	}
	e.strong(dst, input{src, act, out, ctx})
}
