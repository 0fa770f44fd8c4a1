package node

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/localexec"
	"github.com/hetflow/hetflow/transport"
)

// vstate is what the node keeps about one vertex of a run: counters and the
// last activation's state for local vertices, the latest output for every
// vertex whose output a local task reads.
//
// A vstate is what every activation of a plain task touches, side by side
// in 64 bytes (one cache line), and a pointer to the rest (vcold): a run's
// table of them is a large allocation, page-aligned, so each vertex's is
// one whole line, and the table is dense (a fifth of the pages and lines
// it took with the rest inline: a run's vertex table is larger than a
// core's caches, each line an activation reads is a miss, and the pages
// are many more than the TLB holds). What only some vertices' activations
// read (args, a path of their own, a timeout or retries, a device or a
// domain not cpu, remote strong successors) is in the vcold, read where a
// flag says so. TestVstateLayout holds it.
type vstate struct {
	acts  atomic.Uint64 // activations so far (local vertices)
	execs atomic.Uint64 // function executions so far (local vertices)
	done  atomic.Uint64 // activations completed (local vertices; runproto.Config.Done)
	// body is the vertex's function bound at build (funcs.Registry.Bind; a
	// reused build keeps it): nil where the bind failed (Invoke by name
	// then fails the task with why) or the vertex runs no function.
	body *funcs.Bound
	// What an activation reads of its vertex, copied from the graph by the
	// build of the first part that runs it (callInfo; the same in every
	// part: a vertex's data is the plan's): the graph's vertex spans five
	// cache lines, this one.
	name string // its task's name; its path too unless vOwnPath
	*vcold
	flags vflags
	_     [6]byte // to 64 bytes
}

// vcold is the part of a vertex's state (vstate) that a plain task's
// activation does not read: the build makes them in one array beside the
// run's vstates, and a vstate points at its own (a reused build keeps both).
type vcold struct {
	// Read by an activation where flags say so.
	args        funcs.Args    // vArgs
	path        string        // vOwnPath: its path, not its name
	timeout     time.Duration // vLimits
	retries     int32         // vLimits
	device      int32         // vPlaced
	domain      spec.Domain   // vPlaced; defaulted
	strongSends []int         // vSends: the remote targets of its strong out-edges, each once

	mu     sync.Mutex
	ran    bool   // an activation's output is recorded
	outAct uint64 // the activation out belongs to
	out    []byte

	state []byte   // Result.State of the last activation
	ctx   []uint64 // the loop context of the latest activation (runproto.Loops)

	preds []int // strong predecessors (distinct), for Inputs
	// ins are the receive proxies of its in-edges from other nodes or
	// parts, by source (set before its part opens): its Inputs and loop
	// context from those are the traversal last delivered on the edge, not
	// the source's latest on this node (a part that runs again what a lost
	// node ran reads the source's activation k for its activation k, while
	// the source, in another part here, may be far ahead).
	ins        []*recvEdge // by source, ascending (in)
	condSends  []*sendEdge // conditions: per out-edge index, nil where local
	childExecs map[string]*atomic.Uint64
}

// newVstates makes a run's vertex table of n vertices, each with its vcold.
func newVstates(n int) []vstate {
	vs, cold := make([]vstate, n), make([]vcold, n)
	for i := range vs {
		vs[i].vcold = &cold[i]
	}
	return vs
}

// vflags are what a vertex's activations test of it (vstate.flags).
type vflags uint16

const (
	vBuilt     vflags = 1 << iota // the fields callInfo sets are set
	vNoInputs                     // its function reads neither Inputs nor State (funcs.Entry.NoInputs)
	vHasCtx                       // it has a loop context (runproto.Loops.HasCtx)
	vSink                         // no successor: its done event carries its output
	vNoReaders                    // nothing reads its output from its vstate (readers): complete records none
	vPlaced                       // its domain is not spec.DomainCPU or it names a device: an activation reads vstate.domain and device
	vTransient                    // its function keeps no Call (funcs.Entry.Transient): its activations reuse Calls (callPool)
	vOwnPath                      // its path is not its name: an activation reads vstate.path
	vLimits                       // it has a timeout or retries: an activation reads vstate.timeout and retries
	vSends                        // it has strong out-edges to other nodes: complete reads vstate.strongSends
	vArgs                         // it has args: an activation reads vstate.args
	vQuiet                        // a run writes nothing of its vcold: a kept build's reset reads only its counters (quiet)
)

// pathOf is v's path (vOwnPath).
func (s *vstate) pathOf() string {
	if s.flags&vOwnPath != 0 {
		return s.path
	}
	return s.name
}

// callInfo copies what v's activations read of it into vs, once: a vertex
// built in a later part again keeps what is set (its activations may run).
// bodies are the functions bound so far by this build, by name and domain
// (one funcs.Bound for all the tasks of a function).
func (r *run) callInfo(v int, vs *vstate, bodies map[[2]string]*funcs.Bound) bool {
	if vs.flags&vBuilt != 0 {
		return false
	}
	vx := &r.graph().Vertices[v]
	t := &vx.Task
	vs.name, vs.path, vs.args, vs.domain = t.Name, vx.Path, funcs.Args(t.Args), t.Domain.Or()
	vs.timeout, vs.retries = t.Timeout, int32(t.Retries)
	if t.Device != nil {
		vs.device = int32(*t.Device)
	}
	f := vBuilt
	if t.Kind.Or() != spec.KindModule && t.Func != "" {
		key := [2]string{t.Func, string(vs.domain)}
		b, ok := bodies[key]
		if !ok {
			b, _ = r.n.reg.Bind(t.Func, vs.domain) // an error: Invoke by name reports it
			bodies[key] = b
		}
		vs.body = b
		if b != nil && b.NoInputs() {
			f |= vNoInputs
		}
		if b != nil && b.Transient() {
			f |= vTransient
		}
	}
	if r.lp().HasCtx(v) {
		f |= vHasCtx
	}
	if len(vx.Succ) == 0 {
		f |= vSink
	}
	if vs.domain != spec.DomainCPU || vs.device != 0 {
		f |= vPlaced
	}
	if vs.path != vs.name {
		f |= vOwnPath
	}
	if vs.timeout != 0 || vs.retries != 0 {
		f |= vLimits
	}
	if vs.args != nil {
		f |= vArgs
	}
	vs.flags = f
	return true
}

// readers marks v, whose callInfo its part's build has just set (no
// activation of it runs yet), vNoReaders when no successor reads its
// output from its vstate: every strong successor is built here with a
// function that reads no Inputs. A successor not built yet counts as a
// reader; one built in a later part reads v through an in-edge of its
// own, not v's vstate.
func (r *run) readers(v int) {
	for _, e := range r.graph().Vertices[v].Succ {
		if e.Weak {
			continue // a pick: no Inputs
		}
		if f := r.vs[e.To].flags; f&vBuilt == 0 || f&vNoInputs == 0 {
			return
		}
	}
	r.vs[v].flags |= vNoReaders
}

// in is the receive edge of the in-edges from src, or nil: at its place
// when the sources are consecutive vertices (a fan-in's often are), else
// by binary search.
func (s *vstate) in(src int) *recvEdge {
	ins := s.ins
	if len(ins) == 0 {
		return nil
	}
	if i := src - ins[0].src; i >= 0 && i < len(ins) && ins[i].src == src {
		return ins[i]
	}
	lo, hi := 0, len(ins)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ins[m].src < src {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(ins) && ins[lo].src == src {
		return ins[lo]
	}
	return nil
}

func (s *vstate) setOut(act uint64, out []byte) {
	s.mu.Lock()
	if !s.ran || act >= s.outAct {
		s.ran, s.outAct, s.out = true, act, out
	}
	s.mu.Unlock()
}

func (s *vstate) resetOut() {
	s.mu.Lock()
	s.ran, s.outAct, s.out, s.ctx = false, 0, nil, nil
	s.mu.Unlock()
}

func (s *vstate) setCtx(ctx []uint64) {
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
}

func (s *vstate) getCtx() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctx
}

func (s *vstate) output() ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out, s.ran
}

func (s *vstate) setState(b []byte) {
	s.mu.Lock()
	s.state = b
	s.mu.Unlock()
}

func (s *vstate) getState() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func (s *vstate) childCounter(path string) *atomic.Uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.childExecs == nil {
		s.childExecs = map[string]*atomic.Uint64{}
	}
	c := s.childExecs[path]
	if c == nil {
		c = new(atomic.Uint64)
		s.childExecs[path] = c
	}
	return c
}

// item is one traversal of a cross-node edge: the producer's activation,
// output and loop context, and the destination activation it starts.
type item struct {
	act    uint64
	out    []byte
	dstAct uint64
	ctx    []uint64
}

// fifo queues traversals between the producer's completion and its proxy's
// run: the producer may run again before the proxy does.
type fifo struct {
	mu    sync.Mutex
	items []item
	head  int
}

func (q *fifo) push(it item) {
	q.mu.Lock()
	q.items = append(q.items, it)
	q.mu.Unlock()
}

func (q *fifo) pop() (item, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.items) {
		return item{}, false
	}
	it := q.items[q.head]
	q.items[q.head] = item{}
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return it, true
}

// sendEdge is a condition's cross-node out-edge src → dst, with a send
// proxy task that pops the traversal and hands a Signal to the Batcher (a
// strong edge is sent by the producer's completion: sendStrong, by the
// vertex's strongSends).
type sendEdge struct {
	src, dst int
	fifo     fifo
	picks    atomic.Uint64 // a condition's: times it picked this edge
}

// recvEdge is a cross-node in-edge src → dst. At the top level of a part a
// delivered Signal fills its input slot (last) and, for a strong edge,
// counts into dst's join counter (task, which awaits mult such
// completions: localexec's Task.Await and OpenRun.Release), for a pick,
// runs dst (task): no proxy task. Inside a module instance (direct false)
// it is an External proxy task that an accepted Signal schedules.
type recvEdge struct {
	src, dst int
	b        *built
	kind     transport.SignalKind
	task     localexec.Task
	direct   bool
	mult     int   // strong edges src → dst (direct: releases per Signal)
	fifo     *fifo // a proxy's (not direct)

	mu   sync.Mutex
	has  bool
	last item // the traversal last delivered
}

func (e *recvEdge) setLast(it item) {
	e.mu.Lock()
	e.has, e.last = true, it
	e.mu.Unlock()
}

func (e *recvEdge) output() ([]byte, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last.out, e.has
}

func (e *recvEdge) ctx() []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last.ctx
}

// build checks that this node can run the vertices of in (a part: the ones
// assigned here, or those taken over from lost nodes) and builds their
// taskflow: the top-level scope, module instances as nested taskflows.
//
// The first part of a run takes the build an earlier run of the same plan
// and placement left (reuse.go) when there is one, else builds its own and
// the run's vertex table with it.
func (r *run) build(in []bool) (*part, error) {
	g := r.graph()
	first := r.vs == nil
	if first {
		if b := r.n.builds.take(r.pt.Load(), in); b != nil {
			r.n.stats.buildsReused.Add(1)
			return r.adopt(b), nil
		}
		r.vs = newVstates(len(g.Vertices))
	}
	tab := r.sm.Table()
	devs := len(r.n.ex.Devices())
	seen := map[int]bool{} // one vertex's strong predecessors, when it has many; cleared for the next
	var preds []int        // the backing array of the vertices' preds, a chunk at a time
	bodies := map[[2]string]*funcs.Bound{}
	var fresh []int // the vertices callInfo set
	for v := range g.Vertices {
		vx := &g.Vertices[v]
		if int(tab.Owner[v]) >= len(tab.Nodes) {
			return nil, &assignError{vx.Path, fmt.Errorf("owner %d names no node of the assignment", tab.Owner[v])}
		}
		if !in[v] {
			continue
		}
		r.nLocal++
		if p := vx.Parent; p >= 0 && !in[p] {
			return nil, &assignError{vx.Path, fmt.Errorf("module instance split: the task is on node %s but its module task %q is on node %s; a module instance runs wholly on its module task's node", r.n.id, g.Vertices[p].Path, r.nodeOf(p))}
		}
		if vx.Task.Kind.Or() == spec.KindModule {
			for _, d := range g.Descendants(v) {
				if !in[d] {
					return nil, &assignError{vx.Path, fmt.Errorf("module instance split: its task %q is on node %s, not here (%s); a module instance runs wholly on its module task's node", g.Vertices[d].Path, r.nodeOf(d), r.n.id)}
				}
			}
		}
		if vx.Task.Domain.Or() == spec.DomainGPU && r.n.gpuGraph(vx.Task.Func) != nil {
			dev := 0
			if vx.Task.Device != nil {
				dev = *vx.Task.Device
			}
			if dev >= devs {
				return nil, &assignError{vx.Path, fmt.Errorf("needs GPU device %d; node %s has %d", dev, r.n.id, devs)}
			}
		}
		if r.callInfo(v, &r.vs[v], bodies) {
			fresh = append(fresh, v)
		}
		if cap(preds)-len(preds) < len(vx.Pred) {
			preds = make([]int, 0, max(len(vx.Pred), 4096))
		}
		at := len(preds)
		if len(seen) > 0 {
			clear(seen)
		}
		for _, e := range vx.Pred {
			if p := e.From; !e.Weak && !hasPred(preds[at:], p, seen) {
				preds = append(preds, p)
			}
		}
		if got := preds[at:len(preds):len(preds)]; len(got) > 0 && r.vs[v].preds == nil {
			r.vs[v].preds = got
		} else if len(got) > 0 {
			r.vs[v].preds = append(r.vs[v].preds, got...)
		}
	}
	for _, v := range fresh {
		r.readers(v)
	}
	b := &built{tf: localexec.NewTaskflow(r.id), in: in, pt: r.pt.Load()}
	p := &part{built: b, run: r}
	b.cur = p
	b.tfs = append(b.tfs, b.tf)
	jobs := len(r.jobs)
	// The entry and exit task of each vertex, by vertex: scopes are disjoint
	// and their edges never cross, so the nested ones share it.
	ends := make([]taskEnds, len(g.Vertices))
	if err := r.buildScope(p, b.tf, -1, ends); err != nil {
		return nil, err
	}
	if first {
		b.vs, b.nLocal, b.gpu = r.vs, r.nLocal, len(r.jobs) > jobs
		for _, v := range fresh {
			r.quiet(v)
		}
	}
	return p, nil
}

// quiet marks v, built by the run's first part (its callInfo, readers and
// edges set, no activation of it run yet), vQuiet when no run writes
// anything of its vcold, so that a kept build's reset (vstate.reset) need
// not read it: a cold line a vertex, which a no-op activation never
// touches. What a run writes there, and what rules each out:
//   - its output (setOut): by complete unless vNoReaders; by a receive
//     edge's delivery only into its source's vstate: a vertex of another
//     node (not built here: no vBuilt, never marked) or of another part
//     of this node (see below);
//   - its state (setState) unless vNoInputs; its loop context (setCtx)
//     where vHasCtx;
//   - its in-edges' last traversals and queues (ins): set by buildScope
//     before this, so a vertex with any is not marked;
//   - its condition's sends (condSends) and its subflow children's
//     counters (childExecs): only a condition has the one and a subflow the
//     other, and only a static task is marked. The checks of the two are
//     belt and braces (childExecs is set by a run, so is nil here).
//
// A later part (a recovery's, on this node) may add a receive edge from v
// and so deliver into v's vcold: a run of more than one part is never kept
// (keepable), so its builds are never reset, and its flags are not
// changed under the activations that read them.
func (r *run) quiet(v int) {
	s := &r.vs[v]
	const need = vBuilt | vNoReaders | vNoInputs
	if s.flags&(need|vHasCtx) != need || len(s.ins) > 0 || s.condSends != nil || s.childExecs != nil {
		return
	}
	if r.graph().Vertices[v].Task.Kind.Or() != spec.KindStatic {
		return
	}
	s.flags |= vQuiet
}

// hasPred reports whether p is among a vertex's strong predecessors found
// so far (got): by a scan of a few, by seen (which it fills) past 8.
func hasPred(got []int, p int, seen map[int]bool) bool {
	if len(got) <= 8 && len(seen) == 0 {
		return slices.Contains(got, p)
	}
	if len(seen) == 0 {
		for _, q := range got {
			seen[q] = true
		}
	}
	if seen[p] {
		return true
	}
	seen[p] = true
	return false
}

// buildScope adds the part's vertices of one scope to tf, with a task (or an
// entry and an exit task) each, the edges inside the part, and proxies for
// the edges to and from other nodes and other parts.
func (r *run) buildScope(p *part, tf *localexec.Taskflow, scope int, ends []taskEnds) error {
	g := r.graph()
	b := p.built // the closures run the part that holds b now (b.run), not r: a later run may reuse it
	local := func(v int) bool { return p.in[v] }
	ids := g.Scope(scope)
	for _, v := range ids {
		if !local(v) {
			continue
		}
		en, ex, err := r.task(p, tf, v, ends)
		if err != nil {
			return err
		}
		ends[v] = taskEnds{en, ex}
	}
	// Out-edges in Succ order: a condition's k-th successor stays its k-th.
	strong := map[int]bool{} // one vertex's remote strong targets, cleared for the next
	for _, v := range ids {
		if !local(v) {
			continue
		}
		vx := &g.Vertices[v]
		vs := &r.vs[v]
		weak := vx.Task.Kind.IsCondition()
		if weak {
			vs.condSends = make([]*sendEdge, len(vx.Succ))
		}
		clear(strong)
		for k, e := range vx.Succ {
			u := e.To
			if local(u) {
				ends[v].exit.Precede(ends[u].entry)
				continue
			}
			if weak {
				se := &sendEdge{src: v, dst: u}
				// Carried, and the word reset: see run.runStatic.
				ends[v].exit.Precede(tf.EmplaceCarried(func(c *int64) { *c = 0; b.run().send(se) }).Name(vx.Path + ">" + g.Vertices[u].Path))
				vs.condSends[k] = se
				continue
			}
			if strong[u] {
				continue // one Signal per (src, dst, act); the receiver restores the multiplicity
			}
			strong[u] = true
			// no proxy task: complete sends the strong edges (sendStrong)
			vs.strongSends = append(vs.strongSends, u)
			vs.flags |= vSends
		}
	}
	// In-edges from other nodes: at the top level none but dst's join
	// counter and input slot; in a module instance one External proxy per
	// (src, dst).
	direct := scope < 0
	mult := map[int]int{} // one vertex's remote in-edges by source, cleared for the next
	var order []int
	for _, u := range ids {
		if !local(u) {
			continue
		}
		clear(mult)
		order = order[:0]
		for _, e := range g.Vertices[u].Pred {
			if local(e.From) {
				continue
			}
			if mult[e.From] == 0 {
				order = append(order, e.From)
			}
			mult[e.From]++
		}
		slices.Sort(order)
		res := make([]recvEdge, len(order)) // one allocation a vertex, not one an edge
		ins := make([]*recvEdge, 0, len(order))
		for i, src := range order {
			re := &res[i]
			*re = recvEdge{src: src, dst: u, b: p.built, direct: direct, mult: mult[src]}
			if !direct {
				re.fifo = new(fifo)
			}
			cond := g.Vertices[src].Task.Kind.IsCondition()
			switch {
			case cond && direct:
				re.kind = transport.SignalChoice
				re.task = ends[u].entry.External() // a pick runs it, whatever its counter
			case cond:
				re.kind = transport.SignalChoice
				re.task = tf.EmplaceCondition(func() int { return b.run().recvChoice(re) }).Name(proxyName(g, src, u)).External()
				re.task.Precede(ends[u].entry)
			case direct:
				re.kind = transport.SignalEdge
				re.task = ends[u].entry.Await(re.mult)
			default:
				re.kind = transport.SignalEdge
				re.task = tf.EmplaceCarried(func(c *int64) { *c = 0; b.run().recvEdge(re) }).Name(proxyName(g, src, u)).External()
				for range re.mult {
					re.task.Precede(ends[u].entry)
				}
			}
			ins = append(ins, re)
		}
		if len(ins) > 0 {
			r.vs[u].ins = ins
		}
	}
	return nil
}

// taskEnds are the task a vertex's in-edges enter and the one its
// out-edges leave (run.task).
type taskEnds struct{ entry, exit localexec.Task }

// proxyName names the proxy task of the edge src → dst.
func proxyName(g *spec.Graph, src, dst int) string {
	return g.Vertices[src].Path + ">" + g.Vertices[dst].Path
}

// task adds vertex v to tf and returns the task its in-edges enter and the
// task its out-edges leave.
func (r *run) task(p *part, tf *localexec.Taskflow, v int, ends []taskEnds) (entry, exit localexec.Task, err error) {
	vx := &r.graph().Vertices[v]
	path := vx.Path
	b := p.built
	switch vx.Task.Kind.Or() {
	case spec.KindModule:
		inner := localexec.NewTaskflow(path)
		b.tfs = append(b.tfs, inner)
		if err := r.buildScope(p, inner, v, ends); err != nil {
			return entry, exit, err
		}
		entry = tf.ComposedOf(inner).Name(path)
		exit = tf.EmplaceCarried(func(c *int64) { *c = 0; b.run().moduleDone(v) }).Name(path + "#done")
		entry.Precede(exit)
		return entry, exit, nil
	case spec.KindSubflow:
		t := tf.EmplaceSubflow(func(sf *localexec.Subflow) { b.run().runSubflow(v, sf) }).Name(path)
		return t, t, nil
	case spec.KindCondition:
		t := tf.EmplaceCondition(func() int { return b.run().runCondition(v) }).Name(path)
		return t, t, nil
	case spec.KindMultiCondition:
		t := tf.EmplaceMultiCondition(func() []int { return b.run().runMulti(v) }).Name(path)
		return t, t, nil
	}
	if vx.Task.Domain.Or() == spec.DomainGPU {
		if gb := r.n.gpuGraph(vx.Task.Func); gb != nil {
			w, err := gb(funcs.Args(vx.Task.Args))
			if err != nil {
				return entry, exit, &assignError{path, err}
			}
			job := &gpuJob{w}
			r.jobs = append(r.jobs, job)
			dev := 0
			if vx.Task.Device != nil {
				dev = *vx.Task.Device
			}
			entry = tf.EmplaceGPU(job.build).On(dev).Name(path)
			exit = tf.EmplaceCarried(func(c *int64) { *c = 0; b.run().gpuDone(v, job) }).Name(path + "#done")
			entry.Precede(exit)
			return entry, exit, nil
		}
	}
	// Hint: the worker that ran a predecessor asks for v's vstate and row
	// with the closure (run.hint), a task ahead of begin's loads of them.
	t := tf.EmplaceCarried(func(carry *int64) { b.run().runStatic(v, carry) }).Name(path).Hint(v)
	return t, t, nil
}

// hint gives p's taskflow the tables its activations' hints index
// (localexec.Taskflow.SetHints), before p opens: the run's vertex table and
// its rows (the flight slots), the two lines an activation's begin waits
// for (a vertex's vstate and row, one line each: TestVstateLayout), so that
// localexec asks for them a task ahead. The rows are the run's own (a kept
// build's taskflow is given the next run's at its open); the tables are
// only prefetched, so one that a later run replaced costs a miss, never a
// wrong read.
func (r *run) hint(p *part) {
	vs, rows := r.vs, r.flights.rows
	if len(vs) == 0 {
		p.tf.SetHints(nil, nil, 0, 0)
		return
	}
	var b unsafe.Pointer
	if len(rows) >= len(vs) && unsafe.Sizeof(rows[0]) == unsafe.Sizeof(vs[0]) {
		b = unsafe.Pointer(&rows[0])
	}
	p.tf.SetHints(unsafe.Pointer(&vs[0]), b, len(vs), unsafe.Sizeof(vs[0]))
}
