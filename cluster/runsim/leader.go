package runsim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/transport"
)

// The simulated leader. The FSM (coord.FSM), the termination Detector
// (coord.Detector) and the planner (coord.Plan, coord.PlanReassign) are the
// real ones; the leader loop around them lives in cluster/coord/leader.go
// behind raft and NATS, so it is mirrored here function by function (each
// method names the one it mirrors). Commands are applied to the FSM at
// once, as raft does once they commit; the FSM outlives a leader change,
// the leader's own state (trackers, detectors, Cancel times) does not.
//
// To call the real code instead, leader.go's decisions would move into a
// pure type (state: runs, cancelSent, lastSync; inputs: report, fail,
// tick, member change; outputs: commands to apply and messages to send),
// with lead() only moving messages — as runproto did for the node.

type tracker struct {
	run      coord.Run
	asg      *transport.Assignment
	det      *coord.Detector
	lastSend time.Duration
}

type leader struct {
	w          *world
	epoch      int
	runs       map[string]*tracker
	cancelSent map[string]time.Duration
	lastSync   time.Duration
}

var epoch0 = time.Unix(1_700_000_000, 0)

func (w *world) clock() time.Time { return epoch0.Add(w.now) }

func (w *world) apply(c *coord.Command) error {
	err := w.fsm.Apply(c)
	if err != nil {
		w.logf("leader: command %s refused: %v", c.Op, err)
	}
	return err
}

// submit mirrors the leader's part of POST /v1/runs (server.go): Plan over
// the alive nodes, then RunSubmit.
func (w *world) submit(sr *simRun) error {
	var alive []coord.Node
	boots := map[string]string{}
	for _, n := range w.fsm.Nodes() {
		if n.State == proto.NodeAlive {
			alive = append(alive, n)
		}
		boots[n.ID] = n.Boot
	}
	assign, err := coord.Plan(sr.g, alive, coord.Seed(sr.id))
	if err != nil {
		return err
	}
	rb := map[string]string{}
	for _, n := range assign {
		rb[n] = boots[n]
	}
	sr.tables[1] = assign
	w.logf("submit %s: gen 1 %v", sr.id, assign)
	return w.apply(&coord.Command{Op: coord.OpRunSubmit, Run: &coord.Run{ID: sr.id, Flow: sr.flow, FlowName: "top",
		State: proto.RunRunning, Submitted: w.clock(), Gen: 1, Assignment: assign, Boots: rb}})
}

// startLeader mirrors lead(): a new term of leadership starts from the FSM.
func (w *world) startLeader() {
	w.leadEpoch++
	l := &leader{w: w, epoch: w.leadEpoch, runs: map[string]*tracker{}, cancelSent: map[string]time.Duration{}}
	w.lead = l
	w.leadConn = w.natsUp
	w.leadOut = nil
	w.logf("leader %d leads", l.epoch)
	l.syncMembers()
	l.reconcile()
	l.recoverRuns()
	l.ticker()
}

func (w *world) stopLeader(d time.Duration) {
	w.logf("FAULT: leader lost; next one in %v", d)
	w.lead = nil
	w.leadConn = false
	w.leadOut = nil // its reconnect buffer dies with it
	w.at(d, nil, w.startLeader)
}

func (l *leader) live() bool { return l.w.lead == l }

func (l *leader) ticker() {
	l.w.at(tickEvery, nil, func() {
		if !l.live() {
			return
		}
		now := l.w.now
		if now-l.lastSync >= syncEvery {
			l.syncMembers()
			l.recoverRuns()
		}
		l.reconcile()
		l.tick()
		l.ticker()
	})
}

// memberKick mirrors lead()'s memberKick case.
func (l *leader) memberKick() {
	l.syncMembers()
	l.recoverRuns()
}

func (l *leader) receive(m any) {
	switch m := m.(type) {
	case *transport.TermReport:
		l.report(m)
	case failMsg:
		if t := l.runs[m.run]; t != nil {
			l.finish(t, proto.RunFailed, m.err) // leader.fail: "task X: error"
		}
	}
}

// syncMembers mirrors leader.syncMembers (nodes only; suspicion is shown
// alive, as there).
func (l *leader) syncMembers() {
	w := l.w
	l.lastSync = w.now
	known := map[string]coord.Node{}
	for _, n := range w.fsm.Nodes() {
		known[n.ID] = n
	}
	for _, id := range w.nodeIDs {
		n := coord.Node{ID: id, Address: id, State: w.ring[id], CPUs: w.cpus[id], Boot: fmt.Sprint(w.ringBoot[id])}
		if k, ok := known[id]; ok && k.State == n.State && k.Boot == n.Boot {
			continue
		}
		n.Updated = w.clock()
		w.logf("leader: node %s %s (boot %s)", id, n.State, n.Boot)
		w.apply(&coord.Command{Op: coord.OpNodeUpsert, Node: &n})
	}
}

// reconcile mirrors leader.reconcile.
func (l *leader) reconcile() {
	runs := map[string]coord.Run{}
	for _, r := range l.w.fsm.Runs() {
		if r.State == proto.RunRunning {
			runs[r.ID] = r
		} else if _, ok := l.runs[r.ID]; ok {
			runs[r.ID] = r
		}
	}
	for _, id := range sortedKeys(runs) {
		r := runs[id]
		t := l.runs[id]
		switch {
		case r.State != proto.RunRunning:
			l.release(t, r.State)
		case t == nil || t.run.Gen != r.Gen:
			l.track(r)
		}
	}
}

// track mirrors leader.track.
func (l *leader) track(r coord.Run) {
	idx := map[string]uint32{}
	for i, n := range r.Nodes {
		idx[n] = uint32(i)
	}
	owner := make([]uint32, len(r.Assignment))
	for v, n := range r.Assignment {
		owner[v] = idx[n]
	}
	t := &tracker{run: r, det: coord.NewDetector(r.Gen, r.Nodes, probeTimeout),
		asg: &transport.Assignment{Run: r.ID, Gen: r.Gen, Nodes: r.Nodes, Owner: owner, Flow: r.Flow}}
	l.runs[r.ID] = t
	l.w.logf("leader: tracking %s gen %d over %v", r.ID, r.Gen, r.Nodes)
	l.sendAssignment(t)
}

// sendAssignment mirrors leader.sendAssignment.
func (l *leader) sendAssignment(t *tracker) {
	t.lastSend = l.w.now
	for _, n := range t.run.Nodes {
		if !t.det.Reported(n) {
			l.w.publish(nil, n, t.asg)
		}
	}
}

// probe mirrors leader.probe.
func (l *leader) probe(t *tracker, wave uint64) {
	l.w.logf("leader: probe wave %d", wave)
	for _, n := range t.run.Nodes {
		l.w.publish(nil, n, probeMsg{t.run.ID, wave})
	}
}

// report mirrors leader.report.
func (l *leader) report(r *transport.TermReport) {
	w := l.w
	w.logf("leader: %s", describe(r))
	t := l.runs[r.Run]
	if t == nil {
		l.reconcile()
		t = l.runs[r.Run]
	}
	if t == nil {
		key := r.Run + "/" + r.Node
		if last, ok := l.cancelSent[key]; !ok || w.now-last >= cancelEvery {
			l.cancelSent[key] = w.now
			reason := "finished"
			if run, ok := w.fsm.Run(r.Run); ok && run.State != proto.RunSucceeded {
				reason = run.State
			}
			w.publish(nil, r.Node, &transport.Cancel{Run: r.Run, Gen: r.Gen, Reason: reason})
		}
		return
	}
	if r.Gen < t.run.Gen && !slices.Contains(t.run.Nodes, r.Node) {
		key := r.Run + "/" + r.Node
		if last, ok := l.cancelSent[key]; !ok || w.now-last >= cancelEvery {
			l.cancelSent[key] = w.now
			w.logf("leader: releasing %s (gen %d, current %d)", r.Node, r.Gen, t.run.Gen)
			w.publish(nil, r.Node, &transport.Cancel{Run: r.Run, Gen: r.Gen, Reason: "reassigned"})
		}
		return
	}
	l.act(t, t.det.Report(w.clock(), *r))
}

// recoverRuns mirrors leader.recoverRuns (and reassign: PlanReassign with
// the seed the leader derives).
func (l *leader) recoverRuns() {
	w := l.w
	state, boot := map[string]string{}, map[string]string{}
	var alive []coord.Node
	for _, n := range w.fsm.Nodes() {
		state[n.ID], boot[n.ID] = n.State, n.Boot
		if n.State == proto.NodeAlive {
			alive = append(alive, n)
		}
	}
	for _, r := range w.fsm.Runs() {
		if r.State != proto.RunRunning {
			continue
		}
		var lost []string
		for _, n := range r.Nodes {
			st := state[n]
			restarted := r.Boots[n] != "" && boot[n] != r.Boots[n]
			if st == proto.NodeDead || st == proto.NodeLeft || restarted {
				lost = append(lost, n)
			}
		}
		if len(lost) == 0 {
			continue
		}
		var takers []coord.Node
		for _, n := range alive {
			if !slices.Contains(lost, n.ID) && !slices.Contains(r.Lost, n.ID) {
				takers = append(takers, n)
			}
		}
		sr := w.run(r.ID)
		assign, _, err := coord.PlanReassign(sr.g, r.Assignment, takers, coord.Seed(r.ID)+r.Gen)
		if err != nil {
			msg := fmt.Sprintf("node %s was lost: %v", strings.Join(lost, ", "), err)
			w.logf("leader: run cannot recover: %s", msg)
			if t := l.runs[r.ID]; t != nil {
				l.finish(t, proto.RunFailed, msg)
			} else {
				w.apply(&coord.Command{Op: coord.OpRunFinish, Finish: &coord.Finish{ID: r.ID, State: proto.RunFailed, Error: msg, At: w.clock()}})
				w.onFinish(r.ID)
			}
			continue
		}
		boots := map[string]string{}
		for _, n := range assign {
			boots[n] = boot[n]
		}
		if w.apply(&coord.Command{Op: coord.OpRunReassign, Reassign: &coord.Reassign{ID: r.ID, Gen: r.Gen + 1, Assignment: assign, Boots: boots}}) != nil {
			continue
		}
		sr.tables[r.Gen+1] = assign
		w.logf("leader: %s reassigned (lost %v) gen %d %v", r.ID, lost, r.Gen+1, assign)
		l.reconcile()
	}
}

// act mirrors leader.act.
func (l *leader) act(t *tracker, a coord.Action) {
	if a.Probe != 0 {
		l.probe(t, a.Probe)
	}
	if a.Terminated {
		l.finish(t, proto.RunSucceeded, "")
	}
}

// tick mirrors leader.tick (no run timeout in the simulation).
func (l *leader) tick() {
	w := l.w
	for _, id := range sortedKeys(l.runs) {
		t := l.runs[id]
		if w.now-t.lastSend >= resendEvery {
			l.sendAssignment(t)
		}
		l.act(t, t.det.Tick(w.clock()))
	}
}

// finish mirrors leader.finish.
func (l *leader) finish(t *tracker, state, msg string) {
	w := l.w
	w.logf("leader: finish %s %s %s", t.run.ID, state, msg)
	w.apply(&coord.Command{Op: coord.OpRunFinish, Finish: &coord.Finish{ID: t.run.ID, State: state, Error: msg, At: w.clock()}})
	if run, ok := w.fsm.Run(t.run.ID); ok {
		state = run.State
	}
	w.onFinish(t.run.ID)
	l.release(t, state)
}

// release mirrors leader.release.
func (l *leader) release(t *tracker, state string) {
	if t == nil {
		return
	}
	reason := state
	if state == proto.RunSucceeded {
		reason = "finished"
	}
	for _, n := range t.run.Nodes {
		l.w.publish(nil, n, &transport.Cancel{Run: t.run.ID, Gen: t.run.Gen, Reason: reason})
	}
	delete(l.runs, t.run.ID)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
