package node

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// recoverFlow has work on every node and a loop (body, cond) on the node the
// test loses: 25 rounds of 20 ms.
const recoverFlow = `
name: rec
tasks:
  - {name: init, func: hash}
  - {name: a, func: hash, succeed: [init]}
  - {name: b, func: hash, succeed: [init]}
  - {name: body, func: sleep, args: {ms: 20}, succeed: [a, b]}
  - {name: cond, kind: condition, func: loop, args: {n: 25}, succeed: [body], precede: [body, after]}
  - {name: after, func: hash}
  - {name: c, func: sleep, args: {ms: 300}, succeed: [init]}
  - {name: d, func: hash, succeed: [c]}
  - {name: sink, func: hash, succeed: [after, d, a, b]}
`

// recoverPlace: the loop and after on n2, the rest on n0 and n1.
var recoverPlace = map[string]uint32{"init": 0, "a": 0, "b": 1, "body": 2, "cond": 2, "after": 2, "c": 0, "d": 1, "sink": 0}

// runLosing runs file on c under gen 1, kills node lose once kill says so,
// moves its tasks to the others under gen 2 as the coordinator's leader does
// (coord.PlanReassign), and waits for termination by coord.Detector.
func (c *cluster) runLosing(ctx context.Context, file *spec.File, g *spec.Graph, owner []uint32, lose int, kill func(run string) bool) (runID string, asg2 *transport.Assignment) {
	t := c.t
	t.Helper()
	flow, err := spec.Marshal(file, spec.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	l := c.leader
	runID = "r" + time.Now().Format("20060102150405") + "-recov"
	asg := &transport.Assignment{Run: runID, Gen: 1, Nodes: c.ids, Owner: owner, Flow: flow}
	det := coord.NewDetector(1, asg.Nodes, time.Second)
	send := func() {
		for _, id := range asg.Nodes {
			if !det.Reported(id) {
				if err := l.conn.SendControl(id, asg); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	send()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	act := func(a coord.Action) bool {
		if a.Probe != 0 {
			env := &transport.Envelope{Kind: proto.KindProbe, Run: runID, Body: proto.ProbeBody(a.Probe)}
			for _, id := range asg.Nodes {
				if err := l.conn.SendControl(id, env); err != nil {
					t.Fatal(err)
				}
			}
		}
		return a.Terminated
	}
	lost := false
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("run %s did not end (gen %d)", runID, asg.Gen)
		case e := <-l.fail:
			if e.Run == runID {
				t.Fatalf("run failed on %s: %s", e.Node, e.Body)
			}
		case now := <-tick.C:
			if !lost && kill(runID) {
				lost = true
				victim := c.nodes[lose]
				c.killed[victim.id] = true
				victim.conn.NATS().Close() // abrupt: nothing buffered goes out
				_ = victim.Close()
				prev := make([]string, len(owner))
				for v, o := range owner {
					prev[v] = c.ids[o]
				}
				var alive []coord.Node
				for i, id := range c.ids {
					if i != lose {
						alive = append(alive, coord.Node{ID: id, State: proto.NodeAlive, CPUs: 2})
					}
				}
				next, _, err := coord.PlanReassign(g, prev, alive, 1)
				if err != nil {
					t.Fatal(err)
				}
				asg = reassignment(runID, 2, next, flow)
				det = coord.NewDetector(2, asg.Nodes, time.Second)
			}
			send()
			if act(det.Tick(now)) {
				return runID, asg
			}
		case r := <-l.term:
			if r.Run == runID && act(det.Report(time.Now(), r)) {
				return runID, asg
			}
		}
	}
}

func reassignment(run string, gen uint64, assign []string, flow []byte) *transport.Assignment {
	idx := map[string]uint32{}
	var nodes []string
	for _, n := range assign {
		if _, ok := idx[n]; !ok {
			idx[n] = 0
			nodes = append(nodes, n)
		}
	}
	for i := range nodes {
		for j := i + 1; j < len(nodes); j++ {
			if nodes[j] < nodes[i] {
				nodes[i], nodes[j] = nodes[j], nodes[i]
			}
		}
	}
	for i, n := range nodes {
		idx[n] = uint32(i)
	}
	owner := make([]uint32, len(assign))
	for v, n := range assign {
		owner[v] = idx[n]
	}
	return &transport.Assignment{Run: run, Gen: gen, Nodes: nodes, Owner: owner, Flow: flow}
}

func TestRecoveryFromALostNode(t *testing.T) {
	c := newCluster(t, nodeSpec{heartbeat: 100 * time.Millisecond}, nodeSpec{heartbeat: 100 * time.Millisecond}, nodeSpec{heartbeat: 100 * time.Millisecond})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, recoverFlow)

	// The reference: the whole flow on one node.
	ref := c.runFlow(ctx, file, make([]uint32, len(g.Vertices)), runOpts{})
	if ref.failed != nil {
		t.Fatalf("reference run failed: %+v", ref.failed)
	}

	own := make([]uint32, len(g.Vertices))
	for name, o := range recoverPlace {
		own[byName(g, name)] = o
	}
	body := byName(g, "body")
	lostAt := uint64(0)
	runID, asg2 := c.runLosing(ctx, file, g, own, 2, func(run string) bool {
		n := c.nodes[2]
		n.mu.Lock()
		r := n.runs[run]
		n.mu.Unlock()
		if r == nil {
			return false
		}
		lostAt = r.vs[body].acts.Load()
		return lostAt >= 5 // mid-loop
	})
	t.Logf("lost n2 after %d rounds of the loop; gen 2 owners %v of %v", lostAt, asg2.Owner, asg2.Nodes)
	if lostAt >= 25 {
		t.Fatalf("the loop had ended (%d rounds) before the loss", lostAt)
	}
	got := c.fold(ctx, runID)
	for _, name := range []string{"sink", "after", "d"} {
		if got[name] == nil || !bytes.Equal(got[name].output, ref.tasks[name].output) {
			t.Fatalf("%s: output differs from the one-node run\nwant:\n%s\ngot:\n%s", name, summary(ref.tasks), summary(got))
		}
	}
	// Tasks of the live nodes ran exactly as often as their activations:
	// nothing finished there ran again.
	for name, o := range recoverPlace {
		f := got[name]
		if o == 2 {
			if f.acts != ref.tasks[name].acts {
				t.Errorf("moved task %s: %d activations, the one-node run had %d", name, f.acts, ref.tasks[name].acts)
			}
			continue
		}
		if f.executions() != f.acts || f.acts != ref.tasks[name].acts || f.dones != int(f.acts) {
			t.Errorf("live task %s: executions %d, activations %d, done events %d (one-node run: %d activations)", name, f.executions(), f.acts, f.dones, ref.tasks[name].acts)
		}
	}
	var replayed uint64
	for _, n := range c.nodes[:2] {
		replayed += n.Stats().SignalsReplayed
	}
	if replayed == 0 {
		t.Fatal("no Signal was read back from the record")
	}

	// Fencing: a gen-1 Signal from n2, which no longer owns its source, is
	// refused and counted; sink does not run again.
	sinkNode := c.nodes[own[byName(g, "sink")]]
	fenced0 := sinkNode.Stats().SignalsFenced
	ghost, err := c.leader.conn.NewBatcher("n2", transport.WithLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	sig := transport.Signal{Run: runID, Gen: 1, Src: uint32(byName(g, "after")), Dst: uint32(byName(g, "sink")), Act: 2, Kind: transport.SignalEdge, Output: []byte("stale")}
	if err := ghost.Add(ctx, sinkNode.id, &sig); err != nil {
		t.Fatal(err)
	}
	if err := ghost.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the stale Signal fenced", func() bool { return sinkNode.Stats().SignalsFenced == fenced0+1 })

	// Release gen 2 and check nothing changed.
	cancel := &transport.Cancel{Run: runID, Gen: 2, Reason: "finished"}
	for _, id := range asg2.Nodes {
		if err := c.leader.conn.SendControl(id, cancel); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the run released", func() bool {
		for _, n := range c.nodes[:2] {
			if n.Stats().RunsActive != 0 {
				return false
			}
		}
		return true
	})
	again := c.fold(ctx, runID)
	if again["sink"].executions() != got["sink"].executions() {
		t.Fatalf("sink ran again after the stale Signal: %v", again["sink"])
	}
}
