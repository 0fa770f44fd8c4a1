package transport

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// ---- Plan ----

// Plan is one node's part of a run, compiled by the leader from the run's
// expanded graph (cluster/node/runproto.Compile): what the node needs to
// build its taskflow without the flow's text. It travels in
// Assignment.Plan, encoded as its own message ([10, 4, ...]), so that a
// node can key its cache of compiled plans by the bytes' hash.
//
// Tasks is the size of the run's graph (the owner table's length). Vertices
// holds, in ascending Index, every vertex the node runs (Local) and the
// neighbours those need to be named and wired: their predecessors and
// successors on other nodes, their module tasks and the members of their
// module tasks. A neighbour has Index, Path, Name, Kind, Loop and Slot
// only. Loops lists the context of each loop (runproto.Loops) a vertex of
// the plan is in, by the loop's number in the whole graph.
//
//	Plan        [10, 4, tasks, [vertex, ...], [[loop, [head, ...]], ...]]
//	vertex      [index, path, name_at, local, kind, func, args, domain, device, retries, timeout,
//	             parent, [succ, ...], [pred, ...], [member, ...], loop, slot, free]
//
// name_at is where Name begins in Path (a task's path is its module tasks'
// paths and its name); an edge is two uints, the vertex at its other end
// and 0 for a strong edge or 1 + its index for a weak one; device, parent,
// loop and slot are -1 for none; args is a msgpack map (nil: none) whose
// values are nil, bool, int64 (always int64 format), uint64 (uint64
// format), float64, str, arrays and maps of those, keys sorted.
type Plan struct {
	Tasks    uint32
	Vertices []PlanVertex
	Loops    []PlanLoop
}

// PlanVertex is one vertex of a Plan (see Plan).
type PlanVertex struct {
	Index   uint32
	Path    string
	Name    string // a suffix of Path
	Local   bool   // the node runs it; else a neighbour
	Kind    TaskKind
	Func    string
	Args    map[string]any
	Domain  TaskDomain
	Device  int32 // -1: not given
	Retries uint32
	Timeout time.Duration
	Parent  int32 // its module task, -1 at the top level
	Succ    []PlanEdge
	Pred    []PlanEdge
	Members []uint32 // a module task's flow instance, in declaration order
	Loop    int32    // its loop's number in the graph, -1
	Slot    int32    // its place in its loop's context, -1
	Free    bool     // a free join (runproto.FreeJoins)
}

// PlanEdge is an edge of a PlanVertex: Peer is the vertex at its other
// end; Index a weak edge's position in its condition's precede list, -1
// for a strong edge.
type PlanEdge struct {
	Peer  uint32
	Index int32
}

// Weak reports whether e is an edge out of a condition.
func (e PlanEdge) Weak() bool { return e.Index >= 0 }

// PlanLoop is the context of one loop: the tasks of each place, in order.
type PlanLoop struct {
	ID    uint32
	Heads []uint32
}

// TaskKind is a task's kind in a Plan (cluster/spec.Kind).
type TaskKind uint8

// Task kinds.
const (
	KindStatic TaskKind = iota
	KindCondition
	KindMultiCondition
	KindSubflow
	KindModule
	kindEnd
)

// TaskDomain is a task's domain in a Plan (cluster/spec.Domain).
type TaskDomain uint8

// Task domains.
const (
	DomainCPU TaskDomain = iota
	DomainGPU
	domainEnd
)

// MaxArgsDepth bounds the nesting of a task's args in a Plan.
const MaxArgsDepth = 32

// Type implements Message.
func (*Plan) Type() Type { return TypePlan }

const (
	planFields   = 3
	vertexFields = 18
)

// sizeHint is about the bytes of p's encoding (args counted as nil), or
// a little over: what Encode makes room for at once, instead of growing
// the buffer of a plan of 100K tasks some twenty times.
func (p *Plan) sizeHint() int {
	n := 16
	for i := range p.Vertices {
		v := &p.Vertices[i]
		n += 32 + len(v.Path) + len(v.Func) + 6*(len(v.Succ)+len(v.Pred)) + 5*len(v.Members)
	}
	for _, l := range p.Loops {
		n += 8 + 5*len(l.Heads)
	}
	return n
}

// AppendWire implements Message.
func (p *Plan) AppendWire(b []byte) []byte {
	b = appendHeader(b, TypePlan, planFields)
	b = appendUint(b, uint64(p.Tasks))
	b = appendArrayHeader(b, len(p.Vertices))
	for i := range p.Vertices {
		b = p.Vertices[i].append(b)
	}
	b = appendArrayHeader(b, len(p.Loops))
	for _, l := range p.Loops {
		b = appendArrayHeader(b, 2)
		b = appendUint(b, uint64(l.ID))
		b = appendUints(b, l.Heads)
	}
	return b
}

func (v *PlanVertex) append(b []byte) []byte {
	b = appendArrayHeader(b, vertexFields)
	b = appendUint(b, uint64(v.Index))
	b = appendStr(b, v.Path)
	at := len(v.Path) - len(v.Name)
	if at < 0 || v.Path[at:] != v.Name {
		at = len(v.Path) // not a suffix (Validate refuses it): an empty name
	}
	b = appendUint(b, uint64(at))
	b = appendBool(b, v.Local)
	b = append(b, byte(v.Kind))
	b = appendStr(b, v.Func)
	if v.Args == nil {
		b = append(b, mpNil)
	} else {
		b = appendValue(b, v.Args)
	}
	b = append(b, byte(v.Domain))
	b = appendInt(b, int64(v.Device))
	b = appendUint(b, uint64(v.Retries))
	b = appendInt(b, int64(v.Timeout))
	b = appendInt(b, int64(v.Parent))
	b = appendEdges(b, v.Succ)
	b = appendEdges(b, v.Pred)
	b = appendUints(b, v.Members)
	b = appendInt(b, int64(v.Loop))
	b = appendInt(b, int64(v.Slot))
	return appendBool(b, v.Free)
}

func appendUints(b []byte, xs []uint32) []byte {
	b = appendArrayHeader(b, len(xs))
	for _, x := range xs {
		b = appendUint(b, uint64(x))
	}
	return b
}

func appendEdges(b []byte, es []PlanEdge) []byte {
	b = appendArrayHeader(b, 2*len(es))
	for _, e := range es {
		b = appendUint(b, uint64(e.Peer))
		b = appendUint(b, uint64(e.Index+1))
	}
	return b
}

const mpFloat64 = 0xcb

// appendValue writes one value of a task's args (see Plan).
func appendValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, mpNil)
	case bool:
		return appendBool(b, x)
	case string:
		return appendStr(b, x)
	case int64:
		return appendInt64(b, x)
	case int:
		return appendInt64(b, int64(x))
	case int32:
		return appendInt64(b, int64(x))
	case uint64:
		return appendUint64(b, x)
	case uint:
		return appendUint64(b, uint64(x))
	case uint32:
		return appendUint64(b, uint64(x))
	case float64:
		return appendFloat64(b, x)
	case float32:
		return appendFloat64(b, float64(x))
	case []any:
		b = appendArrayHeader(b, len(x))
		for _, e := range x {
			b = appendValue(b, e)
		}
		return b
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = appendMapHeader(b, len(keys))
		for _, k := range keys {
			b = appendStr(b, k)
			b = appendValue(b, x[k])
		}
		return b
	}
	// Not a value a flow's args hold (cluster/spec.Task.Args): its text.
	return appendStr(b, fmt.Sprint(v))
}

func appendInt64(b []byte, v int64) []byte {
	b = append(b, mpInt64)
	return binary.BigEndian.AppendUint64(b, uint64(v))
}

func appendUint64(b []byte, v uint64) []byte {
	b = append(b, mpUint64)
	return binary.BigEndian.AppendUint64(b, v)
}

func appendFloat64(b []byte, v float64) []byte {
	b = append(b, mpFloat64)
	return binary.BigEndian.AppendUint64(b, math.Float64bits(v))
}

// Decode decodes a Plan into p. Every vertex, edge end, member, parent and
// head must be a vertex of the run (below Tasks, at most Limits.MaxTasks),
// vertices and loops must come in ascending order, each once, and a
// vertex's Loop must be one of Loops: a plan that decodes is safe to index
// by.
func (p *Plan) Decode(data []byte, lim Limits) error {
	var r reader
	if err := r.init(data, lim, TypePlan, planFields); err != nil {
		return err
	}
	tasks, err := r.uint("tasks")
	if err != nil {
		return err
	}
	if tasks > uint64(r.lim.MaxTasks) {
		return r.oversized("tasks", int(min(tasks, math.MaxInt32)), r.lim.MaxTasks)
	}
	p.Tasks = uint32(tasks)
	n, err := r.arrayLen("vertices", int(p.Tasks))
	if err != nil {
		return err
	}
	p.Vertices = nil
	if n > 0 {
		p.Vertices = make([]PlanVertex, n)
	}
	funcs := map[string]string{}
	var edges []PlanEdge // the vertices' edge lists' backing arrays
	for i := range p.Vertices {
		v := &p.Vertices[i]
		if err := v.decode(&r, p.Tasks, funcs, &edges); err != nil {
			return fmt.Errorf("vertex %d: %w", i, err)
		}
		if i > 0 && v.Index <= p.Vertices[i-1].Index {
			return r.errf("vertex %d: index %d after %d (want ascending, each once)", i, v.Index, p.Vertices[i-1].Index)
		}
	}
	if n, err = r.arrayLen("loops", int(p.Tasks)); err != nil {
		return err
	}
	p.Loops = nil
	if n > 0 {
		p.Loops = make([]PlanLoop, n)
	}
	for i := range p.Loops {
		l := &p.Loops[i]
		if err := r.fields("loop", 2); err != nil {
			return err
		}
		if l.ID, err = r.uint32("loop id"); err != nil {
			return err
		}
		if l.ID >= p.Tasks {
			return r.errf("loop %d: id %d of a run of %d tasks", i, l.ID, p.Tasks)
		}
		if i > 0 && l.ID <= p.Loops[i-1].ID {
			return r.errf("loop %d: id %d after %d (want ascending, each once)", i, l.ID, p.Loops[i-1].ID)
		}
		if l.Heads, err = r.uints("heads", MaxSignalCtx, p.Tasks); err != nil {
			return err
		}
	}
	for i := range p.Vertices {
		v := &p.Vertices[i]
		if v.Loop < 0 {
			continue
		}
		k, ok := slices.BinarySearchFunc(p.Loops, uint32(v.Loop), func(l PlanLoop, id uint32) int { return int(int64(l.ID) - int64(id)) })
		if !ok {
			return r.errf("vertex %d: loop %d is not among the plan's loops", v.Index, v.Loop)
		}
		if v.Slot >= int32(len(p.Loops[k].Heads)) {
			return r.errf("vertex %d: slot %d of a loop context of %d", v.Index, v.Slot, len(p.Loops[k].Heads))
		}
	}
	return r.end()
}

func (v *PlanVertex) decode(r *reader, tasks uint32, funcs map[string]string, edges *[]PlanEdge) error {
	if err := r.fields("vertex", vertexFields); err != nil {
		return err
	}
	var err error
	if v.Index, err = r.uint32("index"); err != nil {
		return err
	}
	if v.Index >= tasks {
		return r.errf("index %d of a run of %d tasks", v.Index, tasks)
	}
	if v.Path, err = r.str("path", r.lim.MaxText); err != nil {
		return err
	}
	at, err := r.uint("name_at")
	if err != nil {
		return err
	}
	if at > uint64(len(v.Path)) {
		return r.errf("name_at %d past the path's %d bytes", at, len(v.Path))
	}
	v.Name = v.Path[at:]
	if v.Local, err = r.bool("local"); err != nil {
		return err
	}
	k, err := r.uint8("kind")
	if err != nil {
		return err
	}
	if TaskKind(k) >= kindEnd {
		return r.errf("kind: unknown task kind %d", k)
	}
	v.Kind = TaskKind(k)
	fn, err := r.rawStr("func", r.lim.MaxText)
	if err != nil {
		return err
	}
	if s, ok := funcs[string(fn)]; ok {
		v.Func = s
	} else {
		v.Func = string(fn)
		if len(funcs) < 1024 {
			funcs[v.Func] = v.Func
		}
	}
	if r.off < len(r.b) && r.b[r.off] == mpNil {
		r.off++
		v.Args = nil
	} else {
		a, err := r.value("args", 0)
		if err != nil {
			return err
		}
		m, ok := a.(map[string]any)
		if !ok {
			return r.errf("args: want a map")
		}
		v.Args = m
	}
	d, err := r.uint8("domain")
	if err != nil {
		return err
	}
	if TaskDomain(d) >= domainEnd {
		return r.errf("domain: unknown domain %d", d)
	}
	v.Domain = TaskDomain(d)
	if v.Device, err = r.int32m("device", math.MaxInt32); err != nil {
		return err
	}
	if v.Retries, err = r.uint32("retries"); err != nil {
		return err
	}
	to, err := r.int("timeout")
	if err != nil {
		return err
	}
	if to < 0 {
		return r.errf("timeout: negative")
	}
	v.Timeout = time.Duration(to)
	if v.Parent, err = r.int32m("parent", int64(tasks)-1); err != nil {
		return err
	}
	if v.Succ, err = r.edges("succ", tasks, edges); err != nil {
		return err
	}
	if v.Pred, err = r.edges("pred", tasks, edges); err != nil {
		return err
	}
	if v.Members, err = r.uints("members", int(tasks), tasks); err != nil {
		return err
	}
	if v.Loop, err = r.int32m("loop", int64(tasks)-1); err != nil {
		return err
	}
	if v.Slot, err = r.int32m("slot", MaxSignalCtx-1); err != nil {
		return err
	}
	if v.Slot >= 0 && v.Loop < 0 {
		return r.errf("slot %d outside a loop", v.Slot)
	}
	v.Free, err = r.bool("free")
	return err
}

// int32m reads an integer from -1 to max.
func (r *reader) int32m(what string, max int64) (int32, error) {
	n, err := r.int(what)
	if err != nil {
		return 0, err
	}
	if n < -1 || n > max {
		return 0, r.errf("%s: %d out of range -1..%d", what, n, max)
	}
	return int32(n), nil
}

// uints reads an array of at most max vertices of a run of tasks.
func (r *reader) uints(what string, max int, tasks uint32) ([]uint32, error) {
	n, err := r.arrayLen(what, max)
	if err != nil || n == 0 {
		return nil, err
	}
	out := make([]uint32, n)
	for i := range out {
		if out[i], err = r.uint32(what); err != nil {
			return nil, err
		}
		if out[i] >= tasks {
			return nil, r.errf("%s: vertex %d of a run of %d tasks", what, out[i], tasks)
		}
	}
	return out, nil
}

// edges reads a vertex's edge list into the free room of *pool, a backing
// array the plan's lists share (a new one when it is full: never more
// edges than the bytes left could hold), capped at its end.
func (r *reader) edges(what string, tasks uint32, pool *[]PlanEdge) ([]PlanEdge, error) {
	n, err := r.arrayLen(what, 0)
	if err != nil || n == 0 {
		return nil, err
	}
	if n%2 != 0 {
		return nil, r.errf("%s: %d numbers, want pairs", what, n)
	}
	k := n / 2
	if cap(*pool)-len(*pool) < k {
		*pool = make([]PlanEdge, 0, max(k, min(4096, (len(r.b)-r.off)/2)))
	}
	at := len(*pool)
	*pool = (*pool)[:at+k]
	out := (*pool)[at : at+k : at+k]
	for i := range out {
		e := &out[i]
		if e.Peer, err = r.uint32(what); err != nil {
			return nil, err
		}
		if e.Peer >= tasks {
			return nil, r.errf("%s: vertex %d of a run of %d tasks", what, e.Peer, tasks)
		}
		w, err := r.uint32(what)
		if err != nil {
			return nil, err
		}
		if w > math.MaxInt32 {
			return nil, r.errf("%s: edge index %d out of range", what, w)
		}
		e.Index = int32(w) - 1
	}
	return out, nil
}

// value reads one value of a task's args (see Plan).
func (r *reader) value(what string, depth int) (any, error) {
	if depth > MaxArgsDepth {
		return nil, r.errf("%s: nested deeper than %d", what, MaxArgsDepth)
	}
	if r.off >= len(r.b) {
		return nil, r.errf("truncated: unexpected end of input")
	}
	c := r.b[r.off]
	switch {
	case c == mpNil:
		r.off++
		return nil, nil
	case c == mpTrue || c == mpFalse:
		return r.bool(what)
	case c&0xe0 == 0xa0, c == mpStr8, c == mpStr16, c == mpStr32:
		return r.str(what, r.lim.MaxText)
	case c == mpInt64:
		r.off++
		v, err := r.be(8)
		return int64(v), err
	case c == mpUint64:
		r.off++
		return r.be(8)
	case c == mpFloat64:
		r.off++
		v, err := r.be(8)
		return math.Float64frombits(v), err
	case c&0xf0 == 0x90, c == mpArray16, c == mpArray32:
		n, err := r.arrayLen(what, 0)
		if err != nil {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = r.value(what, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case c&0xf0 == 0x80, c == mpMap16, c == mpMap32:
		n, err := r.mapLen(what, 0)
		if err != nil {
			return nil, err
		}
		out := make(map[string]any, n)
		for range n {
			k, err := r.str(what+" key", r.lim.MaxText)
			if err != nil {
				return nil, err
			}
			if _, dup := out[k]; dup {
				return nil, r.errf("%s: key %q given twice", what, k)
			}
			if out[k], err = r.value(what, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, r.errf("%s: a value of format byte 0x%02x (want nil, bool, str, int64, uint64, float64, array or map)", what, c)
}

// Validate checks what a decoder checks of p, before it is sent.
func (p *Plan) Validate() error {
	_, err := DecodePlan(Encode(p), Limits{})
	if err != nil {
		return err
	}
	for i := range p.Vertices {
		v := &p.Vertices[i]
		if len(v.Name) > len(v.Path) || v.Path[len(v.Path)-len(v.Name):] != v.Name {
			return fmt.Errorf("%w: plan vertex %d: name %q is not the end of its path %q", ErrMalformed, v.Index, v.Name, v.Path)
		}
	}
	return nil
}

// DecodePlan decodes a Plan message.
func DecodePlan(data []byte, lim Limits) (*Plan, error) {
	p := new(Plan)
	if err := p.Decode(data, lim); err != nil {
		return nil, err
	}
	return p, nil
}
