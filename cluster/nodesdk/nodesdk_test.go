package nodesdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/nodesdk"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// userRegistry is a user's: the built-ins and a function of its own.
func userRegistry() *funcs.Registry {
	reg := funcs.Default()
	reg.MustRegister(funcs.Entry{
		Name: "shout",
		Doc:  "upper-cases args.text",
		CPU: func(ctx context.Context, c *funcs.Call) (funcs.Result, error) {
			s, err := c.Args.String("text", "")
			if err != nil {
				return funcs.Result{}, err
			}
			return funcs.Result{Output: []byte(strings.ToUpper(s))}, nil
		},
		Check: func(a funcs.Args) error {
			if err := a.Only("text"); err != nil {
				return err
			}
			_, err := a.String("text", "")
			return err
		},
	})
	return reg
}

func writeFlow(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "flow.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const shoutFlow = `name: shout
params:
  who: {type: string, default: world}
tasks:
  - {name: say, func: shout, args: {text: "hello ${who}"}}
`

// validate, dump and funcs use the user's functions; the stock registry
// would refuse the flow.
func TestSubcommandsUseTheUsersFunctions(t *testing.T) {
	p := writeFlow(t, shoutFlow)
	if code := nodesdk.Run([]string{"validate", p}, userRegistry()); code != 0 {
		t.Errorf("validate with the user's registry: exit %d", code)
	}
	if code := nodesdk.Run([]string{"validate", p}, nil); code != 2 {
		t.Errorf("validate with the built-ins only: exit %d, want 2 (unknown function)", code)
	}
	if code := nodesdk.Run([]string{"validate", p, "--param", "nope=1"}, userRegistry()); code != 2 {
		t.Errorf("validate with an undeclared parameter: exit %d, want 2", code)
	}
	bad := writeFlow(t, "name: b\ntasks:\n  - {name: say, func: shout, args: {text: 3}}\n")
	if code := nodesdk.Run([]string{"validate", bad}, userRegistry()); code != 2 {
		t.Errorf("validate with an argument the function's Check refuses: exit %d, want 2", code)
	}
	root := nodesdk.Command(userRegistry())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"funcs"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "shout") || !strings.Contains(out.String(), "upper-cases args.text") || !strings.Contains(out.String(), "hash") {
		t.Errorf("funcs:\n%s", out.String())
	}
	if code := nodesdk.Run([]string{"--nats", "nats://127.0.0.1:1"}, nil); code != 2 {
		t.Errorf("a node without --id: exit %d, want 2", code)
	}
	if code := nodesdk.Run([]string{"nosuchcommand"}, nil); code != 2 {
		t.Errorf("an unknown subcommand: exit %d, want 2", code)
	}
	for _, args := range [][]string{{"--help"}, {"--version"}, {"health", "--help"}} {
		if code := nodesdk.Run(args, nil); code != 0 {
			t.Errorf("node %v: exit %d, want 0", args, code)
		}
	}
	if code := nodesdk.Run([]string{"health", "--server", "http://127.0.0.1:1"}, nil); code != 3 {
		t.Errorf("health of a node that is down: exit %d, want 3", code)
	}
}

// dev runs the user's function on an all-in-one cluster of its own.
func TestDevRunsTheUsersFunctions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	p := writeFlow(t, shoutFlow)
	root := nodesdk.Command(userRegistry())
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs([]string{"dev", "--nodes", "1", "--json", "--param", "who=ann", p})
	if err := root.Execute(); err != nil {
		t.Fatalf("dev: %v\n%s", err, errb.String())
	}
	var st proto.RunStatus
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("%v: %q", err, out.String())
	}
	if st.State != proto.RunSucceeded || len(st.Tasks) != 1 || st.Tasks[0].Output != fmt.Sprintf("%x", "HELLO ANN") {
		t.Errorf("dev run: %+v", st)
	}
}

// A node started by the SDK joins a cluster and runs the user's function:
// the flow pins its task to that node.
func TestNodeJoinsAndRunsTheUsersFunction(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	reg := userRegistry()
	ctx := testsupport.Context(t, 2*time.Minute)
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 1, SimGPUs: -1, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	nctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var out, errb bytes.Buffer
	go func() {
		root := nodesdk.Command(reg)
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs([]string{"--id", "u1", "--nats", d.NATSURL(), "--gossip", "127.0.0.1:0", "--join", d.GossipAddr(), "--cpus", "1"})
		done <- root.ExecuteContext(nctx)
	}()
	c := d.Client()
	testsupport.Eventually(t, 30*time.Second, "node u1 alive", func() bool {
		ns, err := c.Nodes(ctx)
		for _, n := range ns {
			if err == nil && n.ID == "u1" && n.State == proto.NodeAlive {
				return true
			}
		}
		return false
	})
	id, err := c.Submit(ctx, "pin.yaml", []byte("name: pin\ntasks:\n  - {name: say, func: shout, args: {text: hi}, node: u1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(ctx, id, nil)
	if err != nil || st.Tasks[0].Node != "u1" || st.Tasks[0].Output != fmt.Sprintf("%x", "HI") {
		t.Errorf("run on u1: %+v %v", st, err)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("node: %v\n%s", err, errb.String())
		}
	case <-time.After(testsupport.Scale(time.Minute)):
		t.Fatal("the node did not drain and stop")
	}
	if !strings.Contains(out.String(), "node u1: up") || !strings.Contains(out.String(), "draining") {
		t.Errorf("node output %q", out.String())
	}
}

// exec tasks on a cluster: a predecessor's output as a file and as stdin,
// stdout as the output, retries: re-running a failed process, timeout:
// killing one; and a node without --exec-allow has no exec at all.
func TestExecTasksOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	ctx := testsupport.Context(t, 2*time.Minute)
	if _, err := devcluster.Start(ctx, devcluster.Config{Nodes: 1, SimGPUs: -1, ExecAllow: []string{""}}); err == nil {
		t.Fatal("an empty --exec-allow entry was accepted")
	}
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 2, SimGPUs: -1, ExecAllow: []string{"/bin/sh", "cat"}, Registry: userRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	flow := `name: ex
params:
  word: {type: string, default: hello}
tasks:
  - {name: src, func: shout, args: {text: "${word} world"}}
  - name: count
    func: exec
    args: {cmd: /bin/sh, args: ["-c", "wc -w < src | tr -d ' '"]}
    succeed: [src]
  - name: flaky
    func: exec
    retries: 2
    args: {cmd: /bin/sh, args: ["-c", "[ \"$HETFLOW_ATTEMPT\" -ge 1 ] && echo ok-on-$HETFLOW_ATTEMPT || { echo first try fails >&2; exit 1; }"]}
  - {name: echo, func: exec, args: {cmd: cat, stdin: src}, succeed: [src]}
`
	c := d.Client()
	id, err := c.Submit(ctx, "ex.yaml", []byte(flow))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(ctx, id, nil)
	if err != nil {
		t.Fatalf("%v: %+v", err, st)
	}
	outs := map[string]proto.TaskStatus{}
	for _, ts := range st.Tasks {
		outs[ts.Name] = ts
	}
	if got := outs["count"].Output; got != fmt.Sprintf("%x", "2\n") {
		t.Errorf("count output %q", got)
	}
	if f := outs["flaky"]; f.Output != fmt.Sprintf("%x", "ok-on-1\n") || f.Executions != 2 {
		t.Errorf("flaky: %+v, want ok-on-1 after 2 executions", f)
	}
	if got := outs["echo"].Output; got != fmt.Sprintf("%x", "HELLO WORLD") {
		t.Errorf("echo output %q", got)
	}
	slow := "name: slow\ntasks:\n  - {name: nap, func: exec, timeout: 300ms, args: {cmd: /bin/sh, args: [-c, 'sleep 60']}}\n"
	id, err = c.Submit(ctx, "slow.yaml", []byte(slow))
	if err != nil {
		t.Fatal(err)
	}
	st, err = c.Wait(ctx, id, nil)
	if err == nil || st.State != proto.RunFailed || !strings.Contains(st.Error, "killed") {
		t.Errorf("a process past its timeout: %+v %v", st, err)
	}

	plain, err := devcluster.Start(ctx, devcluster.Config{Nodes: 1, SimGPUs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_, err = plain.Client().Submit(ctx, "ex.yaml", []byte(flow))
	if !errors.Is(err, proto.ErrInvalid) || !strings.Contains(err.Error(), `unknown function "exec"`) {
		t.Errorf("exec on a cluster without --exec-allow: %v", err)
	}
}

// Catalogs come from the nodes: a coordinator built with the built-ins
// only accepts a flow naming a function a live SDK node has, places its task
// on that node without a pin, refuses a function no live node has (naming
// the task and the function), and lists what each node offers; validate
// --server checks a file against it.
func TestCatalogsComeFromTheNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	ctx := testsupport.Context(t, 2*time.Minute)
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 2, SimGPUs: -1}) // the built-ins only
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	nctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		root := nodesdk.Command(userRegistry())
		root.SetOut(io.Discard)
		root.SetArgs([]string{"--id", "u1", "--nats", d.NATSURL(), "--gossip", "127.0.0.1:0", "--join", d.GossipAddr(), "--cpus", "1"})
		done <- root.ExecuteContext(nctx)
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("node: %v", err)
		}
	}()
	c := d.Client()
	testsupport.Eventually(t, 30*time.Second, "node u1 offering shout", func() bool {
		ns, err := c.Funcs(ctx)
		for _, n := range ns {
			if err == nil && n.Node == "u1" && n.Hash != "" {
				for _, f := range n.Funcs {
					if f.Name == "shout" {
						return true
					}
				}
			}
		}
		return false
	})
	ns, err := c.Funcs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		has := false
		for _, f := range n.Funcs {
			has = has || f.Name == "shout"
		}
		if has != (n.Node == "u1") || n.Hash == "" || len(n.Funcs) < 10 {
			t.Errorf("node %s offers %d functions (hash %q), shout %v", n.Node, len(n.Funcs), n.Hash, has)
		}
	}
	// Many tasks, so that a placement ignoring the catalogs would put some on n1, n2.
	var b strings.Builder
	b.WriteString("name: many\ntasks:\n")
	for i := 0; i < 12; i++ {
		fmt.Fprintf(&b, "  - {name: s%d, func: shout, args: {text: t%d}}\n  - {name: h%d, func: hash}\n", i, i, i)
	}
	id, err := c.Submit(ctx, "many.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(ctx, id, nil)
	if err != nil {
		t.Fatalf("%v %+v", err, st)
	}
	for _, ts := range st.Tasks {
		if strings.HasPrefix(ts.Name, "s") && ts.Node != "u1" {
			t.Errorf("task %s ran on %s, which lacks shout", ts.Name, ts.Node)
		}
	}
	_, err = c.Submit(ctx, "x.yaml", []byte("name: x\ntasks:\n  - {name: a, func: nowhere}\n"))
	if !errors.Is(err, proto.ErrInvalid) || !strings.Contains(err.Error(), `task "a" field "func": unknown function "nowhere"`) {
		t.Errorf("a function no node has: %v", err)
	}
	// The schema-less user function is checked by its kind only here; a
	// pin to a node without it is refused, naming both.
	_, err = c.Submit(ctx, "p.yaml", []byte("name: p\ntasks:\n  - {name: a, func: shout, node: n1}\n"))
	if !errors.Is(err, proto.ErrInvalid) || !strings.Contains(err.Error(), `task "a" is pinned to node n1, which does not have function "shout" (nodes with it: u1)`) {
		t.Errorf("a pin to a node without the function: %v", err)
	}
	good := writeFlow(t, "name: g\ntasks:\n  - {name: a, func: shout}\n")
	bad := writeFlow(t, "name: g\ntasks:\n  - {name: a, func: whisper}\n")
	if code := nodesdk.Run([]string{"validate", "--server", d.URL(), good}, funcs.Default()); code != 0 {
		t.Errorf("validate --server of a flow the cluster offers: exit %d", code)
	}
	if code := nodesdk.Run([]string{"validate", "--server", d.URL(), bad}, funcs.Default()); code != 2 {
		t.Errorf("validate --server of a function nobody has: exit %d", code)
	}
	if code := nodesdk.Run([]string{"validate", "--server", "http://127.0.0.1:1", good}, funcs.Default()); code != 3 {
		t.Errorf("validate --server of an unreachable cluster: exit %d", code)
	}
}
