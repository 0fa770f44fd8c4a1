package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/natsauth"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

func TestValidateAndDumpExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("name: demo\ntasks:\n  - name: a\n    func: hash\n  - name: b\n    func: hash\n    succeed: [a]\n"), 0o644)
	os.WriteFile(bad, []byte("name: demo\ntasks:\n  - name: a\n    func: nosuchfunc\n"), 0o644)
	if c := run([]string{"validate", good}); c != exitOK {
		t.Fatalf("validate good: %d", c)
	}
	if c := run([]string{"validate", bad}); c != exitInvalid {
		t.Fatalf("validate bad: %d", c)
	}
	if c := run([]string{"validate", filepath.Join(dir, "missing.yaml")}); c != exitInvalid {
		t.Fatalf("validate missing: %d", c)
	}
	if c := run([]string{"dump", good}); c != exitOK {
		t.Fatalf("dump: %d", c)
	}
	if c := run([]string{"nosuchcommand"}); c != exitInvalid {
		t.Fatalf("unknown command: %d", c)
	}
}

// dev's exit codes follow the table: 2 for a flow the cluster refuses,
// whether it fails to parse or names what the cluster lacks; --sim-gpus 0
// means no GPU at all; a taken --http port is 3 (cannot serve), not a panic.
func TestDevExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dev clusters")
	}
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "name: demo\ntasks:\n  - {name: a, func: hash}\n")
	unknown := write("unknown.yaml", "name: demo\ntasks:\n  - {name: a, func: nosuchfunc}\n")
	gpu := write("gpu.yaml", "name: g\ntasks:\n  - {name: s, func: saxpy, args: {n: 64, a: 2}, domain: gpu}\n")
	for _, c := range []struct {
		name string
		args []string
		want int
	}{
		{"a good flow", []string{"dev", "--nodes", "1", good}, exitOK},
		{"an unknown function", []string{"dev", "--nodes", "1", unknown}, exitInvalid},
		{"a GPU task with --sim-gpus 0", []string{"dev", "--nodes", "1", "--sim-gpus", "0", gpu}, exitInvalid},
		{"a GPU task with --sim-gpus 1", []string{"dev", "--nodes", "1", "--sim-gpus", "1", gpu}, exitOK},
	} {
		if got := run(c.args); got != c.want {
			t.Errorf("%s: coordinator %v: exit %d, want %d", c.name, c.args, got, c.want)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := run([]string{"dev", "--nodes", "1", "--http", ln.Addr().String(), good}); got != exitUnreachable {
		t.Errorf("dev on a taken port: exit %d, want %d", got, exitUnreachable)
	}
}

// dev's hidden profiling flags (scripts/bench-sweep.sh) write a CPU and a
// heap profile of the whole command, in pprof's format (gzip), and leave
// its exit code alone; they are not in its help.
func TestDevProfiles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	dir := t.TempDir()
	flow := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(flow, []byte("name: demo\ntasks:\n  - {name: a, func: hash}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cpu, heap := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "heap.pprof")
	if got := run([]string{"dev", "--nodes", "1", "--cpuprofile", cpu, "--memprofile", heap, flow}); got != exitOK {
		t.Fatalf("dev with profiles: exit %d, want %d", got, exitOK)
	}
	for _, p := range []string{cpu, heap} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s: %d bytes, not a gzipped profile", filepath.Base(p), len(b))
		}
	}
	if got := run([]string{"dev", "--cpuprofile", filepath.Join(dir, "no", "such", "dir"), flow}); got != exitInvalid {
		t.Errorf("dev --cpuprofile into a missing directory: exit %d, want %d", got, exitInvalid)
	}
	var help bytes.Buffer
	root := newRoot()
	root.SetOut(&help)
	root.SetArgs([]string{"dev", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(help.String(), "profile") {
		t.Errorf("dev --help shows the hidden profiling flags:\n%s", help.String())
	}
}

// A dev start that fails (here its --http port is taken, as for `dev
// --serve` beside a running cluster) removes the temporary data directory
// it made (devcluster.Start's os.MkdirTemp): none is left in $TMPDIR.
func TestFailedDevStartLeavesNoTempDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	flow := filepath.Join(t.TempDir(), "good.yaml")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	if err := os.WriteFile(flow, []byte("name: demo\ntasks:\n  - {name: a, func: hash}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := run([]string{"dev", "--nodes", "1", "--http", ln.Addr().String(), flow}); got != exitUnreachable {
		t.Fatalf("dev on a taken port: exit %d, want %d", got, exitUnreachable)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left behind in $TMPDIR: %s", e.Name())
	}
}

// cancel tells the truth: a run that had already ended is not reported
// cancelled, and a cancelled run shows no task still running.
func TestCancelSaysWhatHappened(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 1, SimGPUs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := d.Client()
	cancel := func(id string) (string, string, int) {
		root := newRoot()
		var out, errb strings.Builder
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs([]string{"cancel", id, "--server", d.URL()})
		code := exitOK
		if err := root.Execute(); err != nil {
			code = -1
		}
		return out.String(), errb.String(), code
	}

	quick, err := c.Submit(ctx, "quick.yaml", []byte("name: q\ntasks:\n  - {name: a, func: noop}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.Wait(ctx, quick, nil); err != nil || st.State != proto.RunSucceeded {
		t.Fatalf("quick run: %+v %v", st, err)
	}
	out, errs, code := cancel(quick)
	if code != exitOK || strings.Contains(out, "cancelled") || !strings.Contains(errs, "had already succeeded") {
		t.Errorf("cancel of a succeeded run: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	slow, err := c.Submit(ctx, "slow.yaml", []byte("name: s\ntasks:\n  - {name: a, func: sleep, args: {ms: 60000}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "the slow task running", func() bool {
		st, err := c.Status(ctx, slow)
		return err == nil && len(st.Tasks) == 1 && st.Tasks[0].State == proto.TaskRunning
	})
	if out, errs, code := cancel(slow); code != exitOK || !strings.Contains(out, "cancelled "+slow) {
		t.Errorf("cancel of a running run: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	st, err := c.Status(ctx, slow)
	if err != nil || st.State != proto.RunCancelled || st.Tasks[0].State != proto.TaskCancelled {
		t.Errorf("after the cancel: %+v %v, want the run and its task cancelled", st, err)
	}
}

// validate warns, naming the tasks, about a join behind both branches of
// one condition (the run would end with it skipped), and still exits 0.
func TestValidateWarnsOfABranchJoin(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pit.yaml")
	flow := "name: pit\ntasks:\n  - {name: cond, kind: condition, func: loop, args: {n: 1}, precede: [yes, no]}\n" +
		"  - {name: yes, func: noop}\n  - {name: no, func: noop}\n  - {name: join, func: noop, succeed: [yes, no]}\n"
	if err := os.WriteFile(p, []byte(flow), 0o644); err != nil {
		t.Fatal(err)
	}
	root := newRoot()
	var out, errb strings.Builder
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs([]string{"validate", p})
	if err := root.Execute(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if !strings.Contains(errb.String(), `warning: `+p+`: flow "pit" task "join": joins two branches of condition "cond"`) {
		t.Errorf("stderr %q lacks the warning", errb.String())
	}
	if !strings.Contains(out.String(), "ok") {
		t.Errorf("stdout %q", out.String())
	}
}

// dev says what ran and what to do next, and does not present the API
// address as if it stayed up.
func TestDevSaysWhatRanAndWhatNext(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	p := filepath.Join(t.TempDir(), "one.yaml")
	if err := os.WriteFile(p, []byte("name: one\ntasks:\n  - {name: a, func: hash}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := newRoot()
	var out, errb strings.Builder
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs([]string{"dev", "--nodes", "1", p})
	if err := root.Execute(); err != nil {
		t.Fatalf("dev: %v", err)
	}
	for _, want := range []string{"until the flows have run", "ran 1 flow(s): 1 succeeded, 0 did not", "next: run your own flow file", "coordinator dev --serve"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
}

// TestServeRefusesABadDataDirectory: a data directory that is a file, or
// that holds a damaged raft.db, is invalid input (exit 2), not an
// unreachable cluster (3).
func TestServeRefusesABadDataDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	damaged := filepath.Join(dir, "damaged")
	os.MkdirAll(damaged, 0o750)
	os.WriteFile(filepath.Join(damaged, "raft.db"), bytes.Repeat([]byte("not a bbolt file "), 2000), 0o600)
	for _, data := range []string{file, damaged} {
		args := []string{"serve", "--id", "c1", "--data", data, "--raft", "127.0.0.1:0", "--http", "127.0.0.1:0",
			"--gossip", "127.0.0.1:0", "--nats", "nats://127.0.0.1:1", "--bootstrap"}
		if c := run(args); c != exitInvalid {
			t.Fatalf("serve --data %s: exit %d, want %d", data, c, exitInvalid)
		}
	}
}

// Without the token, the CLI says how to give it (exit 4); a path in
// HETFLOW_TOKEN, which must hold the token itself, is named (exit 2).
func TestTokenMistakesAreExplained(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	sec, err := proto.DeriveSecret([]byte("a cluster secret for the CLI test"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 1, SimGPUs: -1, Secret: sec})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cmd := func(env string, args ...string) (int, string) {
		t.Setenv("HETFLOW_TOKEN", env)
		root := newRoot()
		var out, errb strings.Builder
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs(args)
		err := root.Execute()
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.Code, ee.Err.Error()
		}
		if err != nil {
			return -1, err.Error()
		}
		return exitOK, ""
	}
	if code, msg := cmd("", "runs", "--server", d.URL()); code != exitUnauthorized || !strings.Contains(msg, "coordinator token --secret-file") {
		t.Errorf("no token: exit %d, %q", code, msg)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(sec.APIToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, msg := cmd(tokenFile, "runs", "--server", d.URL()); code != exitInvalid || !strings.Contains(msg, "--token-file "+tokenFile) {
		t.Errorf("a path in HETFLOW_TOKEN: exit %d, %q", code, msg)
	}
	if code, msg := cmd(sec.APIToken, "runs", "--server", d.URL()); code != exitOK {
		t.Errorf("the token in HETFLOW_TOKEN: exit %d, %q", code, msg)
	}
	if code, msg := cmd("", "runs", "--server", d.URL(), "--token-file", tokenFile); code != exitOK {
		t.Errorf("--token-file: exit %d, %q", code, msg)
	}
}

// `credentials NODE` writes the node's own credential, once; without a
// secret, or over an existing file, it is invalid input.
func TestCredentialsVerb(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte("a cluster secret for the credentials test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "n4.cred")
	args := []string{"credentials", "n4", "--secret-file", secretFile, "--out", out}
	if c := run(args); c != exitOK {
		t.Fatalf("credentials: exit %d", c)
	}
	cred, err := proto.ReadNodeCredential(out, "n4")
	if err != nil {
		t.Fatal(err)
	}
	sec, _ := proto.DeriveSecret([]byte("a cluster secret for the credentials test"))
	if want, _ := sec.NodeCredential("n4"); cred != want {
		t.Fatalf("wrote %+v, want %+v", cred, want)
	}
	if p, ok := natsauth.Authorize(sec, cred.NATSUser, cred.NATSPassword); !ok || p == nil {
		t.Fatalf("the NATS server would not take it as a node: %v %v", p, ok)
	}
	for name, a := range map[string][]string{
		"over an existing file": args,
		"without a secret":      {"credentials", "n5", "--out", filepath.Join(dir, "n5.cred")},
		"a bad node id":         {"credentials", "a.b", "--secret-file", secretFile, "--out", filepath.Join(dir, "x.cred")},
	} {
		if c := run(a); c != exitInvalid {
			t.Errorf("%s: exit %d, want %d", name, c, exitInvalid)
		}
	}
}

// syncBuf is a strings.Builder safe for a writer and a reader goroutine.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A coordinator that is down is said at once (which one, and that the CLI
// retries), not after the whole retry window of silence; when it comes up
// within the window the call goes through.
func TestClientSaysItRetriesAndWhere(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	root := newRoot()
	var out, errb syncBuf
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs([]string{"runs", "--json", "--server", "http://" + addr})
	done := make(chan error, 1)
	go func() { done <- root.Execute() }()
	testsupport.Eventually(t, 10*time.Second, "the CLI says it is retrying", func() bool {
		return strings.Contains(errb.String(), "retrying http://"+addr)
	})
	if msg := errb.String(); !strings.Contains(msg, "connection refused") || !strings.Contains(msg, "Ctrl-C") {
		t.Errorf("the retry notice does not say why or how to stop: %q", msg)
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("[]"))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runs after the server came up: %v (stderr %q)", err, errb.String())
		}
	case <-time.After(testsupport.Scale(40 * time.Second)):
		t.Fatal("runs did not return after the server came up")
	}
	if strings.Count(errb.String(), "retrying") != 1 {
		t.Errorf("the notice is repeated: %q", errb.String())
	}
}
