package coord

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// Fold is a run's task progress folded from its TaskEvents, in stream
// order (docs/cluster-protocol.md, Status). It is pure; Status renders it.
type Fold struct {
	tasks map[string]*taskAgg
	extra []string // names of tasks that are no vertex (subflow children), in first-seen order
}

type taskAgg struct {
	state  transport.TaskState
	node   string
	act    uint64
	gen    uint64            // of the event that set act, state and node
	execs  map[string]uint64 // node → its latest Executions
	output []byte
}

// NewFold returns an empty fold.
func NewFold() *Fold { return &Fold{tasks: map[string]*taskAgg{}} }

// Add folds one event. Tasks are named by e.Name when set, else by the path
// of vertex e.Task in g; an event naming neither is ignored.
func (f *Fold) Add(g *spec.Graph, e *transport.TaskEvent) {
	name := e.Name
	if name == "" {
		if int(e.Task) >= len(g.Vertices) {
			return
		}
		name = g.Vertices[e.Task].Path
	}
	a := f.tasks[name]
	if a == nil {
		a = &taskAgg{execs: map[string]uint64{}}
		f.tasks[name] = a
		if _, ok := g.Lookup(name); !ok {
			f.extra = append(f.extra, name)
		}
	}
	a.execs[e.Node] = e.Executions
	if e.Act < a.act || (e.Act == a.act && e.Gen < a.gen) {
		// An older activation reported late, or the same one from a node of
		// an older generation (a frozen node that lost the task to a new
		// owner, reporting after it): it counts only its executions.
		return
	}
	a.act, a.gen, a.state, a.node = e.Act, e.Gen, e.State, e.Node
	if len(e.Output) > 0 || e.State == transport.TaskDone {
		a.output = append(a.output[:0], e.Output...)
	}
}

// Status renders the run and its fold as the API's status object: every
// vertex in order (each followed by the subflow children seen under it),
// then any other named task.
func (f *Fold) Status(r Run, g *spec.Graph) proto.RunStatus {
	st := proto.RunStatus{ID: r.ID, Flow: r.FlowName, State: r.State, Error: r.Error, Params: r.Params}
	none := proto.TaskPending
	switch r.State {
	case proto.RunSucceeded, proto.RunFailed:
		none = proto.TaskSkipped
	case proto.RunCancelled:
		none = proto.TaskCancelled
	}
	done := map[string]bool{}
	emit := func(name string, sink bool) {
		done[name] = true
		a := f.tasks[name]
		if a == nil {
			st.Tasks = append(st.Tasks, proto.TaskStatus{Name: name, State: none})
			return
		}
		ts := proto.TaskStatus{Name: name, Node: a.node, State: a.state.String(), Activations: a.act}
		if a.state == transport.TaskRunning && (r.State == proto.RunCancelled || r.State == proto.RunFailed) {
			// The run ended under it: its node cancelled it and will report no more.
			ts.State = proto.TaskCancelled
		}
		for _, x := range a.execs {
			ts.Executions += x
		}
		if sink && len(a.output) > 0 {
			ts.Output = hex.EncodeToString(a.output)
		}
		st.Tasks = append(st.Tasks, ts)
	}
	if g != nil {
		for _, v := range g.Vertices {
			emit(v.Path, len(v.Succ) == 0)
			for _, x := range f.extra {
				if !done[x] && strings.HasPrefix(x, v.Path+"/") {
					emit(x, true)
				}
			}
		}
	}
	for _, x := range f.extra {
		if !done[x] {
			emit(x, true)
		}
	}
	return st
}

// statusCache holds one run's graph and fold, and the stream sequence the
// fold has read up to, so a status call reads only new events.
type statusCache struct {
	mu   sync.Mutex
	g    *spec.Graph
	fold *Fold
	seq  uint64
}

// runStatus builds a run's status from the FSM and the event stream.
func (s *Server) runStatus(ctx context.Context, id string) (proto.RunStatus, error) {
	r, ok := s.run(id)
	if !ok {
		return proto.RunStatus{}, fmt.Errorf("run %s: %w", id, proto.ErrNotFound)
	}
	c := s.cacheOf(id)
	s.mu.Lock()
	for k := range s.status { // forget pruned runs
		if _, ok := s.run(k); !ok {
			delete(s.status, k)
		}
	}
	s.mu.Unlock()

	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.graph(s.flows, r); err != nil {
		return proto.RunStatus{}, err
	}
	if s.nc != nil {
		if err := s.readEvents(ctx, c, r); err != nil {
			s.log.Warn("read events", "run", id, "err", err)
		}
	}
	return c.fold.Status(r, c.g), nil
}

// checkRecord checks a success verdict for run r against its record,
// folded up to now (the status cache's, brought up to date): CheckSuccess,
// under the cache's lock.
func (s *Server) checkRecord(ctx context.Context, r Run) (owed []Owed, failed []string, err error) {
	c := s.cacheOf(r.ID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.graph(s.flows, r); err != nil {
		return nil, nil, err
	}
	if err := s.readEvents(ctx, c, r); err != nil {
		return nil, nil, err
	}
	owed, failed = CheckSuccess(c.g, c.fold)
	return owed, failed, nil
}

// cacheOf returns run id's status cache, made on first use.
func (s *Server) cacheOf(id string) *statusCache {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.status[id]
	if c == nil {
		c = &statusCache{fold: NewFold()}
		s.status[id] = c
	}
	return c
}

// graph expands the run's flow once (shared with the other runs of the
// flow: flowCaches.graph); c.mu is held.
func (c *statusCache) graph(fc flowCaches, r Run) error {
	if c.g != nil {
		return nil
	}
	var err error
	if c.g, err = fc.graph(r); err != nil {
		return fmt.Errorf("coord: run %s: its flow does not expand: %w", r.ID, err)
	}
	return nil
}

// readEvents folds the run's events after c.seq, those of a task from a
// node that may report it (EventFromOwner).
func (s *Server) readEvents(ctx context.Context, c *statusCache, r Run) error {
	seq, err := s.eventsAfter(ctx, r.ID, c.seq, func(e *transport.TaskEvent) {
		if EventFromOwner(r, e) {
			c.fold.Add(c.g, e)
		}
	})
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
	st, err := s.nc.JetStream().Stream(ctx, transport.StreamEvents)
	if err != nil {
		return seq, fmt.Errorf("%w: %w", transport.ErrNoJetStream, err)
	}
	cc := jetstream.ConsumerConfig{FilterSubject: filter, AckPolicy: jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute, MemoryStorage: true, DeliverPolicy: jetstream.DeliverAllPolicy}
	if seq > 0 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	}
	cons, err := st.CreateConsumer(ctx, cc)
	if err != nil {
		return seq, fmt.Errorf("coord: events of %s: %w", run, err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = st.DeleteConsumer(dctx, cons.CachedInfo().Name)
		dcancel()
	}()
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
			from := proto.SenderOf(m.Subject())
			_ = transport.EachEvent(m.Data(), lim, func(e *transport.TaskEvent) error { // a malformed message is skipped
				if e.Run == run && e.Node == from {
					fn(e)
				}
				return nil
			})
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
