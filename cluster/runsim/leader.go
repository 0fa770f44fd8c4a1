package runsim

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// The simulated leader: the real coord.Leader (the leader loop's decisions:
// tracking, probes, the verdict checked by coord.CheckSuccess, refusals,
// gossip's deaths corroborated by coord.Liveness, reassign, Cancel), over
// the real coord.FSM, driven here as cluster/coord/leader.go drives it
// behind raft and NATS. Commands are applied to the FSM at once, as raft
// does once they commit; the FSM and the event stream outlive a leader
// change, the Leader does not.

type leader struct {
	w     *world
	epoch int
	core  *coord.Leader
}

// leaderWorld is what the simulation keeps around the leader (one field of
// world): the event stream, the suspicions and troubles the false-death
// invariant checks against, and counts.
type leaderWorld struct {
	events     map[string][]transport.TaskEvent // run → its TaskEvents (JetStream HF_EVENTS), in stream order
	ringDead   map[string]time.Duration         // node → when memberlist last declared it dead
	troubled   map[string]time.Duration         // node → the latest time NATS could not reach its process
	trouble    time.Duration                    // the latest time NATS or the leader's connection was down
	refused    int                              // success verdicts refused
	refuted    int                              // gossip deaths NATS refuted
	confirmed  int                              // gossip deaths NATS confirmed
	falseDeath bool                             // a live node was confirmed dead (Options.Silence planted)

	acked      map[ackKey]ackRec // Assignment acks the leader of a term took (the first, per process)
	copies     int               // Assignment copies sent
	deliveries map[delivery]bool // the (run, generation, node) those copies were
	byDigest   int               // copies that named their plan by digest alone
	needPlan   int               // acks that asked for the plan a copy named
}

// ackKey is an Assignment ack as one term of leadership took it.
type ackKey struct {
	epoch int
	d     delivery
}

// delivery is an Assignment of one generation of a run to one node.
type delivery struct {
	run  string
	gen  uint64
	node string
}

func (lw *leaderWorld) init() {
	if lw.events == nil {
		lw.events, lw.ringDead, lw.troubled = map[string][]transport.TaskEvent{}, map[string]time.Duration{}, map[string]time.Duration{}
		lw.acked, lw.deliveries = map[ackKey]ackRec{}, map[delivery]bool{}
	}
}

// pongMsg is a node's answer to a liveness ping (alive), or the NATS
// server's "no responders" in its stead.
type pongMsg struct {
	node  string
	boot  string // the answering process's
	alive bool
}

var epoch0 = time.Unix(1_700_000_000, 0)

// simPlacement is the simulation's placement: the simulated flows' tasks
// are tiny, and the cost model would keep them on one node, and whole
// loops would never put a loop across nodes; the simulation is there to
// cross nodes (a flow can pin a loop's tasks apart).
var simPlacement = coord.Placement{Spread: true, SoftLoops: true}

func (w *world) clock() time.Time { return epoch0.Add(w.now) }

// submit is the leader's part of POST /v1/runs (server.go): Plan over the
// alive nodes, then RunSubmit.
func (w *world) submit(sr *simRun) error {
	var alive []coord.Node
	boots := map[string]string{}
	for _, n := range w.fsm.Nodes() {
		if n.State == proto.NodeAlive {
			alive = append(alive, n)
		}
		boots[n.ID] = n.Boot
	}
	assign, err := coord.PlanWith(sr.g, alive, coord.Seed(sr.placeID), simPlacement)
	if err != nil {
		return err
	}
	rb := map[string]string{}
	for _, n := range assign {
		rb[n] = boots[n]
	}
	// the FSM's registry keeps the canonical JSON flow and the run names
	// it, as the server does (the leader sends it and plans a reassign
	// from it)
	f, err := spec.ParseYAML("sim.yaml", sr.flow)
	if err != nil {
		return err
	}
	js, err := spec.Canonical(f)
	if err != nil {
		return err
	}
	sr.tables[1] = assign
	w.logf("submit %s: gen 1 %v", sr.id, assign)
	id := coord.FlowID(js)
	err = w.fsm.Apply(&coord.Command{Op: coord.OpFlowPut, Flow: &coord.StoredFlow{ID: id, Name: "top", Path: "sim.yaml", Text: js,
		Tasks: len(assign), Bytes: len(sr.flow), Stored: w.clock()}})
	if err == nil {
		err = w.fsm.Apply(&coord.Command{Op: coord.OpRunSubmit, Run: &coord.Run{ID: sr.id, FlowID: id, FlowName: "top",
			State: proto.RunRunning, Submitted: w.clock(), Gen: 1, Assignment: assign, Boots: rb}})
	}
	if err != nil {
		w.logf("leader: submit refused: %v", err)
	}
	return err
}

// startLeader is lead(): a new term of leadership starts from the FSM.
func (w *world) startLeader() {
	w.ls.init()
	w.leadEpoch++
	l := &leader{w: w, epoch: w.leadEpoch, core: coord.NewLeader(coord.LeaderConfig{Started: w.clock(), Silence: w.opt.Silence, Placement: simPlacement, Plans: w.plans}, w.fsm)}
	w.lead = l
	w.leadConn = w.natsUp
	w.leadOut = nil
	w.ls.trouble = w.now
	w.logf("leader %d leads", l.epoch)
	l.memberKick()
	l.reconcile()
	l.ticker()
}

func (w *world) stopLeader(d time.Duration) {
	w.logf("FAULT: leader lost; next one in %v", d)
	w.lead = nil
	w.leadConn = false
	w.leadOut = nil // its reconnect buffer dies with it
	w.ls.trouble = w.now
	w.at(d, nil, w.startLeader)
}

func (l *leader) live() bool { return l.w.lead == l }

func (l *leader) ticker() {
	l.w.at(coord.LeaderTimings.Tick, nil, func() {
		if !l.live() {
			return
		}
		now := l.w.clock()
		if l.core.SyncDue(now) {
			l.memberKick()
		}
		l.do(l.core.Tick(now))
		l.ticker()
	})
}

// memberKick is lead()'s memberKick case: gossip's view to the Leader,
// then recovery.
func (l *leader) memberKick() {
	w := l.w
	ms := make([]member.Member, 0, len(w.nodeIDs))
	for _, id := range w.nodeIDs {
		ms = append(ms, member.Member{ID: id, Addr: id, State: w.ring[id], Since: w.clock(),
			Meta: proto.Meta{Role: proto.RoleNode, CPUs: w.cpus[id], Boot: fmt.Sprint(w.ringBoot[id])}})
	}
	now := w.clock()
	l.do(l.core.Members(now, ms))
	l.do(l.core.Recover(now))
}

// reconcile is the kick of a submit.
func (l *leader) reconcile() { l.do(l.core.Reconcile(l.w.clock())) }

func (l *leader) receive(m any) {
	now := l.w.clock()
	switch m := m.(type) {
	case *transport.TermReport:
		l.w.logf("leader: %s", describe(m))
		l.do(l.core.Report(now, m))
	case *transport.Ack:
		l.w.logf("leader: %s", describe(m))
		if m.NeedPlan {
			l.w.ls.needPlan++ // no receipt: the node took nothing
		} else if k := (ackKey{l.epoch, delivery{m.Run, m.Gen, m.Node}}); l.w.ls.acked[k].boot != m.Boot {
			l.w.ls.acked[k] = ackRec{m.Boot, now}
		}
		if !l.w.opt.IgnoreAcks {
			l.do(l.core.Ack(now, m))
		}
	case failMsg:
		task, text, _ := strings.Cut(strings.TrimPrefix(m.err, "task "), ": ")
		body, _ := json.Marshal(proto.FailBody{Task: task, Error: text})
		l.do(l.core.Fail(now, &transport.Envelope{Kind: proto.KindFail, Run: m.run, Node: m.node, Body: body}))
	case pongMsg:
		l.w.logf("leader: ping answer from %s (alive %v, boot %s)", m.node, m.alive, m.boot)
		l.do(l.core.Pong(now, m.node, m.boot, m.alive))
	}
}

// do carries out the Leader's actions as cluster/coord/leader.go does.
func (l *leader) do(acts []coord.LeaderAction) {
	w := l.w
	for _, a := range acts {
		if !l.live() {
			return
		}
		switch a.Kind {
		case coord.LeadSend:
			l.send(a.Node, a.Msg)
		case coord.LeadPing:
			l.ping(a.Node)
		case coord.LeadApply:
			err := w.fsm.Apply(a.Cmd)
			l.applied(a.Cmd, err)
			l.do(l.core.Applied(w.clock(), a.Cmd, err))
		case coord.LeadCheck:
			l.check(a.Run)
		case coord.LeadResync:
			l.memberKick()
		case coord.LeadRefused:
			w.ls.refused++
			w.logf("leader: %s %v", a.Text, a.Attrs)
			if !w.opt.LieIdle {
				w.fail("leader: %s %v", a.Text, a.Attrs)
			}
		case coord.LeadConfirmed:
			w.ls.confirmed++
			w.logf("leader: %s %v", a.Text, a.Attrs)
		case coord.LeadRefuted:
			w.ls.refuted++
			w.logf("leader: %s %v", a.Text, a.Attrs)
		case coord.LeadLog:
			if a.Level >= slog.LevelInfo {
				w.logf("leader: %s %v", a.Text, a.Attrs)
			}
		}
	}
}

// ackRec is an ack the leader took: the acking process's boot, and when.
type ackRec struct {
	boot string
	at   time.Time
}

// send publishes a control message (a probe as the simulation's probeMsg).
// An Assignment is counted, and checked against the acks: the leader sends
// no copy to the process that acknowledged it to this leader sooner than
// coord.LeaderTimings.AckedResend after the ack (it may be building the run
// for a while: slow is not dead; the slow copies after that are answered
// again by a node that refused the part).
func (l *leader) send(node string, m transport.Message) {
	if a, ok := m.(*transport.Assignment); ok {
		w, d := l.w, delivery{a.Run, a.Gen, node}
		w.ls.copies++
		w.ls.deliveries[d] = true
		if a.PlanRef() {
			w.ls.byDigest++
		}
		if ack, ok := w.ls.acked[ackKey{l.epoch, d}]; ok && w.clock().Sub(ack.at) < coord.LeaderTimings.AckedResend {
			if p := w.procs[node]; p != nil && fmt.Sprint(p.boot) == ack.boot {
				w.fail("leader re-sent %s's gen %d Assignment to %s, whose process (boot %s) had acknowledged it %v before", a.Run, a.Gen, node, ack.boot, w.clock().Sub(ack.at))
			}
		}
	}
	if e, ok := m.(*transport.Envelope); ok && e.Kind == proto.KindProbe {
		wave := binary.LittleEndian.Uint64(e.Body)
		l.w.logf("leader: probe %s wave %d to %s", e.Run, wave, node)
		l.w.publish(nil, node, probeMsg{e.Run, wave})
		return
	}
	l.w.publish(nil, node, m)
}

// applied keeps the simulation's books on a committed command, and checks
// a confirmed death against the false-death invariant.
func (l *leader) applied(c *coord.Command, err error) {
	w := l.w
	if err != nil {
		w.logf("leader: command %s refused: %v", c.Op, err)
		return
	}
	switch c.Op {
	case coord.OpNodeUpsert:
		n := c.Node
		w.logf("leader: node %s %s (boot %s)", n.ID, n.State, n.Boot)
		if n.State == proto.NodeDead {
			w.checkDeath(n.ID)
		}
	case coord.OpRunReassign:
		r := c.Reassign
		if sr := w.run(r.ID); sr != nil {
			sr.tables[r.Gen] = r.Assignment
		}
		w.logf("leader: %s reassigned gen %d %v", r.ID, r.Gen, r.Assignment)
		if w.opt.ResumeAtTakeover {
			for _, id := range w.nodeIDs {
				if p := w.procs[id]; p != nil && p.frozen {
					w.at(w.dur(0, 2*time.Millisecond), nil, func() { w.resume(id, p) })
				}
			}
		}
	case coord.OpRunFinish:
		w.logf("leader: finish %s %s %s", c.Finish.ID, c.Finish.State, c.Finish.Error)
		w.onFinish(c.Finish.ID)
	}
}

// checkDeath: a node whose process (the one memberlist shows) NATS reached
// without trouble from before memberlist's verdict until now is alive and
// answering; confirming its death (and moving its tasks) breaks "slow is
// not dead".
func (w *world) checkDeath(id string) {
	p := w.procs[id]
	dead, ok := w.ls.ringDead[id]
	if p == nil || p.frozen || !p.connected || !ok || w.ring[id] != proto.NodeDead || p.boot != w.ringBoot[id] {
		return // dead, or unreachable, or a new process (the one gossip shows is gone)
	}
	if w.ls.troubled[id] < dead && w.ls.trouble < dead {
		w.ls.falseDeath = true
		w.fail("leader confirmed %s dead, but it is alive and NATS reached it throughout since gossip's verdict at %v: a live node lost its tasks (slow is not dead)", id, dead)
	}
}

// check is the record check of a success verdict: CheckSuccess over the
// run's TaskEvents folded in stream order (or, Options.SkipCheck, none),
// into a fold that keeps the check's proof, as the leader's does. The
// check examines only the rows the fold has not proved; the pass over
// every row (CheckEveryRow) must find the same, or the seed fails.
func (l *leader) check(r coord.Run) {
	w := l.w
	sr := w.run(r.ID)
	var owed []coord.Owed
	var failed []string
	if sr != nil && !w.opt.SkipCheck {
		f := coord.NewFold()
		f.KeepProof()
		for i := range w.ls.events[r.ID] {
			f.Add(sr.g, &w.ls.events[r.ID][i])
		}
		owed, failed = coord.CheckSuccess(sr.g, f)
		if wo, wf := coord.CheckEveryRow(sr.g, f); !slices.Equal(owed, wo) || !slices.Equal(failed, wf) {
			w.fail("record check of %s gen %d: the rows not proved show owed %v, failed %v; every row owed %v, failed %v", r.ID, r.Gen, owed, failed, wo, wf)
		}
	}
	w.logf("leader: record check of %s gen %d: owed %v, failed %v", r.ID, r.Gen, owed, failed)
	l.do(l.core.Checked(w.clock(), r.ID, r.Gen, owed, failed, nil))
}

// ping is a liveness ping on core NATS: lost with the control subjects'
// loss; the server answers "no responders" when the node's process has no
// connection; a live process answers from its NATS client (a frozen one
// when it resumes).
func (l *leader) ping(to string) {
	w := l.w
	if !w.natsUp || !w.leadConn {
		return
	}
	if w.inFaultWindow() && w.rng.Float64() < w.lossP {
		w.logf("loss: ping %s", to)
		return
	}
	w.at(w.latency(), nil, func() {
		if !w.natsUp {
			return
		}
		p := w.procs[to]
		if p == nil || !p.connected {
			w.at(w.latency(), nil, func() {
				if l.live() && w.leadConn && w.natsUp {
					l.receive(pongMsg{node: to})
				}
			})
			return
		}
		w.at(0, p, func() {
			if p.connected {
				w.publish(p, "", pongMsg{node: to, boot: fmt.Sprint(p.boot), alive: true})
			}
		})
	})
}

// taskEvent records an activation's state in the node's task table
// (cluster/node's eventPub): stored with the table's other changes at the
// node's next report (storeEvents), at once for a failure or a running
// task. A node lost before then loses them, as a real one does.
func (h *hold) taskEvent(j job, st transport.TaskState) {
	var execs uint64
	for a := uint64(1); a <= j.act; a++ {
		execs += uint64(h.exec[[2]uint64{uint64(j.v), a}])
	}
	gen := h.r.Gen()
	if h.tab == nil {
		h.tab, h.tabDirty, h.tabGen = map[uint32]transport.TaskEvent{}, map[uint32]bool{}, gen
	}
	if gen != h.tabGen { // a report is of one generation: the changes under the last go first
		h.cutEvents()
		h.tabGen = gen
	}
	v := uint32(j.v)
	if !h.tabDirty[v] {
		h.tabDirty[v] = true
		h.dirty = append(h.dirty, v)
	}
	// Name left empty: a TaskReport names a vertex by its index. An
	// earlier activation ending after a later one began leaves the later
	// one in the row (cluster/node's eventPub.record), its executions
	// counted.
	if old, ok := h.tab[v]; ok && j.act < old.Act {
		old.Executions = max(old.Executions, execs)
		h.tab[v] = old
	} else {
		h.tab[v] = transport.TaskEvent{Run: h.run.id, Gen: gen, Task: v, Node: h.p.id, State: st, Act: j.act, Executions: execs}
	}
	if st == transport.TaskFailed || st == transport.TaskRunning {
		h.storeEvents() // at once, as cluster/node sends a failure and a long task's running
	}
}

// cutEvents moves the table's changes into the queue of those to store.
func (h *hold) cutEvents() {
	for _, v := range h.dirty {
		h.cutTasks = append(h.cutTasks, h.tab[v])
		delete(h.tabDirty, v)
	}
	h.dirty = h.dirty[:0]
}

// storeEvents publishes the table's changes to the event stream (JetStream:
// stored when the server takes them; the client keeps them while
// disconnected, in order with its other publishes).
func (h *hold) storeEvents() {
	h.cutEvents()
	if len(h.cutTasks) == 0 {
		return
	}
	p, w := h.p, h.p.w
	evs := h.cutTasks
	h.cutTasks = nil
	run := h.run.id
	store := func() { w.ls.events[run] = append(w.ls.events[run], evs...) }
	if !w.natsUp || !p.connected {
		p.outbox = append(p.outbox, store)
		return
	}
	store()
}

// ringDeadAt notes memberlist's verdict of death on a node (for the
// false-death invariant).
func (w *world) ringDeadAt(id string) { w.ls.ringDead[id] = w.now }

// troubledAt notes that NATS could not reach node id's process at now (""
// for NATS itself or the leader's connection).
func (w *world) troubledAt(id string) {
	if id == "" {
		w.ls.trouble = w.now
		return
	}
	w.ls.troubled[id] = w.now
}

// LeaderStats counts what the leader decided in a seed.
type LeaderStats struct {
	Refused    int // success verdicts refused (work owed)
	Refuted    int // gossip deaths NATS refuted (the node answered)
	Confirmed  int // gossip deaths NATS confirmed
	Copies     int // Assignment copies sent
	Deliveries int // the (run, generation, node) they were: copies beyond these were re-sends
	ByDigest   int // copies that named their plan by digest alone
	NeedPlan   int // acks of nodes that did not hold the plan a copy named
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
