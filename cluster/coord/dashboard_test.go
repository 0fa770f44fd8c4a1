package coord

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/dashboard"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// The dashboard is mounted at / and /ui/, checks the API token itself (as
// a Bearer header, or once as ?token= and then as its cookie), and reads the
// coordinator's FSM and event stream; the cookie does not open the API.
func TestDashboardMountedWithTheAPIToken(t *testing.T) {
	url := testsupport.NATS(t).URL()
	const tok = "0123456789abcdef"
	c := leadingCoord(t, url, func(cfg *Config) { cfg.Secret = proto.Secret{APIToken: tok} })
	startFakeNode(t, "n1", url, []string{c.GossipAddr()}, 2, 0, nil)
	testsupport.Eventually(t, 10*time.Second, "n1 alive", func() bool { return nodeState(c, "n1") == proto.NodeAlive })
	addr := c.HTTPAddr()
	var sub proto.SubmitResponse
	if code, _ := api(t, addr, "POST", "/v1/runs", tok, proto.SubmitRequest{Path: "f.yaml", Flow: "name: f\ntasks:\n  - {name: a, func: noop}\n  - {name: b, func: noop, succeed: [a]}\n"}, &sub); code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	testsupport.Eventually(t, 10*time.Second, "the run succeeds", func() bool { return runState(c, sub.ID) == proto.RunSucceeded })

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, nil)
		must(t, err)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := noRedirect.Do(req)
		must(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if resp, body := do("GET", "/"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "API token required") {
		t.Fatalf("GET / without a token: %d %q", resp.StatusCode, body)
	}
	resp, _ := do("GET", "/?token="+tok)
	ck := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(ck) != 1 || !ck[0].HttpOnly {
		t.Fatalf("GET /?token=: %d %v", resp.StatusCode, ck)
	}
	cookie := ck[0].Name + "=" + ck[0].Value
	if resp, body := do("GET", "/", "Cookie", cookie); resp.StatusCode != http.StatusOK || !strings.Contains(body, "/ui/static/app.js") {
		t.Fatalf("GET / with the cookie: %d", resp.StatusCode)
	}
	if resp, _ := do("GET", "/v1/runs", "Cookie", cookie); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the cookie opened the API: %d", resp.StatusCode)
	}
	resp, body := do("GET", "/ui/overview.json", "Authorization", "Bearer "+tok)
	var o dashboard.Overview
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &o) != nil {
		t.Fatalf("overview: %d %s", resp.StatusCode, body)
	}
	if len(o.Coordinators) != 1 || !o.Coordinators[0].Leader || o.Coordinators[0].State != proto.NodeAlive || o.Term == 0 {
		t.Errorf("coordinators: term %d %+v", o.Term, o.Coordinators)
	}
	if len(o.Nodes) != 1 || o.Nodes[0].ID != "n1" || o.Nodes[0].CPUs != 2 {
		t.Errorf("nodes: %+v", o.Nodes)
	}
	if len(o.Runs) != 1 || o.Runs[0].ID != sub.ID || o.Runs[0].State != proto.RunSucceeded || o.Runs[0].Done != 2 || o.Runs[0].Progress != 1 {
		t.Errorf("runs: %+v", o.Runs)
	}
	resp, body = do("GET", "/ui/runs/"+sub.ID+"/graph.svg", "Cookie", cookie)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-state="done" data-task="a" data-node="n1"`) || !strings.Contains(body, `data-task="b"`) {
		t.Fatalf("graph: %d %s", resp.StatusCode, body)
	}
	resp, body = do("GET", "/ui/runs/"+sub.ID+"/trace.json", "Cookie", cookie)
	if resp.StatusCode != http.StatusOK || strings.Count(body, `"ph":"X"`) != 2 {
		t.Fatalf("trace: %d %s", resp.StatusCode, body)
	}
	// The event stream flushes through the server's middleware: the summary,
	// then (the run has ended) "end".
	resp, body = do("GET", "/ui/runs/"+sub.ID+"/events", "Cookie", cookie)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "event: summary\n") || !strings.Contains(body, `"tasks":2,"pending":0,"running":0,"done":2`) || !strings.HasSuffix(body, "event: end\ndata: {}\n\n") {
		t.Fatalf("run events: %d %q", resp.StatusCode, body)
	}
	if resp, _ := do("POST", "/ui/runs/"+sub.ID+"/cancel", "Cookie", cookie, "X-Hetflow-UI", "1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel of an ended run: %d", resp.StatusCode)
	}
	if st := runState(c, sub.ID); st != proto.RunSucceeded {
		t.Fatalf("cancelling an ended run changed it to %s", st)
	}
}

// On a follower the dashboard reads locally and sends a cancel to the
// leader with the cluster's token.
func TestDashboardOnAFollowerCancelsThroughTheLeader(t *testing.T) {
	url := testsupport.NATS(t).URL()
	const tok = "fedcba9876543210"
	sec := func(cfg *Config) { cfg.Secret = proto.Secret{APIToken: tok} }
	c1 := startCoord(t, "c1", t.TempDir(), url, true, nil, sec)
	seeds := []string{c1.GossipAddr()}
	c2 := startCoord(t, "c2", t.TempDir(), url, false, seeds, sec)
	all := []*Server{c1, c2}
	must(t, c1.WaitLeader(ctxFor(t, 20*time.Second)))
	testsupport.Eventually(t, 20*time.Second, "two voters", func() bool { l := leaderOf(all); return l != nil && voters(l) == 2 })
	busy := startFakeNode(t, "busy", url, seeds, 1, 0, func(n *fakeNode) { n.busy = true })
	l := leaderOf(all)
	f := c1
	if f == l {
		f = c2
	}
	testsupport.Eventually(t, 10*time.Second, "both see the node", func() bool {
		return nodeState(c1, "busy") == proto.NodeAlive && nodeState(c2, "busy") == proto.NodeAlive
	})
	var sub proto.SubmitResponse
	if code, _ := api(t, l.HTTPAddr(), "POST", "/v1/runs", tok, proto.SubmitRequest{Path: "f.yaml", Flow: "name: f\ntasks:\n  - {name: a, func: noop}\n"}, &sub); code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	testsupport.Eventually(t, 10*time.Second, "the node took the run", func() bool { busy.mu.Lock(); defer busy.mu.Unlock(); return busy.runs[sub.ID] == 1 })
	testsupport.Eventually(t, 10*time.Second, "the follower has the run", func() bool { return runState(f, sub.ID) == proto.RunRunning })

	req, err := http.NewRequest("GET", "http://"+f.HTTPAddr()+"/ui/overview.json", nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	var o dashboard.Overview
	err = json.NewDecoder(resp.Body).Decode(&o)
	resp.Body.Close()
	must(t, err)
	leaders := 0
	for _, c := range o.Coordinators {
		if c.Leader {
			leaders++
			if c.ID != l.ID() {
				t.Errorf("the follower's overview names %s the leader, want %s", c.ID, l.ID())
			}
		}
	}
	if len(o.Coordinators) != 2 || leaders != 1 || len(o.Runs) != 1 || o.Runs[0].State != proto.RunRunning {
		t.Fatalf("the follower's overview: %+v", o)
	}

	// The follower forwards the cancel to where the leader serves, which
	// it learns from gossip a little after it has the run (until then it
	// answers 503 "no leader"), as in TestAPIOverTLS.
	testsupport.Eventually(t, 20*time.Second, "the follower knows the leader's API", func() bool {
		var li proto.LeaderInfo
		code, _ := api(t, f.HTTPAddr(), "GET", "/v1/leader", tok, nil, &li)
		return code == http.StatusOK && li.ID == l.ID() && li.HTTP != ""
	})
	req, err = http.NewRequest("POST", "http://"+f.HTTPAddr()+"/ui/runs/"+sub.ID+"/cancel", nil)
	must(t, err)
	req.Header.Set("Cookie", dashboard.CookieName+"="+tok)
	req.Header.Set("X-Hetflow-UI", "1")
	resp, err = http.DefaultClient.Do(req)
	must(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel through the follower: %d %s", resp.StatusCode, b)
	}
	testsupport.Eventually(t, 10*time.Second, "the run is cancelled on the leader", func() bool { return runState(l, sub.ID) == proto.RunCancelled })
	testsupport.Eventually(t, 5*time.Second, "the node is told", func() bool { return busy.cancelled(sub.ID) == proto.RunCancelled })
}
