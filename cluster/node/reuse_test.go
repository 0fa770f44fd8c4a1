package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/localexec"
	"github.com/hetflow/hetflow/transport"
)

// TestRunAgainReusesBuild: a run of a plan run here before takes the
// taskflow and vertex table the earlier run built, and nothing of that run
// leaks into it: every task of the mixed flow (loops counting by their
// State, a multi-condition, a subflow, modules with a loop inside, outputs
// hashed across nodes) runs as often and outputs what it did the first
// time, on one node and split over two.
func TestRunAgainReusesBuild(t *testing.T) {
	c := newCluster(t, nodeSpec{}, nodeSpec{})
	text := strings.Replace(mixedFlow, "      - {name: gsax, func: saxpy, domain: gpu, args: {n: 5000, a: 3}, succeed: [init]}\n", "", 1)
	file, g := parseFlow(t, text)
	ctx := testCtx(t, 120*time.Second)
	for name, own := range map[string][]uint32{
		"one node": placement(g, 1, nil, func(int) int { return 0 }),
		"split":    placement(g, 2, nil, func(v int) int { return v }),
	} {
		first := c.runFlow(ctx, file, own, runOpts{})
		if first.failed != nil {
			t.Fatalf("%s: failed: %+v", name, first.failed)
		}
		for i := range 3 {
			before := []Stats{c.nodes[0].Stats(), c.nodes[1].Stats()}
			got := c.runFlow(ctx, file, own, runOpts{})
			if got.failed != nil {
				t.Fatalf("%s, run %d: failed: %+v", name, i+2, got.failed)
			}
			compare(t, name+" again", first.tasks, got.tasks)
			for k, n := range c.nodes {
				s := n.Stats()
				if s.Assignments == before[k].Assignments {
					continue
				}
				if s.BuildsReused != before[k].BuildsReused+1 {
					t.Fatalf("%s, run %d: %s reused %d builds, then %d; want one more", name, i+2, n.ID(), before[k].BuildsReused, s.BuildsReused)
				}
			}
		}
	}
}

// TestBusyRunLeavesNoBuild: a run released while its tasks still run (a
// cancel) keeps no build for the next run of its plan.
func TestBusyRunLeavesNoBuild(t *testing.T) {
	c := newCluster(t, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, loopFlow)
	own := make([]uint32, len(g.Vertices))
	out := c.runFlow(ctx, file, own, runOpts{stopAfter: 200 * time.Millisecond, noRelease: true})
	if out.failed != nil || out.waves != 0 {
		t.Fatalf("the endless run ended by itself: %+v, waves %d", out.failed, out.waves)
	}
	c.release(ctx, out.run, "cancelled")
	if n, _, _ := c.nodes[0].builds.c.Stats(); n != 0 {
		t.Fatalf("%d builds kept after a busy run", n)
	}
}

// partialFlow: a loop whose body runs on n1 (a quarter second a turn) and
// whose condition, with a join half released by side, is on n0; cancelled
// while n1 sleeps, n0 is idle with the loop part-way, a receive edge filled
// and the join counting one of its two predecessors.
const partialFlow = `
name: partial
tasks:
  - {name: init, func: hash}
  - {name: body, func: sleep, args: {ms: 250}, succeed: [init]}
  - {name: cond, kind: condition, func: loop, args: {n: 3}, succeed: [body], precede: [body, after]}
  - {name: after, func: hash}
  - {name: side, func: hash, succeed: [init]}
  - {name: join, func: hash, succeed: [after, side]}
`

// TestReuseAfterAnIdleCancel: a run cancelled while its node was idle
// part-way (a loop counting, a join half released, an input filled) leaves
// its build for the next run, and nothing of it shows there: every later
// run of the plan gives what a run on fresh builds gave.
func TestReuseAfterAnIdleCancel(t *testing.T) {
	c := newCluster(t, nodeSpec{}, nodeSpec{})
	ctx := testCtx(t, 120*time.Second)
	file, g := parseFlow(t, partialFlow)
	body := byName(g, "body")
	own := placement(g, 2, nil, func(v int) int {
		if v == body {
			return 1
		}
		return 0
	})
	first := c.runFlow(ctx, file, own, runOpts{})
	if first.failed != nil {
		t.Fatalf("the first run failed: %+v", first.failed)
	}
	if b := first.tasks["body"]; b == nil || b.acts != 4 {
		t.Fatalf("the first run: body %v, want 4 activations", b)
	}
	// Cancel once the second turn of body runs on n1: by then n0 ran init,
	// side and cond once, and waits. n0 keeps the build only if it was idle
	// at the cancel, which it is but for microseconds a turn: a cancel that
	// caught it busy is tried again.
	kept := false
	for try := 0; try < 5 && !kept; try++ {
		out := c.runFlow(ctx, file, own, runOpts{stopAfter: 400 * time.Millisecond, noRelease: true})
		if out.failed != nil {
			t.Fatalf("the cancelled run failed: %+v", out.failed)
		}
		c.release(ctx, out.run, "cancelled")
		n, _, _ := c.nodes[0].builds.c.Stats()
		kept = n > 0
	}
	if !kept {
		t.Fatal("n0 kept no build of a run cancelled while it waited, in 5 tries")
	}
	reused := c.nodes[0].Stats().BuildsReused
	for i := range 3 {
		got := c.runFlow(ctx, file, own, runOpts{})
		if got.failed != nil {
			t.Fatalf("run %d after the cancel failed: %+v", i+1, got.failed)
		}
		compare(t, fmt.Sprintf("run %d after the cancel", i+1), first.tasks, got.tasks)
		if r := c.nodes[0].Stats().BuildsReused; r != reused+uint64(i)+1 {
			t.Fatalf("run %d after the cancel: n0 reused %d builds in all, want %d", i+1, r, reused+uint64(i)+1)
		}
	}
}

// TestLateMessagesOfTheRunBefore: a run of a plan takes the build, the
// vertex table and the protocol arrays (runproto.Spare) the run before
// it left; that run's late Signals, Cancel and probe, arriving while the
// new run (another id) runs, are the old run's: counted late, never let
// into the new run's state, which ends as a fresh run does. The node
// forgot the old run, so those go by its ended set; two paths reach the
// old run's own state machine after it handed its arrays on, and are
// taken here with the old run object itself: an Assignment that
// Node.assign found before the release (old.update), and a follow's
// caught-up callback that teardown did not wait for (startFollow). Both
// must act on nothing: the old run stays at generation 1 (taken, it
// would open body on the build the new run now runs, and follow). The
// old run had no follow, so its caught-up acts on nothing either way;
// runproto's TestSpareGoesToTheNextRunOnly takes one on a run that had.
func TestLateMessagesOfTheRunBefore(t *testing.T) {
	c := newCluster(t, nodeSpec{}, nodeSpec{})
	ctx := testCtx(t, 120*time.Second)
	file, g := parseFlow(t, partialFlow)
	body, cond := byName(g, "body"), byName(g, "cond")
	own := placement(g, 2, nil, func(v int) int {
		if v == body {
			return 1
		}
		return 0
	})
	n0 := c.nodes[0]
	first, old := heldOn(ctx, t, c, file, own)
	c.release(ctx, first.run, "done")
	if n, _, _ := n0.builds.c.Stats(); n == 0 {
		t.Fatal("n0 kept no build of the first run")
	}
	before := n0.Stats()
	var late []transport.Signal // what n1 sent n0 in the first run, again: body's turns to cond
	for act := uint64(1); act <= 4; act++ {
		late = append(late, transport.Signal{Run: first.run, Gen: 1, Src: uint32(body), Dst: uint32(cond), Act: act, Kind: transport.SignalEdge})
	}
	got := c.runFlow(ctx, file, own, runOpts{before: func(run string) {
		testsupport.Eventually(t, 30*time.Second, "n0 holds the second run", func() bool {
			n0.mu.Lock()
			defer n0.mu.Unlock()
			return n0.runs[run] != nil
		})
		n0.onBatch(&transport.Batch{From: c.ids[1], Seq: 1 << 40, Signals: late})
		n0.probe(&transport.Envelope{Kind: proto.KindProbe, Run: first.run, Body: proto.ProbeBody(1)})
		n0.cancel(&transport.Cancel{Run: first.run, Gen: 1, Reason: "cancelled"})
		// generation 2 of the old run, body moved to n0: a running run
		// would switch, open body and follow the record
		flow, err := spec.Marshal(file, spec.FormatJSON)
		if err != nil {
			t.Fatal(err)
		}
		a := planned(t, flow, &transport.Assignment{Run: first.run, Gen: 2, Nodes: c.ids, Owner: make([]uint32, len(own)), Boots: []string{n0.boot, c.nodes[1].boot}}, c.ids[0])
		if err := old.update(a); err != nil {
			t.Fatalf("generation 2 of the released run: %v", err)
		}
		n0.mu.Lock()
		caught := old.sm.CaughtUp(old.sm.FollowID()) // as startFollow's caught does
		gen := old.sm.Gen()
		n0.mu.Unlock()
		if len(caught) != 0 || gen != 1 {
			t.Fatalf("the released run took generation 2 (at %d) or a caught-up (%d actions)", gen, len(caught))
		}
	}})
	if got.failed != nil {
		t.Fatalf("the second run failed: %+v", got.failed)
	}
	compare(t, "the run after", first.tasks, got.tasks)
	s := n0.Stats()
	if s.BuildsReused != before.BuildsReused+1 {
		t.Fatalf("n0 reused %d builds, then %d: want one more", before.BuildsReused, s.BuildsReused)
	}
	if s.SignalsLate != before.SignalsLate+uint64(len(late)) {
		t.Fatalf("n0 counted %d Signals late, then %d: want the %d of the run before", before.SignalsLate, s.SignalsLate, len(late))
	}
}

// quietFlow: no-op tasks whose runs write only their counters (quiet),
// beside tasks whose runs write their vcold:
// hash keeps its State and its output is read by its successor, the loop's
// body and condition have a loop context (body, a no-op whose one
// successor reads no Inputs, for that alone), and a subflow counts its
// children's executions.
const quietFlow = `
name: quiet
tasks:
  - {name: a, func: noop}
  - {name: b, func: noop, succeed: [a]}
  - {name: c, func: noop, succeed: [a]}
  - {name: h, func: hash, succeed: [b]}
  - {name: k, func: hash, succeed: [h]}
  - {name: body, func: noop, succeed: [c]}
  - {name: body2, func: noop, succeed: [body]}
  - {name: body3, func: hash, succeed: [body2]}
  - {name: cond, kind: condition, func: loop, args: {n: 3}, succeed: [body3], precede: [body, done]}
  - {name: done, func: noop}
  - {name: fan, kind: subflow, func: fanout, args: {n: 3, us: 1}, succeed: [a]}
  - {name: z, func: noop, succeed: [k, fan, done]}
`

// TestKeptBuildClearsEveryVertex: the build a run leaves is reset whole
// before the next run takes it: every vertex's counters and everything a
// run wrote of its cold part (output, State, loop context, subflow
// counters, in-edges' last traversals), whether or not the reset skipped
// its cold part (vQuiet: the plain no-op tasks alone here). A vertex
// wrongly marked quiet keeps its output, State, context or in-edge here; a
// counter left shows as well. On one node, body is quiet but for its loop
// context; split, with a on n1, c is quiet on n0 but for its in-edge from
// a (delivered into its vcold). A condition's sends and a subflow's
// counters are not covered apart: only a static task is marked quiet, and
// neither has them.
func TestKeptBuildClearsEveryVertex(t *testing.T) {
	for _, split := range []bool{false, true} {
		name := map[bool]string{false: "one node", true: "split"}[split]
		t.Run(name, func(t *testing.T) { keptBuildClears(t, split) })
	}
}

func keptBuildClears(t *testing.T, split bool) {
	c := newCluster(t, nodeSpec{}, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, quietFlow)
	a := byName(g, "a")
	own := placement(g, 2, nil, func(v int) int {
		if split && v == a {
			return 1
		}
		return 0
	})
	n0 := c.nodes[0]
	first, r := heldOn(ctx, t, c, file, own)
	// b's output is read (by h), body's is in the loop: neither is quiet;
	// split, c has an in-edge
	wantQuiet := map[string]bool{"a": !split, "c": !split, "done": true, "z": true}
	wrote, ins := 0, 0 // vertices whose cold part the run wrote; in-edges delivered to
	for v := range g.Vertices {
		s, name := &r.vs[v], g.Vertices[v].Path
		if own[v] != 0 {
			continue // n1's: n0 built none of it
		}
		if got := s.flags&vQuiet != 0; got != wantQuiet[name] {
			t.Errorf("%s: quiet %v, want %v", name, got, wantQuiet[name])
		}
		if s.acts.Load() == 0 || s.done.Load() == 0 {
			t.Errorf("%s: %d activations, %d done: the run did not run it", name, s.acts.Load(), s.done.Load())
		}
		if s.ran || s.state != nil || s.ctx != nil || s.childExecs != nil {
			wrote++
		}
		for _, e := range s.ins {
			if e.has {
				ins++
			}
		}
	}
	if wrote == 0 {
		t.Fatal("the run wrote no vertex's cold part: nothing here to leak")
	}
	if split && ins == 0 {
		t.Fatal("split, no in-edge on n0 was delivered to: nothing here to leak")
	}
	c.release(ctx, first.run, "done")
	slot, ok := n0.builds.c.Get(r.pt.Load())
	if !ok {
		t.Fatal("n0 kept no build of the run")
	}
	slot.mu.Lock()
	b := slot.b
	slot.mu.Unlock() // put kept b after its reset: what it wrote is seen
	if b == nil {
		t.Fatal("n0 kept no build of the run")
	}
	for v := range b.vs {
		s, name := &b.vs[v], g.Vertices[v].Path
		if a, e, d := s.acts.Load(), s.execs.Load(), s.done.Load(); a|e|d != 0 {
			t.Errorf("%s: kept with %d activations, %d executions, %d done", name, a, e, d)
		}
		if s.ran || s.outAct != 0 || s.out != nil || s.state != nil || s.ctx != nil || s.childExecs != nil {
			t.Errorf("%s: kept with its run's output (%v, act %d, %q), State %q, context %v or subflow counters %v",
				name, s.ran, s.outAct, s.out, s.state, s.ctx, s.childExecs)
		}
		for _, e := range s.ins {
			if e.has || e.last.act != 0 {
				t.Errorf("%s: kept with its in-edge from %s's last traversal (act %d)", name, g.Vertices[e.src].Path, e.last.act)
			}
		}
	}
	reused := n0.Stats().BuildsReused
	got := c.runFlow(ctx, file, own, runOpts{})
	if got.failed != nil {
		t.Fatalf("the run again failed: %+v", got.failed)
	}
	compare(t, "the run again", first.tasks, got.tasks)
	if r := n0.Stats().BuildsReused; r != reused+1 {
		t.Fatalf("n0 reused %d builds, then %d: want one more", reused, r)
	}
}

// heldOn runs file placed by own to its end and leaves it unreleased: its
// outcome and the run object node 0 holds for it.
func heldOn(ctx context.Context, t *testing.T, c *cluster, file *spec.File, own []uint32) (*outcome, *run) {
	t.Helper()
	first := c.runFlow(ctx, file, own, runOpts{noRelease: true})
	if first.failed != nil {
		t.Fatalf("the first run failed: %+v", first.failed)
	}
	n0 := c.nodes[0]
	n0.mu.Lock()
	r := n0.runs[first.run]
	n0.mu.Unlock()
	if r == nil {
		t.Fatal("node 0 does not hold the first run")
	}
	return first, r
}

// plainFlow is a plain DAG: no condition, loop or subflow, every join of
// two.
const plainFlow = `
name: plain
tasks:
  - {name: a, func: hash}
  - {name: b, func: hash}
  - {name: c, func: hash, succeed: [a, b]}
  - {name: d, func: hash, succeed: [a, b]}
  - {name: e, func: hash, succeed: [c, d]}
`

// TestIdleRunClosedNotCancelled: a run released idle ends its open run by
// a Close, not a Cancel (run.teardown): nothing of it was running, and an
// uncancelled end is what lets localexec skip the next run's pass over the
// kept build's join counters. The build is kept and the run again gives
// what the first run gave.
func TestIdleRunClosedNotCancelled(t *testing.T) {
	c := newCluster(t, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, plainFlow)
	own := make([]uint32, len(g.Vertices))
	first, r := heldOn(ctx, t, c, file, own)
	open := r.parts()[0].open.Load()
	c.release(ctx, first.run, "done")
	select {
	case <-open.Done():
	default:
		t.Fatal("the run is released and its open run has not ended")
	}
	if err := open.Wait(); err != nil {
		t.Fatalf("the idle run's open run ended with %v: cancelled, not closed", err)
	}
	reused := c.nodes[0].Stats().BuildsReused
	ex0 := c.nodes[0].Executor().Stats()
	got := c.runFlow(ctx, file, own, runOpts{})
	if got.failed != nil {
		t.Fatalf("the run again failed: %+v", got.failed)
	}
	compare(t, "the run again", first.tasks, got.tasks)
	if r := c.nodes[0].Stats().BuildsReused; r != reused+1 {
		t.Fatalf("n0 reused %d builds, then %d: want one more", reused, r)
	}
	joinResets(t, c.nodes[0], ex0, true)
}

// joinResets checks that the one run on n since before (its executor's
// stats) skipped the reset of its join counters (skipped) or did it.
func joinResets(t *testing.T, n *Node, before localexec.Stats, skipped bool) {
	t.Helper()
	s := n.Executor().Stats()
	resets, skips := s.JoinResets-before.JoinResets, s.JoinResetsSkipped-before.JoinResetsSkipped
	want := [2]uint64{1, 0}
	if skipped {
		want = [2]uint64{0, 1}
	}
	if resets != want[0] || skips != want[1] {
		t.Fatalf("the run reset the join counters %d times and skipped it %d times, want %d and %d", resets, skips, want[0], want[1])
	}
}

// TestBusyRunTornDownResets: a run released while a task of it still runs
// (c, held in the node's wrapper until the run stops) ends its open run by
// a Cancel, so it is never taken for clean: its build is not kept, and the
// next run resets the join counters; the run after that, released idle,
// lets the one after skip the reset again.
func TestBusyRunTornDownResets(t *testing.T) {
	c := newCluster(t, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, plainFlow)
	own := make([]uint32, len(g.Vertices))
	n0 := c.nodes[0]
	victim := byName(g, "c")
	var held atomic.Bool
	hook := func(_ string, v int) {
		if v != victim || !held.CompareAndSwap(false, true) {
			return
		}
		// Hold c until the run stops: it is running at the teardown. (On
		// a worker: no t.Fatal here; past the deadline c goes on, and the
		// run ends idle, failing the checks below.)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			n0.mu.Lock()
			stopping := false
			for _, r := range n0.runs {
				stopping = stopping || r.stopping.Load()
			}
			n0.mu.Unlock()
			if stopping {
				return
			}
		}
	}
	staticTestHook.Store(&hook)
	t.Cleanup(func() { staticTestHook.Store(nil) })
	reused := n0.Stats().BuildsReused
	// A user's cancel (stopAfter) releases it: with c held it cannot
	// terminate first.
	busy := c.runFlow(ctx, file, own, runOpts{stopAfter: time.Millisecond})
	staticTestHook.Store(nil)
	if busy.failed != nil {
		t.Fatalf("the cancelled run failed: %+v", busy.failed)
	}
	if !held.Load() {
		t.Fatal("c never ran in the cancelled run")
	}
	ex0 := n0.Executor().Stats()
	first := c.runFlow(ctx, file, own, runOpts{})
	if first.failed != nil {
		t.Fatalf("the run after the cancelled one failed: %+v", first.failed)
	}
	if r := n0.Stats().BuildsReused; r != reused {
		t.Fatalf("n0 reused a build of a run torn down busy (%d, then %d)", reused, r)
	}
	joinResets(t, n0, ex0, false)
	ex0 = n0.Executor().Stats()
	got := c.runFlow(ctx, file, own, runOpts{})
	if got.failed != nil {
		t.Fatalf("the run again failed: %+v", got.failed)
	}
	compare(t, "the run again", first.tasks, got.tasks)
	joinResets(t, n0, ex0, true)
}

// TestSameMask: the build cache's compare of vertex masks as bytes gives
// what a compare a vertex gives: equal masks, masks that differ at one
// vertex anywhere (the first, a middle one, the last, past a word), masks
// of other lengths, empty and nil ones.
func TestSameMask(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 100, 1000} {
		a := make([]bool, n)
		for v := range a {
			a[v] = v%3 == 0
		}
		if !sameMask(a, slices.Clone(a)) {
			t.Fatalf("%d vertices: a mask and its copy differ", n)
		}
		for v := range n {
			b := slices.Clone(a)
			b[v] = !b[v]
			if sameMask(a, b) || sameMask(b, a) {
				t.Fatalf("%d vertices: masks differing at %d are the same", n, v)
			}
		}
		if sameMask(a, append(slices.Clone(a), false)) {
			t.Fatalf("%d and %d vertices: the same", n, n+1)
		}
	}
	if !sameMask(nil, []bool{}) || !sameMask([]bool{}, nil) {
		t.Fatal("an empty mask and a nil one differ")
	}
}
