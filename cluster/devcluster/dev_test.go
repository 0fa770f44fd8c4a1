package devcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/proto"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The all-in-one cluster runs a registry's own function, its nodes
// advertise their catalogs, and Close leaves nothing running.
func TestDevRunsARegistrysFunction(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	reg := funcs.Default()
	reg.MustRegister(funcs.Entry{Name: "hi", CPU: func(ctx context.Context, c *funcs.Call) (funcs.Result, error) {
		return funcs.Result{Output: []byte("hi")}, nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := devcluster.Start(ctx, devcluster.Config{Nodes: 1, ExecAllow: []string{" "}}); err == nil || !strings.Contains(err.Error(), "empty entry") {
		t.Errorf("an empty exec allow entry: %v", err)
	}
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 2, SimGPUs: -1, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := d.Client()
	id, err := c.Submit(ctx, "hi.yaml", []byte("name: hi\ntasks:\n  - {name: a, func: hi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(ctx, id, nil)
	if err != nil || st.State != proto.RunSucceeded || st.Tasks[0].Output != "6869" {
		t.Errorf("run: %+v %v", st, err)
	}
	ns, err := c.Funcs(ctx)
	if err != nil || len(ns) != 2 {
		t.Fatalf("funcs: %+v %v", ns, err)
	}
	for _, n := range ns {
		if n.Hash == "" || n.Builtin || n.Error != "" {
			t.Errorf("node %s: hash %q builtin %v error %q", n.Node, n.Hash, n.Builtin, n.Error)
		}
	}
}
