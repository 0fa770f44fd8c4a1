package node

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/testsupport"
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

// lossStep loses a node once when says so (polled every 100 ms): node, or
// when node < 0 the owner of vertex of in the generation in force.
type lossStep struct {
	node int
	of   int
	when func(run string, node int) bool
}

// runLosing runs file on c under gen 1 and, for each step in turn, kills its
// node once when says so and moves the lost node's tasks to the live nodes
// under the next generation as the coordinator's leader does
// (coord.PlanReassign); it waits for termination by coord.Detector. A
// failure fails the test (runLosingOrFail returns it).
func (c *cluster) runLosing(ctx context.Context, file *spec.File, g *spec.Graph, owner []uint32, steps ...lossStep) (runID string, last *transport.Assignment) {
	c.t.Helper()
	runID, last, fail := c.runLosingOrFail(ctx, file, g, owner, steps...)
	if fail != nil {
		c.t.Fatalf("run failed on %s: %s", fail.Node, fail.Body)
	}
	return runID, last
}

// runLosingOrFail is runLosing that ends at the run's first fail envelope
// and returns it (fail is nil when the run terminated).
func (c *cluster) runLosingOrFail(ctx context.Context, file *spec.File, g *spec.Graph, owner []uint32, steps ...lossStep) (runID string, last *transport.Assignment, fail *transport.Envelope) {
	t := c.t
	t.Helper()
	flow, err := spec.Marshal(file, spec.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	l := c.leader
	runID = c.newRunID(file)
	first := make([]string, len(owner))
	for v, o := range owner {
		first[v] = c.ids[o]
	}
	asg := reassignment(runID, 1, first, flow) // Nodes: only those with tasks
	det := coord.NewDetector(1, asg.Nodes, time.Second)
	send := func() {
		for _, id := range asg.Nodes {
			if !det.Reported(id) {
				if err := l.conn.SendControl(id, planned(t, flow, asg, id)); err != nil {
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
	dead := map[int]bool{}
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("run %s did not end (gen %d)", runID, asg.Gen)
		case e := <-l.fail:
			if e.Run == runID {
				return runID, asg, &e
			}
		case now := <-tick.C:
			lose := -1
			if len(steps) > 0 {
				lose = steps[0].node
				if lose < 0 {
					lose = indexOf(c.ids, asg.NodeOf(uint32(steps[0].of)))
				}
			}
			if lose >= 0 && steps[0].when(runID, lose) {
				steps = steps[1:]
				dead[lose] = true
				victim := c.nodes[lose]
				c.killed[victim.id] = true
				victim.conn.NATS().Close() // abrupt: nothing buffered goes out
				_ = victim.Close()
				prev := make([]string, len(asg.Owner))
				for v := range asg.Owner {
					prev[v] = asg.NodeOf(uint32(v))
				}
				var alive []coord.Node
				for i, id := range c.ids {
					if !dead[i] {
						alive = append(alive, coord.Node{ID: id, State: proto.NodeAlive, CPUs: 2})
					}
				}
				next, _, err := coord.PlanReassign(g, prev, alive, asg.Gen)
				if err != nil {
					t.Fatal(err)
				}
				asg = reassignment(runID, asg.Gen+1, next, flow)
				det = coord.NewDetector(asg.Gen, asg.Nodes, time.Second)
			}
			send()
			if act(det.Tick(now)) && len(steps) == 0 {
				return runID, asg, nil
			}
		case r := <-l.term:
			if r.Run == runID && act(det.Report(time.Now(), r)) {
				if len(steps) > 0 {
					t.Fatalf("run %s terminated before all its losses", runID)
				}
				return runID, asg, nil
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
	return &transport.Assignment{Run: run, Gen: gen, Nodes: nodes, Owner: owner}
}

func TestRecoveryFromALostNode(t *testing.T) {
	t.Run("to nodes of the run", func(t *testing.T) { testRecovery(t, recoverPlace) })
	// n1 holds nothing under gen 1: it joins the run under gen 2 with only
	// the lost node's tasks.
	t.Run("to a node new to the run", func(t *testing.T) {
		place := map[string]uint32{}
		for k, v := range recoverPlace {
			if v == 1 {
				v = 0
			}
			place[k] = v
		}
		testRecovery(t, place)
	})
}

func testRecovery(t *testing.T, recoverPlace map[string]uint32) {
	c := newCluster(t, nodeSpec{heartbeat: 100 * time.Millisecond}, nodeSpec{heartbeat: 100 * time.Millisecond}, nodeSpec{heartbeat: 100 * time.Millisecond})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, recoverFlow)

	// The reference: the whole flow on one node.
	ref := c.runFlow(ctx, file, make([]uint32, len(g.Vertices)), runOpts{})
	if ref.failed != nil {
		t.Fatalf("reference run failed: %+v", ref.failed)
	}

	// Every batch that crosses, to publish them all again at the end.
	var mu sync.Mutex
	var batches []*nats.Msg
	capture, err := c.leader.conn.Subscribe("hf.run.>", func(m *nats.Msg) {
		mu.Lock()
		batches = append(batches, m)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer capture.Close(ctx)
	if err := c.leader.conn.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	own := make([]uint32, len(g.Vertices))
	for name, o := range recoverPlace {
		own[byName(g, name)] = o
	}
	body := byName(g, "body")
	lostAt := uint64(0)
	runID, asg2 := c.runLosing(ctx, file, g, own, lossStep{node: 2, when: func(run string, i int) bool {
		lostAt = c.acts(i, run, body)
		return lostAt >= 5 // mid-loop
	}})
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
		replayed += n.Stats().SignalsTakenOver
	}
	if replayed == 0 {
		t.Fatal("no Signal was read back from the record")
	}

	// Every batch of the run published again (as a node reading its record
	// back after a NATS outage sees them, re-sent Signals of the moved tasks
	// included) changes no counter the leader balances.
	counted := func() (out [2]map[string]uint64) {
		for i, n := range c.nodes[:2] {
			n.mu.Lock()
			_, _, out[i] = n.runs[runID].sm.Counts()
			n.mu.Unlock()
		}
		return out
	}
	before := counted()
	mu.Lock()
	replay := batches
	mu.Unlock()
	dup0 := c.nodes[0].Stats().SignalsDuplicate + c.nodes[1].Stats().SignalsDuplicate
	var republished uint64
	for _, m := range replay {
		b, err := transport.DecodeBatch(m.Data, transport.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Signals) == 0 || b.Signals[0].Run != runID || strings.HasSuffix(m.Subject, ".n2") ||
			strings.Contains(m.Subject, ".node."+transport.PicksNode+".") { // picks and marks reach no node
			continue
		}
		republished += uint64(len(b.Signals))
		if err := c.leader.conn.Publish(m.Subject, m.Data); err != nil {
			t.Fatal(err)
		}
	}
	testsupport.Eventually(t, 10*time.Second, "the republished batches seen", func() bool {
		d := c.nodes[0].Stats().SignalsDuplicate + c.nodes[1].Stats().SignalsDuplicate
		f := c.nodes[0].Stats().SignalsFenced + c.nodes[1].Stats().SignalsFenced
		return d+f >= dup0+republished
	})
	if after := counted(); !reflect.DeepEqual(before, after) {
		t.Fatalf("republished batches changed the counts: %v → %v", before, after)
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
	testsupport.Eventually(t, 10*time.Second, "the stale Signal fenced", func() bool { return sinkNode.Stats().SignalsFenced == fenced0+1 })

	// Release gen 2 and check nothing changed.
	cancel := &transport.Cancel{Run: runID, Gen: 2, Reason: "finished"}
	for _, id := range asg2.Nodes {
		if err := c.leader.conn.SendControl(id, cancel); err != nil {
			t.Fatal(err)
		}
	}
	testsupport.Eventually(t, 10*time.Second, "the run released", func() bool {
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

// acts is how many activations vertex v has had on node i in run (0 when
// the node does not hold the run).
func (c *cluster) acts(i int, run string, v int) uint64 {
	n := c.nodes[i]
	n.mu.Lock()
	r := n.runs[run]
	n.mu.Unlock()
	if r == nil {
		return 0
	}
	return r.vs[v].acts.Load()
}

// A second loss: the node that took the loop over dies too, mid-loop; the
// last node rebuilds it from the record of both lost nodes.
func TestRecoveryFromTwoLosses(t *testing.T) {
	hb := nodeSpec{heartbeat: 100 * time.Millisecond}
	c := newCluster(t, hb, hb, hb)
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, strings.Replace(recoverFlow, "{n: 25}", "{n: 40}", 1))
	ref := c.runFlow(ctx, file, make([]uint32, len(g.Vertices)), runOpts{})
	if ref.failed != nil {
		t.Fatalf("reference run failed: %+v", ref.failed)
	}
	own := make([]uint32, len(g.Vertices))
	for name, o := range recoverPlace {
		own[byName(g, name)] = o
	}
	body := byName(g, "body")
	var rounds []uint64
	midLoop := func(run string, i int) bool {
		if n := c.acts(i, run, body); n >= 5 {
			rounds = append(rounds, n)
			return true
		}
		return false
	}
	runID, last := c.runLosing(ctx, file, g, own,
		lossStep{node: 2, when: midLoop},
		lossStep{node: -1, of: body, when: midLoop}, // the loop's new owner
	)
	t.Logf("losses after %v rounds; gen %d on %v", rounds, last.Gen, last.Nodes)
	if last.Gen != 3 || len(last.Nodes) != 1 {
		t.Fatalf("after two losses: gen %d on %v", last.Gen, last.Nodes)
	}
	got := c.fold(ctx, runID)
	for _, name := range []string{"sink", "after", "d"} {
		if got[name] == nil || !bytes.Equal(got[name].output, ref.tasks[name].output) {
			t.Fatalf("%s: output differs from the one-node run\nwant:\n%s\ngot:\n%s", name, summary(ref.tasks), summary(got))
		}
	}
	survivor := last.Nodes[0]
	for name, f := range got {
		if f.acts != ref.tasks[name].acts {
			t.Errorf("%s: %d activations, the one-node run had %d", name, f.acts, ref.tasks[name].acts)
		}
		if recoverPlace[name] == uint32(indexOf(c.ids, survivor)) && (f.executions() != f.acts || f.dones != int(f.acts)) {
			t.Errorf("%s ran on the survivor from the start, yet executions %d, done events %d, activations %d", name, f.executions(), f.dones, f.acts)
		}
	}
	cancel := &transport.Cancel{Run: runID, Gen: last.Gen, Reason: "finished"}
	if err := c.leader.conn.SendControl(survivor, cancel); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "the run released", func() bool { return c.nodes[indexOf(c.ids, survivor)].Stats().RunsActive == 0 })
}

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

// orderFlow is a loop whose head stays on a live node while its body and
// condition are lost mid-loop: their new owner gets the head's Signals of
// several rounds at once from the record. "inloop" and "inloopcond" fail the
// run when an activation runs on another activation's input; the body's odd
// activations take longer, so two of them run at once finish out of order.
const orderFlow = `
name: order
tasks:
  - {name: init, func: inloop}
  - {name: h, func: inloop, succeed: [init]}
  - {name: body, func: inloop, args: {of: h, ms: 5, odd: 25}, succeed: [h]}
  - {name: cond, kind: condition, func: inloopcond, args: {of: body, n: 16}, succeed: [body], precede: [h, after]}
  - {name: after, func: inloop}
`

// inloopRegistry has "inloop": its output is its activation number; with
// args {of: P} it fails unless P's input is P's output of the same
// activation (args ms, odd: it sleeps ms, and odd more on an odd
// activation, first). "inloopcond" is a condition that checks the same and
// picks 0 on its first n activations, then 1.
func inloopRegistry() *funcs.Registry {
	check := func(c *funcs.Call) error {
		if of, ok := c.Args["of"].(string); ok {
			if got, want := string(c.Inputs[of]), fmt.Sprint(c.Activation); got != want {
				return fmt.Errorf("activation %d of %s ran on activation %q of %s", c.Activation, c.Path, got, of)
			}
		}
		return nil
	}
	reg := funcs.Default()
	reg.MustRegister(funcs.Entry{Name: "inloop", CPU: func(ctx context.Context, c *funcs.Call) (funcs.Result, error) {
		ms, _ := c.Args["ms"].(int64)
		if odd, _ := c.Args["odd"].(int64); c.Activation%2 == 1 {
			ms += odd
		}
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond): // the task's work
		case <-ctx.Done():
			return funcs.Result{}, ctx.Err()
		}
		if err := check(c); err != nil {
			return funcs.Result{}, err
		}
		return funcs.Result{Output: []byte(fmt.Sprint(c.Activation))}, nil
	}})
	reg.MustRegister(funcs.Entry{Name: "inloopcond", Kind: spec.KindCondition, CPU: func(ctx context.Context, c *funcs.Call) (funcs.Result, error) {
		if err := check(c); err != nil {
			return funcs.Result{}, err
		}
		n, _ := c.Args["n"].(int64)
		if c.Activation <= uint64(n) {
			return funcs.Result{Choice: 0}, nil
		}
		return funcs.Result{Choice: 1}, nil
	}})
	return reg
}

// TestRecoveryKeepsLoopOrder is the loop-order bug of issue 12 on real
// nodes (runsim's TestLoopOrder, runproto's testdata/loop-order.txt): the
// moved body numbers its activations by the activation each Signal says it
// starts and runs them in order, so activation k runs on h's activation k.
func TestRecoveryKeepsLoopOrder(t *testing.T) {
	reg := inloopRegistry()
	hb := 100 * time.Millisecond
	c := newCluster(t, nodeSpec{heartbeat: hb, reg: reg, cpus: 4}, nodeSpec{heartbeat: hb, reg: reg, cpus: 4}, nodeSpec{heartbeat: hb, reg: reg, cpus: 4})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlowWith(t, "order.yaml", orderFlow, reg)
	place := map[string]uint32{"init": 0, "h": 0, "body": 2, "cond": 2, "after": 1}
	own := make([]uint32, len(g.Vertices))
	for name, o := range place {
		own[byName(g, name)] = o
	}
	body := byName(g, "body")
	lostAt := uint64(0)
	runID, asg := c.runLosing(ctx, file, g, own, lossStep{node: 2, when: func(run string, i int) bool {
		lostAt = c.acts(i, run, body)
		return lostAt >= 4
	}})
	t.Logf("lost n2 after %d rounds; gen %d owners %v of %v", lostAt, asg.Gen, asg.Owner, asg.Nodes)
	if lostAt >= 16 {
		t.Fatalf("the loop had ended (%d rounds) before the loss", lostAt)
	}
	got := c.fold(ctx, runID)
	if f := got["body"]; f == nil || f.acts != 17 {
		t.Fatalf("body: %+v, want 17 activations", f)
	}
	if f := got["after"]; f == nil || f.state != transport.TaskDone {
		t.Fatalf("after: %+v, want done", f)
	}
}

// replayFlow: a condition on the node the test loses picks between two
// tasks on live nodes; a slow task keeps the run going past the loss.
const replayFlow = `
name: replay
tasks:
  - {name: init, func: hash}
  - {name: d, kind: condition, func: nodepick, succeed: [init], precede: [e, f]}
  - {name: e, func: hash}
  - {name: f, func: hash}
  - {name: slow, func: sleep, args: {ms: 400}, succeed: [init]}
`

// TestRecoveryReplaysConditions: a condition moved off a lost node takes the
// branch the record holds for its activation, not a fresh draw ("nodepick"
// picks e on n2 and f anywhere else, as a coin without a seed might).
// nodepickCluster starts three nodes whose "nodepick" condition picks its
// first successor on n2 and its second anywhere else (as a coin without a
// seed might), and parses flow, placed by task name.
func nodepickCluster(t *testing.T, flow string, place map[string]uint32) (*cluster, *spec.File, *spec.Graph, []uint32) {
	t.Helper()
	hb := 100 * time.Millisecond
	regs := make([]*funcs.Registry, 3)
	for i := range regs {
		pick := 1
		if i == 2 {
			pick = 0
		}
		regs[i] = funcs.Default()
		regs[i].MustRegister(funcs.Entry{Name: "nodepick", Kind: spec.KindCondition, CPU: func(context.Context, *funcs.Call) (funcs.Result, error) {
			return funcs.Result{Choice: pick}, nil
		}})
	}
	c := newCluster(t, nodeSpec{heartbeat: hb, reg: regs[0]}, nodeSpec{heartbeat: hb, reg: regs[1]}, nodeSpec{heartbeat: hb, reg: regs[2]})
	file, err := spec.Parse("nodepick.yaml", []byte(flow))
	if err != nil {
		t.Fatal(err)
	}
	if err := file.Validate(spec.Options{Funcs: regs[0]}); err != nil {
		t.Fatal(err)
	}
	g, err := file.Expand()
	if err != nil {
		t.Fatal(err)
	}
	own := make([]uint32, len(g.Vertices))
	for name, o := range place {
		own[byName(g, name)] = o
	}
	return c, file, g, own
}

func TestRecoveryReplaysConditions(t *testing.T) {
	c, file, g, own := nodepickCluster(t, replayFlow, map[string]uint32{"init": 0, "d": 2, "e": 0, "f": 1, "slow": 2})
	ctx := testCtx(t, 60*time.Second)
	d, e := byName(g, "d"), byName(g, "e")
	runID, asg := c.runLosing(ctx, file, g, own, lossStep{node: 2, when: func(run string, i int) bool {
		return c.acts(i, run, d) >= 1 && c.acts(0, run, e) >= 1 // d picked e, and e has it
	}})
	t.Logf("gen %d owners %v of %v", asg.Gen, asg.Owner, asg.Nodes)
	if o := asg.NodeOf(uint32(d)); o == "n2" {
		t.Fatalf("d did not move: %v", asg)
	}
	got := c.fold(ctx, runID)
	if f := got["f"]; f != nil {
		t.Fatalf("f ran (%+v): the moved condition took another branch than the record's", f)
	}
	if f := got["e"]; f == nil || f.acts != 1 || f.state != transport.TaskDone {
		t.Fatalf("e: %+v, want one activation done", f)
	}
	// d ran again on its new owner (what it ran on n2 counts only if n2's
	// report left before the kill).
	if f, to := got["d"], asg.NodeOf(uint32(byName(g, "d"))); f == nil || f.execs[to] < 1 || f.node != to {
		t.Fatalf("d: %+v, want it run again on %s after the loss", f, to)
	}
}

// localPickFlow: a condition picks between two tasks of its own node, each
// the head of a branch whose next task is on another node.
const localPickFlow = `
name: localpick
tasks:
  - {name: init, func: hash}
  - {name: d, kind: condition, func: nodepick, succeed: [init], precede: [e, f]}
  - {name: e, func: hash}
  - {name: f, func: hash}
  - {name: g, func: hash, succeed: [e]}
  - {name: h, func: hash, succeed: [f]}
  - {name: slow, func: sleep, args: {ms: 400}, succeed: [init]}
`

// TestRecoveryReplaysALocalPick: a condition whose pick started a branch on
// its own node (no Choice Signal crossed) is replayed too after the node is
// lost: the node recorded the pick before the branch ran (Batcher.AddPick),
// so the new owner takes e again rather than a fresh draw of f, and the
// run never takes both branches (g and h both run).
func TestRecoveryReplaysALocalPick(t *testing.T) {
	c, file, g, own := nodepickCluster(t, localPickFlow, map[string]uint32{"init": 0, "d": 2, "e": 2, "f": 2, "g": 0, "h": 1, "slow": 2})
	ctx := testCtx(t, 60*time.Second)
	gv := byName(g, "g")
	runID, asg := c.runLosing(ctx, file, g, own, lossStep{node: 2, when: func(run string, i int) bool {
		return c.acts(0, run, gv) >= 1 // e's output reached g: the branch left n2
	}})
	t.Logf("gen %d owners %v of %v", asg.Gen, asg.Owner, asg.Nodes)
	if o := asg.NodeOf(uint32(byName(g, "d"))); o == "n2" {
		t.Fatalf("d did not move: %v", asg)
	}
	got := c.fold(ctx, runID)
	for _, name := range []string{"f", "h"} {
		if f := got[name]; f != nil {
			t.Fatalf("%s ran (%+v): the moved condition took the other branch too\n%s", name, f, summary(got))
		}
	}
	if f := got["g"]; f == nil || f.acts != 1 || f.state != transport.TaskDone {
		t.Fatalf("g: %+v, want one activation done", f)
	}
	// d ran again on its new owner (what it ran on n2 counts only if n2's
	// report left before the kill).
	if f, to := got["d"], asg.NodeOf(uint32(byName(g, "d"))); f == nil || f.execs[to] < 1 || f.node != to {
		t.Fatalf("d: %+v, want it run again on %s after the loss", f, to)
	}
	var picks uint64
	for _, n := range c.nodes {
		picks += n.Stats().PicksRecorded
	}
	if picks == 0 {
		t.Fatal("no pick recorded")
	}
}

// TestPanicInALaterPartFailsTheRun: a panic in the node's own code
// (staticTestHook) for a task that moved to a node in a later part (after,
// taken over from the lost n2 by a node already running a first part) fails
// the run naming the task and the panic, as in the first part
// (TestPanicInNodeCodeFailsTheRun): localexec ends the later part's open
// run it cancels, and the part's watcher fails the run (run.openEnded).
// Before, the part stayed open and idle, and the run passed for terminated.
func TestPanicInALaterPartFailsTheRun(t *testing.T) {
	hb := nodeSpec{heartbeat: 100 * time.Millisecond}
	c := newCluster(t, hb, hb, hb)
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, recoverFlow)
	own := make([]uint32, len(g.Vertices))
	for name, o := range recoverPlace {
		own[byName(g, name)] = o
	}
	body, victim := byName(g, "body"), byName(g, "after")
	var panicked atomic.Bool
	hook := func(node string, v int) {
		// not on n2: with the leader's view of the loop behind, n2 may
		// run after before its loss, and the panic must be in a later part
		if v == victim && node != "n2" && panicked.CompareAndSwap(false, true) {
			panic("node code: injected in a later part")
		}
	}
	staticTestHook.Store(&hook)
	t.Cleanup(func() { staticTestHook.Store(nil) })
	lostAt := uint64(0)
	_, asg, fail := c.runLosingOrFail(ctx, file, g, own, lossStep{node: 2, when: func(run string, i int) bool {
		lostAt = c.acts(i, run, body)
		return lostAt >= 5 // mid-loop: after has not run on n2
	}})
	staticTestHook.Store(nil)
	t.Logf("lost n2 after %d rounds of the loop; gen %d owners %v of %v", lostAt, asg.Gen, asg.Owner, asg.Nodes)
	if lostAt >= 25 {
		t.Fatalf("the loop had ended (%d rounds) before the loss", lostAt)
	}
	if asg.Gen != 2 {
		t.Fatalf("the run ended under gen %d, want 2 (n2 lost)", asg.Gen)
	}
	to := asg.NodeOf(uint32(victim))
	if to == "n2" || !slices.Contains(own, uint32(indexOf(c.ids, to))) {
		t.Fatalf("after moved to %s, not to a node with a first part", to)
	}
	if !panicked.Load() {
		t.Fatal("the hook never ran for after")
	}
	if fail == nil {
		t.Fatal("the run did not fail")
	}
	var fb proto.FailBody
	if err := jsonUnmarshal(fail.Body, &fb); err != nil {
		t.Fatalf("fail envelope body: %v", err)
	}
	if fail.Node != to || fb.Task != "after" || !strings.Contains(fb.Error, "injected in a later part") {
		t.Fatalf("want %s to fail the run naming after and the panic: %s %+v", to, fail.Node, fb)
	}
}
