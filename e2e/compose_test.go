package e2e

// The compose tier: docker-compose.yml's cluster (natsd, three raft
// coordinators, three nodes, each in its own FROM-scratch container),
// driven from the host through the real CLI. It skips only where the docker
// daemon cannot be reached (`docker info` fails). docs/design.md ("The contract") wants both compose
// CLIs to work: TestComposeCluster runs every scenario on `docker compose` (v2)
// where it works here, else on docker-compose (v1); TestComposeOtherCLI brings
// the cluster up with the other one and runs a bundled flow to completion, or
// skips saying exactly why that CLI cannot be used.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// The compose CLIs scripts/compose.sh runs (its HETFLOW_COMPOSE).
const (
	composeV2 = "v2" // docker compose: the Docker CLI plugin
	composeV1 = "v1" // docker-compose: the Python program
)

// composeProject is the compose project of the test's cluster;
// $HETFLOW_E2E_PROJECT overrides it (with $HETFLOW_NET) where two checkouts
// run the compose tier on one machine at once.
var composeProject = cmp.Or(os.Getenv("HETFLOW_E2E_PROJECT"), "hetflowe2e")

const (
	// composeNet is the /24 the test's cluster uses (docker-compose.yml's
	// HETFLOW_NET), apart from the default one a developer's cluster takes;
	// $HETFLOW_NET overrides it where that /24 is taken.
	composeNet = "172.28.58"
)

// composeRepo is the repository root (the test runs in e2e/).
func composeRepo(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// composeExec runs name args in dir with extra env and a deadline; it
// returns stdout and an error that carries stderr.
func composeExec(dir string, env []string, d time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\nstderr: %s", name, strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// composeFreePorts returns n distinct free loopback ports for the
// coordinators' published HTTP ports, chosen below the kernel's ephemeral
// range (net.ipv4.ip_local_port_range, 32768-60999 by default): a port the
// kernel handed out (127.0.0.1:0) is free only until any outgoing
// connection on the machine — another package's tests run beside this one
// — takes it as its local port, and docker binds it seconds later. One such
// race failed a CI run ("bind: address already in use"); composeUp also
// retries with fresh ports when it happens.
func composeFreePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ps []int
	for tries := 0; len(ps) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no %d free loopback ports in 20000-32767", n)
		}
		p := 20000 + rand.IntN(12768)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		ps = append(ps, p)
	}
	for _, l := range ls {
		l.Close()
	}
	return ps
}

// composePortTaken reports whether compose up failed because a published
// port was taken between choosing it and docker binding it.
func composePortTaken(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "address already in use") || strings.Contains(msg, "port is already allocated")
}

// composeSinks maps each task that reported an output to that output.
func composeSinks(st proto.RunStatus) map[string]string {
	m := map[string]string{}
	for _, task := range st.Tasks {
		if task.Output != "" {
			m[task.Name] = task.Output
		}
	}
	return m
}

func composeStatus(t *testing.T, out string) proto.RunStatus {
	t.Helper()
	var st proto.RunStatus
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &st); err != nil {
		t.Fatalf("decoding run status %q: %v", out, err)
	}
	return st
}

// composeEnv is a running compose cluster and the ways the test drives it.
type composeEnv struct {
	root    string
	cli     string   // the CLI binary
	urls    []string // c1, c2, c3's API on the host
	servers string
	compose func(d time.Duration, args ...string) (string, error) // scripts/compose.sh -p composeProject ...
	run     func(d time.Duration, args ...string) (string, error) // the CLI against the cluster, with the token
}

// container returns the id of a service's container.
func (e *composeEnv) container(t *testing.T, service string) string {
	t.Helper()
	id, err := e.compose(time.Minute, "ps", "-q", service)
	id = strings.TrimSpace(id)
	if err != nil || id == "" {
		t.Fatalf("container of %s: %q %v", service, id, err)
	}
	return id
}

func (e *composeEnv) docker(t *testing.T, args ...string) {
	t.Helper()
	if _, err := composeExec(e.root, nil, 2*time.Minute, "docker", args...); err != nil {
		t.Fatal(err)
	}
}

// nodes maps node id to state as `nodes --json` gives it.
func (e *composeEnv) nodes() (map[string]string, string) {
	out, err := e.run(10*time.Second, "nodes", "--json")
	if err != nil {
		return nil, err.Error()
	}
	var ns []proto.NodeInfo
	if err := json.Unmarshal([]byte(out), &ns); err != nil {
		return nil, fmt.Sprintf("decoding %q: %v", out, err)
	}
	m := map[string]string{}
	for _, n := range ns {
		m[n.ID] = n.State
	}
	return m, strings.TrimSpace(out)
}

// leader is the id of the coordinator leading now ("" when none answers).
func (e *composeEnv) leader() string {
	out, err := e.run(5*time.Second, "peers", "--json")
	if err != nil {
		return ""
	}
	var ps []proto.PeerInfo
	if json.Unmarshal([]byte(out), &ps) != nil {
		return ""
	}
	for _, p := range ps {
		if p.Leader {
			return p.ID
		}
	}
	return ""
}

// status polls a run until fn accepts it.
func (e *composeEnv) status(t *testing.T, id string, d time.Duration, what string, fn func(proto.RunStatus) bool) proto.RunStatus {
	t.Helper()
	var st proto.RunStatus
	testsupport.EventuallyState(t, d, what, func() (bool, string) {
		out, _ := e.run(10*time.Second, "status", "--json", id) // exit 1 for a failed run still prints it
		if json.Unmarshal([]byte(strings.TrimSpace(out)), &st) != nil {
			return false, out
		}
		return fn(st), fmt.Sprintf("%+v", st)
	})
	return st
}

func (e *composeEnv) submit(t *testing.T, path string) string {
	t.Helper()
	out, err := e.run(time.Minute, "submit", "--json", path)
	var r proto.SubmitResponse
	if err != nil || json.Unmarshal([]byte(out), &r) != nil || r.ID == "" {
		t.Fatalf("submit %s: %v %q", path, err, out)
	}
	return r.ID
}

// composeDocker skips the test where the docker daemon cannot be reached.
func composeDocker(t *testing.T) {
	t.Helper()
	if _, err := composeExec("", nil, 30*time.Second, "docker", "info"); err != nil {
		t.Skipf("docker daemon unreachable: %v", err)
	}
}

// composeUsable says why compose CLI which (composeV2 or composeV1) cannot
// run the cluster here, or nil when it can: installed, and (v2) talking to
// this engine's API.
func composeUsable(which string) error {
	if which == composeV1 {
		if _, err := composeExec("", nil, time.Minute, "docker-compose", "version"); err != nil {
			return fmt.Errorf("docker-compose (v1) is not installed: %w", err)
		}
		return nil
	}
	if _, err := composeExec("", nil, time.Minute, "docker", "compose", "version"); err != nil {
		return fmt.Errorf("docker compose (v2) is not installed (bash scripts/install-compose-v2.sh builds it from the Go module proxy; scripts/test.sh runs it): %w", err)
	}
	if _, err := composeExec("", nil, time.Minute, "docker", "compose", "ls"); err != nil {
		return fmt.Errorf("docker compose (v2) cannot talk to this Docker engine: %w", err)
	}
	return nil
}

// composeMain is the compose CLI TestComposeCluster runs on: v2 where it
// works, else v1 (why says why not v2).
func composeMain() (which string, why error) {
	if err := composeUsable(composeV2); err != nil {
		return composeV1, err
	}
	return composeV2, nil
}

// composeAdd is what a test adds to docker-compose.yml's cluster: compose
// files given after it (-f, their paths relative to the repository's root
// as compose resolves them), a step run once the stock image is built and
// before the cluster starts (building the added services' image), and the
// nodes those files add, which must be alive beside n1, n2 and n3.
type composeAdd struct {
	files []string
	build func(t *testing.T, root string)
	nodes []string
}

// composeUp builds the CLI and the image, brings docker-compose.yml's
// cluster (and what add adds) up with compose CLI which (composeV2 or
// composeV1) on free host ports and waits for its nodes alive; the cluster
// goes down (down -v) with the test, failed or not. It skips where docker
// cannot be reached.
func composeUp(t *testing.T, which string, add ...composeAdd) *composeEnv {
	composeDocker(t)
	root := composeRepo(t)
	t0 := time.Now()

	// The CLI the test drives, and the image the cluster runs.
	cli := filepath.Join(t.TempDir(), "coordinator")
	if _, err := composeExec(root, []string{"CGO_ENABLED=0"}, 5*time.Minute, "go", "build", "-trimpath", "-o", cli, "./cmd/coordinator"); err != nil {
		t.Fatal(err)
	}
	if _, err := composeExec(root, nil, 8*time.Minute, "bash", "scripts/compose-build.sh"); err != nil {
		t.Fatal(err)
	}
	var files, want []string
	want = []string{"n1", "n2", "n3"}
	for _, a := range add {
		for _, f := range a.files {
			files = append(files, "-f", f)
		}
		want = append(want, a.nodes...)
		if a.build != nil {
			a.build(t, root)
		}
	}
	t.Logf("built CLI and images in %v", time.Since(t0).Round(time.Millisecond))

	subnet := subnetOf()
	var ports []int
	var env []string
	pick := func() {
		ports = composeFreePorts(t, 3)
		env = []string{
			"HETFLOW_NET=" + subnet,
			"HETFLOW_C1_PORT=" + strconv.Itoa(ports[0]),
			"HETFLOW_C2_PORT=" + strconv.Itoa(ports[1]),
			"HETFLOW_C3_PORT=" + strconv.Itoa(ports[2]),
			"HETFLOW_COMPOSE=" + which,
		}
	}
	pick()
	e := &composeEnv{root: root}
	e.compose = func(d time.Duration, args ...string) (string, error) {
		pre := append(append([]string{"scripts/compose.sh"}, files...), "-p", composeProject)
		return composeExec(root, env, d, "bash", append(pre, args...)...)
	}
	logs := func() {
		if out, err := e.compose(time.Minute, "logs", "--no-color", "--tail", "60"); err == nil {
			t.Logf("cluster logs:\n%s", out)
		}
	}
	// A cluster a crashed earlier run left behind goes first.
	if _, err := e.compose(2*time.Minute, "down", "-v", "--remove-orphans"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs()
		}
		if _, err := e.compose(2*time.Minute, "down", "-v", "--remove-orphans"); err != nil {
			t.Errorf("tearing the cluster down: %v", err)
		}
	})
	t1 := time.Now()
	for attempt := 1; ; attempt++ {
		_, err := e.compose(3*time.Minute, "up", "-d")
		if err == nil {
			break
		}
		if attempt == 3 || !composePortTaken(err) {
			t.Fatal(err)
		}
		t.Logf("compose up, attempt %d: a published port was taken meanwhile; again with other ports: %v", attempt, err)
		if _, err := e.compose(2*time.Minute, "down", "-v", "--remove-orphans"); err != nil {
			t.Fatal(err)
		}
		pick()
	}

	token := filepath.Join(root, "build", "docker", "token")
	urls := make([]string, len(ports))
	for i, p := range ports {
		urls[i] = fmt.Sprintf("http://127.0.0.1:%d", p)
	}
	e.servers, e.urls, e.cli = strings.Join(urls, ","), urls, cli
	e.run = func(d time.Duration, args ...string) (string, error) {
		return composeExec(root, nil, d, cli, append(args, "--server", e.servers, "--token-file", token)...)
	}
	testsupport.EventuallyState(t, 90*time.Second, fmt.Sprintf("%d alive nodes", len(want)), func() (bool, string) {
		m, last := e.nodes()
		for _, n := range want {
			if m[n] != proto.NodeAlive {
				return false, last
			}
		}
		return true, last
	})
	version, _ := e.compose(time.Minute, "version")
	t.Logf("cluster up with %d alive nodes in %v through compose %s: %s", len(want), time.Since(t1).Round(time.Millisecond), which, firstLine(version))
	return e
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// composeDoWhile checks a compose run of the bundled do-while
// (listing5-dowhile.yaml): it succeeded, and its sink gives what the
// in-process dev cluster gives.
func composeDoWhile(t *testing.T, root string, st proto.RunStatus) {
	t.Helper()
	const loop = "listing5-dowhile.yaml"
	if st.State != proto.RunSucceeded {
		t.Fatalf("%s: run %s %s: %s", loop, st.ID, st.State, st.Error)
	}
	out, code := cli(t, "dev", "--json", filepath.Join(root, "cluster", "spec", "examples", loop))
	if code != 0 {
		t.Fatalf("dev run of %s: exit %d", loop, code)
	}
	want := composeSinks(composeStatus(t, out))
	if len(want) == 0 {
		t.Fatalf("dev run of %s reported no sink output: %s", loop, out)
	}
	if sinks := composeSinks(st); !reflect.DeepEqual(sinks, want) {
		t.Fatalf("%s sink outputs: compose %v, dev %v", loop, sinks, want)
	}
}

// TestComposeOtherCLI brings docker-compose.yml's cluster up with the
// compose CLI TestComposeCluster does not run on (v1 where v2 works) and runs
// the bundled do-while to completion through it: docs/design.md ("The contract") wants both to
// work. It skips, saying why, where that CLI cannot be used here.
func TestComposeOtherCLI(t *testing.T) {
	composeDocker(t)
	main, why := composeMain()
	if main == composeV1 {
		t.Skipf("TestComposeCluster runs on docker-compose (v1); the other CLI, v2, cannot be used here: %v", why)
	}
	if err := composeUsable(composeV1); err != nil {
		t.Skipf("TestComposeCluster runs on docker compose (v2); the other CLI cannot be used here: %v", err)
	}
	e := composeUp(t, composeV1)
	ex := filepath.Join(e.root, "cluster", "spec", "examples", "listing5-dowhile.yaml")
	out, err := e.run(2*time.Minute, "submit", "--wait", "--json", ex)
	if err != nil {
		t.Fatalf("%v\nstdout: %s", err, out)
	}
	composeDoWhile(t, e.root, composeStatus(t, out))
}

// TestComposeCluster runs, on docker-compose.yml's cluster, the bundled
// examples and then each failure of the loopback tier with real containers:
// the leader's container killed mid-run, NATS's container restarted mid-run,
// a cancel, and a node killed.
func TestComposeCluster(t *testing.T) {
	composeDocker(t)
	which, why := composeMain()
	if why != nil {
		t.Logf("running on docker-compose (v1): %v", why)
	}
	e := composeUp(t, which)
	root := e.root
	t0 := time.Now()

	// Every bundled example runs to success through the three coordinators.
	examples, err := filepath.Glob(filepath.Join(root, "cluster", "spec", "examples", "*.yaml"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no bundled examples (%v)", err)
	}
	got := map[string]proto.RunStatus{}
	for _, ex := range examples {
		out, err := e.run(2*time.Minute, "submit", "--wait", "--json", ex)
		if err != nil {
			t.Fatalf("%s: %v\nstdout: %s", filepath.Base(ex), err, out)
		}
		st := composeStatus(t, out)
		if st.State != proto.RunSucceeded {
			t.Fatalf("%s: run %s %s: %s", filepath.Base(ex), st.ID, st.State, st.Error)
		}
		got[filepath.Base(ex)] = st
	}
	t.Logf("%d examples succeeded in %v", len(examples), time.Since(t0).Round(time.Millisecond))

	// The do-while sink gives what the in-process dev cluster gives.
	composeDoWhile(t, root, got["listing5-dowhile.yaml"])

	slow := writeFlow(t, "slow.yaml", slowFlow)
	ref := reference(t, slow)
	started := func(st proto.RunStatus) bool { return taskState(st, "a") == proto.TaskDone }

	t.Run("leader killed mid-run", func(t *testing.T) {
		id := e.submit(t, slow)
		e.status(t, id, time.Minute, "the run under way", started)
		old := e.leader()
		if old == "" {
			t.Fatal("no leader")
		}
		c := e.container(t, old)
		killed := time.Now()
		e.docker(t, "kill", c)
		var elected time.Duration
		testsupport.EventuallyState(t, 30*time.Second, "a new leader", func() (bool, string) {
			l := e.leader()
			elected = time.Since(killed)
			return l != "" && l != old, l
		})
		t.Logf("leader %s killed; new leader seen after %v (polled through the CLI)", old, elected.Round(time.Millisecond))
		st := e.status(t, id, 2*time.Minute, "the run ended", ended)
		if st.State != proto.RunSucceeded {
			t.Fatalf("run after the leader died: %+v", st)
		}
		sameAsReference(t, st, ref)
		e.docker(t, "start", c) // back, with its raft data, for what follows
		i, _ := strconv.Atoi(strings.TrimPrefix(old, "c"))
		testsupport.EventuallyState(t, time.Minute, old+" healthy again", func() (bool, string) {
			_, err := composeExec(e.root, nil, 5*time.Second, e.cli, "health", "--server", e.urls[i-1])
			return err == nil && e.leader() != "", fmt.Sprint(err)
		})
	})

	t.Run("NATS restarted mid-run", func(t *testing.T) {
		id := e.submit(t, slow)
		e.status(t, id, time.Minute, "the run under way", started)
		e.docker(t, "restart", "-t", "5", e.container(t, "nats"))
		st := e.status(t, id, 2*time.Minute, "the run ended", ended)
		if st.State != proto.RunSucceeded {
			t.Fatalf("run after NATS restarted: %+v", st)
		}
		sameAsReference(t, st, ref)
	})

	t.Run("cancel", func(t *testing.T) {
		long := writeFlow(t, "long.yaml", "name: long\ntasks:\n  - {name: a, func: noop, node: n1}\n"+
			"  - {name: s1, func: sleep, args: {ms: 60000}, succeed: [a], node: n1}\n"+
			"  - {name: s2, func: sleep, args: {ms: 60000}, succeed: [a], node: n2}\n"+
			"  - {name: s3, func: sleep, args: {ms: 60000}, succeed: [a], node: n3}\n")
		id := e.submit(t, long)
		e.status(t, id, time.Minute, "every node busy", func(st proto.RunStatus) bool {
			return taskState(st, "s1") == proto.TaskRunning && taskState(st, "s2") == proto.TaskRunning && taskState(st, "s3") == proto.TaskRunning
		})
		if out, err := e.run(30*time.Second, "cancel", id); err != nil {
			t.Fatalf("cancel: %v %s", err, out)
		}
		st := e.status(t, id, 30*time.Second, "cancelled", ended)
		if st.State != proto.RunCancelled {
			t.Fatalf("cancelled run: %+v", st)
		}
	})

	t.Run("task fails, panics, retries", func(t *testing.T) {
		failing := writeFlow(t, "fail.yaml", "name: f\ntasks:\n  - {name: a, func: noop, node: n1}\n  - {name: boom, func: fail, succeed: [a], node: n2}\n")
		out, err := e.run(time.Minute, "submit", "--wait", "--json", failing)
		if st := composeStatus(t, out); err == nil || st.State != proto.RunFailed || !strings.Contains(st.Error, "boom") {
			t.Fatalf("failing task: %v, %+v", err, st)
		}
		panics := writeFlow(t, "panic.yaml", "name: p\ntasks:\n  - {name: a, func: noop, node: n2}\n  - {name: kaboom, func: panic, succeed: [a], node: n3}\n")
		out, err = e.run(time.Minute, "submit", "--wait", "--json", panics)
		if st := composeStatus(t, out); err == nil || st.State != proto.RunFailed || !strings.Contains(st.Error, "kaboom") {
			t.Fatalf("panicking task: %v, %+v", err, st)
		}
		retried := writeFlow(t, "retry.yaml", "name: r\ntasks:\n  - {name: a, func: noop, node: n1}\n  - {name: flaky, func: fail, args: {times: 2}, retries: 2, succeed: [a], node: n3}\n")
		out, err = e.run(time.Minute, "submit", "--wait", "--json", retried)
		st := composeStatus(t, out)
		if err != nil || st.State != proto.RunSucceeded {
			t.Fatalf("retried task: %v, %+v", err, st)
		}
		for _, tk := range st.Tasks {
			if tk.Name == "flaky" && (tk.Activations != 1 || tk.Executions != 3) {
				t.Fatalf("flaky ran %d times for %d activations, want 3 for 1", tk.Executions, tk.Activations)
			}
		}
		m, last := e.nodes()
		if m["n2"] != proto.NodeAlive || m["n3"] != proto.NodeAlive {
			t.Fatalf("nodes after failing tasks: %s", last)
		}
	})

	// A node that holds part of a run is lost mid-run three ways; each time
	// its part moves to the others and the run ends as a one-process run
	// does, with n1's pinned tasks (n1 is never hit) run once per activation.
	chaos := writeFlow(t, "chaos.yaml", chaosFlow)
	chaosRef := reference(t, chaos)
	network := composeProject + "_hetflow"
	ip := map[string]string{"n1": subnetOf() + ".21", "n2": subnetOf() + ".22", "n3": subnetOf() + ".23"}
	lose := func(t *testing.T, how string, inject, restore func(container, node string)) {
		id := e.submit(t, chaos)
		var victim string
		e.status(t, id, time.Minute, "a node other than n1 busy with the run", func(st proto.RunStatus) bool {
			for _, tk := range st.Tasks {
				if tk.Node != "" && tk.Node != "n1" {
					victim = tk.Node
					return true
				}
			}
			return ended(st)
		})
		if victim == "" {
			t.Fatal("the run ended before any task ran outside n1")
		}
		c := e.container(t, victim)
		hit := time.Now()
		inject(c, victim)
		var detected time.Duration
		testsupport.EventuallyState(t, 30*time.Second, victim+" dead after "+how, func() (bool, string) {
			m, last := e.nodes()
			detected = time.Since(hit)
			return m[victim] == proto.NodeDead, last
		})
		st := e.status(t, id, 2*time.Minute, "the run ended", ended)
		took := time.Since(hit)
		restore(c, victim)
		if st.State != proto.RunSucceeded {
			t.Fatalf("run after %s of %s: %+v", how, victim, st)
		}
		for name, want := range chaosRef {
			if got := summary(st)[name]; !sameOutcome(got, want) {
				t.Errorf("task %s: %q, one process %q", name, got, want)
			}
		}
		for _, tk := range st.Tasks {
			if pinOf(chaosFlow, tk.Name) == "n1" && tk.Executions != tk.Activations {
				t.Errorf("task %s on n1 ran %d times for %d activations", tk.Name, tk.Executions, tk.Activations)
			}
		}
		testsupport.EventuallyState(t, time.Minute, victim+" alive again", func() (bool, string) {
			m, last := e.nodes()
			return m["n1"] == proto.NodeAlive && m["n2"] == proto.NodeAlive && m["n3"] == proto.NodeAlive, last
		})
		t.Logf("%s of %s: seen dead after %v, the run ended %v after the fault", how, victim, detected.Round(time.Millisecond), took.Round(time.Millisecond))
	}
	t.Run("node killed mid-run", func(t *testing.T) {
		lose(t, "docker kill", func(c, _ string) { e.docker(t, "kill", c) }, func(c, _ string) { e.docker(t, "start", c) })
	})
	t.Run("node paused mid-run", func(t *testing.T) {
		lose(t, "docker pause", func(c, _ string) { e.docker(t, "pause", c) }, func(c, _ string) { e.docker(t, "unpause", c) })
	})
	t.Run("node cut off mid-run", func(t *testing.T) {
		lose(t, "docker network disconnect", func(c, _ string) { e.docker(t, "network", "disconnect", network, c) },
			func(c, n string) { e.docker(t, "network", "connect", "--ip", ip[n], network, c) })
	})
	// Each coordinator in turn is stopped and started again (c1 with its
	// documented command: --bootstrap, no --join): it must be back in the
	// cluster, /healthz 200, and a flow submitted through it alone must run.
	t.Run("coordinators restarted in turn", func(t *testing.T) {
		quick := writeFlow(t, "quick.yaml", quickFlow)
		token := filepath.Join(e.root, "build", "docker", "token")
		for i, c := range []string{"c1", "c2", "c3"} {
			for _, verb := range []string{"stop", "start"} {
				if out, err := e.compose(2*time.Minute, verb, c); err != nil {
					t.Fatalf("compose %s %s: %v %s", verb, c, err, out)
				}
			}
			testsupport.EventuallyState(t, time.Minute, c+" ready after its restart", func() (bool, string) {
				_, err := composeExec(e.root, nil, 5*time.Second, e.cli, "health", "--server", e.urls[i])
				return err == nil, fmt.Sprint(err)
			})
			out, err := composeExec(e.root, nil, 2*time.Minute, e.cli, "submit", "--wait", "--json", quick, "--server", e.urls[i], "--token-file", token)
			if err != nil {
				t.Fatalf("submit through %s after its restart: %v %s", c, err, out)
			}
			if st := composeStatus(t, out); st.State != proto.RunSucceeded {
				t.Fatalf("run through %s after its restart: %+v", c, st)
			}
		}
	})
	t.Logf("whole compose test %v", time.Since(t0).Round(time.Millisecond))
}

// subnetOf is the compose cluster's /24 (HETFLOW_NET or composeNet).
func subnetOf() string {
	if v := os.Getenv("HETFLOW_NET"); v != "" {
		return v
	}
	return composeNet
}

// The compose file reads without a warning on both CLIs: v2 warns that a
// top-level `version` is obsolete on every command, and v1 (1.27+) does not
// need it.
func TestComposeFileHasNoWarnings(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, which := range []string{composeV1, composeV2} {
		if composeUsable(which) != nil {
			continue
		}
		name, args := "docker-compose", []string{"-f", filepath.Join(root, "docker-compose.yml"), "config", "-q"}
		if which == composeV2 {
			name, args = "docker", append([]string{"compose"}, args...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Logf("%s config: %v\n%s", which, err, out) // a missing build context is not this test's concern
		}
		if s := strings.ToLower(string(out)); strings.Contains(s, "obsolete") || strings.Contains(s, "warn") {
			t.Errorf("%s config warns:\n%s", which, out)
		}
		ran++
	}
	if ran == 0 {
		t.Skip("neither docker compose (v2) nor docker-compose (v1) is installed")
	}
}
