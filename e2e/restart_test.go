package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// quickFlow touches every node in a second or so.
const quickFlow = `name: quick
tasks:
  - {name: a, func: hash, node: n1}
  - {name: b, func: hash, succeed: [a], node: n2}
  - {name: c, func: hash, succeed: [b], node: n3}
  - {name: d, func: hash, succeed: [a], node: n3}
`

// aliveNodes counts the nodes a coordinator reports alive (-1: no answer).
func aliveNodes(t *testing.T, server string) int {
	out, code := poll(t, "nodes", "--json", "--server", server)
	var ns []proto.NodeInfo
	if code != 0 || json.Unmarshal([]byte(out), &ns) != nil {
		return -1
	}
	alive := 0
	for _, n := range ns {
		if n.State == proto.NodeAlive {
			alive++
		}
	}
	return alive
}

// leaderHTTP asks one coordinator for the leader's API address.
func leaderHTTP(url string) string {
	hc := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := hc.Get(url + "/v1/leader")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var li proto.LeaderInfo
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&li) != nil {
		return ""
	}
	return li.HTTP
}

// restartCoord stops coordinator i with SIGTERM and starts it again with
// the same command line (c1's is the documented one: --bootstrap, no
// --join), then waits until /healthz says it can serve.
func (c *cluster) restartCoord(t *testing.T, i int) {
	t.Helper()
	p := c.coords[i]
	p.stop(syscall.SIGTERM, 20*time.Second)
	c.coords[i] = start(t, p.name, p.args...)
	c.waitReady(t, i)
}

func (c *cluster) waitReady(t *testing.T, i int) {
	t.Helper()
	testsupport.Eventually(t, 30*time.Second, c.coords[i].name+" ready after its restart", func() bool {
		_, code := poll(t, "health", "--url", c.https[i])
		return code == 0 && leaderHTTP(c.https[i]) != ""
	})
}

// runThrough submits quickFlow through one coordinator alone and waits for
// it to succeed.
func runThrough(t *testing.T, server, flow, what string) {
	t.Helper()
	id := submit(t, server, flow)
	st := waitStatus(t, server, id, 60*time.Second, what, ended)
	if st.State != proto.RunSucceeded {
		t.Fatalf("%s: run %s %s: %s", what, id, st.State, st.Error)
	}
}

// leaderIndex is the index of the coordinator that leads (-1: none agreed).
func (c *cluster) leaderIndex() int {
	id := leaderOf(c.https[0])
	for _, u := range c.https {
		if leaderOf(u) != id {
			return -1
		}
	}
	var i int
	if _, err := fmt.Sscanf(id, "c%d", &i); err != nil {
		return -1
	}
	return i - 1
}

// TestLoopbackCoordinatorsRestartInTurn: each coordinator, stopped cleanly
// and started again with its own command line, is back in the cluster:
// its /healthz says it can serve, its /v1/leader names the leader's API,
// and a flow submitted through it alone runs on every node. c1 restarts
// without its peer list (a data directory of an older version): the others
// pull it back into the ring. Then the leader restarts twice, so that a
// restarted coordinator wins the election; it keeps every live node alive
// past the time it gives the ring to show them, and runs flows.
func TestLoopbackCoordinatorsRestartInTurn(t *testing.T) {
	c := startCluster(t)
	flow := writeFlow(t, "quick.yaml", quickFlow)
	runThrough(t, c.servers, flow, "before any restart")
	for i := range c.coords {
		if i == 0 {
			c.coords[0].stop(syscall.SIGTERM, 20*time.Second)
			if err := os.Remove(filepath.Join(dataDir(c.coords[0]), "peers.json")); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
		c.restartCoord(t, i)
		runThrough(t, c.https[i], flow, fmt.Sprintf("through c%d after its restart", i+1))
	}
	for round := range 2 {
		var l int
		testsupport.Eventually(t, 30*time.Second, "one leader", func() bool { l = c.leaderIndex(); return l >= 0 })
		c.restartCoord(t, l)
		testsupport.Eventually(t, 30*time.Second, "a new leader", func() bool { nl := c.leaderIndex(); return nl >= 0 })
		// the leader marks nodes the ring never showed it dead after 5 s
		deadline := time.Now().Add(7 * time.Second)
		for time.Now().Before(deadline) {
			if n := aliveNodes(t, c.servers); n != 3 && n != -1 {
				t.Fatalf("round %d: %d nodes alive after the leader's restart, want 3", round, n)
			}
		}
		runThrough(t, c.https[l], flow, fmt.Sprintf("round %d: through the restarted leader", round))
	}
}

// TestLoopbackCoordinatorStartsWithItsSeedsDown: c2's only --join seed is
// c1. With c1 down, c2 restarts: it must finish starting, find c3 through
// its raft configuration, and serve (a flow through it alone runs); c1
// comes back afterwards and the cluster serves through it too.
func TestLoopbackCoordinatorStartsWithItsSeedsDown(t *testing.T) {
	c := startCluster(t)
	flow := writeFlow(t, "quick.yaml", quickFlow)
	c.coords[0].stop(syscall.SIGTERM, 20*time.Second)
	c.restartCoord(t, 1)
	runThrough(t, c.https[1], flow, "through c2, its seed down")
	runThrough(t, c.https[2], flow, "through c3")
	c.coords[0] = start(t, "c1", c.coords[0].args...)
	c.waitReady(t, 0)
	runThrough(t, c.https[0], flow, "through c1 once back")
}

// TestLoopbackCLISkipsAFrozenCoordinator: the first --server is a stopped
// (SIGSTOP) follower: it takes connections and answers nothing. runs,
// status and submit go on to the others after the client's per-attempt
// deadline instead of waiting out the whole call.
func TestLoopbackCLISkipsAFrozenCoordinator(t *testing.T) {
	c := startCluster(t)
	flow := writeFlow(t, "quick.yaml", quickFlow)
	var l int
	testsupport.Eventually(t, 30*time.Second, "one leader", func() bool { l = c.leaderIndex(); return l >= 0 })
	f := (l + 1) % 3
	frozen := c.coords[f]
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = frozen.cmd.Process.Signal(syscall.SIGCONT) })
	servers := []string{c.https[f]}
	for i, u := range c.https {
		if i != f {
			servers = append(servers, u)
		}
	}
	list := strings.Join(servers, ",")
	limit := testsupport.Scale(15 * time.Second) // the CLI's call deadline is 30 s

	began := time.Now()
	id := submit(t, list, flow)
	took := map[string]time.Duration{"submit": time.Since(began)}
	began = time.Now()
	if _, code := cli(t, "runs", "--server", list); code != 0 {
		t.Fatalf("runs: exit %d", code)
	}
	took["runs"] = time.Since(began)
	began = time.Now()
	st := waitStatus(t, list, id, 60*time.Second, "the run ends", ended)
	took["status"] = time.Since(began)
	if st.State != proto.RunSucceeded {
		t.Fatalf("run %s %s: %s", id, st.State, st.Error)
	}
	for what, d := range took {
		if d > limit {
			t.Errorf("%s took %v with a frozen first server", what, d)
		}
	}
}

// dataDir is a coordinator's --data.
func dataDir(p *proc) string {
	for i, a := range p.args {
		if a == "--data" && i+1 < len(p.args) {
			return p.args[i+1]
		}
	}
	return ""
}
