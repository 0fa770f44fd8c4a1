package e2e

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// TestCustomNodeExample does what README's "Run your own code" tells a
// user: it copies examples/custom-node outside the repository, points its
// replace at this checkout, builds it, validates its flow, runs the flow on
// the binary's own dev cluster, then on a loopback cluster of the stock
// natsd and coordinators with the custom node joined beside the stock
// nodes (whose coordinators have none of its functions).
func TestCustomNodeExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module and starts clusters")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	work := customNodeCopy(t, root)
	gocmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), customNodeGoEnv...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	gocmd("build", "-o", filepath.Join(bin, "custom-node"), ".")
	wordfreq := filepath.Join(work, "wordfreq-bin")
	gocmd("build", "-o", wordfreq, "./wordfreq")
	flow := filepath.Join(work, "flow.yaml")

	node := func(args ...string) (string, string, int) {
		cmd := exec.Command(filepath.Join(bin, "custom-node"), args...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	if out, errs, code := node("validate", flow, "--param", "tool="+wordfreq); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("validate: exit %d %s %s", code, out, errs)
	}
	if _, errs, code := node("validate", flow, "--param", "top=many"); code != 2 || !strings.Contains(errs, `parameter "top": must be an int, got "many"`) {
		t.Errorf("validate with an ill-typed parameter: exit %d %s", code, errs)
	}
	want := map[string]string{"count": "12 words", "freq": "the 3\nand 1\n"}
	check := func(where string, st proto.RunStatus) {
		t.Helper()
		if st.State != proto.RunSucceeded {
			t.Fatalf("%s: %+v", where, st)
		}
		for _, ts := range st.Tasks {
			if w, ok := want[ts.Name]; ok {
				if b, _ := hex.DecodeString(ts.Output); string(b) != w {
					t.Errorf("%s: task %s output %q, want %q", where, ts.Name, b, w)
				}
			}
		}
	}
	out, errs, code := node("dev", "--nodes", "2", "--json", "--exec-allow", wordfreq, "--param", "tool="+wordfreq, flow)
	if code != 0 {
		t.Fatalf("dev: exit %d\n%s\n%s", code, out, errs)
	}
	var st proto.RunStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	check("dev", st)

	c := startCluster(t)
	start(t, "u1", "custom-node", "--id", "u1", "--nats", c.natsURL, "--gossip", addr(freePort(t)),
		"--join", strings.Join(c.gossip, ","), "--cpus", "2", "--exec-allow", wordfreq)
	waitFuncs(t, c, "u1", "wordcount")
	out, code = cli(t, "submit", flow, "--wait", "--json", "--server", c.servers, "--param", "tool="+wordfreq)
	if code != 0 {
		t.Fatalf("submit to the loopback cluster: exit %d %s", code, out)
	}
	st = proto.RunStatus{}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	check("loopback", st)
	for _, ts := range st.Tasks {
		if ts.Node != "u1" {
			t.Errorf("task %s ran on %s; only u1 has its function", ts.Name, ts.Node)
		}
	}
	out, _ = cli(t, "funcs", "--server", c.servers)
	if !strings.Contains(out, "node u1") || !strings.Contains(out, "wordcount") || !strings.Contains(out, "node n1") {
		t.Errorf("coordinator funcs:\n%s", out)
	}
}

// customNodeGoEnv is the environment the go command builds the example's
// copy in: -mod=mod, so that when hetflow's requirements move on before the
// example's go.mod does, the copy still builds from the module cache (a
// user with network access runs go mod tidy).
var customNodeGoEnv = []string{"CGO_ENABLED=0", "GOFLAGS=-mod=mod"}

// customNodeCopy copies examples/custom-node outside the repository, as
// README's "Run your own code" tells a user to, and points its replace at
// the checkout root; it returns the copy's directory.
func customNodeCopy(t *testing.T, root string) string {
	t.Helper()
	work := filepath.Join(t.TempDir(), "custom-node")
	if err := copyTree(filepath.Join(root, "examples", "custom-node"), work); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "mod", "edit", "-replace", "github.com/hetflow/hetflow="+root)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), customNodeGoEnv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go mod edit: %v\n%s", err, out)
	}
	// The checkout's go.sum too (see customNodeGoEnv).
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile(filepath.Join(work, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "go.sum"), append(own, sums...), 0o644); err != nil {
		t.Fatal(err)
	}
	return work
}

// waitFuncs waits until the cluster lists function fn on
// node id.
func waitFuncs(t *testing.T, c *cluster, id, fn string) {
	t.Helper()
	testsupport.Eventually(t, 60*time.Second, "node "+id+" offering "+fn, func() bool {
		out, code := poll(t, "funcs", "--json", "--server", c.servers)
		var ns []proto.NodeFuncs
		if code != 0 || json.Unmarshal([]byte(out), &ns) != nil {
			return false
		}
		for _, n := range ns {
			for _, f := range n.Funcs {
				if n.Node == id && f.Name == fn {
					return true
				}
			}
		}
		return false
	})
}

// copyTree copies the files under src to dst (build outputs left out).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if rel == "build" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}

// TestComposeCustomNode runs examples/custom-node in containers as README's
// "Run your own code" tells a user: from a copy outside the repository
// (its replace pointing at the checkout) its build.sh builds the custom
// node's image and issues u1's and u2's credentials; the stock cluster
// comes up with the example's compose.override.yml beside
// docker-compose.yml; the stock coordinator CLI submits the example's flow
// with its parameters; the Go functions' and the exec task's outputs must
// be right, and every task must have run on a custom node (the stock nodes
// have neither the functions nor wordfreq). One cluster start; down -v
// with the test, failed or not.
func TestComposeCustomNode(t *testing.T) {
	composeDocker(t)
	which, why := composeMain()
	if why != nil {
		t.Logf("running on docker-compose (v1): %v", why)
	}
	root := composeRepo(t)
	work := customNodeCopy(t, root)
	custom := []string{"u1", "u2"}
	e := composeUp(t, which, composeAdd{
		files: []string{filepath.Join(work, "compose.override.yml")},
		nodes: custom,
		build: func(t *testing.T, root string) {
			out, err := composeExec(work, customNodeGoEnv, 8*time.Minute, "bash", filepath.Join(work, "build.sh"))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("build.sh: %s", strings.TrimSpace(out))
			for _, n := range custom {
				if _, err := os.Stat(filepath.Join(root, "build", "docker", n+".cred")); err != nil {
					t.Fatalf("build.sh issued no credential for %s: %v", n, err)
				}
			}
		},
	})

	// The coordinators place a task only on a node whose catalog they have
	// read: wait for both custom nodes' catalogs.
	testsupport.EventuallyState(t, 60*time.Second, "u1 and u2 offering wordcount and exec", func() (bool, string) {
		out, err := e.run(10*time.Second, "funcs", "--json")
		var ns []proto.NodeFuncs
		if err != nil || json.Unmarshal([]byte(out), &ns) != nil {
			return false, fmt.Sprint(out, err)
		}
		have := map[string]bool{}
		for _, n := range ns {
			for _, f := range n.Funcs {
				have[n.Node+" "+f.Name] = true
			}
		}
		return have["u1 wordcount"] && have["u2 wordcount"] && have["u1 exec"] && have["u2 exec"], out
	})

	const text = "b a c a B a d"
	out, err := e.run(2*time.Minute, "submit", "--wait", "--json", "--param", "text="+text, "--param", "top=2",
		filepath.Join(work, "flow.yaml"))
	if err != nil {
		t.Fatalf("submit: %v\nstdout: %s", err, out)
	}
	st := composeStatus(t, out)
	if st.State != proto.RunSucceeded {
		t.Fatalf("run %s %s: %s", st.ID, st.State, st.Error)
	}
	// Runs keep the outputs of tasks without successors: count's says that
	// say gave wordcount the text parameter, freq's that wordfreq read it
	// and took the top parameter.
	want := map[string]string{"count": "7 words", "freq": "a 3\nb 2\n"}
	ran := map[string]bool{}
	for _, ts := range st.Tasks {
		ran[ts.Name] = true
		if w, ok := want[ts.Name]; ok {
			if b, _ := hex.DecodeString(ts.Output); string(b) != w {
				t.Errorf("task %s output %q, want %q", ts.Name, b, w)
			}
		}
		if !slices.Contains(custom, ts.Node) {
			t.Errorf("task %s ran on %q; only the custom nodes %v have its function", ts.Name, ts.Node, custom)
		}
	}
	for _, name := range []string{"source", "count", "freq"} {
		if !ran[name] {
			t.Errorf("task %s missing from the run: %+v", name, st.Tasks)
		}
	}
	// The bytes as a user takes them: coordinator output RUN TASK.
	if out, err := e.run(time.Minute, "output", st.ID, "freq"); err != nil || out != want["freq"] {
		t.Errorf("coordinator output %s freq: %q %v, want %q", st.ID, out, err, want["freq"])
	}
}
