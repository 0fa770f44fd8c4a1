package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/localexec"
	"github.com/hetflow/hetflow/transport"
	"github.com/nats-io/nats.go"
)

// two-node flows: init on n0, the task under test on n1, after on n0.
func chainFlow(task string) string {
	return `
name: chain
tasks:
  - {name: init, func: hash}
  - ` + task + `
  - {name: after, func: hash, succeed: [t]}
`
}

func chainOwners(t *testing.T, text string) []uint32 {
	_, g := parseFlow(t, text)
	own := make([]uint32, len(g.Vertices))
	own[byName(g, "t")] = 1
	return own
}

func TestTaskFailureNamesTheTask(t *testing.T) {
	c := newCluster(t, nodeSpec{}, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	cases := []struct {
		name, task, errPart string
		acts, execs         uint64
	}{
		{"fail", `{name: t, func: fail, args: {msg: boom}, succeed: [init]}`, "boom", 1, 1},
		{"retries-exhausted", `{name: t, func: fail, args: {msg: boom}, retries: 2, succeed: [init]}`, "boom", 1, 3},
		{"panic", `{name: t, func: panic, args: {msg: kaboom}, retries: 3, succeed: [init]}`, "kaboom", 1, 1},
		{"panic-plain", `{name: t, func: panic, args: {msg: kaboom}, succeed: [init]}`, "panicked", 1, 1}, // invokeOnce
		{"fail-plain", `{name: t, func: fail, args: {msg: boom, times: 5}, succeed: [init]}`, "boom", 1, 1},
		{"timeout", `{name: t, func: sleep, args: {ms: 60000}, timeout: 50ms, succeed: [init]}`, "timed out after 50ms", 1, 1},
	}
	for _, tc := range cases {
		text := chainFlow(tc.task)
		file, _ := parseFlow(t, text)
		out := c.runFlow(ctx, file, chainOwners(t, text), runOpts{})
		if out.failed == nil {
			t.Fatalf("%s: the run did not fail:\n%s", tc.name, summary(out.tasks))
		}
		if out.failed.Task != "t" || out.failNode != "n1" || !strings.Contains(out.failed.Error, tc.errPart) {
			t.Fatalf("%s: fail envelope %+v from %s", tc.name, out.failed, out.failNode)
		}
		f := out.tasks["t"]
		if f == nil || f.state != transport.TaskFailed || f.acts != tc.acts || f.executions() != tc.execs || f.node != "n1" {
			t.Fatalf("%s: task t: %v\n%s", tc.name, f, summary(out.tasks))
		}
		if out.tasks["after"] != nil {
			t.Fatalf("%s: after ran: %s", tc.name, summary(out.tasks))
		}
	}
	// the nodes stay healthy: a good run afterwards
	text := chainFlow(`{name: t, func: fail, args: {times: 2}, retries: 2, succeed: [init]}`)
	file, _ := parseFlow(t, text)
	out := c.runFlow(ctx, file, chainOwners(t, text), runOpts{})
	if out.failed != nil {
		t.Fatalf("retried run failed: %+v", out.failed)
	}
	if f := out.tasks["t"]; f.state != transport.TaskDone || f.acts != 1 || f.executions() != 3 {
		t.Fatalf("retried task: %v", f)
	}
	if out.tasks["after"] == nil || out.tasks["after"].state != transport.TaskDone {
		t.Fatalf("after: %s", summary(out.tasks))
	}
}

func TestRefusedAssignments(t *testing.T) {
	c := newCluster(t, nodeSpec{gpus: 1}, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, mixedFlow)
	// a module instance split from its module task
	own := placement(g, 2, []int{0}, func(int) int { return 0 })
	own[byName(g, "mod/q")] = 1
	out := c.runFlow(ctx, file, own, runOpts{})
	if out.failed == nil || !strings.Contains(out.failed.Error, "module instance split") ||
		(out.failed.Task != "mod" && out.failed.Task != "mod/q") {
		t.Fatalf("split module: %+v", out.failed)
	}
	// a GPU task on a node without a GPU
	own = placement(g, 2, []int{0}, func(int) int { return 0 })
	own[byName(g, "gsax")] = 1
	out = c.runFlow(ctx, file, own, runOpts{})
	if out.failed == nil || out.failed.Task != "gsax" || out.failNode != "n1" || !strings.Contains(out.failed.Error, "needs GPU device 0; node n1 has 0") {
		t.Fatalf("gpu on n1: %+v from %s", out.failed, out.failNode)
	}
	// garbage instead of a flow
	asg := &transport.Assignment{Run: "rbad", Gen: 1, Nodes: []string{"n0"}, Owner: []uint32{0}, Plan: []byte("{not a plan")}
	if err := c.leader.conn.SendControl("n0", asg); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-c.leader.fail:
		if e.Run != "rbad" || !strings.Contains(string(e.Body), "refused") {
			t.Fatalf("garbage flow: %s %s", e.Run, e.Body)
		}
	case <-ctx.Done():
		t.Fatal("no fail envelope for a garbage flow")
	}
	for _, n := range c.nodes {
		if s := n.Stats(); s.RunsActive != 0 || s.Refused == 0 {
			n.mu.Lock()
			for id, r := range n.runs {
				t.Logf("held: %s gen %d reason %q", id, r.sm.Gen(), r.reason)
			}
			n.mu.Unlock()
			t.Fatalf("%s: %+v", n.ID(), s)
		}
	}
}

// loopFlow loops forever across two nodes, next to a long sleep.
const loopFlow = `
name: forever
tasks:
  - {name: init, func: noop}
  - {name: body, func: spin, args: {us: 50}, succeed: [init]}
  - {name: cond, kind: condition, func: loop, args: {n: 1000000000}, succeed: [body], precede: [body, done]}
  - {name: done, func: noop}
  - {name: nap, func: sleep, args: {ms: 600000}, succeed: [init]}
`

func TestCancelStopsALongRun(t *testing.T) {
	c := newCluster(t, nodeSpec{}, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, loopFlow)
	own := make([]uint32, len(g.Vertices))
	own[byName(g, "cond")] = 1
	own[byName(g, "nap")] = 1
	start := time.Now()
	out := c.runFlow(ctx, file, own, runOpts{stopAfter: 300 * time.Millisecond, noRelease: true})
	if out.failed != nil || out.waves != 0 {
		t.Fatalf("the endless run ended by itself: %+v, waves %d", out.failed, out.waves)
	}
	before := c.nodes[0].Stats().TasksExecuted
	if before < 10 {
		t.Fatalf("the loop hardly ran: %d tasks", before)
	}
	c.release(ctx, out.run, "cancelled")
	// released well before the 10-minute sleep: the sleep saw its context end
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("release took %v", d)
	}
	after := c.nodes[0].Stats().TasksExecuted + c.nodes[1].Stats().TasksExecuted
	time.Sleep(20 * time.Millisecond) // nothing may run after the release
	if again := c.nodes[0].Stats().TasksExecuted + c.nodes[1].Stats().TasksExecuted; again != after {
		t.Fatalf("tasks ran after the release: %d then %d", after, again)
	}
	// a late re-sent Assignment of the released run does not start it again
	flow, _ := specJSON(t, file)
	asg := &transport.Assignment{Run: out.run, Gen: 1, Nodes: c.ids, Owner: own}
	for _, id := range c.ids {
		if err := c.leader.conn.SendControl(id, planned(t, flow, asg, id)); err != nil {
			t.Fatal(err)
		}
	}
	// a run sent after it on the same subjects: once it is done, the late
	// Assignment has been handled
	text := chainFlow(`{name: t, func: noop, succeed: [init]}`)
	chain, _ := parseFlow(t, text)
	if next := c.runFlow(ctx, chain, chainOwners(t, text), runOpts{}); next.failed != nil {
		t.Fatalf("next run: %+v", next.failed)
	}
	for _, n := range c.nodes {
		if s := n.Stats(); s.RunsActive != 0 || s.Assignments != 2 {
			t.Fatalf("%s after a late assignment: %+v", n.ID(), s)
		}
	}
}

// A run cancelled while one of its tasks runs is cancelled, not failed:
// the function returns the run's context's error, and the activation's
// wrapper gives up quietly (errStopped) instead of failing the task. The
// three ways an activation calls its function: invokeOnce (no retries, no
// timeout), invoke on its last attempt (a timeout, no retries) and invoke
// with an attempt left (retries).
func TestCancelDuringATaskFailsNothing(t *testing.T) {
	c := newCluster(t, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	n := c.nodes[0]
	for _, tc := range []struct{ name, task string }{
		{"invokeOnce", `{name: nap, func: sleep, args: {ms: 600000}, succeed: [init]}`},
		{"invoke-last-attempt", `{name: nap, func: sleep, args: {ms: 600000}, timeout: 10m, succeed: [init]}`},
		{"invoke-retries", `{name: nap, func: sleep, args: {ms: 600000}, retries: 1, succeed: [init]}`},
	} {
		text := "name: nap\ntasks:\n  - {name: init, func: noop}\n  - " + tc.task + "\n"
		file, g := parseFlow(t, text)
		nap := byName(g, "nap")
		failures := n.Stats().Failures
		// runFlow returns at once; the run stays held until released below
		out := c.runFlow(ctx, file, make([]uint32, len(g.Vertices)), runOpts{stopAfter: time.Nanosecond, noRelease: true})
		if out.failed != nil {
			t.Fatalf("%s: the run failed before its cancel: %+v", tc.name, out.failed)
		}
		var r *run
		testsupport.Eventually(t, 10*time.Second, tc.name+": nap is called", func() bool {
			n.mu.Lock()
			r = n.runs[out.run] // held once built: its vstates are made
			n.mu.Unlock()
			return r != nil && r.vs[nap].execs.Load() > 0
		})
		c.release(ctx, out.run, "cancelled") // returns once the run's teardown (its workers) ended
		if r.failed.Load() || r.failure.Load() != nil || n.Stats().Failures != failures {
			t.Fatalf("%s: the cancelled run failed: %v", tc.name, r.failure.Load())
		}
		if f := c.fold(ctx, out.run)["nap"]; f != nil && f.state == transport.TaskFailed {
			t.Fatalf("%s: nap recorded failed: %v", tc.name, f)
		}
		for len(c.leader.fail) > 0 {
			if e := <-c.leader.fail; e.Run == out.run {
				t.Fatalf("%s: a fail envelope: %s", tc.name, e.Body)
			}
		}
	}
}

// Every Signal batch of a run published a second time: the Deduper drops
// them and nothing runs twice.
func TestDuplicatedSignalsDoNotRerun(t *testing.T) {
	c := newCluster(t, nodeSpec{gpus: 1}, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, mixedFlow)
	own := placement(g, 2, []int{0}, func(v int) int { return v })
	var mu sync.Mutex
	var batches []*nats.Msg
	sub, err := c.leader.conn.Subscribe("hf.run.>", func(m *nats.Msg) {
		mu.Lock()
		batches = append(batches, m)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(ctx)
	if err := c.leader.conn.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	first := c.runFlow(ctx, file, own, runOpts{noRelease: true})
	if first.failed != nil {
		t.Fatalf("failed: %+v", first.failed)
	}
	stats := func() (exec, recv, dup uint64) {
		for _, n := range c.nodes {
			s := n.Stats()
			exec += s.TasksExecuted
			recv += s.SignalsReceived
			dup += s.SignalsDuplicate
		}
		return
	}
	reported := func() (sum uint64) { // what the runs' TermReports count
		for _, n := range c.nodes {
			n.mu.Lock()
			if r := n.runs[first.run]; r != nil {
				_, received, _ := r.sm.Counts()
				sum += received
			}
			n.mu.Unlock()
		}
		return sum
	}
	exec0, recv0, dup0 := stats()
	rep0 := reported()
	mu.Lock()
	replay := batches
	mu.Unlock()
	nsig := 0
	for _, m := range replay {
		b, err := transport.DecodeBatch(m.Data, transport.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(m.Subject, ".node."+transport.PicksNode+".") {
			continue // picks and marks reach no node
		}
		nsig += len(b.Signals)
		if err := c.leader.conn.Publish(m.Subject, m.Data); err != nil {
			t.Fatal(err)
		}
	}
	if nsig == 0 {
		t.Fatal("no signal crossed nodes")
	}
	testsupport.Eventually(t, 10*time.Second, "duplicates dropped", func() bool {
		_, _, dup := stats()
		return dup == dup0+uint64(nsig)
	})
	if exec, recv, _ := stats(); exec != exec0 || recv != recv0 {
		t.Fatalf("after the replay: executed %d→%d, received %d→%d", exec0, exec, recv0, recv)
	}
	// Batches published again (not re-sent by their senders, who did not
	// count them) must not unbalance the termination counters.
	if rep := reported(); rep != rep0 {
		t.Fatalf("the replayed batches changed the reported Received: %d→%d", rep0, rep)
	}
	c.release(ctx, first.run, "finished")
	again := c.fold(ctx, first.run)
	compare(t, "after duplicates", first.tasks, again)
}

// mixedSplit places mixedFlow's init and gsax on n0 (its GPU node) and
// the rest on n1, so that n0's sources feed n1.
func mixedSplit(g *spec.Graph) []uint32 {
	return placement(g, 2, []int{0}, func(v int) int {
		if v == byName(g, "init") || v == byName(g, "gsax") {
			return 0
		}
		return 1
	})
}

// A node that gets Signals before its Assignment keeps them.
func TestSignalsBeforeAssignment(t *testing.T) {
	c := newCluster(t, nodeSpec{gpus: 1}, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, mixedFlow)
	base := c.runFlow(ctx, file, placement(g, 2, []int{0}, func(int) int { return 0 }), runOpts{})
	// n1 owns what n0's source feeds; n1 hears of the run only on the leader's re-send
	own := mixedSplit(g)
	got := c.runFlow(ctx, file, own, runOpts{sendTo: []int{0}})
	if got.failed != nil {
		t.Fatalf("failed: %+v", got.failed)
	}
	compare(t, "late assignment", base.tasks, got.tasks)
	if s := c.nodes[1].Stats(); s.SignalsEarly == 0 {
		t.Fatalf("n1 saw no signal before its assignment: %+v", s)
	}
}

func TestDrainFinishesHeldRuns(t *testing.T) {
	c := newCluster(t, nodeSpec{}, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, loopFlow)
	own := make([]uint32, len(g.Vertices))
	own[byName(g, "cond")] = 1
	out := c.runFlow(ctx, file, own, runOpts{stopAfter: 100 * time.Millisecond, noRelease: true})
	n1 := c.nodes[1]
	drained := make(chan error, 1)
	go func() { drained <- n1.Drain(ctx) }()
	testsupport.Eventually(t, 5*time.Second, "draining", func() bool {
		n1.mu.Lock()
		defer n1.mu.Unlock()
		return n1.draining
	})
	// a new run is not taken while draining
	text := chainFlow(`{name: t, func: noop, succeed: [init]}`)
	chain, _ := parseFlow(t, text)
	flow, _ := specJSON(t, chain)
	asg := &transport.Assignment{Run: "rdrain", Gen: 1, Nodes: c.ids, Owner: chainOwners(t, text)}
	if err := c.leader.conn.SendControl("n1", planned(t, flow, asg, "n1")); err != nil {
		t.Fatal(err)
	}
	if err := c.leader.conn.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned while holding a run: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	c.release(ctx, out.run, "cancelled")
	select {
	case err := <-drained:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Drain did not return after the release")
	}
	if s := n1.Stats(); s.Assignments != 1 || s.RunsActive != 0 {
		t.Fatalf("n1 after drain: %+v", s)
	}
	if err := n1.Start(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Drain: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	url := testsupport.NATS(t).URL()
	conn := connect(t, url, "cfg")
	for _, cfg := range []Config{
		{ID: "", Conn: conn},
		{ID: "a.b", Conn: conn},
		{ID: "n1"},
		{ID: "n1", Conn: conn, CPUs: -1},
	} {
		if n, err := New(cfg); !errors.Is(err, ErrConfig) {
			if n != nil {
				n.Close()
			}
			t.Fatalf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
	n, err := New(Config{ID: "n1", Conn: conn, CPUs: 1, GPUs: 2, HTTP: "127.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	m := n.Meta()
	if len(m.Boot) != 12 || m != (proto.Meta{Role: proto.RoleNode, ID: "n1", HTTP: "127.0.0.1:8080", CPUs: 1, GPUs: 2, Boot: m.Boot}) {
		t.Fatalf("Meta = %+v", m)
	}
	if other, err := New(Config{ID: "n1", Conn: conn, CPUs: 1}); err != nil || other.Meta().Boot == m.Boot {
		t.Fatalf("a second process of n1 has boot %q, the first %q (%v)", other.Meta().Boot, m.Boot, err)
	} else {
		_ = other.Close()
	}
	// Close without Start, twice
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
}

// A task's final failure is told to the leader again with every report
// until the leader releases the run (core NATS may lose the first fail
// envelope), and the node never reports the run idle after it: a run whose
// failure report was lost must not pass for terminated (found by the
// run-protocol simulation, cluster/runsim: 60 seeds of 3,000 succeeded with
// a failed task before runproto.Fail).
func TestFailureIsRepeatedUntilReleased(t *testing.T) {
	c := newCluster(t, nodeSpec{}, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	text := chainFlow(`{name: t, func: fail, args: {msg: boom}, succeed: [init]}`)
	file, _ := parseFlow(t, text)
	out := c.runFlow(ctx, file, chainOwners(t, text), runOpts{noRelease: true})
	if out.failed == nil || out.failed.Task != "t" {
		t.Fatalf("the run did not fail naming t: %+v", out.failed)
	}
	again, idleAfter := 0, 0
	testsupport.Eventually(t, 10*time.Second, "the fail envelope sent again twice", func() bool {
		for {
			select {
			case e := <-c.leader.fail:
				if e.Run == out.run && e.Node == "n1" {
					again++
				}
				continue
			case r := <-c.leader.term:
				// The two channels keep no order between them, so a
				// report n1 sent idle before t's input reached it (it
				// had received nothing yet) can be read after the first
				// envelope. Once the input is in (Received > 0), t runs
				// and fails, and from then on n1 must never say idle.
				if r.Run == out.run && r.Node == "n1" && r.Idle && r.Received > 0 {
					idleAfter++
				}
				continue
			default:
			}
			return again >= 2
		}
	})
	if idleAfter != 0 {
		t.Errorf("n1 reported the failed run idle %d times after its failure", idleAfter)
	}
	c.release(ctx, out.run, "failed")
}

// TestAssignmentAcked: a node acknowledges an Assignment on receipt, before
// it builds the run (an Assignment it refuses while building is acked
// before its fail envelope goes out, on the same connection), and every
// copy of one it holds again, counting the copy; the leader sends no more
// once it has the ack (coord.Leader.Ack).
func TestAssignmentAcked(t *testing.T) {
	c := newCluster(t, nodeSpec{})
	ctx := testCtx(t, 30*time.Second)
	type msg struct {
		subject string
		ack     transport.Ack
	}
	got := make(chan msg, 64)
	sub, err := c.leader.conn.Subscribe("hf.coord.>", func(m *nats.Msg) {
		var a transport.Ack
		if m.Subject == proto.AckSubject("n0") {
			if err := a.Decode(m.Data, transport.Limits{}); err != nil {
				t.Errorf("ack: %v", err)
			}
		}
		got <- msg{m.Subject, a}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(ctx)
	if err := c.leader.conn.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	next := func(what string, skip ...string) msg {
		t.Helper()
		for {
			select {
			case m := <-got:
				if slices.Contains(skip, m.subject) {
					continue
				}
				return m
			case <-ctx.Done():
				t.Fatalf("no %s", what)
			}
		}
	}
	boot := c.nodes[0].Meta().Boot

	// Refused while building: acked first.
	bad := &transport.Assignment{Run: "rbad", Gen: 1, Nodes: []string{"n0"}, Owner: []uint32{0}, Plan: []byte("{not a plan")}
	if err := c.leader.conn.SendControl("n0", bad); err != nil {
		t.Fatal(err)
	}
	if m := next("ack of the refused assignment"); m.subject != proto.AckSubject("n0") || m.ack != (transport.Ack{Run: "rbad", Gen: 1, Node: "n0", Boot: boot}) {
		t.Fatalf("first after a refused assignment: %s %+v, want its ack", m.subject, m.ack)
	}
	if m := next("fail envelope"); m.subject != proto.FailSubject("n0") {
		t.Fatalf("after the ack: %s, want the fail envelope", m.subject)
	}

	// Taken, and a copy acked again.
	file, g := parseFlow(t, loopFlow)
	flow, err := spec.Marshal(file, spec.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	asg := planned(t, flow, &transport.Assignment{Run: "rgood", Gen: 1, Nodes: []string{"n0"}, Owner: make([]uint32, len(g.Vertices))}, "n0")
	for i := range 2 {
		if err := c.leader.conn.SendControl("n0", asg); err != nil {
			t.Fatal(err)
		}
		m := next("ack", proto.TermSubject("n0"))
		if m.ack != (transport.Ack{Run: "rgood", Gen: 1, Node: "n0", Boot: boot}) {
			t.Fatalf("copy %d: %s %+v, want its ack", i+1, m.subject, m.ack)
		}
	}
	if s := c.nodes[0].Stats(); s.Assignments != 1 || s.AssignmentCopies != 1 {
		t.Fatalf("one Assignment taken and one copy: %+v", s)
	}
	c.release(ctx, "rgood", "cancelled")
}

// An Assignment made for an earlier process under a node's id (its Boots
// entry names another incarnation: the node restarted) is not taken: the
// new process has none of its predecessor's state and would run that part
// afresh. One made for this process, or for any (an empty entry), is.
func TestAssignmentForAnEarlierProcessIsIgnored(t *testing.T) {
	c := newCluster(t, nodeSpec{gpus: 1}, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, mixedFlow)
	flow, err := spec.Marshal(file, spec.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	n1 := c.nodes[1]
	own := placement(g, 2, []int{0}, func(v int) int { return v % 2 })
	asg := &transport.Assignment{Run: "r0000000000001-000001", Gen: 1, Nodes: c.ids, Owner: own,
		Boots: []string{c.nodes[0].boot, "0123456789abcdef"}}
	if err := c.leader.conn.SendControl("n1", planned(t, flow, asg, "n1")); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "n1 ignores the assignment of its earlier process", func() bool {
		return n1.Stats().AssignmentsOtherBoot == 1
	})
	if s := n1.Stats(); s.RunsActive != 0 || s.Assignments != 0 || s.Refused != 0 {
		t.Fatalf("n1 took a part made for another process: %+v", s)
	}
	base := c.runFlow(ctx, file, placement(g, 2, []int{0}, func(int) int { return 0 }), runOpts{})
	got := c.runFlow(ctx, file, own, runOpts{boots: []string{c.nodes[0].boot, n1.boot}})
	if got.failed != nil {
		t.Fatalf("with the nodes' own boots: %+v", got.failed)
	}
	compare(t, "with the nodes' own boots", base.tasks, got.tasks)
	if s := n1.Stats(); s.AssignmentsOtherBoot != 1 {
		t.Fatalf("n1 ignored its own process's assignment: %+v", s)
	}
}

// digestFlow is a short loop beside a subflow.
const digestFlow = `
name: bydigest
tasks:
  - {name: init, func: noop}
  - {name: body, func: spin, args: {us: 50}, succeed: [init]}
  - {name: cond, kind: condition, func: loop, args: {n: 20}, succeed: [body], precede: [body, done]}
  - {name: done, func: noop}
  - {name: kids, kind: subflow, func: fanout, args: {n: 3, us: 100}, succeed: [init]}
`

// TestAssignmentByDigest: an Assignment that names its plan by digest
// alone runs the plan of that digest the node compiled before, with the
// outcome the plan gives when sent in full; a node that does not hold it
// (never had it, or lost it) takes nothing and asks for it (an Ack with
// NeedPlan), and takes the Assignment once it comes with its plan; a plan
// that does not match the digest it comes with is refused.
func TestAssignmentByDigest(t *testing.T) {
	c := newCluster(t, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	n0 := c.nodes[0]
	boot := n0.Meta().Boot
	acks := make(chan transport.Ack, 64)
	fails := make(chan string, 64)
	sub, err := c.leader.conn.Subscribe("hf.coord.>", func(m *nats.Msg) {
		switch m.Subject {
		case proto.AckSubject("n0"):
			var a transport.Ack
			if err := a.Decode(m.Data, transport.Limits{}); err != nil {
				t.Errorf("ack: %v", err)
			}
			acks <- a
		case proto.FailSubject("n0"):
			fails <- string(m.Data)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(ctx)
	if err := c.leader.conn.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ack := func(run string) transport.Ack { // the next ack of run (the harness's runs ack too)
		t.Helper()
		for {
			select {
			case a := <-acks:
				if a.Run == run {
					return a
				}
			case <-ctx.Done():
				t.Fatalf("no ack of %s", run)
			}
		}
	}
	file, g := parseFlow(t, digestFlow)
	flow, err := spec.Marshal(file, spec.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	owner := make([]uint32, len(g.Vertices))
	full := func(run string) *transport.Assignment {
		return withDigest(planned(t, flow, &transport.Assignment{Run: run, Gen: 1, Nodes: []string{"n0"}, Owner: owner}, "n0"), planDigest)
	}
	ref := func(run string) *transport.Assignment {
		return withDigest(planned(t, flow, &transport.Assignment{Run: run, Gen: 1, Nodes: []string{"n0"}, Owner: owner}, "n0"), digestAlone)
	}
	send := func(a *transport.Assignment) {
		t.Helper()
		if err := c.leader.conn.SendControl("n0", a); err != nil {
			t.Fatal(err)
		}
	}

	// A plan this node never had: asked for, nothing taken.
	send(ref("rnever"))
	if a := ack("rnever"); a != (transport.Ack{Run: "rnever", Gen: 1, Node: "n0", Boot: boot, NeedPlan: true}) {
		t.Fatalf("a plan never held: %+v, want an ack asking for it", a)
	}
	if s := n0.Stats(); s.PlansNeeded != 1 || s.Assignments != 0 || s.RunsActive != 0 || s.Refused != 0 {
		t.Fatalf("a plan never held: %+v", s)
	}
	// The Assignment again with its plan: taken.
	send(full("rnever"))
	if a := ack("rnever"); a != (transport.Ack{Run: "rnever", Gen: 1, Node: "n0", Boot: boot}) {
		t.Fatalf("with its plan: %+v, want its ack", a)
	}
	testsupport.Eventually(t, 10*time.Second, "n0 runs rnever", func() bool { return n0.Stats().Assignments == 1 })
	c.release(ctx, "rnever", "cancelled")

	// A plan whose bytes are not the digest's: refused.
	bad := full("rbad")
	bad.PlanDigest = bytes.Repeat([]byte{1}, transport.PlanDigestLen)
	send(bad)
	if a := ack("rbad"); a.NeedPlan {
		t.Fatalf("a mislabelled plan: %+v", a)
	}
	select {
	case f := <-fails:
		if !strings.Contains(f, ErrPlanDigest.Error()) {
			t.Fatalf("mislabelled plan refused with %q, want %v", f, ErrPlanDigest)
		}
	case <-ctx.Done():
		t.Fatal("a mislabelled plan was not refused")
	}

	// Run by digest: the outcome of the plan sent in full.
	base := c.runFlow(ctx, file, owner, runOpts{digest: planDigest})
	got := c.runFlow(ctx, file, owner, runOpts{digest: digestAlone})
	if base.failed != nil || got.failed != nil {
		t.Fatalf("failed: %+v / %+v", base.failed, got.failed)
	}
	compare(t, "by digest", base.tasks, got.tasks)
	if s := n0.Stats(); s.PlansNeeded != 1 {
		t.Fatalf("a held plan was asked for: %+v", s)
	}

	// The node lost its plans: asked for again, nothing taken.
	n0.graphs.forget()
	before := n0.Stats()
	send(ref("rlost"))
	if a := ack("rlost"); !a.NeedPlan || a.Run != "rlost" {
		t.Fatalf("a lost plan: %+v, want an ack asking for it", a)
	}
	if s := n0.Stats(); s.PlansNeeded != 2 || s.Assignments != before.Assignments || s.RunsActive != 0 {
		t.Fatalf("a lost plan: %+v", s)
	}
	send(full("rlost"))
	if a := ack("rlost"); a.NeedPlan {
		t.Fatalf("the lost plan sent: %+v", a)
	}
	testsupport.Eventually(t, 10*time.Second, "n0 runs rlost", func() bool { return n0.Stats().Assignments == before.Assignments+1 })
	c.release(ctx, "rlost", "cancelled")
}

// An activation's call of its bound function (callFunc, as invokeOnce
// calls it for a task without retries or a timeout) turns a panic into
// the activation's PanicError with the panic's value and the stack of the
// panicking function, and leaves no Result.
func TestCallFuncTurnsAPanicIntoItsError(t *testing.T) {
	body, err := funcs.Default().Bind(funcs.Panic, "")
	if err != nil {
		t.Fatal(err)
	}
	r := &run{ctx: context.Background()}
	c := &funcs.Call{Task: "t", Path: "m/t", Args: funcs.Args{"msg": "kaboom"}}
	res := funcs.Result{Output: []byte("stale")}
	err = r.callFunc(r.ctx, "", body, c, &res)
	var pe *localexec.PanicError
	if !errors.As(err, &pe) || pe.Task != "m/t" || !strings.Contains(fmt.Sprint(pe.Value), "kaboom") || !strings.Contains(string(pe.Stack), "funcs.panicFn") {
		t.Fatalf("callFunc of a panicking function: %v (%#v)", err, pe)
	}
	if res.Output != nil {
		t.Fatalf("a panicked call left a Result: %+v", res)
	}
	body, _ = funcs.Default().Bind(funcs.Noop, "")
	if err := r.callFunc(r.ctx, "", body, &funcs.Call{Task: "t", Path: "t"}, &res); err != nil || res.Output != nil {
		t.Fatalf("callFunc of noop: %v %+v", err, res)
	}
}
