package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/proto"
)

// blobFlow's outputs depend on its parameter: c is blob {n} (byte i is
// i mod 256) and h the hash of its name and b's blob of the same size.
const blobFlow = `name: blobs
params:
  n: {type: int, default: 4}
tasks:
  - name: b
    func: blob
    args: {n: "${n}"}
  - name: h
    func: hash
    succeed: [b]
  - name: c
    func: blob
    args: {n: "${n}"}
`

func blobOf(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// register prints a flow's id once and for all; run FLOWID starts runs of
// it with parameters and behaves as submit (its output, --wait, --json,
// exit codes); flows lists it. Three runs of one registered flow with
// three values of its parameter each succeed with the outputs of that
// value, on a dev cluster of two nodes.
func TestRegisterAndRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	t.Setenv("HETFLOW_TOKEN", "")
	t.Setenv("HETFLOW_SERVER", "")
	dir := t.TempDir()
	p := filepath.Join(dir, "blobs.yaml")
	if err := os.WriteFile(p, []byte(blobFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 2, SimGPUs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	srv := []string{"--server", d.URL()}
	with := func(args ...string) []string { return append(args, srv...) }

	code, out, errs := execute(with("register", p)...)
	id := strings.TrimSpace(out)
	if code != exitOK || len(id) != 64 {
		t.Fatalf("register: exit %d, %q %q", code, out, errs)
	}
	var ref proto.FlowRef
	code, out, _ = execute(with("register", "--json", p)...)
	if code != exitOK || json.Unmarshal([]byte(out), &ref) != nil || ref != (proto.FlowRef{ID: id, Flow: "blobs"}) {
		t.Fatalf("register --json again: exit %d, %q; want {%q, blobs}", code, out, id)
	}

	for _, n := range []int{3, 40, 300} {
		code, out, errs := execute(with("run", id, "--param", "n="+strconv.Itoa(n), "--wait", "--json")...)
		if code != exitOK {
			t.Fatalf("run n=%d --wait: exit %d, %s %s", n, code, out, errs)
		}
		var st proto.RunStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
		h := sha256.Sum256(append([]byte("h"), blobOf(n)...))
		want := map[string]string{"c": hex.EncodeToString(blobOf(n)), "h": hex.EncodeToString(h[:]), "b": ""}
		if st.State != proto.RunSucceeded || st.Flow != "blobs" || st.Params["n"] != float64(n) || len(st.Tasks) != 3 {
			t.Fatalf("run n=%d: %+v", n, st)
		}
		for _, task := range st.Tasks {
			if task.Output != want[task.Name] || task.State != proto.TaskDone {
				t.Errorf("run n=%d: task %s %s output %.40q, want done %.40q", n, task.Name, task.State, task.Output, want[task.Name])
			}
		}
	}
	// Without --wait: the run id, or {"id"}, as submit prints them.
	code, out, errs = execute(with("run", id)...)
	if code != exitOK || !proto.ValidRunID(strings.TrimSpace(out)) {
		t.Fatalf("run: exit %d, %q %q", code, out, errs)
	}
	var sub proto.SubmitResponse
	if code, out, _ = execute(with("run", id, "--json")...); code != exitOK || json.Unmarshal([]byte(out), &sub) != nil || !proto.ValidRunID(sub.ID) {
		t.Fatalf("run --json: exit %d, %q", code, out)
	}

	code, out, _ = execute(with("flows", "--json")...)
	var fl []proto.FlowInfo
	if code != exitOK || json.Unmarshal([]byte(out), &fl) != nil || len(fl) != 1 || fl[0].ID != id || !fl[0].Registered || fl[0].Runs != 5 || fl[0].Tasks != 3 {
		t.Fatalf("flows --json: exit %d, %s", code, out)
	}
	if code, out, _ = execute(with("flows")...); code != exitOK || !strings.HasPrefix(out, id+" blobs") || !strings.Contains(out, "registered") {
		t.Fatalf("flows: exit %d, %q", code, out)
	}

	// Invalid input, exit 2, naming what is wrong.
	for _, c := range []struct {
		args []string
		want string
	}{
		{with("run", strings.Repeat("a", 64)), "no such flow"},
		{with("run", "blobs"), `flow id "blobs": want 64 lowercase hex digits`},
		{with("run", id, "--param", "n=many"), `parameter "n": must be an int, got "many"`},
		{with("run", id, "--param", "m=1"), `parameter "m" given, but the flow does not declare it`},
		{with("run", id, "--param", "n"), `--param "n": want name=value`},
		{with("register", filepath.Join(dir, "missing.yaml")), "missing.yaml"},
	} {
		if code, _, errs := execute(c.args...); code != exitInvalid || !strings.Contains(errs, c.want) {
			t.Errorf("coordinator %v: exit %d, stderr %q; want exit %d naming %q", c.args, code, errs, exitInvalid, c.want)
		}
	}
}
