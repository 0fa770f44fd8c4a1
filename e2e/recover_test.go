package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// getJSON GETs url into v; false on any failure (for polling).
func getJSON(url string, v any) bool {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(v) == nil
}

// api is a coordinator's base URL (c1, which bootstrapped).
func (c *cluster) api() string {
	s := strings.Split(c.servers, ",")
	return s[len(s)-1]
}

func (c *cluster) nodeState(id string) string {
	var ns []proto.NodeInfo
	if !getJSON(c.api()+"/v1/nodes", &ns) {
		return ""
	}
	for _, n := range ns {
		if n.ID == id {
			return n.State
		}
	}
	return ""
}

func task(st proto.RunStatus, name string) proto.TaskStatus {
	for _, tk := range st.Tasks {
		if tk.Name == name {
			return tk
		}
	}
	return proto.TaskStatus{}
}

// loss is what one run that loses a node measured.
type loss struct {
	victim  string
	before  proto.RunStatus // just before the signal
	final   proto.RunStatus
	detect  time.Duration // signal → GET /v1/nodes shows the victim dead
	resumed time.Duration // signal → the loop's task reports from its new node
	done    time.Duration // signal → the run has ended
}

// runLosingNode submits testdata/recover.yaml, waits until the loop has run
// 3 rounds, sends sig to the loop's node and follows the run to its end.
// With SIGSTOP the node is continued once its tasks have moved; with 0 no
// node is lost (the baseline).
func runLosingNode(t *testing.T, c *cluster, sig syscall.Signal) loss {
	t.Helper()
	out, code := cli(t, "submit", "--json", "--server", c.servers, "testdata/recover.yaml")
	if code != 0 {
		t.Fatalf("submit: exit %d: %s", code, out)
	}
	var sub proto.SubmitResponse
	if err := json.Unmarshal([]byte(out), &sub); err != nil {
		t.Fatalf("submit output %q: %v", out, err)
	}
	status := func() (st proto.RunStatus, ok bool) {
		ok = getJSON(c.api()+"/v1/runs/"+sub.ID, &st)
		return st, ok
	}
	var l loss
	testsupport.Eventually(t, 30*time.Second, "the loop's third round", func() bool {
		st, ok := status()
		b := task(st, "body")
		if ok && st.State == proto.RunRunning && b.Activations >= 3 && b.Node != "" {
			l.before, l.victim = st, b.Node
			return true
		}
		if proto.Finished(st.State) {
			t.Fatalf("the run ended before the loss: %+v", st)
		}
		return false
	})
	var victim *proc
	for _, p := range c.nodes {
		if p.name == l.victim {
			victim = p
		}
	}
	if victim == nil {
		t.Fatalf("the loop ran on %q, no node of the cluster", l.victim)
	}
	sent := sig
	t0 := time.Now()
	if sig == 0 { // undisturbed: the baseline
		for {
			if st, ok := status(); ok && proto.Finished(st.State) {
				l.done, l.final = time.Since(t0), st
				t.Logf("undisturbed: the run ended %v after the loop's third round", l.done.Round(time.Millisecond))
				return l
			}
			if time.Since(t0) > 60*time.Second {
				t.Fatal("the undisturbed run did not end in 60s")
			}
			time.Sleep(20 * time.Millisecond) // polling interval
		}
	}
	if err := victim.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	for l.done == 0 {
		if time.Since(t0) > 60*time.Second {
			t.Fatalf("the run did not end within 60s of losing %s", l.victim)
		}
		if l.detect == 0 && c.nodeState(l.victim) == proto.NodeDead {
			l.detect = time.Since(t0)
		}
		if st, ok := status(); ok {
			if l.resumed == 0 && l.detect != 0 {
				if n := task(st, "body").Node; n != "" && n != l.victim {
					l.resumed = time.Since(t0)
				}
			}
			if proto.Finished(st.State) {
				l.done, l.final = time.Since(t0), st
				if l.resumed == 0 {
					l.resumed = l.done
				}
			}
		}
		if sig == syscall.SIGSTOP && l.resumed != 0 {
			_ = victim.cmd.Process.Signal(syscall.SIGCONT)
			sig = syscall.SIGCONT
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	if sig == syscall.SIGSTOP {
		_ = victim.cmd.Process.Signal(syscall.SIGCONT)
	}
	t.Logf("lost %s (%v) after %d rounds: detected in %v, the loop resumed on a live node %v after the signal, run ended %v after it",
		l.victim, sent, task(l.before, "body").Activations, l.detect.Round(time.Millisecond), l.resumed.Round(time.Millisecond), l.done.Round(time.Millisecond))
	if l.detect == 0 {
		t.Errorf("GET /v1/nodes never showed %s dead", l.victim)
	}
	return l
}

// checkRecovered compares a run that lost a node with the one-process run.
func checkRecovered(t *testing.T, l loss, ref proto.RunStatus) {
	t.Helper()
	if l.final.State != proto.RunSucceeded {
		t.Fatalf("run after losing %s: %s %s", l.victim, l.final.State, l.final.Error)
	}
	if len(l.final.Tasks) != len(ref.Tasks) {
		t.Fatalf("task sets differ: %d vs %d", len(l.final.Tasks), len(ref.Tasks))
	}
	for _, want := range ref.Tasks {
		got := task(l.final, want.Name)
		if got.State != want.State || got.Activations != want.Activations || got.Output != want.Output {
			t.Errorf("task %s: %s a=%d out=%s, one process: %s a=%d out=%s", want.Name,
				got.State, got.Activations, got.Output, want.State, want.Activations, want.Output)
		}
	}
	// What had finished on live nodes before the loss did not run again.
	for _, b := range l.before.Tasks {
		if b.State != "done" || b.Node == l.victim || b.Node == "" {
			continue
		}
		got := task(l.final, b.Name)
		if got.Node != b.Node || got.Executions != got.Activations {
			t.Errorf("task %s finished on live %s before the loss: now on %s, executions %d, activations %d",
				b.Name, b.Node, got.Node, got.Executions, got.Activations)
		}
	}
}

func TestLoopbackRecoversFromLostNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := startCluster(t)
	out, code := cli(t, "dev", "--json", "--nodes", "1", "testdata/recover.yaml")
	if code != 0 {
		t.Fatalf("dev: exit %d", code)
	}
	refs := parseStatuses(t, out)
	if len(refs) != 1 || refs[0].State != proto.RunSucceeded {
		t.Fatalf("one-process run: %+v", refs)
	}
	ref := refs[0]
	base := runLosingNode(t, c, 0)
	checkRecovered(t, base, ref)

	t.Run("SIGKILL", func(t *testing.T) {
		l := runLosingNode(t, c, syscall.SIGKILL)
		used := map[string]bool{}
		for _, tk := range append(l.before.Tasks, l.final.Tasks...) {
			if tk.Node != "" {
				used[tk.Node] = true
			}
		}
		if len(used) != 3 {
			t.Errorf("tasks ran on %v, want all three nodes", used)
		}
		checkRecovered(t, l, ref)
	})
	if t.Failed() {
		return
	}
	t.Run("SIGSTOP", func(t *testing.T) {
		l := runLosingNode(t, c, syscall.SIGSTOP)
		checkRecovered(t, l, ref)
		// The frozen node comes back alive and empty: it learnt it lost its
		// tasks (Cancel in answer to its old-generation reports).
		var h string
		for i, p := range c.nodes {
			if p.name == l.victim {
				h = c.nodeHTTP[i]
			}
		}
		testsupport.Eventually(t, 30*time.Second, l.victim+" alive again and holding no run", func() bool {
			return c.nodeState(l.victim) == proto.NodeAlive && gauge(h, "hetflow_node_runs_active") == 0
		})
	})
}
