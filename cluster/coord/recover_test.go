package coord

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// waitProbesDone waits (registered first, it runs after every other cleanup)
// for memberlist's probes in flight: its Shutdown does not join them, and
// with dead members its awareness stretches a probe to up to 8 × 200 ms.
func waitProbesDone(t *testing.T) {
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			buf := make([]byte, 1<<20)
			if !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "memberlist.(*Memberlist).probeNode") {
				return
			}
			time.Sleep(20 * time.Millisecond) // polling interval
		}
	})
}

// A node taken for dead whose tasks moved, but still connected to NATS
// (frozen, cut off from gossip only), is told to let go when it reports its
// old generation.
func TestLeaderReleasesANodeThatLostItsTasks(t *testing.T) {
	waitProbesDone(t)
	url := testsupport.NATS(t).URL()
	c := leadingCoord(t, url, nil)
	seeds := []string{c.GossipAddr()}
	live := startFakeNode(t, "live", url, seeds, 1, 0, func(n *fakeNode) { n.busy = true })
	zombie := startFakeNode(t, "zombie", url, seeds, 1, 0, func(n *fakeNode) { n.busy = true })
	testsupport.Eventually(t, 10*time.Second, "two nodes alive", func() bool {
		return nodeState(c, "live") == proto.NodeAlive && nodeState(c, "zombie") == proto.NodeAlive
	})
	var sub proto.SubmitResponse
	flow := "name: two\ntasks:\n  - {name: a, func: spin, args: {us: 1000}}\n  - {name: b, func: spin, args: {us: 1000}}\n"
	if code, _ := api(t, c.HTTPAddr(), "POST", "/v1/runs", "", proto.SubmitRequest{Path: "f.yaml", Flow: flow}, &sub); code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	took := func(n *fakeNode, gen uint64) bool { n.mu.Lock(); defer n.mu.Unlock(); return n.runs[sub.ID] == gen }
	testsupport.Eventually(t, 10*time.Second, "both nodes took gen 1", func() bool { return took(live, 1) && took(zombie, 1) })
	zombie.silent.Store(true)     // frozen: it answers no ping
	must(t, zombie.ml.Shutdown()) // gone from gossip, still on NATS
	testsupport.Eventually(t, 15*time.Second, "live holds the whole run under gen 2", func() bool { return took(live, 2) })
	if r, _ := c.run(sub.ID); r.State != proto.RunRunning || len(r.Nodes) != 1 || r.Nodes[0] != "live" {
		t.Fatalf("run after the loss: %s on %v", r.State, r.Nodes)
	}
	testsupport.Eventually(t, 10*time.Second, "the zombie is told its tasks were reassigned", func() bool {
		zombie.term(sub.ID, 1, 0)
		return zombie.cancelled(sub.ID) == "reassigned"
	})
	if live.cancelled(sub.ID) != "" {
		t.Fatalf("the live node was cancelled too: %q", live.cancelled(sub.ID))
	}
	if code, _ := api(t, c.HTTPAddr(), "POST", "/v1/runs/"+sub.ID+"/cancel", "", nil, nil); code != http.StatusOK {
		t.Fatalf("cancel: %d", code)
	}
}

// The leader moves a lost node's tasks to live nodes under a new generation,
// and fails a run whose tasks cannot move, naming the task and the node.
func TestLeaderRecoversFromALostNode(t *testing.T) {
	waitProbesDone(t)
	url := testsupport.NATS(t).URL()
	c := leadingCoord(t, url, nil)
	seeds := []string{c.GossipAddr()}
	ok := startFakeNode(t, "ok", url, seeds, 1, 0, nil)
	doomed := startFakeNode(t, "doomed", url, seeds, 1, 0, func(n *fakeNode) { n.busy = true })
	pinned := startFakeNode(t, "pinned", url, seeds, 1, 0, func(n *fakeNode) { n.busy = true })
	testsupport.Eventually(t, 10*time.Second, "three nodes alive", func() bool {
		return nodeState(c, "ok") == proto.NodeAlive && nodeState(c, "doomed") == proto.NodeAlive && nodeState(c, "pinned") == proto.NodeAlive
	})
	submit := func(flow string) string {
		t.Helper()
		var sub proto.SubmitResponse
		if code, _ := api(t, c.HTTPAddr(), "POST", "/v1/runs", "", proto.SubmitRequest{Path: "f.yaml", Flow: flow}, &sub); code != http.StatusCreated {
			t.Fatalf("submit: %d", code)
		}
		return sub.ID
	}
	var b strings.Builder
	b.WriteString("name: spread\ntasks:\n")
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		b.WriteString("  - {name: " + n + ", func: spin, args: {us: 1000}}\n")
	}
	spread := submit(b.String())
	stuck := submit("name: stuck\ntasks:\n  - {name: p, func: noop, node: pinned}\n  - {name: q, func: noop, succeed: [p]}\n")
	gen1 := map[string]bool{}
	testsupport.Eventually(t, 10*time.Second, "every node took its part", func() bool {
		for _, n := range []*fakeNode{ok, doomed, pinned} {
			n.mu.Lock()
			gen1[n.id] = n.runs[spread] == 1
			n.mu.Unlock()
		}
		return gen1["ok"] && gen1["doomed"] && gen1["pinned"]
	})
	r, _ := c.run(spread)
	if r.State != proto.RunRunning {
		t.Fatalf("the spread run is %s before any loss (busy nodes hold it)", r.State)
	}

	doomed.stop() // no Leave: memberlist declares them dead
	pinned.stop()
	testsupport.Eventually(t, 15*time.Second, "the spread run succeeds on ok alone", func() bool { return runState(c, spread) == proto.RunSucceeded })
	r, _ = c.run(spread)
	if r.Gen < 2 || len(r.Nodes) != 1 || r.Nodes[0] != "ok" {
		t.Fatalf("spread run after the losses: gen %d nodes %v", r.Gen, r.Nodes)
	}
	ok.mu.Lock()
	gotGen := ok.runs[spread]
	ok.mu.Unlock()
	if gotGen != r.Gen {
		t.Fatalf("ok runs gen %d of the spread run, the FSM has %d", gotGen, r.Gen)
	}
	var st proto.RunStatus
	api(t, c.HTTPAddr(), "GET", "/v1/runs/"+spread, "", nil, &st)
	for _, tk := range st.Tasks {
		if tk.State != proto.TaskDone || tk.Node != "ok" {
			t.Fatalf("task %+v: want done on ok", tk)
		}
	}

	testsupport.Eventually(t, 15*time.Second, "the stuck run fails", func() bool { return runState(c, stuck) == proto.RunFailed })
	r, _ = c.run(stuck)
	if !strings.Contains(r.Error, `task "p"`) || !strings.Contains(r.Error, "pinned") || !strings.Contains(r.Error, "lost") {
		t.Fatalf("the stuck run's error does not name the task and the lost node: %q", r.Error)
	}
}

// A node restarted under the same id (a new Boot in its metadata) before
// gossip took it for dead has lost what its old process held: the leader
// moves that part to the other nodes and leaves the new process out of the
// run; the new process is placeable once it answers a ping as itself.
func TestLeaderTreatsARestartedNodeAsLost(t *testing.T) {
	waitProbesDone(t)
	url := testsupport.NATS(t).URL()
	c := leadingCoord(t, url, nil)
	seeds := []string{c.GossipAddr()}
	startFakeNode(t, "ok", url, seeds, 1, 0, func(n *fakeNode) { n.busy = true })
	again := startFakeNode(t, "again", url, seeds, 1, 0, func(n *fakeNode) { n.busy = true })
	testsupport.Eventually(t, 10*time.Second, "two nodes alive", func() bool {
		return nodeState(c, "ok") == proto.NodeAlive && nodeState(c, "again") == proto.NodeAlive
	})
	var b strings.Builder
	b.WriteString("name: spread\ntasks:\n")
	for _, n := range []string{"a", "b", "c", "d"} {
		b.WriteString("  - {name: " + n + ", func: spin, args: {us: 1000}}\n")
	}
	var sub proto.SubmitResponse
	if code, _ := api(t, c.HTTPAddr(), "POST", "/v1/runs", "", proto.SubmitRequest{Path: "f.yaml", Flow: b.String()}, &sub); code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	if r, _ := c.run(sub.ID); len(r.Nodes) != 2 || r.Boots["again"] != "boot1" {
		t.Fatalf("run before the restart: nodes %v boots %v", r.Nodes, r.Boots)
	}
	must(t, again.ml.UpdateMeta(proto.Meta{Role: proto.RoleNode, ID: "again", CPUs: 1, Boot: "boot2"}))
	testsupport.Eventually(t, 15*time.Second, "the run moved off the restarted node", func() bool {
		r, _ := c.run(sub.ID)
		return r.Gen == 2 && len(r.Nodes) == 1 && r.Nodes[0] == "ok"
	})
	// Until the process of the new boot answers a ping, the node is
	// unverified: suspect, given no work.
	if st := nodeState(c, "again"); st != proto.NodeSuspect {
		t.Fatalf("the restarted node, its pings answered by the old boot, is %s, want suspect", st)
	}
	again.boot.Store("boot2")
	testsupport.Eventually(t, 10*time.Second, "the restarted node is alive once its new boot answers (it takes new runs)", func() bool {
		return nodeState(c, "again") == proto.NodeAlive
	})
	if code, _ := api(t, c.HTTPAddr(), "POST", "/v1/runs/"+sub.ID+"/cancel", "", nil, nil); code != http.StatusOK {
		t.Fatalf("cancel: %d", code)
	}
}

// Slow is not dead: a node gossip declares dead that still answers pings
// over NATS keeps its tasks, for as long as it answers; once NATS has no
// responder for it (its process is gone), its tasks move at once.
func TestLeaderKeepsTheTasksOfANodeThatAnswersPings(t *testing.T) {
	waitProbesDone(t)
	url := testsupport.NATS(t).URL()
	const silence = time.Second
	c := leadingCoord(t, url, func(cfg *Config) { cfg.NodeSilence = silence })
	seeds := []string{c.GossipAddr()}
	ok := startFakeNode(t, "ok", url, seeds, 1, 0, func(n *fakeNode) { n.busy = true })
	slow := startFakeNode(t, "slow", url, seeds, 1, 0, func(n *fakeNode) { n.busy = true })
	testsupport.Eventually(t, 10*time.Second, "two nodes alive", func() bool {
		return nodeState(c, "ok") == proto.NodeAlive && nodeState(c, "slow") == proto.NodeAlive
	})
	var sub proto.SubmitResponse
	flow := "name: two\ntasks:\n  - {name: a, func: spin, args: {us: 1000}, node: ok}\n  - {name: b, func: spin, args: {us: 1000}, node: slow}\n"
	if code, _ := api(t, c.HTTPAddr(), "POST", "/v1/runs", "", proto.SubmitRequest{Path: "f.yaml", Flow: flow}, &sub); code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	took := func(n *fakeNode, gen uint64) bool { n.mu.Lock(); defer n.mu.Unlock(); return n.runs[sub.ID] == gen }
	testsupport.Eventually(t, 10*time.Second, "both nodes took gen 1", func() bool { return took(ok, 1) && took(slow, 1) })

	must(t, slow.ml.Shutdown()) // gossip declares it dead; NATS still hears it
	testsupport.Eventually(t, 15*time.Second, "gossip declares slow dead", func() bool {
		m, found := c.members.Member("slow")
		return found && m.State == proto.NodeDead
	})
	testsupport.Eventually(t, 10*time.Second, "NATS refutes the death", func() bool { _, _, refuted := c.Verdicts(); return refuted >= 1 })
	for start := time.Now(); time.Since(start) < 3*silence; time.Sleep(50 * time.Millisecond) { // polling interval
		if r, _ := c.run(sub.ID); r.Gen != 1 || nodeState(c, "slow") != proto.NodeAlive {
			t.Fatalf("a node that answers pings was taken for dead: run gen %d, node %s", r.Gen, nodeState(c, "slow"))
		}
	}
	if _, confirmed, _ := c.Verdicts(); confirmed != 0 {
		t.Fatalf("%d deaths confirmed, want 0", confirmed)
	}

	slow.stopPings() // the process is gone, as NATS sees it
	testsupport.Eventually(t, 10*time.Second, "slow confirmed dead", func() bool { return nodeState(c, "slow") == proto.NodeDead })
	// b is pinned to slow: it cannot move, so the run fails naming it.
	testsupport.Eventually(t, 10*time.Second, "the run failed", func() bool { return proto.Finished(runState(c, sub.ID)) })
	if r, _ := c.run(sub.ID); r.State != proto.RunFailed || !strings.Contains(r.Error, `"b"`) {
		t.Fatalf("run after the loss: %s %q", r.State, r.Error)
	}
	if _, confirmed, _ := c.Verdicts(); confirmed != 1 {
		t.Fatalf("%d deaths confirmed, want 1", confirmed)
	}
}

// Success means done: a run whose nodes all report idle with balanced
// counters, but whose record shows a task that never ran behind a
// predecessor that did, is not marked succeeded. The leader refuses the
// verdict, counts it, probes again and, as the run stays quiet, fails it
// naming the task.
func TestLeaderRefusesASuccessVerdictWithWorkOwed(t *testing.T) {
	waitProbesDone(t)
	url := testsupport.NATS(t).URL()
	c := leadingCoord(t, url, nil)
	lossy := startFakeNode(t, "lossy", url, []string{c.GossipAddr()}, 1, 0, func(n *fakeNode) { n.lose = "b" })
	testsupport.Eventually(t, 10*time.Second, "the node is alive", func() bool { return nodeState(c, "lossy") == proto.NodeAlive })
	_ = lossy
	var sub proto.SubmitResponse
	flow := "name: chain\ntasks:\n  - {name: a, func: noop}\n  - {name: b, func: noop, succeed: [a]}\n  - {name: c, func: noop, succeed: [b]}\n"
	if code, _ := api(t, c.HTTPAddr(), "POST", "/v1/runs", "", proto.SubmitRequest{Path: "f.yaml", Flow: flow}, &sub); code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	testsupport.Eventually(t, 60*time.Second, "the run ends", func() bool { return proto.Finished(runState(c, sub.ID)) })
	r, _ := c.run(sub.ID)
	if r.State != proto.RunFailed || !strings.Contains(r.Error, "task b: never ran") || !strings.Contains(r.Error, "internal error") {
		t.Fatalf("run: %s %q, want failed naming task b", r.State, r.Error)
	}
	if refused, _, _ := c.Verdicts(); refused < maxRefusals {
		t.Fatalf("%d verdicts refused, want %d", refused, maxRefusals)
	}
	var metrics string
	resp, err := http.Get("http://" + c.HTTPAddr() + "/metrics")
	must(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics = string(b)
	if !strings.Contains(metrics, "hetflow_verdicts_refused_total 5") {
		t.Fatalf("/metrics lacks hetflow_verdicts_refused_total 5:\n%s", grepLines(metrics, "verdicts"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
