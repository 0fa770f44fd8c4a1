package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/proto"
)

// execute runs one CLI command line as main does and returns its exit
// code, stdout and stderr (the error main would print).
func execute(args ...string) (int, string, string) {
	root := newRoot()
	var out, errb strings.Builder
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.Execute()
	code := exitOK
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.Code
			errb.WriteString(ee.Err.Error())
		} else {
			code = exitInvalid // main's rule for cobra's own errors (unknown flag, command)
			errb.WriteString(err.Error())
		}
	}
	return code, out.String(), errb.String()
}

// TestEveryCommandsExitCodes checks every client command against the exit
// code table (0 ok, 1 a run failed or was cancelled, 2 invalid input, 3 the
// cluster cannot be reached, 4 not authorised, 5 no such run or node), on
// one all-in-one cluster with a secret.
func TestEveryCommandsExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	t.Setenv("HETFLOW_TOKEN", "")
	t.Setenv("HETFLOW_SERVER", "")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secretFile := write("secret", "a cluster secret for the exit-code table\n")
	raw, err := proto.ReadSecretFile(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := proto.DeriveSecret(raw)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := write("token", sec.APIToken+"\n")
	wrongToken := write("wrong", "not-the-token\n")
	good := write("good.yaml", "name: demo\ntasks:\n  - {name: a, func: hash}\n  - {name: b, func: hash, succeed: [a]}\n")
	failing := write("failing.yaml", "name: failing\ntasks:\n  - {name: a, func: fail}\n")
	unknownFunc := write("unknown.yaml", "name: demo\ntasks:\n  - {name: a, func: nosuchfunc}\n")
	broken := write("broken.yaml", "name: demo\ntasks:\n  - name: a\n   func: hash\n")
	missing := filepath.Join(dir, "missing.yaml")

	ctx, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 1, SimGPUs: -1, Secret: sec})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	srv := []string{"--server", d.URL(), "--token-file", tokenFile}
	with := func(args ...string) []string { return append(args, srv...) }

	// A run that succeeded, for status and cancel.
	code, out, errs := execute(with("submit", "--json", "--wait", good)...)
	var st struct{ ID, State string }
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || st.State != proto.RunSucceeded {
		t.Fatalf("submit --wait of a good flow: exit %d, %q %q", code, out, errs)
	}
	// A registered flow, and one that fails, for run.
	code, goodID, errs := execute(with("register", good)...)
	goodID = strings.TrimSpace(goodID)
	if code != exitOK {
		t.Fatalf("register of a good flow: exit %d, %q", code, errs)
	}
	code, failingID, errs := execute(with("register", failing)...)
	failingID = strings.TrimSpace(failingID)
	if code != exitOK {
		t.Fatalf("register of a failing flow: exit %d, %q", code, errs)
	}
	// An address nothing listens on: cannot be reached.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()

	for _, c := range []struct {
		name string
		args []string
		want int
	}{
		{"validate a good flow", []string{"validate", good}, exitOK},
		{"validate an unknown function", []string{"validate", unknownFunc}, exitInvalid},
		{"validate a YAML error", []string{"validate", broken}, exitInvalid},
		{"validate a missing file", []string{"validate", missing}, exitInvalid},
		{"dump a good flow", []string{"dump", good}, exitOK},
		{"dump a missing file", []string{"dump", missing}, exitInvalid},
		{"token from a secret file", []string{"token", "--secret-file", secretFile}, exitOK},
		{"token from a missing secret file", []string{"token", "--secret-file", missing}, exitInvalid},
		{"an unknown command", []string{"nosuchcommand"}, exitInvalid},
		{"the version", []string{"--version"}, exitOK},
		{"dev over its --max-tasks", []string{"dev", "--nodes", "1", "--max-tasks", "1", good}, exitInvalid},
		{"health of a coordinator", []string{"health", "--server", d.URL()}, exitOK},
		{"health of a coordinator that is down", []string{"health", "--server", down}, exitUnreachable},
		{"an unknown flag", []string{"runs", "--nosuchflag"}, exitInvalid},

		{"submit", with("submit", good), exitOK},
		{"submit --wait of a failing flow", with("submit", "--wait", failing), exitRunFailed},
		{"submit an invalid flow", with("submit", unknownFunc), exitInvalid},
		{"submit a missing file", with("submit", missing), exitInvalid},
		{"submit without the token", []string{"submit", good, "--server", d.URL()}, exitUnauthorized},
		{"submit with a wrong token", []string{"submit", good, "--server", d.URL(), "--token-file", wrongToken}, exitUnauthorized},
		{"register", with("register", good), exitOK},
		{"register a YAML error", with("register", broken), exitInvalid},
		{"register a missing file", with("register", missing), exitInvalid},
		{"register without the token", []string{"register", good, "--server", d.URL()}, exitUnauthorized},
		{"run a registered flow", with("run", goodID, "--wait"), exitOK},
		{"run --wait of a registered failing flow", with("run", "--wait", failingID), exitRunFailed},
		{"run an unknown flow id", with("run", strings.Repeat("0", 64)), exitInvalid},
		{"run with a parameter the flow lacks", with("run", goodID, "--param", "x=1"), exitInvalid},
		{"run without the token", []string{"run", goodID, "--server", d.URL()}, exitUnauthorized},
		{"flows", with("flows"), exitOK},
		{"flows without the token", []string{"flows", "--server", d.URL()}, exitUnauthorized},
		{"status of a run", with("status", st.ID), exitOK},
		{"status of no such run", with("status", "nosuchrun"), exitNotFound},
		{"status without the token", []string{"status", st.ID, "--server", d.URL()}, exitUnauthorized},
		{"runs", with("runs"), exitOK},
		{"nodes", with("nodes"), exitOK},
		{"peers", with("peers"), exitOK},
		{"peers remove of no such coordinator", with("peers", "remove", "nosuchpeer"), exitNotFound},
		{"cancel of an ended run", with("cancel", st.ID), exitOK},
		{"cancel of no such run", with("cancel", "nosuchrun"), exitNotFound},
		{"runs without the token", []string{"runs", "--server", d.URL()}, exitUnauthorized},
		{"a missing token file", []string{"runs", "--server", d.URL(), "--token-file", missing}, exitInvalid},
		{"runs of a cluster that is down", []string{"runs", "--server", down}, exitUnreachable},
	} {
		if code, out, errs := execute(c.args...); code != c.want {
			t.Errorf("%s: coordinator %s: exit %d, want %d\nstdout: %s\nstderr: %s", c.name, strings.Join(c.args, " "), code, c.want, out, errs)
		}
	}
}

// TestServePlacementFlags: a bad --cost or a negative --hop is invalid
// input (exit 2) naming the flag, before anything starts.
func TestServePlacementFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cost", "mine=fast"}, "--cost mine=fast"},
		{[]string{"--cost", "mine=-1ms"}, "--cost mine=-1ms"},
		{[]string{"--hop", "-1ms"}, "hop -1ms"},
	} {
		args := append([]string{"serve", "--id", "c1", "--data", t.TempDir(), "--raft", "127.0.0.1:0", "--http", "127.0.0.1:0", "--gossip", "127.0.0.1:0"}, tc.args...)
		code, _, errs := execute(args...)
		if code != exitInvalid || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, %q; want %d naming %q", tc.args, code, errs, exitInvalid, tc.want)
		}
	}
	if got, err := parseCosts(map[string]string{"mine": "3ms"}); err != nil || got["mine"] != 3*time.Millisecond {
		t.Errorf("--cost mine=3ms: %v %v", got, err)
	}
}
