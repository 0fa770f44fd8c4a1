package e2e

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/hetflow/hetflow/cluster/proto"
)

// hog keeps every core busy with one busy-loop process per core until the
// test ends: other programs loading the machine, as on a production host.
func hog(t *testing.T) {
	t.Helper()
	for i := 0; i < runtime.NumCPU(); i++ {
		cmd := exec.Command("bash", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start the CPU hog: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		})
	}
}

// counter reads one labelled counter (name{labels}) from url's /metrics; 0
// when absent, -1 when unreadable.
func counter(url, series string) int {
	v, ok := metric(url, series)
	switch {
	case ok:
		return v
	case v < 0:
		return -1
	}
	return 0
}

// Slow is not dead: a cluster of real processes whose machine is saturated
// by other programs (a busy loop per core) runs CPU-heavy flows with every
// node kept alive — gossip may suspect a starved node, NATS refutes it — and
// every task executed exactly once.
func TestLoopbackSlowIsNotDead(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := startCluster(t)
	hog(t)
	const runs = 2
	for i := 0; i < runs; i++ {
		out, code := cli(t, "submit", "--wait", "--json", "--server", c.servers, "../examples/flows/busy.yaml")
		sts := parseStatuses(t, out)
		if code != 0 || len(sts) != 1 {
			t.Fatalf("run %d: exit %d: %s", i+1, code, out)
		}
		st := sts[0]
		if st.State != proto.RunSucceeded {
			t.Fatalf("run %d: %s %s", i+1, st.State, st.Error)
		}
		for _, tk := range st.Tasks {
			if tk.State != proto.TaskDone && tk.State != proto.TaskSkipped {
				t.Errorf("run %d: task %s %s", i+1, tk.Name, tk.State)
			}
			if tk.Executions != tk.Activations {
				t.Errorf("run %d: task %s executed %d times for %d activations (a live node taken for dead?)", i+1, tk.Name, tk.Executions, tk.Activations)
			}
		}
	}
	confirmed, refuted := 0, 0
	for _, u := range c.https {
		confirmed += max(counter(u, `hetflow_gossip_deaths_total{verdict="confirmed"}`), 0)
		refuted += max(counter(u, `hetflow_gossip_deaths_total{verdict="refuted"}`), 0)
		if n := counter(u, "hetflow_verdicts_refused_total"); n > 0 {
			t.Errorf("%s refused %d success verdicts", u, n)
		}
	}
	t.Logf("%d runs under a CPU hog (load %s): gossip deaths confirmed %d, refuted by NATS %d", runs, loadavg(), confirmed, refuted)
	if confirmed != 0 {
		t.Errorf("%d live nodes were taken for dead", confirmed)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if st := c.nodeState(id); st != proto.NodeAlive && st != proto.NodeSuspect {
			t.Errorf("node %s is %s", id, st)
		}
	}
}

// loadavg is the machine's 1-minute load average, as /proc/loadavg says
// ("?" where it cannot be read).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
