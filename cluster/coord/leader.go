package coord

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// Leader loop timings.
const (
	resendEvery  = 500 * time.Millisecond // Assignment re-send to nodes that have not reported
	tickEvery    = 100 * time.Millisecond
	syncEvery    = time.Second // membership reconcile, even without events
	probeTimeout = 2 * time.Second
	cancelEvery  = 500 * time.Millisecond // Cancel answers to reports of ended runs, per (run, node)
)

// tracker is the leader's view of one running run.
type tracker struct {
	run      Run
	asg      *transport.Assignment
	det      *Detector
	lastSend time.Time
	refused  int // success verdicts refused in a row (verdict)
}

// leader is the state of one term of leadership; only lead's goroutine
// touches it.
type leader struct {
	s          *Server
	runs       map[string]*tracker
	cancelSent map[string]time.Time // "run/node" → last Cancel sent in answer to a report
	lastSync   time.Time
	lastPrune  time.Time
	live       *Liveness // which nodes are dead (gossip, corroborated over NATS)
	pingInbox  string    // replies to pings come to pingInbox + "." + node
}

type inbound struct {
	term *transport.TermReport
	fail *transport.Envelope
	ping *pingAnswer
}

// pingAnswer is a node's answer to a liveness ping, or the NATS server's
// "no responders" in its stead.
type pingAnswer struct {
	node  string
	alive bool
}

// lead is the leader loop: it runs until ctx ends (leadership lost or Close).
func (s *Server) lead(ctx context.Context) {
	s.log.Info("leading")
	defer s.log.Info("no longer leading")
	l := &leader{s: s, runs: map[string]*tracker{}, cancelSent: map[string]time.Time{},
		live: &Liveness{Silence: s.cfg.NodeSilence, InProcess: s.cfg.InProcessNodes}}

	// Make sure every entry of earlier terms is applied before acting on the FSM.
	if err := s.raft.Barrier(5 * time.Second).Error(); err != nil {
		s.log.Warn("barrier", "err", err)
		return
	}
	if s.fsmConfig().Retention != s.cfg.Retention {
		if err := s.apply(&Command{Op: OpConfig, Config: &Settings{Retention: s.cfg.Retention}}); err != nil {
			s.log.Warn("set retention", "err", err)
		}
	}

	in := make(chan inbound, 1024)
	if s.nc != nil {
		deliver := func(m inbound) {
			select {
			case in <- m:
			case <-ctx.Done():
			}
		}
		lim := s.nc.Limits()
		term, err := s.nc.Subscribe(proto.SubjectTerm, func(m *nats.Msg) {
			var r transport.TermReport
			if err := r.Decode(m.Data, lim); err != nil {
				s.dropped(proto.SubjectTerm, err)
				return
			}
			deliver(inbound{term: &r})
		})
		if err != nil {
			s.log.Error("subscribe term reports", "err", err)
			return
		}
		fail, err := s.nc.Subscribe(proto.SubjectFail, func(m *nats.Msg) {
			var e transport.Envelope
			if err := e.Decode(m.Data, lim); err != nil {
				s.dropped(proto.SubjectFail, err)
				return
			}
			if e.Kind != proto.KindFail {
				s.dropped(proto.SubjectFail, errWrongKind)
				return
			}
			deliver(inbound{fail: &e})
		})
		if err != nil {
			s.log.Error("subscribe fail reports", "err", err)
			closeSub(term)
			return
		}
		defer closeSub(fail)
		defer closeSub(term)
		l.pingInbox = s.nc.NATS().NewInbox()
		pong, err := s.nc.Subscribe(l.pingInbox+".*", func(m *nats.Msg) {
			node := m.Subject[len(l.pingInbox)+1:]
			// The server answers a request nobody subscribes to with an
			// empty message whose header says 503.
			none := len(m.Data) == 0 && m.Header.Get("Status") == "503"
			deliver(inbound{ping: &pingAnswer{node: node, alive: !none}})
		})
		if err != nil {
			s.log.Error("subscribe ping answers", "err", err)
			return
		}
		defer closeSub(pong)
	}

	t := time.NewTicker(tickEvery)
	defer t.Stop()
	l.syncMembers(time.Now())
	l.reconcile(time.Now())
	l.recoverRuns(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-in:
			now := time.Now()
			switch {
			case m.term != nil:
				if l.live.Heard(now, m.term.Node) {
					l.refuted(m.term.Node, "a TermReport")
				}
				l.report(now, m.term)
			case m.ping != nil:
				l.pinged(now, m.ping)
			default:
				l.fail(now, m.fail)
			}
		case <-s.kick:
			l.reconcile(time.Now())
		case <-s.memberKick:
			l.syncMembers(time.Now())
			l.recoverRuns(time.Now())
		case now := <-t.C:
			if due := l.live.Next(now); now.Sub(l.lastSync) >= syncEvery || (!due.IsZero() && !due.After(now)) {
				l.syncMembers(now)
				l.recoverRuns(now)
			}
			l.ping(now)
			l.reconcile(now)
			l.tick(now)
			l.prune(now)
		}
	}
}

// ping sends a liveness ping to every node gossip calls dead whose death is
// not confirmed yet (Liveness); answers come back through the inbound
// channel.
func (l *leader) ping(now time.Time) {
	if l.s.nc == nil || l.pingInbox == "" {
		return
	}
	for _, id := range l.live.Pings(now) {
		m := &nats.Msg{Subject: proto.PingSubject(id), Reply: l.pingInbox + "." + id}
		if err := l.s.nc.NATS().PublishMsg(m); err != nil {
			l.s.log.Warn("ping node", "node", id, "err", err)
		}
	}
}

// pinged takes a ping's answer; a node confirmed dead by it is recorded and
// its runs recovered at once.
func (l *leader) pinged(now time.Time, a *pingAnswer) {
	if a.alive {
		if l.live.Heard(now, a.node) {
			l.refuted(a.node, "a ping's answer")
		}
		return
	}
	l.live.NoResponder(now, a.node)
	if l.live.State(now, a.node) == proto.NodeDead {
		l.syncMembers(now)
		l.recoverRuns(now)
	}
}

// refuted logs and counts a death gossip declared that NATS refuted.
func (l *leader) refuted(node, sign string) {
	l.s.gossipDeath(false)
	l.s.log.Info("gossip declared a node dead, but it is alive (slow is not dead)", "node", node, "heard", sign)
}

func closeSub(sub *transport.Subscription) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = sub.Close(ctx)
}

func (s *Server) fsmConfig() (c Settings) {
	s.fsm.read(func(f *FSM) { c = f.Settings() })
	return c
}

// syncMembers writes node membership into the FSM and adds coordinator
// members raft does not know as voters.
func (l *leader) syncMembers(now time.Time) {
	s := l.s
	l.lastSync = now
	var known map[string]Node
	s.fsm.read(func(f *FSM) {
		known = map[string]Node{}
		for _, n := range f.Nodes() {
			known[n.ID] = n
		}
	})
	seen := map[string]bool{}
	var voters map[raft.ServerID]raft.ServerAddress
	for _, m := range s.members.Members() {
		switch m.Meta.Role {
		case proto.RoleNode:
			seen[m.ID] = true
			// The FSM does not follow suspicion (it flaps; GET /v1/nodes
			// shows it), and gossip's deaths only once NATS corroborates
			// them (Liveness).
			l.live.Gossip(now, m.ID, m.State, m.Meta.Boot)
			state := l.live.State(now, m.ID)
			if k, ok := known[m.ID]; state == proto.NodeDead && (!ok || k.State != proto.NodeDead) {
				s.gossipDeath(true)
				s.log.Info("node confirmed dead", "node", m.ID, "gossip_dead_for", now.Sub(m.Since).Round(time.Millisecond))
			}
			n := Node{ID: m.ID, Address: m.Addr, State: state, CPUs: m.Meta.CPUs, GPUs: m.Meta.GPUs, Boot: m.Meta.Boot}
			if k, ok := known[m.ID]; ok && k.Address == n.Address && k.State == n.State && k.CPUs == n.CPUs && k.GPUs == n.GPUs && k.Boot == n.Boot {
				continue
			}
			n.Updated = now
			if err := s.apply(&Command{Op: OpNodeUpsert, Node: &n}); err != nil {
				s.log.Warn("node upsert", "node", n.ID, "err", err)
			}
		case proto.RoleCoordinator:
			if m.State != proto.NodeAlive || m.Meta.Raft == "" || m.ID == s.cfg.ID {
				continue
			}
			if voters == nil {
				voters = map[raft.ServerID]raft.ServerAddress{}
				f := s.raft.GetConfiguration()
				if err := f.Error(); err != nil {
					s.log.Warn("raft configuration", "err", err)
					continue
				}
				for _, sv := range f.Configuration().Servers {
					voters[sv.ID] = sv.Address
				}
			}
			if addr, ok := voters[raft.ServerID(m.ID)]; ok && string(addr) == m.Meta.Raft {
				continue
			}
			s.log.Info("adding voter", "id", m.ID, "raft", m.Meta.Raft)
			if err := s.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.Meta.Raft), 0, 5*time.Second).Error(); err != nil {
				s.log.Warn("add voter", "id", m.ID, "err", err)
			}
		}
	}
	// Nodes the FSM knows but the ring has never shown this server (the
	// cluster restarted without them) are dead, once gossip had time to sync.
	if now.Sub(s.started) > 5*time.Second {
		for id, k := range known {
			if !seen[id] && k.State != proto.NodeDead && k.State != proto.NodeLeft {
				k.State, k.Updated = proto.NodeDead, now
				_ = s.apply(&Command{Op: OpNodeUpsert, Node: &k})
			}
		}
	}
}

// reconcile starts tracking every running run of the FSM and ends the
// trackers of runs that finished (by cancel, say).
func (l *leader) reconcile(now time.Time) {
	var runs map[string]Run
	l.s.fsm.read(func(f *FSM) {
		runs = map[string]Run{}
		for _, r := range f.Runs() {
			if r.State == proto.RunRunning {
				runs[r.ID] = r
			} else if _, ok := l.runs[r.ID]; ok {
				runs[r.ID] = r
			}
		}
	})
	for id, r := range runs {
		t := l.runs[id]
		switch {
		case r.State != proto.RunRunning:
			l.release(t, r.State)
		case t == nil || t.run.Gen != r.Gen:
			l.track(now, r)
		}
	}
	for id, t := range l.runs {
		if _, ok := runs[id]; !ok { // pruned meanwhile
			l.release(t, proto.RunCancelled)
		}
	}
}

// track starts (or, for a new generation, restarts) following a run: the
// Assignment goes out to every node of the run now and again until each
// reports.
func (l *leader) track(now time.Time, r Run) {
	idx := map[string]uint32{}
	for i, n := range r.Nodes {
		idx[n] = uint32(i)
	}
	owner := make([]uint32, len(r.Assignment))
	for v, n := range r.Assignment {
		owner[v] = idx[n]
	}
	t := &tracker{run: r, det: NewDetector(r.Gen, r.Nodes, probeTimeout),
		asg: &transport.Assignment{Run: r.ID, Gen: r.Gen, Nodes: r.Nodes, Owner: owner, Flow: r.Flow}}
	l.runs[r.ID] = t
	l.sendAssignment(now, t)
}

func (l *leader) sendAssignment(now time.Time, t *tracker) {
	t.lastSend = now
	for _, n := range t.run.Nodes {
		if !t.det.Reported(n) {
			l.send(n, t.asg)
		}
	}
}

func (l *leader) send(node string, m transport.Message) {
	if l.s.nc == nil {
		return
	}
	if err := l.s.nc.SendControl(node, m); err != nil {
		l.s.log.Warn("send control", "node", node, "err", err)
	}
}

func (l *leader) probe(t *tracker, wave uint64) {
	body := binary.LittleEndian.AppendUint64(nil, wave)
	for _, n := range t.run.Nodes {
		l.send(n, &transport.Envelope{Kind: proto.KindProbe, Run: t.run.ID, Body: body})
	}
}

func (l *leader) report(now time.Time, r *transport.TermReport) {
	t := l.runs[r.Run]
	if t == nil {
		l.reconcile(now) // a run submitted an instant ago, or one that ended
		t = l.runs[r.Run]
	}
	if t == nil {
		// Ended or unknown: tell the node to let go, at most every cancelEvery.
		key := r.Run + "/" + r.Node
		if now.Sub(l.cancelSent[key]) >= cancelEvery {
			l.cancelSent[key] = now
			reason := "finished"
			if run, ok := l.s.run(r.Run); ok && run.State != proto.RunSucceeded {
				reason = run.State
			}
			l.send(r.Node, &transport.Cancel{Run: r.Run, Gen: r.Gen, Reason: reason})
		}
		return
	}
	if r.Gen < t.run.Gen && !contains(t.run.Nodes, r.Node) {
		// A node that lost its part of the run (it was taken for dead and its
		// tasks moved): it lets go and rejoins empty.
		key := r.Run + "/" + r.Node
		if now.Sub(l.cancelSent[key]) >= cancelEvery {
			l.cancelSent[key] = now
			l.s.log.Info("releasing a node that lost its tasks", "run", r.Run, "node", r.Node, "gen", r.Gen, "current", t.run.Gen)
			l.send(r.Node, &transport.Cancel{Run: r.Run, Gen: r.Gen, Reason: "reassigned"})
		}
		return
	}
	l.act(now, t, t.det.Report(now, *r))
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// recoverRuns moves the tasks of every running run whose nodes include a
// dead one (or one that left) to live nodes under a new generation
// (PlanReassign, RunReassign); reconcile then tracks the new generation. A
// run whose tasks cannot move fails with the reason.
func (l *leader) recoverRuns(now time.Time) {
	s := l.s
	var runs []Run
	var alive []Node
	state := map[string]string{}
	boot := map[string]string{}
	s.fsm.read(func(f *FSM) {
		for _, n := range f.Nodes() {
			state[n.ID] = n.State
			boot[n.ID] = n.Boot
			if n.State == proto.NodeAlive {
				alive = append(alive, n)
			}
		}
		for _, r := range f.Runs() {
			if r.State == proto.RunRunning {
				runs = append(runs, r)
			}
		}
	})
	for _, r := range runs {
		var lost []string
		for _, n := range r.Nodes {
			st := state[n]
			restarted := r.Boots[n] != "" && boot[n] != r.Boots[n] // the process that held the part is gone
			if st == proto.NodeDead || st == proto.NodeLeft || restarted {
				lost = append(lost, n)
			}
		}
		if len(lost) == 0 {
			continue
		}
		start := time.Now()
		// Takers: alive, not a lost node's new process (it knows nothing of
		// the run), and not a node the run lost before (Run.Lost: it may
		// still run its old part, and the receivers keep counting what that
		// part sent for its name).
		var takers []Node
		for _, n := range alive {
			if !slices.Contains(lost, n.ID) && !slices.Contains(r.Lost, n.ID) {
				takers = append(takers, n)
			}
		}
		assign, err := reassign(r, takers, s.cachedOffered(takers))
		if err != nil {
			msg := fmt.Sprintf("node %s was lost: %v", strings.Join(lost, ", "), err)
			s.log.Warn("run cannot recover", "run", r.ID, "lost", lost, "err", err)
			if t := l.runs[r.ID]; t != nil {
				l.finish(now, t, proto.RunFailed, msg)
			} else if err := s.apply(&Command{Op: OpRunFinish, Finish: &Finish{ID: r.ID, State: proto.RunFailed, Error: msg, At: now}}); err != nil {
				s.log.Warn("finish run", "run", r.ID, "err", err)
			}
			continue
		}
		boots := map[string]string{}
		for _, n := range assign {
			boots[n] = boot[n]
		}
		if err := s.apply(&Command{Op: OpRunReassign, Reassign: &Reassign{ID: r.ID, Gen: r.Gen + 1, Assignment: assign, Boots: boots}}); err != nil {
			s.log.Warn("reassign run", "run", r.ID, "err", err)
			continue
		}
		s.log.Info("run reassigned", "run", r.ID, "lost", lost, "gen", r.Gen+1, "planned_in", time.Since(start))
		l.reconcile(now)
	}
}

// reassign plans a run's new assignment over the alive nodes; moved tasks
// go to nodes that have their functions (o, pinMoved in catalog.go).
func reassign(r Run, alive []Node, o *funcs.Offered) ([]string, error) {
	f, err := spec.ParseJSON(r.ID+".json", r.Flow)
	if err != nil {
		return nil, fmt.Errorf("coord: run %s: flow does not parse: %w", r.ID, err)
	}
	g, err := f.Expand()
	if err != nil {
		return nil, fmt.Errorf("coord: run %s: flow does not expand: %w", r.ID, err)
	}
	pinMoved(g, r.Assignment, alive, o, Seed(r.ID)+r.Gen)
	assign, _, err := PlanReassign(g, r.Assignment, alive, Seed(r.ID)+r.Gen)
	return assign, err
}

func (l *leader) act(now time.Time, t *tracker, a Action) {
	if a.Probe != 0 {
		l.probe(t, a.Probe)
	}
	if a.Terminated {
		l.verdict(now, t)
	}
}

// maxRefusals is how many success verdicts in a row the leader refuses for
// work owed before it fails the run loudly: the run is quiet (every node
// idle, every Signal counted) with an activation undone, which nothing will
// change.
const maxRefusals = 5

// verdict checks the detector's "terminated" against the run's record
// before it commits success (CheckSuccess). A verdict that leaves work owed
// is refused, logged and counted (hetflow_verdicts_refused_total), and the
// run is probed again; after maxRefusals in a row it fails, naming the work
// owed. A task whose latest activation failed fails the run. A record that
// cannot be read now postpones the verdict.
func (l *leader) verdict(now time.Time, t *tracker) {
	s := l.s
	reprobe := func() { t.det = NewDetector(t.run.Gen, t.run.Nodes, probeTimeout) }
	if s.nc == nil {
		l.finish(now, t, proto.RunSucceeded, "")
		return
	}
	owed, failed, err := s.checkRecord(context.Background(), t.run)
	if err != nil {
		s.log.Warn("success verdict postponed: the run's record cannot be read", "run", t.run.ID, "err", err)
		reprobe()
		return
	}
	if len(failed) > 0 {
		l.finish(now, t, proto.RunFailed, fmt.Sprintf("task %s failed", failed[0]))
		return
	}
	if len(owed) == 0 {
		l.finish(now, t, proto.RunSucceeded, "")
		return
	}
	t.refused++
	s.verdictRefused()
	show := owed[:min(len(owed), 5)]
	msgs := make([]string, len(show))
	for i, o := range show {
		msgs[i] = o.String()
	}
	s.log.Error("success verdict refused: work is owed (a protocol bug)", "run", t.run.ID, "gen", t.run.Gen,
		"refused", t.refused, "owed", len(owed), "first", strings.Join(msgs, "; "))
	if t.refused >= maxRefusals {
		l.finish(now, t, proto.RunFailed, fmt.Sprintf("internal error: the run went quiet with work undone (%s); please report this bug", strings.Join(msgs, "; ")))
		return
	}
	reprobe()
}

func (l *leader) fail(now time.Time, e *transport.Envelope) {
	t := l.runs[e.Run]
	if t == nil {
		return
	}
	var body proto.FailBody
	msg := "a task failed"
	if err := json.Unmarshal(e.Body, &body); err == nil && body.Task != "" {
		msg = fmt.Sprintf("task %s: %s", body.Task, failText(body.Task, body.Error))
	} else if err == nil && body.Error != "" {
		msg = fmt.Sprintf("node %s: %s", e.Node, body.Error)
	} else if e.Node != "" {
		msg = "a task failed on node " + e.Node
	}
	l.finish(now, t, proto.RunFailed, msg)
}

// failText is a task's error as the run's error shows it after "task T: ":
// the node's text names the task again (`task "T": `) and carries the
// registry's sentinel ("funcs: task failed: "); both are said once, by the
// prefix.
func failText(task, text string) string {
	text = strings.TrimPrefix(text, fmt.Sprintf("task %q: ", task))
	return strings.TrimPrefix(text, funcs.ErrFailed.Error()+": ")
}

func (l *leader) tick(now time.Time) {
	for _, t := range l.runs {
		if to := t.run.Timeout; to > 0 && now.Sub(t.run.Submitted) > to {
			l.finish(now, t, proto.RunFailed, "timed out after "+spec.FormatDuration(to))
			continue
		}
		if now.Sub(t.lastSend) >= resendEvery {
			l.sendAssignment(now, t)
		}
		l.act(now, t, t.det.Tick(now))
	}
	for k, at := range l.cancelSent {
		if now.Sub(at) > time.Minute {
			delete(l.cancelSent, k)
		}
	}
}

// finish commits a run's end and releases its nodes.
func (l *leader) finish(now time.Time, t *tracker, state, msg string) {
	err := l.s.apply(&Command{Op: OpRunFinish, Finish: &Finish{ID: t.run.ID, State: state, Error: msg, At: now}})
	if err != nil {
		l.s.log.Warn("finish run", "run", t.run.ID, "state", state, "err", err)
		if errors.Is(err, proto.ErrNotLeader) {
			return // the next leader takes over
		}
	}
	if run, ok := l.s.run(t.run.ID); ok {
		state = run.State
	}
	l.release(t, state)
}

// release sends Cancel to every node of the run and stops tracking it.
func (l *leader) release(t *tracker, state string) {
	if t == nil {
		return
	}
	reason := state
	if state == proto.RunSucceeded {
		reason = "finished"
	}
	for _, n := range t.run.Nodes {
		l.send(n, &transport.Cancel{Run: t.run.ID, Gen: t.run.Gen, Reason: reason})
	}
	delete(l.runs, t.run.ID)
}

// prune drops finished runs past the retention, and their events.
func (l *leader) prune(now time.Time) {
	s := l.s
	every := min(max(s.cfg.Retention/4, 100*time.Millisecond), 10*time.Second)
	if now.Sub(l.lastPrune) < every {
		return
	}
	l.lastPrune = now
	before := now.Add(-s.cfg.Retention)
	var old []string
	s.fsm.read(func(f *FSM) {
		for _, r := range f.Runs() {
			if proto.Finished(r.State) && r.Finished.Before(before) {
				old = append(old, r.ID)
			}
		}
	})
	if len(old) == 0 {
		return
	}
	if err := s.apply(&Command{Op: OpPrune, Before: before}); err != nil {
		s.log.Warn("prune", "err", err)
		return
	}
	if s.nc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, id := range old {
			if err := s.nc.PurgeRun(ctx, id); err != nil {
				s.log.Warn("purge run", "run", id, "err", err)
			}
		}
		cancel()
	}
}

// run returns a copy of a run from the local FSM.
func (s *Server) run(id string) (r Run, ok bool) {
	s.fsm.read(func(f *FSM) { r, ok = f.Run(id) })
	return r, ok
}
