package coord

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// Leader loop timings.
const (
	// An Assignment goes to a node once; it is sent again only while the
	// node has neither acknowledged it (transport.Ack, on receipt, before
	// it builds the run) nor reported, resendFirst after the first send,
	// then at intervals doubling up to resendMax: a lost Assignment (or
	// ack) costs at most resendMax, and a node that has not read its
	// control subject for a while (building another big run) gets a few
	// copies, not one every 500 ms.
	resendFirst = 500 * time.Millisecond
	resendMax   = 4 * time.Second
	// A node that acknowledged an Assignment but has not reported since
	// gets a copy ackedResend after its ack, then at intervals doubling up
	// to ackedResendMax. A node building a big part reports once it is
	// built, so this is rare and cheap; a node that refused the part
	// answers a copy with its fail envelope again, which core NATS may
	// have lost (the run would otherwise wait for its timeout).
	ackedResend    = 10 * time.Second
	ackedResendMax = time.Minute
	tickEvery      = 100 * time.Millisecond
	syncEvery      = time.Second // membership reconcile, even without events
	probeTimeout   = 2 * time.Second
	cancelEvery    = 500 * time.Millisecond // Cancel answers to reports of ended runs, per (run, node)
	// neverShownAfter: a node the FSM knows that the ring has not shown
	// this server this long after it started is dead (the cluster restarted
	// without it).
	neverShownAfter = 5 * time.Second
)

// LeaderTimings are the leader loop's intervals, for a driver that keeps its
// own clock (the simulation).
var LeaderTimings = struct{ Tick, Resend, ResendMax, AckedResend, Sync, ProbeTimeout, CancelEvery time.Duration }{
	tickEvery, resendFirst, resendMax, ackedResend, syncEvery, probeTimeout, cancelEvery}

// maxRefusals is how many success verdicts in a row the leader refuses for
// work owed before it fails the run loudly: the run is quiet (every node
// idle, every Signal counted) with an activation undone, which nothing will
// change.
const maxRefusals = 5

// View is the replicated state the leader decides on: the FSM as raft has
// applied it (read-only; the leader changes it only by the commands it asks
// for). *FSM is one; the server's takes the FSM's lock for each call.
type View interface {
	Run(id string) (Run, bool)
	Runs() []Run
	Nodes() []Node
	// RunFlow is the canonical JSON flow run r executes (FSM.RunFlow): what
	// its Assignments carry and what a reassign plans from.
	RunFlow(r Run) ([]byte, error)
}

// LeaderConfig configures a Leader.
type LeaderConfig struct {
	// Started is when this server started: a node the FSM knows that the
	// ring has never shown this server is dead once gossip had
	// neverShownAfter to sync.
	Started time.Time
	// NoRecord: there is no record to check a verdict against (no NATS, a
	// test server); a success verdict stands as the detector gives it.
	NoRecord bool
	// Silence, InProcess and NoNATS configure the Liveness (which see).
	Silence   time.Duration
	InProcess bool
	NoNATS    bool
	// Offered, when set, tells what the takers of a reassignment offer (the
	// server's cached node catalogs, Server.cachedOffered): moved tasks go to
	// nodes that have their functions (pinMoved). nil: placement by capacity.
	Offered func(nodes []Node) *funcs.Offered
	// Placement is the cost model a lost node's tasks are placed again by
	// (PlanReassignWith).
	Placement Placement
	// Plans, when set, compiles the plan of each node's part of a
	// generation of run r (the encoded transport.Plan, by node id), which
	// goes in that node's Assignment: a node builds its part from it and
	// never sees the flow (runproto.Compile; the server's Server.plans). It
	// is called once per generation a Leader tracks. An error fails the
	// run. nil: Assignments carry no plan.
	//
	// A node that acknowledged an Assignment with a plan is taken to hold
	// that plan (its graph cache, cluster/node): the next Assignment of a
	// plan with the same digest goes to it by digest alone (see
	// heldPlans). It may not (a later generation's part, a plan over the
	// cache's size, one refused after the ack): it then answers NeedPlan
	// and gets the plan in full, a round trip more, never a wrong plan.
	Plans func(r Run) (map[string]NodePlan, error)
}

// heldPlans are the plans a node's process acknowledged (by digest, most
// recent last): the leader's guess of what the node holds. A guess only: a
// node that does not hold a plan an Assignment names answers with an Ack
// whose NeedPlan is set, and gets the plan (Leader.Ack). What a node holds
// is learnt within one term (a new leader sends plans in full first).
type heldPlans struct {
	boot    string // the process that acknowledged them
	digests [][32]byte
}

// maxHeldPlans bounds the digests the leader remembers of one node (a
// node's graph cache keeps a few hundred thousand vertices' plans).
const maxHeldPlans = 16

func (h *heldPlans) has(d [32]byte) bool { return h != nil && slices.Contains(h.digests, d) }

func (h *heldPlans) add(d [32]byte) {
	if i := slices.Index(h.digests, d); i >= 0 {
		h.digests = slices.Delete(h.digests, i, i+1)
	}
	if len(h.digests) >= maxHeldPlans {
		h.digests = slices.Delete(h.digests, 0, 1)
	}
	h.digests = append(h.digests, d)
}

func (h *heldPlans) drop(d [32]byte) {
	if i := slices.Index(h.digests, d); i >= 0 {
		h.digests = slices.Delete(h.digests, i, i+1)
	}
}

// Leader is the leader loop's decisions, as a pure state machine in the
// style of FSM, Detector and Liveness (and of etcd-io/raft's raft.go):
// inputs in (gossip's members, TermReports, fail envelopes, ping answers,
// ticks, the outcome of the commands and record checks it asked for), with
// the time as an argument; actions out (messages to send, pings, commands
// to commit, records to check, what to log and count). It does no I/O and
// reads no clock; the replicated state comes in through a View. The server's
// lead loop (leader.go) and the simulation (cluster/runsim) drive the same
// code.
//
// The driver's contract: carry out the actions in order; after a LeadApply,
// call Applied with the command's outcome and carry out its actions before
// the next ones; after a LeadCheck, call Checked with the record's verdict
// (CheckSuccess); after a LeadResync, call Members and Recover. Feed
// Members then Recover when gossip's membership changes and when SyncDue;
// Reconcile when the FSM's runs change; Tick every LeaderTimings.Tick.
//
// A Leader lives for one term of leadership: a new leader starts a new one
// from the FSM. It is not safe for concurrent use.
type Leader struct {
	cfg        LeaderConfig
	view       View
	runs       map[string]*tracker
	cancelSent map[string]time.Time // "run/node" → last Cancel sent in answer to a report
	lastSync   time.Time
	live       *Liveness
	held       map[string]*heldPlans // node → the plans its process acknowledged
	out        []LeaderAction
	owned      ownedBy // the owners of the last assignment tracked
}

// ownedBy is owners(nodes, assign), kept: runs of a flow again on the same
// placement share their assignment's array (internAssignment) and the
// Assignments the leader sends them one Owner array (read-only: encoded).
type ownedBy struct {
	nodes, assign []string
	owner         []uint32
}

// of is owners(nodes, assign), the kept array when assign is the array
// and nodes the nodes it was made of.
func (o *ownedBy) of(nodes, assign []string) []uint32 {
	if len(assign) > 0 && len(o.assign) == len(assign) && &o.assign[0] == &assign[0] && slices.Equal(o.nodes, nodes) {
		return o.owner
	}
	owner, _ := owners(nodes, assign)
	*o = ownedBy{slices.Clone(nodes), assign, owner}
	return owner
}

// tracker is the leader's view of one running run.
type tracker struct {
	run      Run
	asg      map[string]*transport.Assignment // node → its Assignment (its own plan)
	digest   map[string][32]byte              // node → its plan's digest (nodes with a plan)
	det      *Detector
	dlv      map[string]*delivery // node → the Assignment's delivery to it
	refused  int                  // success verdicts refused in a row (verdict)
	checking bool                 // a LeadCheck is out
	ending   bool                 // a LeadApply of its finish is out
}

// delivery is the Assignment of one generation to one node of the run.
type delivery struct {
	next  time.Time     // when it goes again, unless acked or reported
	every time.Duration // the interval after that (doubling to resendMax)
	sent  int           // copies sent
	acked bool          // the node acknowledged it (Ack)
	boot  string        // the boot of the process that acked ("" when it did not say)
	gone  string        // an acking boot already taken for gone once (resend): not again
}

// LeadKind is what a LeaderAction asks for.
type LeadKind uint8

// Kinds of LeaderAction.
const (
	// LeadSend: send Msg to Node on its control subject.
	LeadSend LeadKind = iota + 1
	// LeadPing: ping Node (Liveness); answer with Pong.
	LeadPing
	// LeadApply: commit Cmd through raft, then call Applied.
	LeadApply
	// LeadCheck: check Run's success verdict against its record
	// (CheckSuccess over its folded TaskEvents), then call Checked.
	LeadCheck
	// LeadResync: a death was confirmed: call Members and Recover now.
	LeadResync
	// LeadRefused: a success verdict was refused for work owed (a protocol
	// bug): count it (hetflow_verdicts_refused_total) and log Text as an
	// error.
	LeadRefused
	// LeadConfirmed: NATS confirmed a death gossip declared: count it
	// (hetflow_gossip_deaths_total{verdict="confirmed"}) and log Text.
	LeadConfirmed
	// LeadRefuted: NATS refuted a death gossip declared (slow is not dead):
	// count it (verdict="refuted") and log Text.
	LeadRefuted
	// LeadLog: log Text at Level.
	LeadLog
)

var leadKindNames = [...]string{"?", "send", "ping", "apply", "check", "resync", "refused", "confirmed", "refuted", "log"}

func (k LeadKind) String() string {
	if int(k) < len(leadKindNames) {
		return leadKindNames[k]
	}
	return fmt.Sprintf("LeadKind(%d)", k)
}

// LeaderAction is one thing the Leader asks its driver to do.
type LeaderAction struct {
	Kind  LeadKind
	Node  string            // LeadSend, LeadPing, LeadConfirmed, LeadRefuted: the node
	Msg   transport.Message // LeadSend
	Cmd   *Command          // LeadApply
	Run   Run               // LeadCheck: the run (and generation) to check
	Level slog.Level        // LeadLog
	Text  string            // LeadRefused, LeadConfirmed, LeadRefuted, LeadLog
	Attrs []any             // key/value pairs to log with Text
}

// NewLeader returns the decisions of a new term of leadership over view.
func NewLeader(cfg LeaderConfig, view View) *Leader {
	return &Leader{cfg: cfg, view: view, runs: map[string]*tracker{}, cancelSent: map[string]time.Time{}, held: map[string]*heldPlans{},
		live: &Liveness{Silence: cfg.Silence, InProcess: cfg.InProcess, NoNATS: cfg.NoNATS}}
}

func (l *Leader) flush() []LeaderAction {
	out := l.out
	l.out = nil
	return out
}

func (l *Leader) send(node string, m transport.Message) {
	l.out = append(l.out, LeaderAction{Kind: LeadSend, Node: node, Msg: m})
}

func (l *Leader) apply(c *Command) { l.out = append(l.out, LeaderAction{Kind: LeadApply, Cmd: c}) }

func (l *Leader) log(level slog.Level, text string, attrs ...any) {
	l.out = append(l.out, LeaderAction{Kind: LeadLog, Level: level, Text: text, Attrs: attrs})
}

// Tracking reports whether the leader follows run id (at which generation).
func (l *Leader) Tracking(id string) (gen uint64, ok bool) {
	if t := l.runs[id]; t != nil {
		return t.run.Gen, true
	}
	return 0, false
}

// SyncDue reports whether Members and Recover are due at now: a second
// since the last, or a candidate's ping or verdict is due (Liveness.Next).
func (l *Leader) SyncDue(now time.Time) bool {
	due := l.live.Next(now)
	return now.Sub(l.lastSync) >= syncEvery || (!due.IsZero() && !due.After(now))
}

// Members takes gossip's view of the ring: the node members' states go to
// the FSM (NodeUpsert), gossip's deaths only once Liveness confirms them;
// suspicion is not followed (it flaps; GET /v1/nodes shows it). A member is
// alive only once it answered a ping as itself (Liveness): until then it is
// recorded suspect, given no work, and pinged (Tick, every PingEvery); a node the FSM records alive with the boot gossip shows was
// verified by a leader already. Members of
// other roles are the driver's (coordinator voters). A node the FSM knows
// that the ring has not shown is dead once neverShownAfter has passed since
// Started.
func (l *Leader) Members(now time.Time, members []member.Member) []LeaderAction {
	l.lastSync = now
	known := map[string]Node{}
	for _, n := range l.view.Nodes() {
		known[n.ID] = n
	}
	seen := map[string]bool{}
	for _, m := range members {
		if m.Meta.Role != proto.RoleNode {
			continue
		}
		seen[m.ID] = true
		l.live.Gossip(now, m.ID, m.State, m.Meta.Boot)
		k, ok := known[m.ID]
		if ok && k.State == proto.NodeAlive {
			l.live.Vouch(m.ID, k.Boot) // a leader verified it
		}
		state := l.live.State(now, m.ID)
		if state == proto.NodeDead && (!ok || k.State != proto.NodeDead) {
			l.out = append(l.out, LeaderAction{Kind: LeadConfirmed, Node: m.ID, Text: "node confirmed dead",
				Attrs: []any{"node", m.ID, "gossip_dead_for", now.Sub(m.Since).Round(time.Millisecond)}})
		}
		n := Node{ID: m.ID, Address: m.Addr, State: state, CPUs: m.Meta.CPUs, GPUs: m.Meta.GPUs, Boot: m.Meta.Boot}
		if ok && k.Address == n.Address && k.State == n.State && k.CPUs == n.CPUs && k.GPUs == n.GPUs && k.Boot == n.Boot {
			continue
		}
		n.Updated = now
		l.apply(&Command{Op: OpNodeUpsert, Node: &n})
	}
	if now.Sub(l.cfg.Started) > neverShownAfter {
		for _, id := range sortedIDs(known) {
			k := known[id]
			if !seen[id] && k.State != proto.NodeDead && k.State != proto.NodeLeft {
				k.State, k.Updated = proto.NodeDead, now
				l.apply(&Command{Op: OpNodeUpsert, Node: &k})
			}
		}
	}
	return l.flush()
}

// pings asks for the pings Liveness has due.
func (l *Leader) pings(now time.Time) {
	for _, id := range l.live.Pings(now) {
		l.out = append(l.out, LeaderAction{Kind: LeadPing, Node: id})
	}
}

func sortedIDs[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Pong takes a ping's answer: alive (the node's process of boot id boot
// answered; "" when the answer does not say) or not (NATS said no
// responder). A death it confirms, or an answer that verifies the node (it
// becomes alive), asks for a resync at once.
func (l *Leader) Pong(now time.Time, node, boot string, alive bool) []LeaderAction {
	was := l.live.Candidate(now, node)
	verified := l.live.Verified(node)
	if alive {
		if l.live.Answered(now, node, boot) {
			l.out = append(l.out, LeaderAction{Kind: LeadRefuted, Node: node,
				Text: "gossip declared a node dead, but it is alive (slow is not dead)", Attrs: []any{"node", node, "heard", "a ping's answer"}})
		}
	} else {
		l.live.NoResponder(now, node)
	}
	if was && l.live.State(now, node) == proto.NodeDead || !verified && l.live.Verified(node) {
		l.out = append(l.out, LeaderAction{Kind: LeadResync})
	}
	return l.flush()
}

// heard is a sign of life from node over NATS.
func (l *Leader) heard(now time.Time, node, sign string) {
	if l.live.Heard(now, node) {
		l.out = append(l.out, LeaderAction{Kind: LeadRefuted, Node: node,
			Text: "gossip declared a node dead, but it is alive (slow is not dead)", Attrs: []any{"node", node, "heard", sign}})
	}
}

// Reconcile starts tracking every running run of the FSM and ends the
// trackers of runs that finished (by cancel, say).
func (l *Leader) Reconcile(now time.Time) []LeaderAction {
	l.reconcile(now)
	return l.flush()
}

func (l *Leader) reconcile(now time.Time) {
	runs := map[string]Run{}
	for _, r := range l.view.Runs() {
		if r.State == proto.RunRunning {
			runs[r.ID] = r
		} else if _, ok := l.runs[r.ID]; ok {
			runs[r.ID] = r
		}
	}
	for _, id := range sortedIDs(runs) {
		r := runs[id]
		t := l.runs[id]
		switch {
		case r.State != proto.RunRunning:
			l.release(t, r.State)
		case t == nil || t.run.Gen != r.Gen:
			l.track(now, r)
		}
	}
	for _, id := range sortedIDs(l.runs) {
		if _, ok := runs[id]; !ok { // pruned meanwhile
			l.release(l.runs[id], proto.RunCancelled)
		}
	}
}

// track starts (or, for a new generation, restarts) following a run: the
// Assignment goes out to every node of the run now, and again (Tick,
// resend) only to a node that has neither acknowledged nor reported it.
func (l *Leader) track(now time.Time, r Run) {
	owner := l.owned.of(r.Nodes, r.Assignment) // the FSM made Nodes of Assignment
	t := &tracker{run: r, det: NewDetector(r.Gen, r.Nodes, probeTimeout), dlv: map[string]*delivery{},
		asg: map[string]*transport.Assignment{}, digest: map[string][32]byte{}}
	l.runs[r.ID] = t
	var plans map[string]NodePlan
	if l.cfg.Plans != nil {
		var err error
		if plans, err = l.cfg.Plans(r); err != nil {
			// Tracked, with nothing to send: the finish releases it. (The
			// registry lost the run's flow, or it no longer binds.)
			l.log(slog.LevelWarn, "run cannot be planned", "run", r.ID, "gen", r.Gen, "err", err)
			l.finish(now, r.ID, proto.RunFailed, fmt.Sprintf("internal error: the nodes' plans of the run: %v", err))
			return
		}
	}
	boots := assignBoots(r)
	for _, n := range r.Nodes {
		a := &transport.Assignment{Run: r.ID, Gen: r.Gen, Nodes: r.Nodes, Owner: owner, Boots: boots}
		if p, ok := plans[n]; ok && p.Plan != nil {
			a.Plan, a.PlanDigest = p.Plan, p.Digest[:]
			t.digest[n] = p.Digest
		}
		t.asg[n] = a
	}
	l.log(slog.LevelDebug, "tracking run", "run", r.ID, "gen", r.Gen, "nodes", r.Nodes)
	for _, n := range r.Nodes {
		d := &delivery{}
		t.dlv[n] = d
		l.sendAssignment(now, t, n, d)
	}
}

// assignBoots names, per node of r, the process its part is for (Run.Boots):
// a node restarted since is not that process, takes no part (it would start
// its tasks afresh, without the record of what its predecessor did), and is
// reassigned as lost once the leader sees its new boot (Reconcile).
func assignBoots(r Run) []string {
	if len(r.Boots) == 0 {
		return nil
	}
	out := make([]string, len(r.Nodes))
	for i, n := range r.Nodes {
		out[i] = r.Boots[n]
	}
	return out
}

// sendAssignment sends t's Assignment to node and sets when it goes again
// (resendFirst after the first copy, doubling up to resendMax).
//
// The first copy names the node's plan by digest alone when the node's
// process acknowledged an Assignment of that plan before (heldPlans) and
// is, as far as the run says, the process the part is for; every later
// copy carries the plan (a copy goes again only when the first, or the
// node's answer, was lost or the node asked for the plan: a lost answer
// must not bring a copy without it again).
func (l *Leader) sendAssignment(now time.Time, t *tracker, node string, d *delivery) {
	limit := resendMax
	if d.acked {
		limit = ackedResendMax
	}
	switch {
	case d.sent == 0 || d.every == 0:
		d.every = resendFirst
	default:
		d.every = min(2*d.every, limit)
	}
	m := t.asg[node]
	if dg, ok := t.digest[node]; ok && d.sent == 0 {
		h := l.held[node]
		if b := t.run.Boots[node]; h.has(dg) && (b == "" || h.boot == "" || b == h.boot) {
			ref := *m
			ref.Plan = nil
			m = &ref
		}
	}
	d.sent++
	d.next = now.Add(d.every)
	l.send(node, m)
}

// resend sends t's Assignment again to each node of the run whose copy is
// due and that has neither acknowledged nor reported it. A node whose boot
// the run recorded (Run.Boots) and that restarted since loses its part to
// a new generation (Recover), whose Assignment goes out afresh; for one
// whose boot the run did not record, an ack from a process that is gone
// (the FSM shows the node under another boot since) stands for nothing:
// the node's new process gets the Assignment at once, as one that had not
// reported would have before acks.
func (l *Leader) resend(now time.Time, t *tracker, boots func() map[string]string) {
	for _, n := range t.run.Nodes {
		d := t.dlv[n]
		if d == nil {
			continue
		}
		if d.acked {
			if b := boots()[n]; d.boot != "" && b != "" && b != d.boot && t.run.Boots[n] == "" && d.gone != d.boot {
				// Once per acking boot: if the FSM is only behind (the ack
				// came from a process gossip has not shown yet), that
				// process acks the copy again, and it must not bring
				// another copy at every tick.
				l.log(slog.LevelInfo, "the process that acknowledged an Assignment is gone: sending it again", "run", t.run.ID, "gen", t.run.Gen,
					"node", n, "acked_boot", d.boot, "boot", b)
				*d = delivery{sent: d.sent, next: now, gone: d.boot}
			} else if t.det.Reported(n) {
				continue
			}
			// Acked, not reported yet: the slow copies (ackedResend).
		} else if t.det.Reported(n) {
			continue
		}
		if now.Before(d.next) {
			continue
		}
		l.sendAssignment(now, t, n, d)
	}
}

// Ack takes a node's receipt of an Assignment (transport.Ack on
// hf.coord.ack.<node>, a.Node the subject's): a sign of life from the node;
// the Assignment of that generation is not sent to it again (resend). A
// node that acked and builds its part for a while is neither sent it again
// nor taken for lost: only gossip and pings say a node is dead (Liveness).
func (l *Leader) Ack(now time.Time, a *transport.Ack) []LeaderAction {
	l.heard(now, a.Node, "an Ack")
	t := l.runs[a.Run]
	if t == nil {
		l.reconcile(now) // a run submitted an instant ago
		t = l.runs[a.Run]
	}
	if t == nil || t.run.Gen != a.Gen {
		return l.flush() // ended, or another generation: the latest goes on
	}
	dg, planned := t.digest[a.Node]
	if a.NeedPlan {
		// The node does not hold the plan a copy named by digest: it took
		// nothing. The plan goes to it now (and in every copy after).
		if h := l.held[a.Node]; h != nil && planned {
			h.drop(dg)
		}
		if d := t.dlv[a.Node]; d != nil && !d.acked && planned {
			l.log(slog.LevelInfo, "node does not hold the plan named: sending it", "run", a.Run, "gen", a.Gen, "node", a.Node, "boot", a.Boot)
			l.sendAssignment(now, t, a.Node, d)
		}
		return l.flush()
	}
	if planned {
		h := l.held[a.Node]
		if h == nil || h.boot != a.Boot {
			h = &heldPlans{boot: a.Boot}
			l.held[a.Node] = h
		}
		h.add(dg)
	}
	if d := t.dlv[a.Node]; d != nil {
		if !d.acked || d.boot != a.Boot {
			// The next copy, unless the node reports first: ackedResend
			// from now (sendAssignment doubles the interval after it).
			d.next, d.every = now.Add(ackedResend), ackedResend/2
		}
		d.acked, d.boot = true, a.Boot
	}
	return l.flush()
}

// Sent is how many copies of run id's current Assignment the leader has
// sent to node (0 when it does not track the run or the node is not in it).
func (l *Leader) Sent(id, node string) int {
	if t := l.runs[id]; t != nil {
		if d := t.dlv[node]; d != nil {
			return d.sent
		}
	}
	return 0
}

func (l *Leader) probe(t *tracker, wave uint64) {
	body := proto.ProbeBody(wave)
	for _, n := range t.run.Nodes {
		l.send(n, &transport.Envelope{Kind: proto.KindProbe, Run: t.run.ID, Body: body})
	}
}

// Report takes a TermReport: a sign of life from its node, then the run's
// detector's input; a report for an ended run, or from a node that lost its
// part, is answered with Cancel (at most every cancelEvery per run and
// node).
func (l *Leader) Report(now time.Time, r *transport.TermReport) []LeaderAction {
	l.heard(now, r.Node, "a TermReport")
	t := l.runs[r.Run]
	if t == nil {
		l.reconcile(now) // a run submitted an instant ago, or one that ended
		t = l.runs[r.Run]
	}
	if t == nil {
		// Ended or unknown: tell the node to let go.
		key := r.Run + "/" + r.Node
		if last, ok := l.cancelSent[key]; !ok || now.Sub(last) >= cancelEvery {
			l.cancelSent[key] = now
			reason := "finished"
			if run, ok := l.view.Run(r.Run); ok && run.State != proto.RunSucceeded {
				reason = run.State
			}
			l.send(r.Node, &transport.Cancel{Run: r.Run, Gen: r.Gen, Reason: reason})
		}
		return l.flush()
	}
	if r.Gen < t.run.Gen && !slices.Contains(t.run.Nodes, r.Node) {
		// A node that lost its part of the run (it was taken for dead and its
		// tasks moved): it lets go and rejoins empty.
		key := r.Run + "/" + r.Node
		if last, ok := l.cancelSent[key]; !ok || now.Sub(last) >= cancelEvery {
			l.cancelSent[key] = now
			l.log(slog.LevelInfo, "releasing a node that lost its tasks", "run", r.Run, "node", r.Node, "gen", r.Gen, "current", t.run.Gen)
			l.send(r.Node, &transport.Cancel{Run: r.Run, Gen: r.Gen, Reason: "reassigned"})
		}
		return l.flush()
	}
	if !t.ending {
		l.act(now, t, t.det.Report(now, *r))
	}
	return l.flush()
}

// Recover moves the tasks of every running run whose nodes include a dead
// one (or one that left, or was restarted) to live nodes under a new
// generation (PlanReassign, RunReassign); Applied then tracks the new
// generation. A run whose tasks cannot move fails with the reason.
func (l *Leader) Recover(now time.Time) []LeaderAction {
	var alive []Node
	state := map[string]string{}
	boot := map[string]string{}
	for _, n := range l.view.Nodes() {
		state[n.ID] = n.State
		boot[n.ID] = n.Boot
		if n.State == proto.NodeAlive {
			alive = append(alive, n)
		}
	}
	for _, r := range l.view.Runs() {
		if r.State != proto.RunRunning {
			continue
		}
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
		var offered *funcs.Offered
		if l.cfg.Offered != nil {
			offered = l.cfg.Offered(takers)
		}
		text, err := l.view.RunFlow(r)
		var assign []string
		if err == nil {
			assign, err = reassign(r, text, takers, offered, l.cfg.Placement)
		}
		if err != nil {
			msg := fmt.Sprintf("node %s was lost: %v", strings.Join(lost, ", "), err)
			l.log(slog.LevelWarn, "run cannot recover", "run", r.ID, "lost", lost, "err", err)
			l.finish(now, r.ID, proto.RunFailed, msg)
			continue
		}
		boots := map[string]string{}
		for _, n := range assign {
			boots[n] = boot[n]
		}
		l.log(slog.LevelInfo, "run reassigned", "run", r.ID, "lost", lost, "gen", r.Gen+1)
		l.apply(&Command{Op: OpRunReassign, Reassign: &Reassign{ID: r.ID, Gen: r.Gen + 1, Assignment: assign, Boots: boots}})
	}
	return l.flush()
}

// reassign plans a run's new assignment over the alive nodes by the cost
// model pl; moved tasks go to nodes that have their functions (o,
// pinMoved in catalog.go). text is the run's flow (View.RunFlow).
func reassign(r Run, text []byte, alive []Node, o *funcs.Offered, pl Placement) ([]string, error) {
	f, err := spec.ParseJSON(r.ID+".json", text)
	if err != nil {
		return nil, fmt.Errorf("coord: run %s: flow does not parse: %w", r.ID, err)
	}
	g, err := f.Expand()
	if err != nil {
		return nil, fmt.Errorf("coord: run %s: flow does not expand: %w", r.ID, err)
	}
	pinMoved(g, r.Assignment, alive, o, Seed(r.ID)+r.Gen)
	assign, _, err := PlanReassignWith(g, r.Assignment, alive, Seed(r.ID)+r.Gen, pl)
	return assign, err
}

// Applied takes the outcome of a command the leader asked for (LeadApply):
// a reassign committed starts tracking the new generation; a finish
// releases the run's nodes with the state the FSM has (unless leadership
// was lost: the next leader takes over).
func (l *Leader) Applied(now time.Time, c *Command, err error) []LeaderAction {
	if err != nil {
		l.log(slog.LevelWarn, "command not committed", "op", c.Op, "err", err)
	}
	switch c.Op {
	case OpRunReassign:
		if err == nil {
			l.reconcile(now)
		}
	case OpRunFinish:
		t := l.runs[c.Finish.ID]
		if t == nil || errors.Is(err, proto.ErrNotLeader) {
			break
		}
		state := c.Finish.State
		run, ok := l.view.Run(c.Finish.ID)
		if ok {
			state = run.State
		}
		if state == proto.RunRunning {
			// Not committed, and the run goes on: track it afresh (the next
			// verdict, timeout or fail decides again). No Cancel: a node
			// that let go of a running run would not take its Assignment
			// again. The Assignment's deliveries stand for the same
			// generation (what was acked is not sent again).
			if run.Gen != t.run.Gen {
				delete(l.runs, t.run.ID)
				l.reconcile(now)
				break
			}
			t.run, t.det = run, NewDetector(run.Gen, run.Nodes, probeTimeout)
			t.refused, t.checking, t.ending = 0, false, false
			break
		}
		l.release(t, state)
	}
	return l.flush()
}

func (l *Leader) act(now time.Time, t *tracker, a Action) {
	if a.Probe != 0 {
		l.probe(t, a.Probe)
	}
	if a.Terminated {
		l.verdict(now, t)
	}
}

// verdict takes the detector's "terminated": without a record it stands;
// else the record is checked first (LeadCheck, Checked).
func (l *Leader) verdict(now time.Time, t *tracker) {
	if l.cfg.NoRecord {
		l.finish(now, t.run.ID, proto.RunSucceeded, "")
		return
	}
	t.checking = true
	l.out = append(l.out, LeaderAction{Kind: LeadCheck, Run: t.run})
}

// Checked takes the record's verdict on run id's generation gen (LeadCheck):
// CheckSuccess's owed and failed, or err when the record cannot be read now.
// A verdict that leaves work owed is refused, counted (LeadRefused), and the
// run probed again; after maxRefusals in a row it fails, naming the work
// owed. A task whose latest activation failed fails the run. A record that
// cannot be read postpones the verdict.
func (l *Leader) Checked(now time.Time, id string, gen uint64, owed []Owed, failed []string, err error) []LeaderAction {
	t := l.runs[id]
	if t == nil || t.run.Gen != gen || !t.checking || t.ending {
		return l.flush() // the run moved on meanwhile
	}
	t.checking = false
	reprobe := func() { t.det = NewDetector(t.run.Gen, t.run.Nodes, probeTimeout) }
	switch {
	case err != nil:
		l.log(slog.LevelWarn, "success verdict postponed: the run's record cannot be read", "run", id, "err", err)
		reprobe()
	case len(failed) > 0:
		l.finish(now, id, proto.RunFailed, fmt.Sprintf("task %s failed", failed[0]))
	case len(owed) == 0:
		l.finish(now, id, proto.RunSucceeded, "")
	default:
		t.refused++
		show := owed[:min(len(owed), 5)]
		msgs := make([]string, len(show))
		for i, o := range show {
			msgs[i] = o.String()
		}
		l.out = append(l.out, LeaderAction{Kind: LeadRefused, Text: "success verdict refused: work is owed (a protocol bug)",
			Attrs: []any{"run", id, "gen", gen, "refused", t.refused, "owed", len(owed), "first", strings.Join(msgs, "; ")}})
		if t.refused >= maxRefusals {
			l.finish(now, id, proto.RunFailed, fmt.Sprintf("internal error: the run went quiet with work undone (%s); please report this bug", strings.Join(msgs, "; ")))
			return l.flush()
		}
		reprobe()
	}
	return l.flush()
}

// Fail takes a node's fail envelope (hf.coord.fail.<node>, e.Node the
// subject's): the run fails, "task X: error". Only a node of the run fails
// it.
func (l *Leader) Fail(now time.Time, e *transport.Envelope) []LeaderAction {
	t := l.runs[e.Run]
	if t == nil || t.ending || !slices.Contains(t.run.Nodes, e.Node) {
		return l.flush()
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
	l.finish(now, e.Run, proto.RunFailed, msg)
	return l.flush()
}

// failText is a task's error as the run's error shows it after "task T: ":
// the node's text names the task again (`task "T": `) and carries the
// registry's sentinel ("funcs: task failed: "); both are said once, by the
// prefix.
func failText(task, text string) string {
	text = strings.TrimPrefix(text, fmt.Sprintf("task %q: ", task))
	return strings.TrimPrefix(text, funcs.ErrFailed.Error()+": ")
}

// Tick advances time: pings to gossip's death candidates and unverified
// members, the runs
// reconciled, each run's timeout, Assignment re-sends (resend) and detector
// tick.
func (l *Leader) Tick(now time.Time) []LeaderAction {
	l.pings(now)
	l.reconcile(now)
	var boots map[string]string
	bootsOf := func() map[string]string { // the FSM's nodes' boots, read once a tick if at all
		if boots == nil {
			boots = map[string]string{}
			for _, n := range l.view.Nodes() {
				boots[n.ID] = n.Boot
			}
		}
		return boots
	}
	for _, id := range sortedIDs(l.runs) {
		t := l.runs[id]
		if t.ending {
			continue
		}
		if to := t.run.Timeout; to > 0 && now.Sub(t.run.Submitted) > to {
			l.finish(now, id, proto.RunFailed, "timed out after "+spec.FormatDuration(to))
			continue
		}
		l.resend(now, t, bootsOf)
		l.act(now, t, t.det.Tick(now))
	}
	for k, at := range l.cancelSent {
		if now.Sub(at) > time.Minute {
			delete(l.cancelSent, k)
		}
	}
	return l.flush()
}

// finish asks for a run's end to be committed; Applied releases its nodes.
func (l *Leader) finish(now time.Time, id, state, msg string) {
	if t := l.runs[id]; t != nil {
		t.ending = true
	}
	l.apply(&Command{Op: OpRunFinish, Finish: &Finish{ID: id, State: state, Error: msg, At: now}})
}

// release sends Cancel to every node of the run and stops tracking it.
func (l *Leader) release(t *tracker, state string) {
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
