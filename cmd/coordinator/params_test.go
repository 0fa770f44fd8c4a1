package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster"
	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/proto"
)

const paramsFlow = `name: pf
params:
  ms: {type: int, default: 1}
  who: {type: string}
tasks:
  - name: nap
    func: sleep
    args: {ms: "${ms}"}
  - name: end
    func: hash
    succeed: [nap]
`

// submit --param fills a flow's parameters; status --json carries them; a
// missing, ill-typed or undeclared one is exit 2 naming it, from the CLI's
// own check and from the cluster's (the Go client).
func TestSubmitParams(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	p := filepath.Join(t.TempDir(), "pf.yaml")
	if err := os.WriteFile(p, []byte(paramsFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"validate", p}, `parameter "who" (string) has no default`},
		{[]string{"validate", p, "--param", "who=x", "--param", "ms=soon"}, `parameter "ms": must be an int, got "soon"`},
		{[]string{"validate", p, "--param", "who=x", "--param", "ms=-3"}, `task "nap" field "args"`},
		{[]string{"dump", p, "--param", "who"}, `--param "who": want name=value`},
		{[]string{"validate", p, "--param", "who=x", "--param", "who=y"}, `--param who given twice`},
		{[]string{"submit", p, "--server", "http://127.0.0.1:1", "--param", "who=x", "--param", "nope=1"}, `parameter "nope" given, but the flow does not declare it`},
	} {
		code, _, errs := execute(c.args...)
		if code != exitInvalid || !strings.Contains(errs, c.want) {
			t.Errorf("coordinator %v: exit %d, stderr %q; want exit %d naming %q", c.args, code, errs, exitInvalid, c.want)
		}
	}
	if code, out, errs := execute("validate", p, "--param", "who=x"); code != exitOK || !strings.Contains(out, "ok") {
		t.Errorf("validate with the parameter: exit %d %q %q", code, out, errs)
	}

	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 1, SimGPUs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	code, out, errs := execute("submit", p, "--server", d.URL(), "--wait", "--json", "--param", "who=ann", "--param", "ms=2")
	if code != exitOK {
		t.Fatalf("submit --wait: exit %d, %s %s", code, out, errs)
	}
	var st proto.RunStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if st.State != proto.RunSucceeded || st.Params["who"] != "ann" || st.Params["ms"] != 2.0 {
		t.Errorf("status %+v: want succeeded with params who=ann ms=2", st)
	}
	code, out, _ = execute("status", st.ID, "--server", d.URL())
	if code != exitOK || !strings.Contains(out, "params ms=2 who=ann") {
		t.Errorf("status: exit %d\n%s\nwant a line params ms=2 who=ann", code, out)
	}
	// The cluster checks too: the Go client skips the CLI's check.
	text := []byte(paramsFlow)
	for _, c := range []struct {
		params cluster.Params
		want   string
	}{
		{nil, `parameter "who" (string) has no default`},
		{cluster.Params{"who": "x", "ms": true}, `parameter "ms": must be an int, got true`},
	} {
		_, err := d.Client().Submit(ctx, "pf.yaml", text, c.params)
		if !errors.Is(err, proto.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Submit with %v: %v; want invalid naming %q", c.params, err, c.want)
		}
	}
	id, err := d.Client().Submit(ctx, "pf.yaml", text, cluster.Params{"who": "bo", "ms": 1})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := d.Client().Wait(ctx, id, nil); err != nil || st.Params["who"] != "bo" || st.Params["ms"] != 1.0 {
		t.Errorf("Go client run: %+v %v", st, err)
	}
}
