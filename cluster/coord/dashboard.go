package coord

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/cluster/dashboard"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/transport"
)

// dashSource is the coordinator as the dashboard's Source: the FSM, raft,
// the gossip ring and the event stream, read locally on any coordinator;
// Cancel goes to the leader.
type dashSource struct {
	s *Server

	mu      sync.Mutex
	sub     *transport.Subscription
	closed  bool
	last    map[string]uint64 // "run/node" → the latest report's Sent
	signals atomic.Uint64
}

// newDashboard builds the coordinator's dashboard (mounted by handler).
func (s *Server) newDashboard() *dashboard.Dashboard {
	s.dashSrc = &dashSource{s: s, last: map[string]uint64{}}
	return dashboard.New(s.dashSrc, dashboard.Options{Token: s.cfg.Secret.APIToken})
}

// closeDashboard ends the dashboard's event streams and its subscription.
func (s *Server) closeDashboard() {
	if s.dash != nil {
		s.dash.Close()
	}
	if d := s.dashSrc; d != nil {
		d.mu.Lock()
		d.closed = true
		sub := d.sub
		d.sub = nil
		d.mu.Unlock()
		if sub != nil {
			closeSub(sub)
		}
	}
}

func (d *dashSource) Coordinators() ([]dashboard.Coordinator, uint64) {
	var term uint64
	if d.s.raft != nil {
		term = d.s.raft.CurrentTerm()
	}
	ps, err := d.s.Peers()
	if err != nil {
		return nil, term
	}
	out := make([]dashboard.Coordinator, 0, len(ps))
	for _, p := range ps {
		c := dashboard.Coordinator{ID: p.ID, HTTP: p.HTTP, Raft: p.Raft, Suffrage: p.Suffrage, Leader: p.Leader}
		if p.ID == d.s.cfg.ID {
			c.State = proto.NodeAlive
		} else if m, ok := d.s.members.Member(p.ID); ok {
			c.State = m.State
		}
		out = append(out, c)
	}
	return out, term
}

func (d *dashSource) Nodes() []proto.NodeInfo { return d.s.nodeInfos() }

func summary(r *Run) proto.RunSummary {
	rs := proto.RunSummary{ID: r.ID, Flow: r.FlowName, State: r.State, Submitted: r.Submitted}
	if !r.Finished.IsZero() {
		t := r.Finished
		rs.Finished = &t
	}
	return rs
}

func (d *dashSource) Runs() []proto.RunSummary {
	var out []proto.RunSummary
	d.s.fsm.read(func(f *FSM) {
		for _, r := range f.Runs() {
			out = append(out, summary(&r))
		}
	})
	return out
}

func (d *dashSource) Run(id string) (dashboard.RunInfo, bool) {
	r, ok := d.s.run(id)
	if !ok {
		return dashboard.RunInfo{}, false
	}
	text, _ := d.s.runFlow(r) // nil (no graph drawn) if it cannot be read
	return dashboard.RunInfo{RunSummary: summary(&r), Error: r.Error, FlowFile: text, Assignment: r.Assignment, Gen: r.Gen}, true
}

func (d *dashSource) Status(ctx context.Context, id string) (proto.RunStatus, error) {
	return d.s.runStatus(ctx, id)
}

// Progress makes dashSource a dashboard.ProgressSource: the fold's tallies.
func (d *dashSource) Progress(ctx context.Context, id string) (proto.RunProgress, error) {
	return d.s.runProgress(ctx, id)
}

func (d *dashSource) Events(ctx context.Context, run string, after uint64, fn func(*transport.TaskEvent)) (uint64, error) {
	if d.s.nc == nil {
		return after, nil
	}
	d.subscribe()
	r, ok := d.s.run(run)
	if !ok {
		return after, nil
	}
	return d.s.eventsAfter(ctx, run, after, func(e *transport.TaskEvent) {
		if EventFromOwner(r, e) { // as the status fold: only the task's owner
			fn(e)
		}
	})
}

// Cancel cancels on the leader: here, or through its API.
func (d *dashSource) Cancel(ctx context.Context, id string) error {
	if d.s.Leader() {
		_, err := d.s.Cancel(ctx, id)
		return err
	}
	li, ok := d.s.leaderInfo()
	if !ok || li.HTTP == "" {
		return proto.ErrNoLeader
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+li.HTTP+"/v1/runs/"+id+"/cancel", nil)
	if err != nil {
		return fmt.Errorf("coord: cancel %s: %w", id, err)
	}
	if tok := d.s.cfg.Secret.APIToken; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set(HeaderForwardedBy, d.s.cfg.ID)
	resp, err := d.s.fwd.Do(req)
	if err != nil {
		return fmt.Errorf("%w: forwarding cancel to %s: %w", proto.ErrNoLeader, li.HTTP, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusNotFound:
		return fmt.Errorf("run %s: %w", id, proto.ErrNotFound)
	}
	return fmt.Errorf("coord: cancel %s on the leader: %s", id, strings.ToLower(resp.Status))
}

// Signals sums, over every (run, node), how far the Sent counter of its
// termination reports has grown since this coordinator started listening.
func (d *dashSource) Signals() uint64 {
	d.subscribe()
	return d.signals.Load()
}

// subscribe starts listening to termination reports, once.
func (d *dashSource) subscribe() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sub != nil || d.closed || d.s.nc == nil {
		return
	}
	lim := d.s.nc.Limits()
	sub, err := d.s.nc.Subscribe(proto.SubjectTerm, func(m *nats.Msg) {
		var r transport.TermReport
		if r.Decode(m.Data, lim) != nil || r.Node != proto.SenderOf(m.Subject) {
			return
		}
		key := r.Run + "/" + r.Node
		d.mu.Lock()
		prev, seen := d.last[key]
		if r.Sent > prev || !seen {
			if seen {
				d.signals.Add(r.Sent - prev)
			} else {
				d.signals.Add(r.Sent)
			}
			d.last[key] = r.Sent
		}
		if len(d.last) > 1<<16 { // forget old runs' counters
			clear(d.last)
		}
		d.mu.Unlock()
	})
	if err != nil {
		d.s.log.Warn("dashboard: subscribe term reports", "err", err)
		return
	}
	d.sub = sub
}
