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
)

// The dashboard is mounted at / and /ui/, checks the API token itself (as
// a Bearer header, or once as ?token= and then as its cookie), and reads the
// coordinator's FSM and event stream; the cookie does not open the API.
func TestDashboardMountedWithTheAPIToken(t *testing.T) {
	url := startNATS(t)
	const tok = "0123456789abcdef"
	c := startCoord(t, "c1", t.TempDir(), url, true, nil, func(cfg *Config) { cfg.Secret = proto.Secret{APIToken: tok} })
	must(t, c.WaitLeader(ctxFor(t, 20*time.Second)))
	eventually(t, 10*time.Second, "leader", c.Leader)
	startFakeNode(t, "n1", url, []string{c.GossipAddr()}, 2, 0, nil)
	eventually(t, 10*time.Second, "n1 alive", func() bool { return nodeState(c, "n1") == proto.NodeAlive })
	addr := c.HTTPAddr()
	var sub proto.SubmitResponse
	if code, _ := api(t, addr, "POST", "/v1/runs", tok, proto.SubmitRequest{Path: "f.yaml", Flow: "name: f\ntasks:\n  - {name: a, func: noop}\n  - {name: b, func: noop, succeed: [a]}\n"}, &sub); code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	eventually(t, 10*time.Second, "the run succeeds", func() bool { return runState(c, sub.ID) == proto.RunSucceeded })

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
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "event: summary\n") || !strings.HasSuffix(body, "event: end\ndata: {}\n\n") {
		t.Fatalf("run events: %d %q", resp.StatusCode, body)
	}
	if resp, _ := do("POST", "/ui/runs/"+sub.ID+"/cancel", "Cookie", cookie, "X-Hetflow-UI", "1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel of an ended run: %d", resp.StatusCode)
	}
	if st := runState(c, sub.ID); st != proto.RunSucceeded {
		t.Fatalf("cancelling an ended run changed it to %s", st)
	}
}
