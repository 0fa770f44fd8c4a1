package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// freePort returns a loopback port nobody uses now, for TCP and UDP
// (memberlist binds both), never handed out before in this process. It
// draws from below the kernel's ephemeral range (ip_local_port_range,
// 32768 and up by default), so the outgoing connections of the many
// processes a test starts cannot take it between this check and the bind:
// drawing from the ephemeral range let a coordinator fail with "address
// already in use" about once in 12 cluster starts.
func freePort(t *testing.T) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		p := 20000 + rand.IntN(12000)
		if portsUsed[p] {
			continue
		}
		l, err := net.Listen("tcp", addr(p))
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", addr(p))
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		portsUsed[p] = true
		return p
	}
	t.Fatal("no free loopback port in 20000-31999")
	return 0
}

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

func addr(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }

// proc is one started binary; its output goes to a log file kept on failure.
type proc struct {
	name string
	args []string // the command line, to start it again
	cmd  *exec.Cmd
	log  *bytes.Buffer
	mu   *sync.Mutex
	done chan struct{}
}

type lockedBuf struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, args: args, log: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(bin, args[0]), args[1:]...)
	w := lockedBuf{p.mu, p.log}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		began := time.Now()
		p.stop(syscall.SIGTERM, 20*time.Second)
		if d := time.Since(began); d > 5*time.Second {
			t.Logf("%s took %v to stop after SIGTERM", name, d)
		}
		if t.Failed() {
			p.mu.Lock()
			t.Logf("---- %s log ----\n%s", name, p.log.String())
			p.mu.Unlock()
		}
	})
	return p
}

// stop sends sig and waits for the process, killing it after d.
func (p *proc) stop(sig syscall.Signal, d time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cli runs the coordinator CLI and returns stdout and the exit code.
func cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return runCLI(t, true, args...)
}

// poll runs the CLI without logging failures (for eventually).
func poll(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return runCLI(t, false, args...)
}

func runCLI(t *testing.T, logFail bool, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "coordinator"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("coordinator %v: %v", args, err)
	}
	if code != 0 && logFail {
		t.Logf("coordinator %s: exit %d, stderr: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String(), code
}

type cluster struct {
	servers  string   // comma-separated coordinator URLs, a follower first
	https    []string // coordinator URLs, c1 first
	coords   []*proc
	nodes    []*proc
	nodeHTTP []string // the nodes' --http URLs, n1 first
	nats     *proc
	natsArgs []string // natsd's command line, to start it again on the same port and store
	natsURL  string
	gossip   []string // the coordinators' gossip addresses, to join more nodes
}

// startCluster starts natsd, three coordinators (c1 bootstraps, c2 and c3
// join its gossip) and three nodes (n3 with two sim GPUs) on loopback.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	dir := t.TempDir()
	natsPort := freePort(t)
	natsURL := "nats://" + addr(natsPort)
	c := &cluster{natsArgs: []string{"natsd", "--addr", addr(natsPort), "--store", filepath.Join(dir, "nats")}}
	c.nats = start(t, "natsd", c.natsArgs...)
	var gossip, https []string
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("c%d", i)
		g, h, r := addr(freePort(t)), addr(freePort(t)), addr(freePort(t))
		args := []string{"coordinator", "serve", "--id", id, "--data", filepath.Join(dir, id), "--raft", r,
			"--http", h, "--gossip", g, "--nats", natsURL}
		if i == 1 {
			args = append(args, "--bootstrap")
		} else {
			args = append(args, "--join", strings.Join(gossip, ","))
		}
		c.coords = append(c.coords, start(t, id, args...))
		gossip = append(gossip, g)
		https = append(https, "http://"+h)
		if i == 1 {
			testsupport.Eventually(t, 30*time.Second, "c1 healthy", func() bool {
				_, code := poll(t, "health", "--server", https[0])
				return code == 0
			})
		}
	}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("n%d", i)
		nh := addr(freePort(t))
		c.nodeHTTP = append(c.nodeHTTP, "http://"+nh)
		args := []string{"node", "--id", id, "--nats", natsURL, "--gossip", addr(freePort(t)),
			"--join", strings.Join(gossip, ","), "--http", nh, "--cpus", "2"}
		if i == 3 {
			args = append(args, "--sim-gpus", "2")
		}
		c.nodes = append(c.nodes, start(t, id, args...))
	}
	c.https, c.gossip, c.natsURL = https, gossip, natsURL
	// a follower first: the CLI must find the leader itself
	c.servers = strings.Join([]string{https[2], https[1], https[0]}, ",")
	testsupport.Eventually(t, 60*time.Second, "3 alive nodes and 3 raft peers", func() bool {
		out, code := poll(t, "nodes", "--json", "--server", c.servers)
		if code != 0 {
			return false
		}
		var ns []proto.NodeInfo
		if json.Unmarshal([]byte(out), &ns) != nil {
			return false
		}
		alive := 0
		for _, n := range ns {
			if n.State == proto.NodeAlive {
				alive++
			}
		}
		if alive != 3 {
			return false
		}
		out, code = poll(t, "peers", "--json", "--server", c.servers)
		var ps []proto.PeerInfo
		return code == 0 && json.Unmarshal([]byte(out), &ps) == nil && len(ps) == 3
	})
	return c
}

func parseStatuses(t *testing.T, out string) []proto.RunStatus {
	t.Helper()
	var sts []proto.RunStatus
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var st proto.RunStatus
		if err := json.Unmarshal([]byte(line), &st); err != nil {
			t.Fatalf("bad status JSON %q: %v", line, err)
		}
		sts = append(sts, st)
	}
	return sts
}

// summary is what must agree between placements: per task its state,
// activations, executions and output.
func summary(st proto.RunStatus) map[string]string {
	m := map[string]string{}
	for _, tk := range st.Tasks {
		m[tk.Name] = fmt.Sprintf("%s a=%d e=%d out=%s", tk.State, tk.Activations, tk.Executions, tk.Output)
	}
	return m
}

var nodePin = regexp.MustCompile(`(?m)^\s*node: n\d\s*$\n`)

func TestLoopbackClusterRunsMixedFlowLikeOneProcess(t *testing.T) {
	c := startCluster(t)
	out, code := cli(t, "submit", "--wait", "--json", "--server", c.servers, "testdata/mixed.yaml")
	if code != 0 {
		t.Fatalf("submit --wait: exit %d: %s", code, out)
	}
	sts := parseStatuses(t, out)
	if len(sts) != 1 || sts[0].State != proto.RunSucceeded {
		t.Fatalf("run: %+v", sts)
	}
	got := sts[0]
	nodesUsed := map[string]bool{}
	for _, tk := range got.Tasks {
		if tk.Node != "" {
			nodesUsed[tk.Node] = true
		}
	}
	if len(nodesUsed) != 3 {
		t.Fatalf("tasks ran on %v, want all three nodes", nodesUsed)
	}

	// the same flow, unpinned, in one process with one node
	raw, err := os.ReadFile("testdata/mixed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	single := filepath.Join(t.TempDir(), "mixed.yaml")
	if err := os.WriteFile(single, nodePin.ReplaceAll(raw, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = cli(t, "dev", "--json", "--nodes", "1", "--sim-gpus", "-1", single)
	if code != 0 {
		t.Fatalf("dev: exit %d", code)
	}
	ref := parseStatuses(t, out)
	if len(ref) != 1 || ref[0].State != proto.RunSucceeded {
		t.Fatalf("one-process run: %+v", ref)
	}
	a, b := summary(got), summary(ref[0])
	if len(a) != len(b) {
		t.Fatalf("task sets differ:\n cluster %v\n single  %v", a, b)
	}
	for name, s := range b {
		if a[name] != s {
			t.Errorf("task %s: cluster %q, one process %q", name, a[name], s)
		}
	}
	if !strings.HasPrefix(a["body"], "done a=5 e=5") || !strings.HasPrefix(a["middle"], "skipped") {
		t.Errorf("loop or multi-condition wrong: body %q middle %q", a["body"], a["middle"])
	}

	// status, runs and exit codes through any coordinator
	if _, code := cli(t, "status", "--server", c.servers, got.ID); code != 0 {
		t.Fatalf("status: exit %d", code)
	}
	if _, code := cli(t, "status", "--server", c.servers, "r-nosuchrun"); code != 5 {
		t.Fatalf("status of an unknown run: exit %d, want 5", code)
	}
	out, code = cli(t, "runs", "--json", "--server", c.servers)
	if code != 0 || !strings.Contains(out, got.ID) {
		t.Fatalf("runs: exit %d, %s", code, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("name: x\ntasks:\n  - name: a\n    func: hash\n    node: n9\n"), 0o644)
	if _, code := cli(t, "submit", "--server", c.servers, bad); code != 2 {
		t.Fatalf("submit of a flow pinned to a missing node: exit %d, want 2", code)
	}
	if _, code := cli(t, "nodes", "--server", "http://"+addr(freePort(t))); code != 3 {
		t.Fatalf("unreachable cluster: exit %d, want 3", code)
	}
	// a failing task fails the run with exit 1 and names the task
	failing := filepath.Join(t.TempDir(), "fail.yaml")
	os.WriteFile(failing, []byte("name: f\ntasks:\n  - name: a\n    func: noop\n  - name: boom\n    func: fail\n    succeed: [a]\n"), 0o644)
	out, code = cli(t, "submit", "--wait", "--json", "--server", c.servers, failing)
	if code != 1 || !strings.Contains(out, "boom") {
		t.Fatalf("failing run: exit %d, %s", code, out)
	}
}
