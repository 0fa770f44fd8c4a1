package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// slowFlow runs for a few seconds with tasks on every node, cross-node
// edges and a loop whose body and condition sit on different nodes, so a
// failure can be injected while it runs.
const slowFlow = `name: slow
tasks:
  - {name: a, func: hash, node: n1}
  - {name: w1, func: sleep, args: {ms: 700}, succeed: [a], node: n2}
  - {name: body, func: sleep, args: {ms: 250}, succeed: [w1], node: n3}
  - {name: cond, kind: condition, func: loop, args: {n: 4}, succeed: [body], precede: [body, w2], node: n1}
  - {name: w2, func: sleep, args: {ms: 700}, node: n2}
  - {name: side, func: hash, succeed: [a], node: n2}
  - {name: end, func: hash, succeed: [w2, side], node: n3}
`

func writeFlow(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// reference runs a flow file, unpinned, in one process with one node.
func reference(t *testing.T, path string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw = []byte(strings.NewReplacer(", node: n1", "", ", node: n2", "", ", node: n3", "").Replace(string(nodePin.ReplaceAll(raw, nil))))
	single := writeFlow(t, "single-"+filepath.Base(path), string(raw))
	out, code := cli(t, "dev", "--json", "--nodes", "1", "--sim-gpus", "-1", single)
	ref := parseStatuses(t, out)
	if code != 0 || len(ref) != 1 || ref[0].State != proto.RunSucceeded {
		t.Fatalf("one-process run: exit %d, %+v", code, ref)
	}
	return summary(ref[0])
}

func sameAsReference(t *testing.T, got proto.RunStatus, ref map[string]string) {
	t.Helper()
	a := summary(got)
	if len(a) != len(ref) {
		t.Fatalf("task sets differ:\n cluster %v\n single  %v", a, ref)
	}
	for name, s := range ref {
		if a[name] != s {
			t.Errorf("task %s: cluster %q, one process %q", name, a[name], s)
		}
	}
}

// waitStatus polls a run until fn accepts its status.
func waitStatus(t *testing.T, servers, id string, d time.Duration, what string, fn func(proto.RunStatus) bool) proto.RunStatus {
	t.Helper()
	var last proto.RunStatus
	testsupport.EventuallyState(t, d, what, func() (bool, string) {
		out, code := poll(t, "status", "--json", "--server", servers, id)
		var st proto.RunStatus
		if (code == 0 || code == 1) && json.Unmarshal([]byte(out), &st) == nil {
			last = st
			if fn(st) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("status %+v", last)
	})
	return last
}

func ended(st proto.RunStatus) bool { return proto.Finished(st.State) }

func taskState(st proto.RunStatus, name string) string {
	for _, tk := range st.Tasks {
		if tk.Name == name {
			return tk.State
		}
	}
	return ""
}

func submit(t *testing.T, servers, path string) string {
	t.Helper()
	out, code := cli(t, "submit", "--json", "--server", servers, path)
	var r proto.SubmitResponse
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.ID == "" {
		t.Fatalf("submit %s: exit %d, %q", path, code, out)
	}
	return r.ID
}

// leaderOf asks one coordinator whom it follows ("" when it cannot say).
func leaderOf(url string) string {
	hc := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := hc.Get(url + "/v1/leader")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var li proto.LeaderInfo
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&li) != nil {
		return ""
	}
	return li.ID
}

// TestLoopbackLeaderDiesMidRun: SIGKILL the leader coordinator while one
// run is half done and another was submitted a moment before. A new leader
// comes within 3 s, both runs finish with the outputs of a one-process run,
// and the CLI, given the dead leader first, finds the new one by itself.
func TestLoopbackLeaderDiesMidRun(t *testing.T) {
	c := startCluster(t)
	path := writeFlow(t, "slow.yaml", slowFlow)
	ref := reference(t, path)

	first := submit(t, c.servers, path)
	waitStatus(t, c.servers, first, 30*time.Second, "w1 running", func(st proto.RunStatus) bool {
		return taskState(st, "a") == proto.TaskDone
	})
	old := leaderOf(c.https[0])
	var dead *proc
	var deadURL string
	var rest []string
	for i, p := range c.coords {
		if p.name == old {
			dead, deadURL = p, c.https[i]
		} else {
			rest = append(rest, c.https[i])
		}
	}
	if dead == nil {
		t.Fatalf("no coordinator named %q leads", old)
	}
	second := submit(t, c.servers, path) // just before the leader dies
	killed := time.Now()
	dead.stop(syscall.SIGKILL, 10*time.Second)

	var elected time.Duration
	testsupport.Eventually(t, 10*time.Second, "a new leader", func() bool {
		for _, u := range rest {
			if l := leaderOf(u); l != "" && l != old {
				elected = time.Since(killed)
				return true
			}
		}
		return false
	})
	t.Logf("leader %s killed; new leader after %v", old, elected)
	if elected > 3*time.Second {
		t.Errorf("new leader after %v, want within 3s", elected)
	}

	servers := strings.Join(append([]string{deadURL}, rest...), ",") // the dead one first
	for _, id := range []string{first, second} {
		st := waitStatus(t, servers, id, 60*time.Second, "run "+id+" ended", ended)
		if st.State != proto.RunSucceeded {
			t.Fatalf("run %s after the leader died: %+v", id, st)
		}
		sameAsReference(t, st, ref)
	}
	out, code := cli(t, "runs", "--json", "--server", servers)
	if code != 0 || strings.Count(out, `"id"`) != 2 {
		t.Fatalf("runs after failover: exit %d, %s", code, out)
	}
}

// TestLoopbackNATSRestartsMidRun: natsd (JetStream on disk) stops and comes
// back on the same port and store while a run is half done; nodes and
// coordinators reconnect and the run finishes with the right outputs.
func TestLoopbackNATSRestartsMidRun(t *testing.T) {
	c := startCluster(t)
	path := writeFlow(t, "slow.yaml", slowFlow)
	ref := reference(t, path)

	id := submit(t, c.servers, path)
	waitStatus(t, c.servers, id, 30*time.Second, "a done", func(st proto.RunStatus) bool {
		return taskState(st, "a") == proto.TaskDone
	})
	stopped := time.Now()
	c.nats.stop(syscall.SIGTERM, 10*time.Second)
	time.Sleep(time.Second) // the outage itself (fault injection, not a wait for a condition)
	c.nats = start(t, "natsd-again", c.natsArgs...)
	t.Cleanup(c.stopAllButNATS) // before natsd-again's own cleanup: nodes drain while NATS is up
	restarted := time.Now()

	st := waitStatus(t, c.servers, id, 60*time.Second, "the run ended", ended)
	t.Logf("natsd down for %v; the run ended %v after it came back", restarted.Sub(stopped), time.Since(restarted))
	if st.State != proto.RunSucceeded {
		t.Fatalf("run after a NATS restart: %+v", st)
	}
	sameAsReference(t, st, ref)
	// and the cluster takes new work
	again := time.Now()
	out, code := cli(t, "submit", "--wait", "--json", "--server", c.servers, path)
	t.Logf("a run submitted after the restart took %v", time.Since(again))
	if sts := parseStatuses(t, out); code != 0 || len(sts) != 1 {
		t.Fatalf("run after the restart: exit %d, %s", code, out)
	} else {
		sameAsReference(t, sts[0], ref)
	}
}

// TestLoopbackCancelStopsEveryNode: a run with long tasks on every node is
// cancelled through a follower; it ends cancelled and every node lets go of
// it (hetflow_node_runs_active falls to 0) long before its tasks would
// have ended. A task that panics fails its run, and the nodes stay healthy:
// a flow with retries then succeeds after two application errors.
func TestLoopbackCancelStopsEveryNode(t *testing.T) {
	c := startCluster(t)
	long := writeFlow(t, "long.yaml", `name: long
tasks:
  - {name: a, func: noop, node: n1}
  - {name: s1, func: sleep, args: {ms: 60000}, succeed: [a], node: n1}
  - {name: s2, func: sleep, args: {ms: 60000}, succeed: [a], node: n2}
  - {name: s3, func: sleep, args: {ms: 60000}, succeed: [a], node: n3}
  - {name: z, func: hash, succeed: [s1, s2, s3]}
`)
	id := submit(t, c.servers, long)
	waitStatus(t, c.servers, id, 30*time.Second, "every node busy", func(st proto.RunStatus) bool {
		return taskState(st, "s1") == proto.TaskRunning && taskState(st, "s2") == proto.TaskRunning && taskState(st, "s3") == proto.TaskRunning
	})
	for _, u := range c.nodeHTTP {
		if v := gauge(u, "hetflow_node_runs_active"); v != 1 {
			t.Fatalf("%s holds %d runs before the cancel, want 1", u, v)
		}
	}
	cancelled := time.Now()
	if out, code := cli(t, "cancel", "--server", c.servers, id); code != 0 || !strings.Contains(out, "cancelled "+id) {
		t.Fatalf("cancel: exit %d, %s", code, out)
	}
	for _, u := range c.nodeHTTP {
		testsupport.Eventually(t, 20*time.Second, u+" lets go of the run", func() bool {
			return gauge(u, "hetflow_node_runs_active") == 0
		})
	}
	t.Logf("every node released the run %v after the cancel", time.Since(cancelled))
	st := waitStatus(t, c.servers, id, 10*time.Second, "cancelled", ended)
	if st.State != proto.RunCancelled || taskState(st, "z") != proto.TaskCancelled {
		t.Fatalf("cancelled run: %+v", st)
	}

	panics := writeFlow(t, "panic.yaml", "name: p\ntasks:\n  - {name: a, func: noop, node: n2}\n  - {name: kaboom, func: panic, succeed: [a], node: n3}\n")
	out, code := cli(t, "submit", "--wait", "--json", "--server", c.servers, panics)
	if sts := parseStatuses(t, out); code != 1 || len(sts) != 1 || sts[0].State != proto.RunFailed || !strings.Contains(sts[0].Error, "kaboom") {
		t.Fatalf("panicking task: exit %d, %s", code, out)
	}
	retried := writeFlow(t, "retry.yaml", "name: r\ntasks:\n  - {name: a, func: noop, node: n1}\n  - {name: flaky, func: fail, args: {times: 2}, retries: 2, succeed: [a], node: n3}\n  - {name: z, func: hash, succeed: [flaky], node: n2}\n")
	out, code = cli(t, "submit", "--wait", "--json", "--server", c.servers, retried)
	sts := parseStatuses(t, out)
	if code != 0 || len(sts) != 1 || sts[0].State != proto.RunSucceeded {
		t.Fatalf("retried task: exit %d, %s", code, out)
	}
	for _, tk := range sts[0].Tasks {
		if tk.Name == "flaky" && (tk.Activations != 1 || tk.Executions != 3) {
			t.Fatalf("flaky ran %d times for %d activations, want 3 for 1", tk.Executions, tk.Activations)
		}
	}
}

// stopAllButNATS stops the nodes, then the coordinators, as their cleanups
// would.
func (c *cluster) stopAllButNATS() {
	for _, p := range append(append([]*proc(nil), c.nodes...), c.coords...) {
		p.stop(syscall.SIGTERM, 20*time.Second)
	}
}
