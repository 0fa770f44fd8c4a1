package cluster_test

import (
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster"
	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/flowgen"
)

// TestRunStoredWhileItRuns: through a real dev cluster, a run of more
// tasks than a node's volume cut (32K rows) may have its record stored in
// reports cut while it runs, folded by the leader's status read as they
// come, and the leader's verdict over them is a success with every task
// done once, as a run's record cut at idle gave: first run and run again.
// How many early reports a run makes is not asserted: it is the load's
// (the publisher serves a kick when it gets a core, and a heartbeat's,
// a probe's or the idle flush's cut restarts the count), so it is logged.
func TestRunStoredWhileItRuns(t *testing.T) {
	ctx := timeout(t, 3*time.Minute)
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 1, SimGPUs: -1})
	must(t, err)
	t.Cleanup(func() { must(t, d.Close()) })
	c := d.Client()
	const layers, width = 40, 1000
	ref, err := c.RegisterFlow(ctx, "layered.json", flowgen.Layered(layers, width, 1, true))
	must(t, err)
	nd := d.Nodes()[0]
	for _, what := range []string{"first run", "run again"} {
		before := nd.Stats()
		id, err := c.RunFlow(ctx, ref.ID)
		must(t, err)
		version := ""
		var p proto.RunProgress
		for { // followed as a client does: each report folded answers a long poll
			p, err = c.Progress(ctx, id, version, cluster.FollowWait)
			must(t, err)
			if proto.Finished(p.State) {
				break
			}
			version = p.Version
		}
		if p.State != proto.RunSucceeded || p.Counts.Done != layers*width {
			t.Fatalf("%s: %s, %d of %d tasks done (%s)", what, p.State, p.Counts.Done, layers*width, p.Error)
		}
		after := nd.Stats()
		t.Logf("%s: %d volume kicks, %d reports stored for %d tasks", what,
			after.EventVolumeCuts-before.EventVolumeCuts, after.EventReports-before.EventReports, layers*width)
		st, err := c.Status(ctx, id)
		must(t, err)
		for _, task := range st.Tasks {
			if task.State != proto.TaskDone || task.Executions != 1 {
				t.Fatalf("%s: task %s %s, %d executions", what, task.Name, task.State, task.Executions)
			}
		}
	}
}
