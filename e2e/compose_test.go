package e2e

// The compose tier: docker-compose.yml's cluster (natsd, three raft
// coordinators, three nodes, each in its own FROM-scratch container),
// driven from the host through the real CLI. It skips only where the docker
// daemon cannot be reached (`docker info` fails).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
)

const (
	composeProject = "hetflowe2e"
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

// composeFreePorts returns n distinct free loopback ports.
func composeFreePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ps []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ps = append(ps, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ps
}

// composeEventually polls cond until it holds or d passes.
func composeEventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, d, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
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

func TestComposeClusterRunsExamplesAndSeesAKilledNode(t *testing.T) {
	if _, err := composeExec("", nil, 30*time.Second, "docker", "info"); err != nil {
		t.Skipf("docker daemon unreachable: %v", err)
	}
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
	t.Logf("built CLI and image in %v", time.Since(t0).Round(time.Millisecond))

	subnet := composeNet
	if v := os.Getenv("HETFLOW_NET"); v != "" {
		subnet = v
	}
	ports := composeFreePorts(t, 3)
	env := []string{
		"HETFLOW_NET=" + subnet,
		"HETFLOW_C1_PORT=" + strconv.Itoa(ports[0]),
		"HETFLOW_C2_PORT=" + strconv.Itoa(ports[1]),
		"HETFLOW_C3_PORT=" + strconv.Itoa(ports[2]),
	}
	compose := func(d time.Duration, args ...string) (string, error) {
		return composeExec(root, env, d, "bash", append([]string{"scripts/compose.sh", "-p", composeProject}, args...)...)
	}
	logs := func() {
		if out, err := compose(time.Minute, "logs", "--no-color", "--tail", "40"); err == nil {
			t.Logf("cluster logs:\n%s", out)
		}
	}
	// A cluster a crashed earlier run left behind goes first.
	if _, err := compose(2*time.Minute, "down", "-v", "--remove-orphans"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs()
		}
		if _, err := compose(2*time.Minute, "down", "-v", "--remove-orphans"); err != nil {
			t.Errorf("tearing the cluster down: %v", err)
		}
	})
	t1 := time.Now()
	if _, err := compose(3*time.Minute, "up", "-d"); err != nil {
		t.Fatal(err)
	}

	token := filepath.Join(root, "build", "docker", "token")
	urls := make([]string, len(ports))
	for i, p := range ports {
		urls[i] = fmt.Sprintf("http://127.0.0.1:%d", p)
	}
	servers := strings.Join(urls, ",")
	run := func(d time.Duration, args ...string) (string, error) {
		return composeExec(root, nil, d, cli, append(args, "--server", servers, "--token-file", token)...)
	}
	nodes := func() (map[string]string, string) {
		out, err := run(10*time.Second, "nodes", "--json")
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
	composeEventually(t, 90*time.Second, "three alive nodes", func() (bool, string) {
		m, last := nodes()
		return m["n1"] == proto.NodeAlive && m["n2"] == proto.NodeAlive && m["n3"] == proto.NodeAlive, last
	})
	t.Logf("cluster up with 3 alive nodes in %v", time.Since(t1).Round(time.Millisecond))

	// Every bundled example runs to success through the three coordinators.
	examples, err := filepath.Glob(filepath.Join(root, "cluster", "spec", "examples", "*.yaml"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no bundled examples (%v)", err)
	}
	got := map[string]proto.RunStatus{}
	t2 := time.Now()
	for _, ex := range examples {
		out, err := run(2*time.Minute, "submit", "--wait", "--json", ex)
		if err != nil {
			t.Fatalf("%s: %v\nstdout: %s", filepath.Base(ex), err, out)
		}
		st := composeStatus(t, out)
		if st.State != proto.RunSucceeded {
			t.Fatalf("%s: run %s %s: %s", filepath.Base(ex), st.ID, st.State, st.Error)
		}
		got[filepath.Base(ex)] = st
	}
	t.Logf("%d examples succeeded in %v", len(examples), time.Since(t2).Round(time.Millisecond))

	// The do-while sink gives what the in-process dev cluster gives.
	const loop = "listing5-dowhile.yaml"
	devOut, err := composeExec(root, nil, 2*time.Minute, cli, "dev", "--json", filepath.Join("cluster", "spec", "examples", loop))
	if err != nil {
		t.Fatal(err)
	}
	want := composeSinks(composeStatus(t, devOut))
	if len(want) == 0 {
		t.Fatalf("dev run of %s reported no sink output: %s", loop, devOut)
	}
	if sinks := composeSinks(got[loop]); !reflect.DeepEqual(sinks, want) {
		t.Fatalf("%s sink outputs: compose %v, dev %v", loop, sinks, want)
	}

	// A node killed while idle is seen gone.
	id, err := compose(time.Minute, "ps", "-q", "n2")
	id = strings.TrimSpace(id)
	if err != nil || id == "" {
		t.Fatalf("container of n2: %q %v", id, err)
	}
	t3 := time.Now()
	if _, err := composeExec(root, nil, time.Minute, "docker", "kill", id); err != nil {
		t.Fatal(err)
	}
	seen := ""
	composeEventually(t, 60*time.Second, "n2 not alive after docker kill", func() (bool, string) {
		m, last := nodes()
		s, ok := m["n2"]
		seen = s
		if !ok {
			seen = "absent"
		}
		return m != nil && (!ok || s == proto.NodeSuspect || s == proto.NodeDead) &&
			m["n1"] == proto.NodeAlive && m["n3"] == proto.NodeAlive, last
	})
	t.Logf("killed n2 seen %s in %v; whole test %v", seen, time.Since(t3).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
}
