package cluster_test

import (
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/flowgen"
)

// TestRunAgainByDigest: through a real dev cluster, a registered flow run
// again on the same nodes goes to them by its plans' digests (the nodes
// hold the plans: none is asked for); a node that lost its plans asks for
// its plan and gets it, and the run succeeds with every task done, as the
// first did.
func TestRunAgainByDigest(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 2, SimGPUs: -1})
	must(t, err)
	t.Cleanup(func() { must(t, d.Close()) })
	c := d.Client()
	ref, err := c.RegisterFlow(ctx, "layered.json", flowgen.Layered(4, 20, 1, true))
	must(t, err)
	run := func(what string) {
		t.Helper()
		id, err := c.RunFlow(ctx, ref.ID)
		must(t, err)
		st, err := c.Wait(ctx, id, nil)
		must(t, err)
		if st.State != proto.RunSucceeded || len(st.Tasks) != 80 {
			t.Fatalf("%s: %s with %d tasks (%s)", what, st.State, len(st.Tasks), st.Error)
		}
		for _, task := range st.Tasks {
			if task.State != proto.TaskDone || task.Executions != 1 {
				t.Fatalf("%s: task %s %s", what, task.Name, task.State)
			}
		}
	}
	needed := func() (n uint64) {
		for _, nd := range d.Nodes() {
			n += nd.Stats().PlansNeeded
		}
		return n
	}
	run("first run")
	run("run again")
	if n := needed(); n != 0 {
		t.Fatalf("the nodes asked for %d plans they held", n)
	}
	for _, nd := range d.Nodes() {
		nd.ForgetPlans()
	}
	run("run again after the nodes lost their plans")
	if n := needed(); n == 0 {
		t.Fatal("no node asked for the plan it lost: the run again did not name it by digest")
	}
}
