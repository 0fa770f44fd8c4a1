package coord

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// Fold is a run's task progress folded from its TaskEvents, in stream
// order (docs/cluster-protocol.md, Status). It is pure; Status renders it.
//
// A task's aggregate holds no pointer (its node is an index into the
// fold's node names; a task's output, and the executions of a task that
// more than one node ran, are kept beside, in maps of the few tasks that
// have them), and the vertices' are one array: a run's fold costs the
// garbage collector nothing to scan, and a node's TaskReport folds row by
// row into it (AddReport) without a TaskEvent made for each.
//
// It also keeps what a status read that is not the whole table needs, so
// that it costs what changed: a version, bumped by every event that changed
// what a task shows (and by Touch); for each task the version that last
// changed it, and a journal of the tasks changed since the last change of
// the whole table (changed); and the tallies of RunProgress, kept as tasks
// change. For the leader's record check it keeps the vertices proved, as
// they were folded, to owe nothing (foldProof).
type Fold struct {
	vert   []taskAgg      // the vertices' tasks, by index (seen false: no event yet)
	packed []aggSeg       // instead of vert, once packed (a finished run's): its aggregates run-length
	named  []taskAgg      // the tasks that are no vertex (subflow children), in first-seen order
	extra  []string       // their names (extra[k] is named[k]'s)
	byName map[string]int // index in named, by name
	nodes  []string       // the node names taskAgg.node and .enode index ("" first)
	execs  map[taskKey][]nodeExecs
	out    map[taskKey][]byte // the tasks' outputs (none: no entry)
	ntasks int                // tasks with an event

	ver     uint64   // bumped by every Add that changed a task's row, and by Touch
	floor   uint64   // changed answers for versions ≥ floor: at floor the whole table changed
	journal []change // tasks changed after floor, in version order; superseded entries are dropped now and then
	n       foldCounts

	proof foldProof // the vertices the record check need not examine
}

// taskKey names a task of a fold: a vertex by its index (≥ 0), a task that
// is no vertex by -1 - its index in Fold.named.
type taskKey int

// change is one entry of Fold.journal: task key changed at version ver.
type change struct {
	ver uint64
	key taskKey
}

// foldCounts are the tallies of the tasks that have an event (taskAgg).
type foldCounts struct {
	state [8]int // by transport.TaskState
	again int    // more than one activation, in a state that is not final (a loop running again)
	acts  uint64
	execs uint64
}

type taskAgg struct {
	act   uint64
	gen   uint64 // of the event that set act, state and node
	sum   uint64 // the executions of every node that reported the task
	ver   uint64 // Fold.ver when its row last changed
	node  uint32 // of the event that set act and state (Fold.nodes)
	enode uint32 // the node that reported executions (sum), unless multi
	state transport.TaskState
	seen  bool // an event came (else the rest is zero)
	hasE  bool // enode is set
	multi bool // more than one node reported executions: Fold.execs holds each node's
}

// aggSeg is a run of equal aggregates of a packed fold: the vertices from
// the end of the segment before up to end (excluded).
type aggSeg struct {
	end int
	a   taskAgg
}

type nodeExecs struct {
	node uint32
	n    uint64
}

// NewFold returns an empty fold.
func NewFold() *Fold {
	return &Fold{byName: map[string]int{}, nodes: []string{""}, execs: map[taskKey][]nodeExecs{}, out: map[taskKey][]byte{}}
}

// vertAgg is the aggregate of vertex v (nil: no event yet).
func (f *Fold) vertAgg(v int) *taskAgg {
	if f.packed != nil {
		return f.packedAgg(v)
	}
	if v < len(f.vert) && f.vert[v].seen {
		return &f.vert[v]
	}
	return nil
}

// packedAgg is vertAgg of a packed fold. The aggregate is shared by the
// vertices of its segment: read it only.
func (f *Fold) packedAgg(v int) *taskAgg {
	i, _ := slices.BinarySearchFunc(f.packed, v, func(s aggSeg, v int) int {
		if s.end <= v {
			return -1
		}
		return 1
	})
	if i < len(f.packed) && f.packed[i].a.seen {
		return &f.packed[i].a
	}
	return nil
}

// pack stores the vertices' aggregates run-length when they are few runs
// (a finished run's: in the common case every task done once, on one node
// or a few) and hands their array on to the next run's fold (foldArrays).
// It changes nothing Status, Delta, Progress or CheckSuccess read: only
// the rows' versions, which no journal entry names (pack does nothing
// while the journal holds one: a change since the last change of the
// whole table). A fold folding an event again is unpacked first (grow).
func (f *Fold) pack() {
	if f.packed != nil || len(f.vert) < minPooledAgg || len(f.journal) > 0 {
		return
	}
	most := len(f.vert) / 64 // beyond that, packing saves too little
	var segs []aggSeg
	for i := range f.vert {
		a := &f.vert[i]
		if n := len(segs); n > 0 && sameRow(&segs[n-1].a, a) {
			segs[n-1].end = i + 1
			continue
		}
		if len(segs) == most {
			return
		}
		s := aggSeg{end: i + 1}
		if a.seen {
			s.a = *a
			s.a.ver = 0
		}
		segs = append(segs, s)
	}
	f.packed = slices.Clip(segs)
	putAggs(f.vert)
	f.vert = nil
}

// sameRow reports whether a and b are the same but for their versions
// (any two aggregates of no event are).
func sameRow(a, b *taskAgg) bool {
	if !a.seen || !b.seen {
		return a.seen == b.seen
	}
	return a.act == b.act && a.gen == b.gen && a.sum == b.sum && a.node == b.node && a.enode == b.enode &&
		a.state == b.state && a.hasE == b.hasE && a.multi == b.multi
}

// unpack makes a packed fold's array of aggregates again.
func (f *Fold) unpack() {
	vert := takeAggs(f.packed[len(f.packed)-1].end)
	lo := 0
	for _, s := range f.packed {
		if s.a.seen {
			for i := lo; i < s.end; i++ {
				vert[i] = s.a
			}
		}
		lo = s.end
	}
	f.vert, f.packed = vert, nil
}

// agg is task key's aggregate (nil: no event yet).
func (f *Fold) agg(key taskKey) *taskAgg {
	if key >= 0 {
		return f.vertAgg(int(key))
	}
	return &f.named[-1-key]
}

// nodeOf is a's node's name.
func (f *Fold) nodeOf(a *taskAgg) string { return f.nodes[a.node] }

// output is task key's output (nil: none).
func (f *Fold) output(key taskKey) []byte { return f.out[key] }

// clean reports whether a ran on one node, each activation once.
func (f *Fold) clean(a *taskAgg) bool { return a != nil && a.hasE && !a.multi && a.sum == a.act }

// node is the index of node name in f.nodes, added if new.
func (f *Fold) node(name string) uint32 {
	for i, n := range f.nodes {
		if n == name {
			return uint32(i)
		}
	}
	f.nodes = append(f.nodes, name)
	return uint32(len(f.nodes) - 1)
}

func final(s transport.TaskState) bool {
	return s == transport.TaskDone || s == transport.TaskFailed || s == transport.TaskSkipped
}

// count adds a's tallies to f's (sign 1) or takes them away (-1).
func (f *Fold) count(a *taskAgg, sign int) {
	f.n.state[a.state&7] += sign
	if a.act > 1 && !final(a.state) {
		f.n.again += sign
	}
	if sign > 0 {
		f.n.acts += a.act
		f.n.execs += a.sum
	} else {
		f.n.acts -= a.act
		f.n.execs -= a.sum
	}
}

// Add folds one event. Tasks are named by e.Name when set, else by the path
// of vertex e.Task in g (a node's TaskReport names vertices by index only);
// an event naming neither is ignored.
func (f *Fold) Add(g *spec.Graph, e *transport.TaskEvent) {
	f.proof.track(g)
	f.add(g, e.Name, e.Task, f.node(e.Node), e.Gen, e.State, e.Act, e.Executions, e.Output)
}

// AddReport folds a TaskReport's deltas, in order, as Add folds the
// TaskEvents they stand for (transport.EachEvent), without making them.
func (f *Fold) AddReport(g *spec.Graph, tr *transport.TaskReport) {
	f.addReport(g, tr, nil, nil)
}

// addReport is AddReport of the deltas that r's rule (EventFromOwner)
// lets in (nil r: all of them), of a report decoded by Decode (runs nil)
// or by DecodeRuns (delta i standing for runs[i] consecutive tasks).
//
// A delta's tasks are taken a span at a time: the tasks of one owner in
// r's assignment, each let in or not with one compare of its owner to the
// report's node, as EventFromOwner lets in or not each of its tasks; a
// span of vertices is folded by foldRun. The spans are found by ownerRuns
// when the report stands for at least an eighth of the assignment's
// tasks; otherwise a task at a time: ownerRunsOf makes the runs of the
// whole assignment when it holds another run's (it keeps one), which for
// a report of a few tasks would cost far more than those few compares.
func (f *Fold) addReport(g *spec.Graph, tr *transport.TaskReport, runs []uint32, r *Run) {
	lost := false
	var assign []string // the owners of the tasks let in by owner (nil: every task is let in)
	var own *ownerRuns
	if r != nil {
		if tr.Gen > r.Gen {
			return
		}
		if lost = tr.Gen < r.Gen && slices.Contains(r.Lost, tr.Node); !lost && len(r.Assignment) > 0 {
			assign = r.Assignment
			total := len(tr.Tasks)
			if runs != nil {
				total = 0
				for _, n := range runs {
					total += int(n)
				}
			}
			if total >= len(assign)/8 {
				own = ownerRunsOf(assign)
			}
		}
	}
	f.proof.track(g)
	node := f.node(tr.Node)
	nv := len(g.Vertices)
	f.grow(nv)
	for i := range tr.Tasks {
		d := &tr.Tasks[i]
		n := 1
		if runs != nil {
			n = int(runs[i])
		}
		lo, hi := int(d.Task), int(d.Task)+n // a task is a uint32: no overflow
		if r != nil {
			hi = min(hi, len(r.Assignment)) // no task past the assignment is let in
		}
		for lo < hi {
			end := hi
			if own != nil {
				var owned bool
				if end, owned = own.span(lo, hi, tr.Node); !owned {
					lo = end
					continue
				}
			} else if assign != nil {
				if assign[lo] != tr.Node {
					lo++
					continue
				}
				end = lo + 1
				for end < hi && assign[end] == tr.Node {
					end++
				}
			}
			if d.Name != "" { // an event of an earlier build, one task
				for task := lo; task < end; task++ {
					f.add(g, d.Name, uint32(task), node, tr.Gen, d.State, d.Act, d.Executions, d.Output)
				}
			} else if lo < nv { // a vertex named by its index; past the graph's vertices, none (add ignores them)
				f.foldRun(lo, min(end, nv), node, tr.Gen, d.State, d.Act, d.Executions, d.Output)
			}
			lo = end
		}
	}
}

// foldRun folds vertices lo up to hi (excluded, within f.vert), each with
// the same values, as fold folds each in turn. A vertex with no event yet
// and no output to set (the common case: a run's tasks reported once, as
// ranges, which hold no output) is set in place: what fold does for such
// a vertex, without its steps for an aggregate seen before (no tallies to
// take away, no older activation, one node) and without setOutput, which
// for an empty output changes nothing of a task with no output kept, as
// a vertex with no event has (an output is kept only by fold, which marks
// the vertex seen). TestFoldRunIsFold checks it against fold. The span's
// proof is taken once its rows are set (proveSpan).
func (f *Fold) foldRun(lo, hi int, node uint32, gen uint64, st transport.TaskState, act, execs uint64, out []byte) {
	again := act > 1 && !final(st)
	same := true // every vertex of the span was set in place: its row is (st, act, execs) on node
	for v := lo; v < hi; v++ {
		a := &f.vert[v]
		if a.seen || len(out) > 0 {
			f.fold(taskKey(v), a, node, gen, st, act, execs, out)
			same = false
			continue
		}
		f.ntasks++
		f.ver++
		*a = taskAgg{act: act, gen: gen, sum: execs, ver: f.ver, node: node, enode: node, state: st, seen: true, hasE: true}
		f.n.state[st&7]++ // count(a, 1)
		if again {
			f.n.again++
		}
		f.n.acts += act
		f.n.execs += execs
		if f.journal == nil { // as fold makes it: only for a row changed
			f.journal = takeJournal(len(f.vert) + 64)
		}
		f.journal = append(f.journal, change{f.ver, taskKey(v)})
		if len(f.journal) > 2*f.ntasks+64 {
			f.compact()
		}
	}
	f.proveSpan(lo, hi, same, st, act, execs)
}

// grow makes room for nv vertices (and unpacks a packed fold).
func (f *Fold) grow(nv int) {
	if f.packed != nil {
		f.unpack()
	}
	switch n := len(f.vert); {
	case n >= nv:
	case n == 0:
		f.vert = takeAggs(nv)
	default:
		f.vert = slices.Grow(f.vert, nv-n)[:nv]
		clear(f.vert[n:]) // a kept array's room is not zeroed
	}
}

// add folds one task's values: Add's, with the node as its index.
func (f *Fold) add(g *spec.Graph, name string, task uint32, node uint32, gen uint64, st transport.TaskState, act, execs uint64, out []byte) {
	v := int(task)
	if name != "" { // an event of an earlier build names every task: a vertex's name is its path
		var ok bool
		if v, ok = g.Lookup(name); !ok {
			v = -1
		}
	} else if v >= len(g.Vertices) {
		return
	}
	if v >= 0 {
		f.grow(len(g.Vertices))
		f.fold(taskKey(v), &f.vert[v], node, gen, st, act, execs, out)
		return
	}
	k, ok := f.byName[name]
	if !ok {
		k = len(f.named)
		f.named = append(f.named, taskAgg{})
		f.extra = append(f.extra, name)
		f.byName[name] = k
		// A new row: the table's order changed, a delta cannot say so.
		f.floor, f.journal = f.ver+1, f.journal[:0]
	}
	f.fold(taskKey(-1-k), &f.named[k], node, gen, st, act, execs, out)
}

// fold folds one task's values into its aggregate a (task key's).
func (f *Fold) fold(key taskKey, a *taskAgg, node uint32, gen uint64, st transport.TaskState, act, execs uint64, out []byte) {
	changed := !a.seen
	if a.seen {
		f.count(a, -1)
	} else {
		a.seen = true
		f.ntasks++
	}
	wasState, wasNode, wasAct, wasSum := a.state, a.node, a.act, a.sum
	f.setExecs(key, a, node, execs)
	// An older activation reported late, or the same one from a node of an
	// older generation (a frozen node that lost the task to a new owner,
	// reporting after it), counts only its executions.
	if older := act < a.act || (act == a.act && gen < a.gen); !older {
		a.act, a.gen, a.state, a.node = act, gen, st, node
		if len(out) > 0 || st == transport.TaskDone {
			changed = f.setOutput(key, out) || changed
		}
	}
	f.count(a, 1)
	if changed || wasState != a.state || wasNode != a.node || wasAct != a.act || wasSum != a.sum {
		f.ver++
		a.ver = f.ver
		if f.journal == nil { // room for a change of every vertex, as a run makes
			f.journal = takeJournal(len(f.vert) + 64)
		}
		f.journal = append(f.journal, change{f.ver, key})
		if len(f.journal) > 2*f.ntasks+64 {
			f.compact()
		}
	}
	if key >= 0 {
		f.prove(int(key)) // whether or not what it shows changed: clean reads multi
	}
}

// setExecs sets the executions node reported of task key (aggregate a).
func (f *Fold) setExecs(key taskKey, a *taskAgg, node uint32, n uint64) {
	if !a.multi {
		if !a.hasE || a.enode == node { // the common case, one node
			a.enode, a.hasE, a.sum = node, true, n
			return
		}
		a.multi = true
		f.execs[key] = []nodeExecs{{a.enode, a.sum}, {node, n}}
		a.sum += n
		return
	}
	xs := f.execs[key]
	for i := range xs {
		if xs[i].node == node {
			a.sum += n - xs[i].n
			xs[i].n = n
			return
		}
	}
	f.execs[key] = append(xs, nodeExecs{node, n})
	a.sum += n
}

// setOutput sets task key's output to a copy of out and reports whether
// it changed.
func (f *Fold) setOutput(key taskKey, out []byte) bool {
	old := f.out[key]
	if bytes.Equal(old, out) {
		return false
	}
	if len(out) == 0 {
		delete(f.out, key)
	} else {
		f.out[key] = append(old[:0], out...)
	}
	return true
}

// compact drops the journal entries a later one of the same task supersedes.
func (f *Fold) compact() {
	j := f.journal[:0]
	for _, c := range f.journal {
		if f.agg(c.key).ver == c.ver {
			j = append(j, c)
		}
	}
	f.journal = j
}

// Version is the fold's version: it changes whenever what Status renders
// from it (for one Run state) changes.
func (f *Fold) Version() uint64 { return f.ver }

// Touch bumps the version for a change of the whole table (the run's state
// changed: tasks it did not start turn skipped or cancelled).
func (f *Fold) Touch() {
	f.ver++
	putJournal(f.journal)
	f.floor, f.journal = f.ver, nil // a finished run's fold keeps none
}

// changed lists the tasks whose rows changed after version since, in the
// order they last changed; ok is false when that cannot be said row by row
// (since is before the last change of the whole table: Touch, or a new
// row) and the whole table is what changed.
func (f *Fold) changed(since uint64) (cs []change, ok bool) {
	if since < f.floor || since > f.ver {
		return nil, false
	}
	i, _ := slices.BinarySearchFunc(f.journal, since+1, func(c change, v uint64) int {
		switch {
		case c.ver < v:
			return -1
		case c.ver > v:
			return 1
		}
		return 0
	})
	for _, c := range f.journal[i:] {
		if f.agg(c.key).ver == c.ver {
			cs = append(cs, c)
		}
	}
	return cs, true
}

// noneState is the state of a task with no event in a run in state runState.
func noneState(runState string) string {
	switch runState {
	case proto.RunSucceeded, proto.RunFailed:
		return proto.TaskSkipped
	case proto.RunCancelled:
		return proto.TaskCancelled
	}
	return proto.TaskPending
}

// row renders one task of run r, key's (a nil a: no event yet).
func (f *Fold) row(name string, key taskKey, a *taskAgg, r *Run, sink bool) proto.TaskStatus {
	if a == nil {
		return proto.TaskStatus{Name: name, State: noneState(r.State)}
	}
	ts := proto.TaskStatus{Name: name, Node: f.nodeOf(a), State: a.state.String(), Activations: a.act, Executions: a.sum}
	if a.state == transport.TaskRunning && (r.State == proto.RunCancelled || r.State == proto.RunFailed) {
		// The run ended under it: its node cancelled it and will report no more.
		ts.State = proto.TaskCancelled
	}
	if sink && len(f.out) > 0 {
		if out := f.output(key); len(out) > 0 {
			ts.Output = hex.EncodeToString(out)
		}
	}
	return ts
}

// rows calls fn for every row of the status in order: every vertex (each
// followed by the subflow children seen under it), then any other named
// task; sink says whether its output is shown.
func (f *Fold) rows(g *spec.Graph, fn func(name string, key taskKey, a *taskAgg, sink bool)) {
	var done []bool
	if len(f.extra) > 0 {
		done = make([]bool, len(f.extra))
	}
	if g != nil {
		seg := 0 // a packed fold's segment of vertex i
		for i, v := range g.Vertices {
			var a *taskAgg
			if f.packed == nil {
				a = f.vertAgg(i)
			} else {
				for seg < len(f.packed) && f.packed[seg].end <= i {
					seg++
				}
				if seg < len(f.packed) && f.packed[seg].a.seen {
					a = &f.packed[seg].a
				}
			}
			fn(v.Path, taskKey(i), a, len(v.Succ) == 0)
			if done == nil {
				continue
			}
			for k, x := range f.extra {
				if !done[k] && strings.HasPrefix(x, v.Path+"/") {
					done[k] = true
					fn(x, taskKey(-1-k), &f.named[k], true)
				}
			}
		}
	}
	for k, x := range f.extra {
		if !done[k] {
			done[k] = true
			fn(x, taskKey(-1-k), &f.named[k], true)
		}
	}
}

// Status renders the run and its fold as the API's status object: every
// vertex in order (each followed by the subflow children seen under it),
// then any other named task.
func (f *Fold) Status(r Run, g *spec.Graph) proto.RunStatus {
	st := proto.RunStatus{ID: r.ID, Flow: r.FlowName, State: r.State, Error: r.Error, Params: r.Params}
	n := len(f.extra)
	if g != nil {
		n += len(g.Vertices)
	}
	if n > 0 {
		st.Tasks = make([]proto.TaskStatus, 0, n)
	}
	f.rows(g, func(name string, key taskKey, a *taskAgg, sink bool) {
		st.Tasks = append(st.Tasks, f.row(name, key, a, &r, sink))
	})
	return st
}

// AppendJSON appends Status(r, g) as JSON, byte for byte what
// encoding/json makes of it (without the newline an Encoder adds), at a
// fraction of the cost: no RunStatus is built.
func (f *Fold) AppendJSON(b []byte, r Run, g *spec.Graph) []byte {
	if g != nil {
		b = slices.Grow(b, 128+80*(len(g.Vertices)+len(f.extra))) // 75 bytes a row of the layered benchmark
	}
	b = appendHead(b, r.ID, r.FlowName, r.State, r.Error, r.Params)
	first := true
	f.rows(g, func(name string, key taskKey, a *taskAgg, sink bool) {
		if first {
			b = append(b, `,"tasks":[`...)
			first = false
		} else {
			b = append(b, ',')
		}
		if a == nil { // the common row of a run under way, rendered without a TaskStatus
			b = append(b, `{"name":`...)
			b = appendString(b, name)
			b = append(b, `,"state":`...)
			b = appendString(b, noneState(r.State))
			b = append(b, `,"activations":0,"executions":0}`...)
			return
		}
		b = appendTask(b, f.row(name, key, a, &r, sink))
	})
	if !first {
		b = append(b, ']')
	}
	return append(b, '}')
}

// Progress tallies the status Status would render, without rendering it.
func (f *Fold) Progress(r Run, g *spec.Graph) proto.RunProgress {
	nv := 0
	if g != nil {
		nv = len(g.Vertices)
	}
	return f.progress(r, nv)
}

// progress is Progress for a graph of nv vertices.
func (f *Fold) progress(r Run, nv int) proto.RunProgress {
	p := proto.RunProgress{ID: r.ID, Flow: r.FlowName, State: r.State, Error: r.Error, Params: r.Params,
		Activations: f.n.acts, Executions: f.n.execs}
	rows := nv + len(f.extra)
	c := &p.Counts
	c.Tasks = rows
	none := rows - f.ntasks
	switch noneState(r.State) {
	case proto.TaskSkipped:
		c.Skipped = none
	case proto.TaskCancelled:
		c.Cancelled = none
	default:
		c.Pending = none
	}
	ns := &f.n.state
	c.Pending += ns[transport.TaskPending]
	c.Done += ns[transport.TaskDone]
	c.Failed += ns[transport.TaskFailed]
	c.Skipped += ns[transport.TaskSkipped]
	c.Cancelled += ns[transport.TaskCancelled]
	if r.State == proto.RunCancelled || r.State == proto.RunFailed {
		c.Cancelled += ns[transport.TaskRunning]
	} else {
		c.Running += ns[transport.TaskRunning]
	}
	p.Finished = c.Done + c.Failed + c.Skipped + f.n.again
	return p
}

// Delta renders what changed after version since as a RunDelta (its
// Version left to the caller): the changed rows, or the whole table.
func (f *Fold) Delta(r Run, g *spec.Graph, since uint64) proto.RunDelta {
	d := proto.RunDelta{ID: r.ID, Flow: r.FlowName, State: r.State, Error: r.Error, Params: r.Params}
	cs, ok := f.changed(since)
	if !ok {
		d.Full, d.Tasks = true, f.Status(r, g).Tasks
		return d
	}
	for _, c := range cs {
		name, sink := "", true
		if c.key >= 0 {
			v := &g.Vertices[c.key]
			name, sink = v.Path, len(v.Succ) == 0
		} else {
			name = f.extra[-1-c.key]
		}
		d.Tasks = append(d.Tasks, f.row(name, c.key, f.agg(c.key), &r, sink))
	}
	return d
}

// JSON, as encoding/json writes it (HTML-safe, invalid UTF-8 replaced);
// appendString takes the fast way for the plain ASCII task and node names
// are, and hands anything else to encoding/json.

func appendHead(b []byte, id, flow, state, errText string, params map[string]any) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, id)
	b = append(b, `,"flow":`...)
	b = appendString(b, flow)
	b = append(b, `,"state":`...)
	b = appendString(b, state)
	if errText != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, errText)
	}
	if len(params) > 0 {
		pb, err := json.Marshal(params)
		if err != nil { // a value JSON cannot hold (none comes from Bind): as encoding/json, nothing
			pb = []byte("null")
		}
		b = append(b, `,"params":`...)
		b = append(b, pb...)
	}
	return b
}

func appendTask(b []byte, t proto.TaskStatus) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, t.Name)
	if t.Node != "" {
		b = append(b, `,"node":`...)
		b = appendString(b, t.Node)
	}
	b = append(b, `,"state":`...)
	b = appendString(b, t.State)
	b = append(b, `,"activations":`...)
	b = strconv.AppendUint(b, t.Activations, 10)
	b = append(b, `,"executions":`...)
	b = strconv.AppendUint(b, t.Executions, 10)
	if t.Output != "" {
		b = append(b, `,"output":"`...)
		b = append(b, t.Output...) // lowercase hex
		b = append(b, '"')
	}
	return append(b, '}')
}

func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// statusCache holds one run's graph and fold, and the stream sequence the
// fold has read up to, so a status call reads only new events; and, once
// the run has ended and its full status has been asked for, that status
// rendered as JSON, so that a repeat read is a copy. Once the run has ended
// the cache lets its graph go (of 100,000 tasks: 111 MB, where the JSON is
// 7.7 MB and the fold 5 MB), keeping a weak pointer to it: what needs it
// again (a late event, a delta, the full status, the dashboard's graph)
// takes it back while the flow cache or another run holds it, and expands
// it again once nothing does. A run's end renders nothing: a client
// following it reads its tallies (RunProgress), not its table.
type statusCache struct {
	mu     sync.Mutex
	flows  flowCaches                // where g comes from (shared by the runs of one flow)
	flowOf func(Run) ([]byte, error) // the run's flow text (Server.runFlow)
	g      *spec.Graph
	gw     weak.Pointer[spec.Graph] // g, once dropped (done)
	done   bool                     // the run has ended: g is let go after each use
	nv     int                      // len(g.Vertices), kept when g is dropped
	fold   *Fold
	seq    uint64      // the last stream sequence folded
	cur    eventCursor // reads the events after seq
	epoch  string      // names this cache in its versions: "epoch-N"

	keyed        bool   // state and errTx are the run's as the fold's version last covered
	state, errTx string // (Touch when they change)

	body *rendered // a finished run's full status, once asked for

	// checkedGen is the generation whose success this server's record
	// check last passed (checkRecordAside; 0: none, generations start at
	// 1): the fold then holds every event the verdict counted.
	checkedGen uint64
}

// rendered is a run's full status JSON at fold version ver.
type rendered struct {
	ver uint64
	b   []byte
}

// statusNonce and statusSerial name status caches across processes and
// runs: a version ("epoch-N") from another coordinator, an earlier process
// or a cache made again is no version here, and a delta asked since it is
// the whole table.
var (
	statusNonce  = newNonce()
	statusSerial atomic.Uint64
)

func newNonce() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// version is the cache's current version token; c.mu is held.
func (c *statusCache) version() string { return c.epoch + "-" + strconv.FormatUint(c.fold.ver, 10) }

// parseVersion returns the fold version of token v of this cache.
func (c *statusCache) parseVersion(v string) (uint64, bool) {
	ep, n, ok := strings.Cut(v, "-")
	if !ok || ep != c.epoch {
		return 0, false
	}
	x, err := strconv.ParseUint(n, 10, 64)
	return x, err == nil
}

// withStatus brings run id's status cache up to date (its graph, the new
// events, the run's state) and calls fn with it locked.
func (s *Server) withStatus(ctx context.Context, id string, fn func(c *statusCache, r Run)) error {
	return s.withStatusOf(ctx, id, true, fn)
}

// withStatusOf is withStatus that reads the new events only when events
// is set (else the cache is brought up to date but for them: a read that
// only the run's state can have changed), or when the run has finished
// and its verdict is not a success this server checked at this
// generation.
func (s *Server) withStatusOf(ctx context.Context, id string, events bool, fn func(c *statusCache, r Run)) error {
	r, ok := s.run(id)
	if !ok {
		return fmt.Errorf("run %s: %w", id, proto.ErrNotFound)
	}
	c := s.cacheOf(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done { // else the graph was dropped: taken back when needed
		if err := c.graph(r); err != nil {
			return err
		}
	}
	// A finished run's summary reads the events unless its verdict is a
	// success this server checked at this generation: a failed or
	// cancelled verdict has no check, and a wait that began while this
	// server led goes on after it lost the lead (another leader checked).
	events = events || proto.Finished(r.State) && (r.State != proto.RunSucceeded || c.checkedGen != r.Gen)
	if s.Leader() {
		c.fold.KeepProof() // the record check runs here: the rows proved as they are folded
	}
	if s.nc != nil && events {
		if err := s.readEvents(ctx, c, r); err != nil {
			s.log.Warn("read events", "run", id, "err", err)
		}
	}
	if !c.keyed || c.state != r.State || c.errTx != r.Error {
		c.keyed, c.state, c.errTx = true, r.State, r.Error
		c.fold.Touch()
	}
	fn(c, r)
	if proto.Finished(r.State) && c.g != nil {
		// The run has ended: let the graph go (c.graph takes it back), and
		// pack the fold, its array of aggregates kept for the next run.
		// Its record check is behind it: the fold's proof goes, and with
		// it the graph's verdict plan it holds (~2 MB of a 100K-task graph).
		c.done, c.gw, c.g = true, weak.Make(c.g), nil
		c.fold.pack()
		c.fold.proof.drop()
	}
	return nil
}

// runStatus builds a run's status from the FSM and the event stream.
func (s *Server) runStatus(ctx context.Context, id string) (st proto.RunStatus, err error) {
	err = s.withStatus(ctx, id, func(c *statusCache, r Run) {
		if err = c.graph(r); err == nil {
			st = c.fold.Status(r, c.g)
		}
	})
	return st, err
}

// statusJSON is runStatus as the API's JSON (with a newline, as
// encoding/json's Encoder ends it). A finished run's is kept: until an
// event changes it (a late report) a repeat read is a copy of it. The
// bytes are shared: the caller must not change them.
func (s *Server) statusJSON(ctx context.Context, id string) (b []byte, err error) {
	err = s.withStatus(ctx, id, func(c *statusCache, r Run) {
		if c.body != nil && c.body.ver == c.fold.ver {
			b = c.body.b
			return
		}
		if err = c.graph(r); err != nil {
			return
		}
		b = append(c.fold.AppendJSON(nil, r, c.g), '\n')
		if proto.Finished(r.State) {
			c.body = &rendered{c.fold.ver, b}
		}
	})
	return b, err
}

// runProgress is a run's RunProgress: its tallies, no table.
func (s *Server) runProgress(ctx context.Context, id string) (p proto.RunProgress, err error) {
	err = s.withStatus(ctx, id, func(c *statusCache, r Run) {
		p = c.fold.progress(r, c.nv)
		p.Version = c.version()
	})
	return p, err
}

// runDelta is what changed in a run's status after version since (a token
// of runProgress or runDelta; any other is answered with the whole table).
func (s *Server) runDelta(ctx context.Context, id, since string) (d proto.RunDelta, err error) {
	err = s.withStatus(ctx, id, func(c *statusCache, r Run) {
		v, ok := c.parseVersion(since)
		if !ok {
			v = 0 // before every version: the whole table
		}
		if err = c.graph(r); err != nil {
			return
		}
		d = c.fold.Delta(r, c.g, v)
		d.Version = c.version()
	})
	return d, err
}

// statusVersion is a run's current version token.
func (s *Server) statusVersion(ctx context.Context, id string) (v string, err error) {
	err = s.withStatus(ctx, id, func(c *statusCache, r Run) { v = c.version() })
	return v, err
}

// MaxStatusWait bounds GET /v1/runs/{id}?wait=: well inside the API's
// 30 s bound on a request, and the forwarding follower's.
const MaxStatusWait = 10 * time.Second

// statusWaitTick is how often a waiting status read looks at the run's
// record (its state) even when nothing woke it; new events and every
// command the FSM applies wake it at once.
var statusWaitTick = 100 * time.Millisecond // a var for TestVerdictWakesAWaitingRead

// statusRechecks bounds the looks that read a run's events again after a
// read found nothing new (awaitChange): a second of them at statusWaitTick.
// Its cost: a poll that sees no change makes up to statusRechecks more
// reads of the event stream (a FetchNoWait each, under the cache's lock)
// in its first second. A var for TestEventWakeNotLostToTheTick, whose
// tick is a millisecond.
var statusRechecks = 10

// awaitChange returns once run id's status version is no longer version,
// or after wait, or when ctx ends or the server stops. New events wake it
// (a subscription, for the length of the wait, to the notices a node sends
// once its events of the run are stored, messages of no body: the read
// takes the events from the stream, and a subscription to the events' own
// subject was sent each of them a second time, ~800 KB a 100K-task run),
// and so does every command the FSM applies (appliedCh: a run's verdict
// reaches its waiting client when it is applied; it waited up to
// statusWaitTick, 50 ms on average, before).
//
// answer (nil: none) is called with the status cache when the read that
// ends the wait finds the version changed, under the same lock: the
// caller's answer made from that read needs no read of its own (a request
// to the event stream, as each read makes); answered says it was called.
func (s *Server) awaitChange(ctx context.Context, id, version string, wait time.Duration, answer func(c *statusCache, r Run)) (answered bool, err error) {
	s.longPolls.Add(1)
	defer s.longPolls.Add(-1)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	woke := make(chan struct{}, 1)
	if s.nc != nil {
		filter, err := transport.RunEventNoticesFilter(id)
		if err != nil {
			return false, fmt.Errorf("run %s: %w", id, proto.ErrNotFound)
		}
		sub, err := s.nc.Subscribe(filter, func(*nats.Msg) {
			select {
			case woke <- struct{}{}:
			default:
			}
		})
		if err != nil {
			return false, fmt.Errorf("coord: await run %s: %w", id, err)
		}
		// Stopped, not drained: the messages still on the way would only
		// wake a wait that is over, and a drain with messages pending
		// waits 100 ms for them (the client's check), which a node's
		// events, sent in parts, made the common case.
		defer stopSub(sub)
	}
	tick := time.NewTicker(statusWaitTick)
	defer tick.Stop()
	applied := s.appliedCh() // taken before the first read: a command applied after it wakes the wait
	// events: whether the read reads the new events too. A read the run's
	// state woke (a command applied, or the tick, that found it changed)
	// does not, unless an event woke it as well: what changed is in the
	// FSM, and a request to the event stream (under a busy machine, ~2 ms
	// of the way from a verdict applied to its client) would only add the
	// events stored since the last read, which the next read adds. A
	// success verdict this server checked at the run's generation has its
	// tallies whole without it (the record check folded every event stored
	// when it began, into this cache); any other finished run's read does
	// read the events (withStatusOf).
	//
	// rechecks: the first read, or one an event woke, found nothing new.
	// The wake-up subscription can hear of a message before the cursor's
	// kept consumer does (the node sends the notice once the server acked
	// the events, and the server tells its consumers on another goroutine),
	// and a message stored just before the wait subscribed wakes nothing;
	// so the next ticks read the events again, up to statusRechecks times,
	// until one finds a change (they read only the state before, and such a
	// wait lasted until the next event or its deadline).
	//
	// noticed: a notice woke this read (fresh, but not the first read).
	rechecks, noticed := 0, false
	for read, events, fresh := true, true, true; ; noticed = fresh {
		if read {
			changed := false
			err := s.withStatusOf(ctx, id, events, func(c *statusCache, r Run) {
				if changed = c.version() != version; changed && answer != nil {
					answer(c, r)
				}
			})
			if changed && noticed {
				s.noticeAnswers.Add(1)
			}
			if err != nil || changed {
				return changed && answer != nil && err == nil, err
			}
			if events && fresh {
				rechecks = statusRechecks
			}
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-s.stop:
			return false, nil
		case <-deadline.C:
			return false, nil
		case <-woke:
			read, events, fresh = true, true, true
		case <-applied:
			applied = s.appliedCh()
			events = woken(woke)
			read, fresh = events || s.recordChanged(id), events
		case <-tick.C:
			fresh = woken(woke)
			events = fresh || rechecks > 0
			if events && !fresh {
				rechecks--
			}
			read = events || s.recordChanged(id)
		}
	}
}

// stopSub ends sub at once, dropping what it holds (Subscription.Stop).
func stopSub(sub *transport.Subscription) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = sub.Stop(ctx)
}

// woken reports whether an event woke the wait too, and takes the wake:
// the caller must then read (the event is read or its wake is lost).
func woken(woke chan struct{}) bool {
	select {
	case <-woke:
		return true
	default:
		return false
	}
}

// recordChanged reports whether run id's state or error differ from what
// its status cache last covered (or the run is gone).
func (s *Server) recordChanged(id string) bool {
	r, ok := s.run(id)
	if !ok {
		return true
	}
	c := s.cacheOf(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.keyed || c.state != r.State || c.errTx != r.Error
}

// checkRecord checks a success verdict for run r against its record,
// folded up to now (the status cache's, brought up to date): CheckSuccess,
// under the cache's lock. It reads every event stored when it starts: the
// cursor's kept consumer is set aside and the new events are read through
// one made for the check. (The NATS server acks a publish before it tells
// the stream's consumers of the message, on another goroutine, so a kept
// consumer can still answer "no messages" for an event a node was told is
// stored and reported after; a new consumer counts from storage.) The
// consumer set aside is removed once the check is done.
func (s *Server) checkRecord(ctx context.Context, r Run) (owed []Owed, failed []string, err error) {
	owed, failed, stale, err := s.checkRecordAside(ctx, r)
	s.dropConsumer(ctx, stale)
	return owed, failed, err
}

// checkRecordAside is checkRecord that leaves the removal of the consumer
// it set aside (stale; nil: none) to its caller: the leader removes it
// after the check's outcome is taken (the verdict applied, a refusal, or
// the check's error), off its action loop, so that the request is not on
// the way from the node's last report to the verdict. What the check reads does
// not depend on it: a new consumer counts every message stored when it is
// made, whatever other consumers there are (the stale one still gets the
// stream's signals until it goes, and delivers nothing, as nobody fetches
// from it).
func (s *Server) checkRecordAside(ctx context.Context, r Run) (owed []Owed, failed []string, stale jetstream.Consumer, err error) {
	c := s.cacheOf(r.ID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.graph(r); err != nil {
		return nil, nil, nil, err
	}
	stale = c.cur.aside()
	// A fold that kept no proof up to now (its server led from after its
	// run began) keeps one from here; the rows it folded before are
	// examined by the check.
	c.fold.KeepProof()
	if err := s.readEvents(ctx, c, r); err != nil {
		return nil, nil, stale, err
	}
	owed, failed = verdictPlanOf(c.g).checkFold(c.g, c.fold) // CheckSuccess, the graph's plan kept, of the rows not proved
	if len(owed) == 0 && len(failed) == 0 {
		c.checkedGen = r.Gen
	}
	return owed, failed, stale, nil
}

// cacheOf returns run id's status cache, made on first use (and then
// forgets the caches of pruned runs).
func (s *Server) cacheOf(id string) *statusCache {
	s.mu.Lock()
	c := s.status[id]
	if c != nil {
		s.mu.Unlock()
		return c
	}
	c = &statusCache{flows: s.flows, flowOf: s.runFlow, fold: NewFold(), epoch: statusNonce + "." + strconv.FormatUint(statusSerial.Add(1), 10)}
	s.status[id] = c
	var ids []string
	for k := range s.status {
		ids = append(ids, k)
	}
	s.mu.Unlock()
	gone := slices.DeleteFunc(ids, func(k string) bool { _, ok := s.run(k); return ok })
	if len(gone) > 0 {
		s.mu.Lock()
		for _, k := range gone {
			delete(s.status, k)
		}
		s.mu.Unlock()
	}
	return c
}

// graph expands the run's flow once (shared with the other runs of the
// flow: flowCaches.graph); c.mu is held.
func (c *statusCache) graph(r Run) error {
	if c.g != nil {
		return nil
	}
	if c.g = c.gw.Value(); c.g != nil {
		return nil
	}
	var err error
	if c.g, err = c.flows.graph(r, c.flowOf); err != nil {
		return fmt.Errorf("coord: run %s: its flow does not expand: %w", r.ID, err)
	}
	c.nv = len(c.g.Vertices)
	return nil
}

// readEvents folds the run's events after c.seq, those of a task from a
// node that may report it (EventFromOwner), through the cache's cursor.
func (s *Server) readEvents(ctx context.Context, c *statusCache, r Run) error {
	var gerr error
	ready := func() bool {
		if gerr == nil && c.g == nil { // dropped after the run ended (statusJSON); an event came after all
			gerr = c.graph(r)
		}
		return gerr == nil
	}
	s.eventReads.Add(1)
	seq, err := c.cur.read(ctx, s, r.ID, c.seq, eventSink{
		event: func(e *transport.TaskEvent) {
			if ready() && EventFromOwner(r, e) {
				c.fold.Add(c.g, e)
			}
		},
		report: func(tr *transport.TaskReport, runs []uint32) {
			if ready() {
				c.fold.addReport(c.g, tr, runs, &r) // its deltas that EventFromOwner lets in
			}
		},
	})
	if gerr != nil {
		c.cur.cons = nil // c.seq stays: the events are read again, by a consumer made again
		return gerr
	}
	c.seq = seq
	return err
}

// EventFromOwner reports whether e may be folded into run r's status: it
// is of a generation r has reached, and its node (the sender its subject
// names, which the NATS server enforces) owns its task in r's assignment or,
// for an older generation, is one the run lost (Run.Lost: it may have
// owned the task then). No other node can report a task, nor anyone a
// generation to come.
func EventFromOwner(r Run, e *transport.TaskEvent) bool {
	if e.Gen > r.Gen || int(e.Task) >= len(r.Assignment) {
		return false
	}
	if r.Assignment[e.Task] == e.Node {
		return true
	}
	return e.Gen < r.Gen && slices.Contains(r.Lost, e.Node)
}

// eventsAfter hands fn the run's decodable events stored after stream
// sequence seq, in order, and returns the last sequence read.
func (s *Server) eventsAfter(ctx context.Context, run string, seq uint64, fn func(*transport.TaskEvent)) (uint64, error) {
	filter, err := transport.RunEventsFilter(run)
	if err != nil {
		return seq, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cons, err := s.eventConsumer(ctx, filter, seq, time.Minute)
	if err != nil {
		return seq, fmt.Errorf("coord: events of %s: %w", run, err)
	}
	defer s.deleteConsumer(ctx, cons)
	lim := s.nc.Limits()
	for pending := cons.CachedInfo().NumPending; pending > 0; {
		batch, err := cons.Fetch(int(min(pending, 512)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return seq, fmt.Errorf("coord: events of %s: %w", run, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			seq, pending = meta.Sequence.Stream, meta.NumPending
			eachRunEvent(m, run, lim, fn)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return seq, fmt.Errorf("coord: events of %s: %w", run, err)
		}
		if got == 0 {
			break
		}
	}
	return seq, nil
}
