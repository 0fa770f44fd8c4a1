package coord

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

const wideFlow = `
name: wide
tasks:
  - {name: a, func: hash, node: n1}
  - {name: b, func: hash, succeed: [a], node: n2}
  - {name: c, func: hash, succeed: [a]}
  - {name: d, func: hash, succeed: [b, c]}
`

func TestThreeCoordinators(t *testing.T) {
	url := testsupport.NATS(t).URL()
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	c1 := startCoord(t, "c1", dirs[0], url, true, nil, nil)
	seeds := []string{c1.GossipAddr()}
	c2 := startCoord(t, "c2", dirs[1], url, false, seeds, nil)
	c3 := startCoord(t, "c3", dirs[2], url, false, seeds, nil)
	all := []*Server{c1, c2, c3}
	must(t, c1.WaitLeader(ctxFor(t, 20*time.Second)))
	testsupport.Eventually(t, 20*time.Second, "three voters", func() bool { l := leaderOf(all); return l != nil && voters(l) == 3 })
	n1 := startFakeNode(t, "n1", url, seeds, 2, 0, nil)
	n2 := startFakeNode(t, "n2", url, seeds, 2, 0, nil)
	for _, s := range all {
		testsupport.Eventually(t, 10*time.Second, s.ID()+" sees both nodes alive", func() bool {
			return nodeState(s, "n1") == proto.NodeAlive && nodeState(s, "n2") == proto.NodeAlive
		})
	}

	// Submit through a follower: forwarded to the leader, committed, visible everywhere.
	var follower *Server
	for _, s := range all {
		if !s.Leader() {
			follower = s
			break
		}
	}
	// The follower forwards to the leader's HTTP address, which it learns
	// from gossip (until then it answers 503 "no leader").
	testsupport.Eventually(t, 20*time.Second, follower.ID()+" knows the leader's API", func() bool {
		var li proto.LeaderInfo
		code, _ := api(t, follower.HTTPAddr(), "GET", "/v1/leader", "", nil, &li)
		return code == http.StatusOK && li.HTTP != ""
	})
	var sub proto.SubmitResponse
	code, hdr := api(t, follower.HTTPAddr(), "POST", "/v1/runs", "", proto.SubmitRequest{Path: "wide.yaml", Flow: wideFlow}, &sub)
	if code != http.StatusCreated || sub.ID == "" || hdr.Get(HeaderForwardedBy) != follower.ID() {
		t.Fatalf("submit through %s: %d %+v forwarded-by %q", follower.ID(), code, sub, hdr.Get(HeaderForwardedBy))
	}
	if !strings.HasPrefix(sub.ID, "r") || len(sub.ID) != 21 {
		t.Fatalf("run id %q does not follow the protocol", sub.ID)
	}
	for _, s := range all {
		testsupport.Eventually(t, 10*time.Second, s.ID()+" has the run succeeded", func() bool { return runState(s, sub.ID) == proto.RunSucceeded })
	}
	var st proto.RunStatus
	if code, _ := api(t, follower.HTTPAddr(), "GET", "/v1/runs/"+sub.ID, "", nil, &st); code != http.StatusOK {
		t.Fatalf("status: %d", code)
	}
	if st.State != proto.RunSucceeded || st.Flow != "wide" || len(st.Tasks) != 4 {
		t.Fatalf("status %+v", st)
	}
	for _, ts := range st.Tasks {
		if ts.State != proto.TaskDone || ts.Activations != 1 || ts.Executions != 1 || ts.Node == "" {
			t.Fatalf("task %+v", ts)
		}
		if (ts.Name == "d") != (ts.Output != "") {
			t.Fatalf("only the sink d has an output: %+v", ts)
		}
		if (ts.Name == "a" && ts.Node != "n1") || (ts.Name == "b" && ts.Node != "n2") {
			t.Fatalf("pin not honoured: %+v", ts)
		}
	}
	if n1.cancelled(sub.ID) != "finished" || n2.cancelled(sub.ID) != "finished" {
		testsupport.Eventually(t, 5*time.Second, "both nodes released with reason finished", func() bool {
			return n1.cancelled(sub.ID) == "finished" && n2.cancelled(sub.ID) == "finished"
		})
	}

	// The leader dies: a new one is elected and the run is still there.
	old := leaderOf(all)
	oldIdx := 0
	for i, s := range all {
		if s == old {
			oldIdx = i
		}
	}
	killed := time.Now()
	must(t, old.Close())
	all[oldIdx] = nil
	var nl *Server
	testsupport.Eventually(t, 15*time.Second, "a new leader", func() bool { nl = leaderOf(all); return nl != nil })
	t.Logf("new leader %s %v after the old one closed", nl.ID(), time.Since(killed).Round(time.Millisecond))
	if runState(nl, sub.ID) != proto.RunSucceeded {
		t.Fatalf("the run is gone on the new leader: %q", runState(nl, sub.ID))
	}
	var sub2 proto.SubmitResponse
	code, _ = api(t, nl.HTTPAddr(), "POST", "/v1/runs", "", proto.SubmitRequest{Path: "wide.yaml", Flow: wideFlow}, &sub2)
	if code != http.StatusCreated {
		t.Fatalf("submit to the new leader: %d", code)
	}
	testsupport.Eventually(t, 10*time.Second, "the second run succeeds", func() bool { return runState(nl, sub2.ID) == proto.RunSucceeded })

	// The old leader comes back from its data dir; --bootstrap again is a no-op.
	var seed string
	for _, s := range all {
		if s != nil {
			seed = s.GossipAddr()
		}
	}
	back := startCoord(t, old.ID(), dirs[oldIdx], url, true, []string{seed}, nil)
	all[oldIdx] = back
	testsupport.Eventually(t, 15*time.Second, "the restarted coordinator catches up", func() bool {
		return runState(back, sub.ID) == proto.RunSucceeded && runState(back, sub2.ID) == proto.RunSucceeded
	})
	testsupport.Eventually(t, 10*time.Second, "still one leader among three voters", func() bool {
		l := leaderOf(all)
		return l != nil && voters(l) == 3
	})
	n := 0
	for _, s := range all {
		if s.Leader() {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d leaders", n)
	}

	// Peers: a live coordinator cannot be removed; an unknown one is 404.
	l := leaderOf(all)
	var other *Server
	for _, s := range all {
		if s != l {
			other = s
		}
	}
	var er proto.ErrorResponse
	if code, _ := api(t, other.HTTPAddr(), "DELETE", "/v1/peers/"+other.ID(), "", nil, &er); code != http.StatusConflict {
		t.Fatalf("removing a live peer: %d %+v", code, er)
	}
	if code, _ := api(t, other.HTTPAddr(), "DELETE", "/v1/peers/nobody", "", nil, nil); code != http.StatusNotFound {
		t.Fatalf("removing an unknown peer: %d", code)
	}
	var li proto.LeaderInfo
	if code, _ := api(t, other.HTTPAddr(), "GET", "/v1/leader", "", nil, &li); code != http.StatusOK || li.ID != l.ID() || li.HTTP != l.HTTPAddr() || li.Term == 0 {
		t.Fatalf("leader: %d %+v", code, li)
	}
}

func TestRunOutcomes(t *testing.T) {
	url := testsupport.NATS(t).URL()
	secret, err := proto.DeriveSecret([]byte("a cluster secret for the tests"))
	must(t, err)
	tok := secret.APIToken
	c := leadingCoord(t, url, func(cfg *Config) {
		cfg.Secret = proto.Secret{APIToken: tok}
		// Longer than the test takes to list the runs on a loaded machine
		// (at 3 s the first runs were pruned before the listing, at load 18).
		cfg.Retention = 10 * time.Second
	})
	seeds := []string{c.GossipAddr()}
	startFakeNode(t, "ok", url, seeds, 4, 1, nil)
	bad := startFakeNode(t, "bad", url, seeds, 1, 0, func(n *fakeNode) { n.failTask = "x" })
	busy := startFakeNode(t, "busy", url, seeds, 1, 0, func(n *fakeNode) { n.busy = true })
	testsupport.Eventually(t, 10*time.Second, "three nodes alive", func() bool {
		return nodeState(c, "ok") == proto.NodeAlive && nodeState(c, "bad") == proto.NodeAlive && nodeState(c, "busy") == proto.NodeAlive
	})
	addr := c.HTTPAddr()
	submit := func(flow string) string {
		t.Helper()
		var sub proto.SubmitResponse
		if code, _ := api(t, addr, "POST", "/v1/runs", tok, proto.SubmitRequest{Path: "f.yaml", Flow: flow}, &sub); code != http.StatusCreated {
			t.Fatalf("submit: %d", code)
		}
		return sub.ID
	}
	status := func(id string) proto.RunStatus {
		var st proto.RunStatus
		api(t, addr, "GET", "/v1/runs/"+id, tok, nil, &st)
		return st
	}

	// Auth: without the token (or with another) every call is 401 with a JSON
	// error and a submit runs nothing; /healthz answers but tells nothing.
	for _, c := range []struct{ method, path, token string }{
		{"GET", "/v1/runs", ""}, {"POST", "/v1/runs", ""}, {"POST", "/v1/runs", "wrong"}, {"POST", "/v1/runs", tok + "x"},
		{"POST", "/v1/runs/rx/cancel", "wrong"}, {"GET", "/v1/nodes", ""}, {"GET", "/v1/peers", "wrong"},
		{"DELETE", "/v1/peers/c1", ""}, {"GET", "/v1/leader", ""}, {"GET", "/metrics", ""}, {"GET", "/metrics", "wrong"},
	} {
		var er proto.ErrorResponse
		if code, _ := api(t, addr, c.method, c.path, c.token, proto.SubmitRequest{Path: "w.yaml", Flow: wideFlow}, &er); code != http.StatusUnauthorized || er.Error != proto.ErrUnauthorized.Error() {
			t.Fatalf("%s %s with token %q: %d %+v", c.method, c.path, c.token, code, er)
		}
	}
	var none []proto.RunSummary
	if code, _ := api(t, addr, "GET", "/v1/runs", tok, nil, &none); code != http.StatusOK || len(none) != 0 {
		t.Fatalf("unauthorised submits made runs: %d %+v", code, none)
	}
	c.fsm.read(func(f *FSM) {
		if n := len(f.Runs()); n != 0 {
			t.Fatalf("the FSM holds %d runs after unauthorised submits", n)
		}
	})
	var health map[string]string
	if code, _ := api(t, addr, "GET", "/healthz", "", nil, &health); code != http.StatusOK || len(health) != 1 || health["status"] != "ok" {
		t.Fatalf("healthz without a token: %d %v", code, health)
	}
	if code, _ := api(t, addr, "GET", "/healthz", tok, nil, &health); code != http.StatusOK || health["id"] != "c1" || health["state"] != "leader" {
		t.Fatalf("healthz with the token: %d %v", code, health)
	}

	// Invalid flows: 400 with the problems.
	var er proto.ErrorResponse
	code, _ := api(t, addr, "POST", "/v1/runs", tok, proto.SubmitRequest{Path: "bad.yaml", Flow: "name: f\ntasks:\n  - {name: a, func: nosuch}\n  - {name: b, func: noop, node: ghost}\n"}, &er)
	if code != http.StatusBadRequest || len(er.Problems) != 2 || !strings.Contains(er.Problems[0], "bad.yaml:3") || !strings.Contains(strings.Join(er.Problems, " "), "ghost") {
		t.Fatalf("invalid flow: %d %+v", code, er)
	}
	code, _ = api(t, addr, "POST", "/v1/runs", tok, proto.SubmitRequest{Path: "g.yaml", Flow: "name: g\ntasks:\n  - {name: s, func: saxpy, domain: gpu, device: 3}\n"}, &er)
	if code != http.StatusBadRequest {
		t.Fatalf("a GPU the cluster lacks: %d %+v", code, er)
	}
	if code, _ := api(t, addr, "GET", "/v1/runs/rnope", tok, nil, &er); code != http.StatusNotFound {
		t.Fatalf("unknown run: %d", code)
	}

	// A task fails: the run fails naming it, the nodes are released.
	failed := submit("name: f\ntasks:\n  - {name: a, func: noop, node: ok}\n  - {name: x, func: fail, succeed: [a], node: bad}\n")
	testsupport.Eventually(t, 10*time.Second, "the run fails", func() bool { return status(failed).State == proto.RunFailed })
	if st := status(failed); st.Error != "task x: boom" {
		t.Fatalf("failed run: %+v", st)
	}
	testsupport.Eventually(t, 5*time.Second, "bad is released", func() bool { return bad.cancelled(failed) == proto.RunFailed })

	// A run that never goes idle times out.
	slow := submit("name: slow\ntimeout: 1s\ntasks:\n  - {name: a, func: noop, node: busy}\n")
	testsupport.Eventually(t, 10*time.Second, "the run times out", func() bool { return status(slow).State == proto.RunFailed })
	if st := status(slow); st.Error != "timed out after 1s" {
		t.Fatalf("timed-out run: %+v", st)
	}

	// A user cancel.
	long := submit("name: long\ntasks:\n  - {name: a, func: noop, node: busy}\n  - {name: b, func: noop, node: busy, succeed: [a]}\n")
	testsupport.Eventually(t, 5*time.Second, "busy took the run", func() bool { busy.mu.Lock(); defer busy.mu.Unlock(); return busy.runs[long] == 1 })
	var cst proto.RunStatus
	if code, _ := api(t, addr, "POST", "/v1/runs/"+long+"/cancel", tok, nil, &cst); code != http.StatusOK || cst.State != proto.RunCancelled {
		t.Fatalf("cancel: %d %+v", code, cst)
	}
	testsupport.Eventually(t, 5*time.Second, "busy is told to cancel", func() bool { return busy.cancelled(long) == proto.RunCancelled })
	if code, _ := api(t, addr, "POST", "/v1/runs/"+long+"/cancel", tok, nil, &cst); code != http.StatusOK || cst.State != proto.RunCancelled {
		t.Fatalf("a second cancel: %d %+v", code, cst)
	}

	// Listings and metrics.
	var runs []proto.RunSummary
	api(t, addr, "GET", "/v1/runs", tok, nil, &runs)
	if len(runs) != 3 || runs[0].Finished == nil {
		t.Fatalf("runs: %+v", runs)
	}
	var nodes []proto.NodeInfo
	api(t, addr, "GET", "/v1/nodes", tok, nil, &nodes)
	if len(nodes) != 3 || nodes[2].ID != "ok" || nodes[2].CPUs != 4 || nodes[2].GPUs != 1 || nodes[2].State != proto.NodeAlive {
		t.Fatalf("nodes: %+v", nodes)
	}
	req, err := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`hetflow_coord_runs{state="failed"} 2`, `hetflow_coord_runs{state="cancelled"} 1`, `hetflow_coord_nodes{state="alive"} 3`,
		`hetflow_coord_leader 1`, `hetflow_coord_raft_state{state="leader"} 1`, `hetflow_coord_http_requests_total{code="401",method="GET",route="other"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// Finished runs go after the retention.
	testsupport.Eventually(t, 30*time.Second, "finished runs pruned", func() bool {
		_, a := c.run(failed)
		_, b := c.run(long)
		return !a && !b
	})
}
