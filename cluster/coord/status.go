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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// Fold is a run's task progress folded from its TaskEvents, in stream
// order (docs/cluster-protocol.md, Status). It is pure; Status renders it.
//
// It also keeps what a status read that is not the whole table needs, so
// that it costs what changed: a version, bumped by every event that changed
// what a task shows (and by Touch); for each task the version that last
// changed it, and a journal of the tasks changed since the last change of
// the whole table (changed); and the tallies of RunProgress, kept as tasks
// change.
type Fold struct {
	vert   []*taskAgg          // the vertices' tasks, by index (nil: no event yet)
	tasks  map[string]*taskAgg // the tasks that are no vertex (subflow children), by name
	extra  []string            // their names, in first-seen order
	slab   []taskAgg           // where new tasks' aggregates are cut from (one allocation for many)
	ntasks int                 // tasks with an event

	ver     uint64   // bumped by every Add that changed a task's row, and by Touch
	floor   uint64   // changed answers for versions ≥ floor: at floor the whole table changed
	journal []change // tasks changed after floor, in version order; superseded entries are dropped now and then
	n       foldCounts
}

// change is one entry of Fold.journal: task name (aggregate a) changed at
// version ver.
type change struct {
	ver  uint64
	name string
	a    *taskAgg
}

// foldCounts are the tallies of the tasks that have an event (taskAgg).
type foldCounts struct {
	state [8]int // by transport.TaskState
	again int    // more than one activation, in a state that is not final (a loop running again)
	acts  uint64
	execs uint64
}

type taskAgg struct {
	state  transport.TaskState
	node   string
	act    uint64
	gen    uint64      // of the event that set act, state and node
	execs  []nodeExecs // each node's latest Executions (one node, but for a task that moved)
	one    [1]nodeExecs
	sum    uint64 // of execs
	output []byte
	ver    uint64 // Fold.ver when its row last changed
}

type nodeExecs struct {
	node string
	n    uint64
}

// NewFold returns an empty fold.
func NewFold() *Fold { return &Fold{tasks: map[string]*taskAgg{}} }

// newAgg returns a new task aggregate.
func (f *Fold) newAgg() *taskAgg {
	if len(f.slab) == 0 {
		f.slab = make([]taskAgg, 256)
	}
	a := &f.slab[0]
	f.slab = f.slab[1:]
	f.ntasks++
	return a
}

// vertAgg is the aggregate of vertex v (nil: no event yet).
func (f *Fold) vertAgg(v int) *taskAgg {
	if v < len(f.vert) {
		return f.vert[v]
	}
	return nil
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
	name, v := e.Name, int(e.Task)
	if name != "" { // an event of an earlier build names every task: a vertex's name is its path
		var ok bool
		if v, ok = g.Lookup(name); !ok {
			v = -1
		}
	} else if v >= len(g.Vertices) {
		return
	}
	var a *taskAgg
	if v >= 0 {
		name = g.Vertices[v].Path
		if len(f.vert) < len(g.Vertices) {
			f.vert = slices.Grow(f.vert, len(g.Vertices)-len(f.vert))[:len(g.Vertices)]
		}
		a = f.vert[v]
	} else {
		a = f.tasks[name]
	}
	changed := a == nil
	if a == nil {
		a = f.newAgg()
		if v >= 0 {
			f.vert[v] = a
		} else {
			f.tasks[name] = a
			f.extra = append(f.extra, name)
			// A new row: the table's order changed, a delta cannot say so.
			f.floor, f.journal = f.ver+1, f.journal[:0]
		}
	} else {
		f.count(a, -1)
	}
	was := *a
	a.setExecs(e.Node, e.Executions)
	// An older activation reported late, or the same one from a node of an
	// older generation (a frozen node that lost the task to a new owner,
	// reporting after it), counts only its executions.
	if older := e.Act < a.act || (e.Act == a.act && e.Gen < a.gen); !older {
		a.act, a.gen, a.state, a.node = e.Act, e.Gen, e.State, e.Node
		if len(e.Output) > 0 || e.State == transport.TaskDone {
			changed = changed || !bytes.Equal(a.output, e.Output)
			a.output = append(a.output[:0], e.Output...)
		}
	}
	f.count(a, 1)
	if changed || was.state != a.state || was.node != a.node || was.act != a.act || was.sum != a.sum {
		f.ver++
		a.ver = f.ver
		f.journal = append(f.journal, change{f.ver, name, a})
		if len(f.journal) > 2*f.ntasks+64 {
			f.compact()
		}
	}
}

func (a *taskAgg) setExecs(node string, n uint64) {
	for i := range a.execs {
		if a.execs[i].node == node {
			a.sum += n - a.execs[i].n
			a.execs[i].n = n
			return
		}
	}
	if a.execs == nil {
		a.execs = a.one[:0:1] // the common case, one node: no allocation
	}
	a.execs = append(a.execs, nodeExecs{node, n})
	a.sum += n
}

// compact drops the journal entries a later one of the same task supersedes.
func (f *Fold) compact() {
	j := f.journal[:0]
	for _, c := range f.journal {
		if c.a.ver == c.ver {
			j = append(j, c)
		}
	}
	clear(f.journal[len(j):])
	f.journal = j
}

// Version is the fold's version: it changes whenever what Status renders
// from it (for one Run state) changes.
func (f *Fold) Version() uint64 { return f.ver }

// Touch bumps the version for a change of the whole table (the run's state
// changed: tasks it did not start turn skipped or cancelled).
func (f *Fold) Touch() {
	f.ver++
	f.floor, f.journal = f.ver, nil
}

// changed lists the tasks whose rows changed after version since, with
// their aggregates, in the order they last changed; ok is false when that
// cannot be said row by row (since is before the last change of the whole
// table: Touch, or a new row) and the whole table is what changed.
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
		if c.a.ver == c.ver {
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

// row renders one task of run r (a nil a: no event yet).
func (f *Fold) row(name string, a *taskAgg, r *Run, sink bool) proto.TaskStatus {
	if a == nil {
		return proto.TaskStatus{Name: name, State: noneState(r.State)}
	}
	ts := proto.TaskStatus{Name: name, Node: a.node, State: a.state.String(), Activations: a.act, Executions: a.sum}
	if a.state == transport.TaskRunning && (r.State == proto.RunCancelled || r.State == proto.RunFailed) {
		// The run ended under it: its node cancelled it and will report no more.
		ts.State = proto.TaskCancelled
	}
	if sink && len(a.output) > 0 {
		ts.Output = hex.EncodeToString(a.output)
	}
	return ts
}

// rows calls fn for every row of the status in order: every vertex (each
// followed by the subflow children seen under it), then any other named
// task; sink says whether its output is shown.
func (f *Fold) rows(g *spec.Graph, fn func(name string, a *taskAgg, sink bool)) {
	var done map[string]bool
	if len(f.extra) > 0 {
		done = map[string]bool{}
	}
	if g != nil {
		for i, v := range g.Vertices {
			fn(v.Path, f.vertAgg(i), len(v.Succ) == 0)
			if done == nil {
				continue
			}
			for _, x := range f.extra {
				if !done[x] && strings.HasPrefix(x, v.Path+"/") {
					done[x] = true
					fn(x, f.tasks[x], true)
				}
			}
		}
	}
	for _, x := range f.extra {
		if !done[x] {
			done[x] = true
			fn(x, f.tasks[x], true)
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
	f.rows(g, func(name string, a *taskAgg, sink bool) { st.Tasks = append(st.Tasks, f.row(name, a, &r, sink)) })
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
	f.rows(g, func(name string, a *taskAgg, sink bool) {
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
		b = appendTask(b, f.row(name, a, &r, sink))
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
		sink := true
		if v, ok := g.Lookup(c.name); ok {
			sink = len(g.Vertices[v].Succ) == 0
		}
		d.Tasks = append(d.Tasks, f.row(c.name, c.a, &r, sink))
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
// the run has ended, its status rendered as JSON, so that a repeat read is
// a copy. Rendering that drops the graph (of 100,000 tasks: 111 MB, where
// the JSON is 7.7 MB and the fold 17 MB): what needs it again (a late
// event, a delta, the dashboard's graph) expands it again.
type statusCache struct {
	mu     sync.Mutex
	flows  flowCaches                // where g comes from (shared by the runs of one flow)
	flowOf func(Run) ([]byte, error) // the run's flow text (Server.runFlow)
	g      *spec.Graph
	nv     int // len(g.Vertices), kept when g is dropped
	fold   *Fold
	seq    uint64      // the last stream sequence folded
	cur    eventCursor // reads the events after seq
	epoch  string      // names this cache in its versions: "epoch-N"

	keyed        bool   // state and errTx are the run's as the fold's version last covered
	state, errTx string // (Touch when they change)

	body *rendered // a finished run's full status
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
	r, ok := s.run(id)
	if !ok {
		return fmt.Errorf("run %s: %w", id, proto.ErrNotFound)
	}
	c := s.cacheOf(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.body == nil { // else the graph was dropped: expanded again when needed
		if err := c.graph(r); err != nil {
			return err
		}
	}
	if s.nc != nil {
		if err := s.readEvents(ctx, c, r); err != nil {
			s.log.Warn("read events", "run", id, "err", err)
		}
	}
	if !c.keyed || c.state != r.State || c.errTx != r.Error {
		c.keyed, c.state, c.errTx = true, r.State, r.Error
		c.fold.Touch()
	}
	fn(c, r)
	if proto.Finished(r.State) && c.body == nil && c.g != nil {
		// The run has ended: keep its table rendered and let the graph go,
		// once (what expands it again later keeps it).
		c.body = &rendered{c.fold.ver, append(c.fold.AppendJSON(nil, r, c.g), '\n')}
		c.g = nil
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
			c.g = nil
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
// record (its state); new events wake it at once.
const statusWaitTick = 100 * time.Millisecond

// awaitChange returns once run id's status version is no longer version,
// or after wait, or when ctx ends or the server stops. New events wake it
// (a subscription to the run's event subject, for the length of the wait);
// a change of the run's record is seen within statusWaitTick.
func (s *Server) awaitChange(ctx context.Context, id, version string, wait time.Duration) error {
	s.longPolls.Add(1)
	defer s.longPolls.Add(-1)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	woke := make(chan struct{}, 1)
	if s.nc != nil {
		filter, err := transport.RunEventsFilter(id)
		if err != nil {
			return fmt.Errorf("run %s: %w", id, proto.ErrNotFound)
		}
		sub, err := s.nc.Subscribe(filter, func(*nats.Msg) {
			select {
			case woke <- struct{}{}:
			default:
			}
		})
		if err != nil {
			return fmt.Errorf("coord: await run %s: %w", id, err)
		}
		defer closeSub(sub)
	}
	tick := time.NewTicker(statusWaitTick)
	defer tick.Stop()
	for read := true; ; {
		if read {
			v, err := s.statusVersion(ctx, id)
			if err != nil || v != version {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.stop:
			return nil
		case <-deadline.C:
			return nil
		case <-woke:
			read = true
		case <-tick.C:
			read = s.recordChanged(id)
		}
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
// cursor's kept consumer is dropped and the new events are read through
// one made for the check. (The NATS server acks a publish before it tells
// the stream's consumers of the message, on another goroutine, so a kept
// consumer can still answer "no messages" for an event a node was told is
// stored and reported after; a new consumer counts from storage.)
func (s *Server) checkRecord(ctx context.Context, r Run) (owed []Owed, failed []string, err error) {
	c := s.cacheOf(r.ID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.graph(r); err != nil {
		return nil, nil, err
	}
	c.cur.drop(ctx, s)
	if err := s.readEvents(ctx, c, r); err != nil {
		return nil, nil, err
	}
	owed, failed = CheckSuccess(c.g, c.fold)
	return owed, failed, nil
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
	seq, err := c.cur.read(ctx, s, r.ID, c.seq, func(e *transport.TaskEvent) {
		if gerr == nil && c.g == nil { // dropped after the run ended (statusJSON); an event came after all
			gerr = c.graph(r)
		}
		if gerr == nil && EventFromOwner(r, e) {
			c.fold.Add(c.g, e)
		}
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
