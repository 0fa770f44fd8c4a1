package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/proto"
)

// status shows printable outputs as text and others as hex (--json stays
// hex); output RUN TASK writes a task's bytes as they are.
func TestOutputsPeopleCanRead(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	reg := funcs.Default()
	reg.MustRegister(funcs.Entry{Name: "say", CPU: func(ctx context.Context, c *funcs.Call) (funcs.Result, error) {
		return funcs.Result{Output: []byte("6 words\n")}, nil
	}})
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 1, SimGPUs: -1, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	flow := "name: o\ntasks:\n  - {name: say, func: say}\n  - {name: bin, func: blob, args: {n: 5}}\n" +
		"  - {name: big, func: blob, args: {n: 100000}}\n  - {name: mid, func: noop}\n  - {name: end, func: noop, succeed: [mid]}\n"
	id, err := d.Client().Submit(ctx, "o.yaml", []byte(flow))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := d.Client().Wait(ctx, id, nil); err != nil {
		t.Fatalf("%v %+v", err, st)
	}
	code, out, errs := execute("status", id, "--server", d.URL())
	if code != exitOK {
		t.Fatalf("status: %d %s", code, errs)
	}
	for _, want := range []string{`output "6 words\n"`, "output 0001020304\n", "output " + hex.EncodeToString(blob(32)) + "… (100000 bytes)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = execute("status", id, "--server", d.URL(), "--json")
	var st proto.RunStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Tasks[0].Output != hex.EncodeToString([]byte("6 words\n")) {
		t.Errorf("status --json: %v %+v", err, st.Tasks)
	}
	for task, want := range map[string][]byte{"say": []byte("6 words\n"), "bin": blob(5), "big": blob(100000), "end": nil} {
		code, out, errs := execute("output", id, task, "--server", d.URL())
		if code != exitOK || out != string(want) {
			t.Errorf("output %s: exit %d, %d bytes, want %d (%s)", task, code, len(out), len(want), errs)
		}
		if want == nil && !strings.Contains(errs, "has no output") {
			t.Errorf("output of a task without one: stderr %q", errs)
		}
	}
	if code, _, errs := execute("output", id, "nosuch", "--server", d.URL()); code != exitNotFound || !strings.Contains(errs, `no task "nosuch"`) {
		t.Errorf("output of an unknown task: exit %d %s", code, errs)
	}
}

func blob(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}
