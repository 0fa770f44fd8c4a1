package coord

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/transport"
)

// leader is the I/O of one term of leadership around its decisions (Leader,
// lead.go): it moves messages between NATS and the Leader, commits the
// commands it asks for through raft, checks records, logs and counts. Only
// lead's goroutine touches it.
type leader struct {
	s         *Server
	core      *Leader
	lastPrune time.Time
	pingInbox string // replies to pings come to pingInbox + "." + node
	// refusedVoters: coordinators of an earlier build syncMembers did not
	// add as voters, warned of once each
	refusedVoters map[string]bool
	// drops takes the consumers the record checks set aside to the
	// goroutine that removes them (dropConsumers), off the loop.
	drops chan jetstream.Consumer
}

// fsmView is the View of the server's FSM: each call under its read lock.
type fsmView struct{ s *Server }

func (v fsmView) Run(id string) (Run, bool)     { return v.s.run(id) }
func (v fsmView) RunFlow(r Run) ([]byte, error) { return v.s.runFlow(r) }
func (v fsmView) Runs() (rs []Run) {
	v.s.fsm.read(func(f *FSM) { rs = f.Runs() })
	return rs
}
func (v fsmView) Nodes() (ns []Node) {
	v.s.fsm.read(func(f *FSM) { ns = f.Nodes() })
	return ns
}

type inbound struct {
	term *transport.TermReport
	ack  *transport.Ack
	fail *transport.Envelope
	ping *pingAnswer
}

// pingAnswer is a node's answer to a liveness ping, or the NATS server's
// "no responders" in its stead.
type pingAnswer struct {
	node  string
	boot  string // the answering process's boot id (cluster/node answers with it)
	alive bool
}

// lead is the leader loop: it runs until ctx ends (leadership lost or Close).
func (s *Server) lead(ctx context.Context) {
	s.log.Info("leading")
	defer s.log.Info("no longer leading")
	l := &leader{s: s, core: NewLeader(LeaderConfig{Started: s.started, NoRecord: s.nc == nil, NoNATS: s.nc == nil,
		Silence: s.cfg.NodeSilence, InProcess: s.cfg.InProcessNodes, Offered: s.cachedOffered, Placement: s.cfg.Placement, Plans: s.plans}, fsmView{s})}

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
			if r.Node != proto.SenderOf(m.Subject) { // the server enforces the subject's sender
				s.dropped(proto.SubjectTerm, errSender)
				return
			}
			deliver(inbound{term: &r})
		})
		if err != nil {
			s.log.Error("subscribe term reports", "err", err)
			return
		}
		ack, err := s.nc.Subscribe(proto.SubjectAck, func(m *nats.Msg) {
			var a transport.Ack
			if err := a.Decode(m.Data, lim); err != nil {
				s.dropped(proto.SubjectAck, err)
				return
			}
			if a.Node != proto.SenderOf(m.Subject) {
				s.dropped(proto.SubjectAck, errSender)
				return
			}
			deliver(inbound{ack: &a})
		})
		if err != nil {
			s.log.Error("subscribe assignment acks", "err", err)
			closeSub(term)
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
			if e.Node != proto.SenderOf(m.Subject) {
				s.dropped(proto.SubjectFail, errSender)
				return
			}
			deliver(inbound{fail: &e})
		})
		if err != nil {
			s.log.Error("subscribe fail reports", "err", err)
			closeSub(ack)
			closeSub(term)
			return
		}
		defer closeSub(fail)
		defer closeSub(ack)
		defer closeSub(term)
		l.pingInbox = s.nc.NATS().NewInbox()
		pong, err := s.nc.Subscribe(l.pingInbox+".*", func(m *nats.Msg) {
			node := m.Subject[len(l.pingInbox)+1:]
			// The server answers a request nobody subscribes to with an
			// empty message whose header says 503.
			none := len(m.Data) == 0 && m.Header.Get("Status") == "503"
			deliver(inbound{ping: &pingAnswer{node: node, boot: string(m.Data), alive: !none}})
		})
		if err != nil {
			s.log.Error("subscribe ping answers", "err", err)
			return
		}
		defer closeSub(pong)
	}

	// The removals of the consumers set aside: a request each (up to 2 s
	// when the server is slow) the loop does not wait for. The goroutine
	// ends with the term; what it has not removed yet the server drops a
	// minute unread.
	l.drops = make(chan jetstream.Consumer, 64)
	dropsDone := make(chan struct{})
	var dropper sync.WaitGroup
	dropper.Add(1)
	go func() {
		defer dropper.Done()
		l.dropConsumers(dropsDone)
	}()
	defer dropper.Wait()
	defer close(dropsDone)

	t := time.NewTicker(tickEvery)
	defer t.Stop()
	l.syncMembers(time.Now())
	l.do(time.Now(), l.core.Reconcile(time.Now()))
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-in:
			now := time.Now()
			switch {
			case m.term != nil:
				l.do(now, l.core.Report(now, m.term))
			case m.ack != nil:
				l.do(now, l.core.Ack(now, m.ack))
			case m.ping != nil:
				l.do(now, l.core.Pong(now, m.ping.node, m.ping.boot, m.ping.alive))
			default:
				l.do(now, l.core.Fail(now, m.fail))
			}
		case <-s.kick:
			now := time.Now()
			l.do(now, l.core.Reconcile(now))
		case <-s.memberKick:
			l.syncMembers(time.Now())
		case now := <-t.C:
			if l.core.SyncDue(now) {
				l.syncMembers(now)
			}
			l.do(now, l.core.Tick(now))
			l.prune(now)
		}
	}
}

// do carries out the Leader's actions in order (the contract of Leader).
func (l *leader) do(now time.Time, acts []LeaderAction) {
	s := l.s
	for _, a := range acts {
		switch a.Kind {
		case LeadSend:
			l.send(a.Node, a.Msg)
		case LeadPing:
			l.ping(a.Node)
		case LeadApply:
			err := s.apply(a.Cmd)
			l.do(now, l.core.Applied(now, a.Cmd, err))
		case LeadCheck:
			owed, failed, stale, err := s.checkRecordAside(context.Background(), a.Run)
			l.do(now, l.core.Checked(now, a.Run.ID, a.Run.Gen, owed, failed, err))
			// The status cursor's consumer the check set aside goes after
			// Checked's actions (the verdict applied, or a refusal, or the
			// check's error logged), on another goroutine: its removal is
			// a request to the server that nothing here waits for.
			l.drop(stale)
		case LeadResync:
			l.syncMembers(now)
		case LeadRefused:
			s.verdictRefused()
			s.log.Error(a.Text, a.Attrs...)
		case LeadConfirmed:
			s.gossipDeath(true)
			s.log.Info(a.Text, a.Attrs...)
		case LeadRefuted:
			s.gossipDeath(false)
			s.log.Info(a.Text, a.Attrs...)
		case LeadLog:
			s.log.Log(context.Background(), a.Level, a.Text, a.Attrs...)
		}
	}
}

// drop hands consumer cons (nil: none) to the goroutine that removes it;
// with its queue full it is left to the server, which drops it a minute
// unread.
func (l *leader) drop(cons jetstream.Consumer) {
	if cons == nil || l.drops == nil {
		return
	}
	select {
	case l.drops <- cons:
	default:
	}
}

// dropConsumers removes the consumers drop hands it until done is closed.
func (l *leader) dropConsumers(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case cons := <-l.drops:
			l.s.dropConsumer(context.Background(), cons)
		}
	}
}

// ping sends a liveness ping to a node gossip calls dead whose death is
// not confirmed yet, or to a member not verified yet (Liveness); answers
// come back through the inbound channel.
func (l *leader) ping(id string) {
	if l.s.nc == nil || l.pingInbox == "" {
		return
	}
	m := &nats.Msg{Subject: proto.PingSubject(id), Reply: l.pingInbox + "." + id}
	if err := l.s.nc.NATS().PublishMsg(m); err != nil {
		l.s.log.Warn("ping node", "node", id, "err", err)
	}
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

// syncMembers feeds gossip's view to the Leader (node membership, then the
// recovery of runs that lost a node) and adds coordinator members raft does
// not know as voters.
func (l *leader) syncMembers(now time.Time) {
	s := l.s
	members := s.members.Members()
	l.do(now, l.core.Members(now, members))
	l.do(now, l.core.Recover(now))
	var voters map[raft.ServerID]raft.ServerAddress
	for _, m := range members {
		if m.Meta.Role != proto.RoleCoordinator || m.State != proto.NodeAlive || m.Meta.Raft == "" || m.ID == s.cfg.ID {
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
		if m.Meta.Log < LogRanges && s.logForms() >= LogRanges {
			// Of an earlier build: this leader may have written ranged
			// run_submits (0x03) to the log, or may yet, and what the
			// servers read is what the ring shows now, not what the log
			// holds (entryRanges turns false where the ring misses a
			// server, a dead coordinator, yet the log keeps the ranged
			// entries written before). A voter that cannot
			// apply an entry replicates it all the same, and its FSM goes
			// its own way. So a leader of this build never adds one, nor
			// moves a known one to a new address (it stays where it was,
			// unreachable there). It joins once it runs this build.
			s.votersRefused.Add(1)
			if !l.refusedVoters[m.ID] {
				if l.refusedVoters == nil {
					l.refusedVoters = map[string]bool{}
				}
				l.refusedVoters[m.ID] = true
				s.log.Warn("coordinator of an earlier build not added as a voter: the log may hold entries it cannot read", "id", m.ID)
			}
			continue
		}
		s.log.Info("adding voter", "id", m.ID, "raft", m.Meta.Raft)
		if err := s.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.Meta.Raft), 0, 5*time.Second).Error(); err != nil {
			s.log.Warn("add voter", "id", m.ID, "err", err)
		}
	}
}

func (l *leader) send(node string, m transport.Message) {
	if l.s.nc == nil {
		return
	}
	if err := l.s.nc.SendControl(node, m); err != nil {
		l.s.log.Warn("send control", "node", node, "err", err)
		return
	}
	if _, ok := m.(*transport.Assignment); ok {
		l.s.assignmentSent()
	}
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

// runFlow is FSM.RunFlow with the binding of a flow with parameters done
// once for each set of values (flowCaches.stored).
func (s *Server) runFlow(r Run) ([]byte, error) {
	sf, ok := s.storedFlow(r.FlowID)
	switch {
	case !ok:
		return nil, fmt.Errorf("coord: run %s: flow %q: %w", r.ID, r.FlowID, ErrUnknownFlow)
	case !sf.HasParams:
		return sf.Text, nil
	}
	b, err := s.flows.stored(sf, r.Params)
	if err != nil {
		return nil, fmt.Errorf("coord: run %s: %w", r.ID, err)
	}
	return b.canon, nil
}

// plans compiles the plans of each node's part of a generation of run r
// (LeaderConfig.Plans), from its flow in the registry (runFlow).
func (s *Server) plans(r Run) (map[string]NodePlan, error) { return s.flows.plans(r, s.runFlow) }
