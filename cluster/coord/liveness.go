package coord

import (
	"sort"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
)

// Liveness decides when a node is dead, so that a node that is only slow is
// never taken for dead ("slow is not dead").
//
// Gossip (memberlist) alone cannot tell a crashed process from one whose CPU
// is saturated: both miss their probes. Acting on gossip alone moved the
// tasks of busy, live nodes to other nodes, which then ran them a second time
// while the first copy was still running. So a node that gossip declares dead
// is only a candidate: the leader corroborates over NATS, which every node
// keeps a connection to, before it writes the death into the FSM and moves the
// node's tasks:
//
//   - the leader pings the candidate on its ping subject (proto.PingSubject)
//     every PingEvery; a node answers from its NATS connection's own
//     goroutine, whatever its executor is doing;
//   - an answer, or any TermReport from the node, is a sign of life: the
//     node stays alive whatever gossip says (memberlist lets the node refute
//     the suspicion when it gets the CPU);
//   - an answer from a process of another boot (a restart under the same
//     id, before gossip shows the new incarnation) confirms the death of
//     the old one at once: it is gone, with its part of every run;
//   - "no responders" means the NATS server holds no subscription of the
//     node: its connection is closed, and a killed process's connection is
//     closed by its kernel at once. Two such answers in a row (GoneAfter, one
//     PingEvery apart) confirm the death, so a crash is detected a quarter of
//     a second after gossip detects it;
//   - a candidate unheard for Silence (no answer, no report) since the later
//     of the last sign of life and gossip's verdict is dead: a frozen
//     process (SIGSTOP, docker pause) or one cut off from the network.
//
// A node that left the ring gracefully (Drain) is dead to runs at once. With
// InProcess (the all-in-one dev cluster, whose nodes share the coordinator's
// process) gossip's deaths are ignored: in-process nodes stop with the
// process.
//
// Gossip is no proof of who a member is: every holder of the gossip key
// (every node) can announce a member under any name. So a node is alive
// (placeable) only once it has answered a ping over NATS as itself, with the
// boot id its gossip metadata advertises: its NATS credential lets only the
// node subscribe to its own ping subject (cluster/natsauth). Until then it is
// suspect and pinged every PingEvery; "no responders" or an answer of another
// boot leaves it suspect; a new boot id in gossip makes it unverified again.
// In-process nodes are verified the same way (they answer pings too).
//
// Liveness is pure: gossip states, signs of life, answers and time come in;
// the nodes to ping and the verdicts go out. It is not safe for concurrent
// use.
type Liveness struct {
	// Silence is how long a candidate must stay unheard to be dead (default
	// DefaultSilence).
	Silence time.Duration
	// PingEvery is the interval between pings of a candidate (default
	// DefaultPingEvery).
	PingEvery time.Duration
	// InProcess ignores gossip's deaths (not its leaves).
	InProcess bool
	// NoNATS: there is no NATS to ping over (a coordinator without NATS,
	// which commits runs but executes nothing): members are alive as gossip
	// shows them, unverified.
	NoNATS bool

	nodes map[string]*liveNode
}

// Defaults of Liveness.
const (
	DefaultSilence   = 4 * time.Second
	DefaultPingEvery = 250 * time.Millisecond
)

type liveNode struct {
	gossip    string    // latest gossip state
	deadSince time.Time // when gossip last turned to dead (zero unless dead)
	heard     time.Time // the latest sign of life over NATS
	pinged    time.Time // the latest ping sent
	noResp    int       // consecutive pings that found no responder since gossip said dead
	confirmed bool      // State said dead in this episode of gossip's verdict: it stays dead
	replaced  bool      // a process of another boot answered under the id: the old one is gone
	boot      string    // the process's boot id (gossip metadata)
	verified  bool      // the process of boot answered a ping: it is who gossip says
}

func (l *Liveness) node(id string) *liveNode {
	if l.nodes == nil {
		l.nodes = map[string]*liveNode{}
	}
	n := l.nodes[id]
	if n == nil {
		n = &liveNode{gossip: proto.NodeAlive}
		l.nodes[id] = n
	}
	return n
}

func (l *Liveness) silence() time.Duration {
	if l.Silence > 0 {
		return l.Silence
	}
	return DefaultSilence
}

func (l *Liveness) pingEvery() time.Duration {
	if l.PingEvery > 0 {
		return l.PingEvery
	}
	return DefaultPingEvery
}

// Gossip feeds what memberlist says of node at now: its state and its
// process's boot id. A new boot id is a new process: what the old one
// learned of NATS no longer counts, and it is unverified (pinged at once).
func (l *Liveness) Gossip(now time.Time, id, state, boot string) {
	n := l.node(id)
	if boot != n.boot {
		n.boot, n.noResp, n.heard, n.replaced, n.verified, n.pinged = boot, 0, time.Time{}, false, false, time.Time{}
	}
	switch {
	case state != proto.NodeDead:
		n.deadSince, n.noResp, n.confirmed, n.replaced = time.Time{}, 0, false, false
	case n.gossip != proto.NodeDead: // a new verdict of death
		n.deadSince, n.noResp, n.confirmed, n.replaced = now, 0, false, false
	}
	n.gossip = state
}

// Heard records a sign of life from node over NATS (a ping's answer, a
// TermReport) at now. It reports whether that refutes gossip's verdict: the
// first sign of life from a candidate since gossip declared it dead.
func (l *Liveness) Heard(now time.Time, id string) (refuted bool) {
	n := l.node(id)
	refuted = l.Candidate(now, id) && !n.heard.After(n.deadSince)
	n.heard = now
	n.noResp = 0
	return refuted
}

// Answered records a ping's answer from node's process of boot id boot
// ("": an answer that does not say). An answer from another process than
// the one gossip declared dead (a restart under the same id, before gossip
// shows the new incarnation) is no sign of life of the old one: it confirms
// that the old process is gone, with its part of every run. An answer of the
// boot gossip advertises verifies the node (Verified).
func (l *Liveness) Answered(now time.Time, id, boot string) (refuted bool) {
	n := l.node(id)
	if boot != "" && n.boot != "" && boot != n.boot {
		if n.gossip == proto.NodeDead {
			n.replaced = true
		}
		return false
	}
	if boot == n.boot {
		n.verified = true
	}
	return l.Heard(now, id)
}

// Verified reports whether node's process (the boot gossip advertises) has
// answered a ping as itself.
func (l *Liveness) Verified(id string) bool {
	n := l.nodes[id]
	return n != nil && n.verified
}

// Vouch marks node verified if gossip advertises boot: the replicated state
// records it alive with that boot, so a leader verified it (a new leader
// does not take its nodes away from placement while it pings them again).
func (l *Liveness) Vouch(id, boot string) {
	if n := l.nodes[id]; n != nil && n.boot == boot {
		n.verified = true
	}
}

// NoResponder records that a ping of node found no subscriber: its NATS
// connection is gone. Two in a row (GoneAfter) confirm the death: one could
// be a live node's reconnect to a restarted NATS server.
func (l *Liveness) NoResponder(now time.Time, id string) {
	n := l.node(id)
	if n.gossip == proto.NodeDead {
		n.noResp++
	}
}

// GoneAfter is how many pings in a row must find no responder to confirm a
// death.
const GoneAfter = 2

// State is the state to record for node at now: proto.NodeAlive unless it is
// confirmed dead (proto.NodeDead), left the ring (proto.NodeLeft) or has not
// answered a ping as itself yet (proto.NodeSuspect: not placeable); gossip's
// suspicion is never followed (it flaps on a busy machine). A death once
// confirmed stands until gossip changes its mind (the node refutes it, or a
// new process joins under the id): its tasks have moved by then, and a late
// sign of life from the old process does not bring them back.
func (l *Liveness) State(now time.Time, id string) string {
	n := l.node(id)
	st := l.state(now, n)
	if st == proto.NodeDead && n.gossip == proto.NodeDead {
		n.confirmed = true
	}
	return st
}

func (l *Liveness) state(now time.Time, n *liveNode) string {
	switch n.gossip {
	case proto.NodeLeft:
		return proto.NodeLeft
	case proto.NodeDead:
		if l.InProcess {
			break
		}
		if n.confirmed || n.replaced || n.noResp >= GoneAfter {
			return proto.NodeDead
		}
		if now.Sub(n.quietSince()) >= l.silence() {
			return proto.NodeDead
		}
	}
	if !n.verified && !l.NoNATS {
		return proto.NodeSuspect
	}
	return proto.NodeAlive
}

// quietSince is when a candidate's silence began: the later of gossip's
// verdict and the last sign of life.
func (n *liveNode) quietSince() time.Time {
	if n.heard.After(n.deadSince) {
		return n.heard
	}
	return n.deadSince
}

// Candidate reports whether gossip says node is dead but that is not
// confirmed yet: the node is being pinged.
func (l *Liveness) Candidate(now time.Time, id string) bool {
	n := l.nodes[id]
	return n != nil && n.gossip == proto.NodeDead && !l.InProcess && l.state(now, n) != proto.NodeDead
}

// pinging reports whether node is pinged: a candidate, or a member not yet
// verified (neither left nor dead).
func (l *Liveness) pinging(now time.Time, id string, n *liveNode) bool {
	if l.Candidate(now, id) {
		return true
	}
	return !n.verified && !l.NoNATS && n.gossip != proto.NodeLeft && l.state(now, n) != proto.NodeDead
}

// Pings returns the nodes to ping at now (candidates and unverified members,
// sorted), and records the pings as sent.
func (l *Liveness) Pings(now time.Time) []string {
	var out []string
	for id, n := range l.nodes {
		if l.pinging(now, id, n) && now.Sub(n.pinged) >= l.pingEvery() {
			n.pinged = now
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Next is the earliest time after now at which a candidate's verdict or a
// ping is due (zero when no node is pinged): the leader wakes then.
func (l *Liveness) Next(now time.Time) time.Time {
	var next time.Time
	for id, n := range l.nodes {
		if !l.pinging(now, id, n) {
			continue
		}
		ping := n.pinged.Add(l.pingEvery())
		if n.pinged.IsZero() {
			ping = now
		}
		due := []time.Time{ping}
		if l.Candidate(now, id) {
			due = append(due, n.quietSince().Add(l.silence()))
		}
		for _, t := range due {
			if next.IsZero() || t.Before(next) {
				next = t
			}
		}
	}
	return next
}
