package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/bench"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// TestLoopbackBenchReadsNodeMetrics: bench --server (cmd/bench) on the real
// binaries reads every node's counters and peak memory from its /metrics,
// finding the address in GET /v1/nodes, and says which node has no --http.
func TestLoopbackBenchReadsNodeMetrics(t *testing.T) {
	c := startCluster(t)
	start(t, "n4", "node", "--id", "n4", "--nats", c.natsURL, "--gossip", addr(freePort(t)),
		"--join", strings.Join(c.gossip, ","), "--cpus", "1")
	testsupport.Eventually(t, 60*time.Second, "4 alive nodes, 3 with an HTTP address", func() bool {
		out, code := poll(t, "nodes", "--json", "--server", c.servers)
		var ns []proto.NodeInfo
		if code != 0 || json.Unmarshal([]byte(out), &ns) != nil {
			return false
		}
		alive, withHTTP := 0, 0
		for _, n := range ns {
			if n.State == proto.NodeAlive {
				alive++
			}
			if n.HTTP != "" {
				withHTTP++
			}
		}
		return alive == 4 && withHTTP == 3
	})

	out := t.TempDir()
	cfg := bench.Config{Out: out, Servers: strings.Split(c.servers, ","), Seed: 3, Workers: 2, Timeout: time.Minute,
		Sizes: []int{60, 400}, NodeSet: []int{1}, GPUSet: []int{1}, Reps: 1, BoxSizes: []int{60}, BoxRuns: 2,
		LoopIters: 5, LoopWidth: 2, LoopSpinUS: 5, CorunK: 1, CorunTasks: 60, GranNodes: 2, SimTasks: 100}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := bench.Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "htdg.json"))
	if err != nil {
		t.Fatal(err)
	}
	var h bench.HTDGReport
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(h.Meta.Notes, "\n"), "node n4: the node runs without --http") {
		t.Errorf("notes do not name the node without --http: %q", h.Meta.Notes)
	}
	if len(h.Configs) != 1 || len(h.Configs[0].Points) != 2 {
		t.Fatalf("configs: %+v", h.Configs)
	}
	for _, p := range h.Configs[0].Points {
		r := p.Runs[0]
		if len(r.Nodes) != 4 {
			t.Fatalf("%d tasks: %d nodes' counters, want 4: %+v", p.Tasks, len(r.Nodes), r.Nodes)
		}
		var executed, sent, received uint64
		var mem []string
		for _, n := range r.Nodes {
			mem = append(mem, fmt.Sprintf("%s RSS %d MiB heap %d MiB", n.Node, n.PeakRSSBytes>>20, n.PeakHeapBytes>>20))
			if n.Node == "n4" {
				if !strings.Contains(n.Note, "--http") || n.TasksExecuted != 0 {
					t.Errorf("n4 (no --http): %+v", n)
				}
				continue
			}
			if n.Note != "" || n.PeakRSSBytes == 0 || n.PeakHeapBytes == 0 || len(n.Domains) == 0 || n.Domains[0].Domain != "cpu" {
				t.Errorf("%d tasks: node %s: %+v", p.Tasks, n.Node, n)
			}
			executed += n.TasksExecuted
			sent += n.SignalsSent
			received += n.SignalsReceived
		}
		// n4 runs tasks too, but its share is not counted: the others' is at
		// most the whole run's
		if executed == 0 || executed > r.Executions {
			t.Errorf("%d tasks: nodes with --http executed %d functions, the run %d", p.Tasks, executed, r.Executions)
		}
		t.Logf("%d tasks: executed %d of %d on n1-n3, signals sent %d received %d, %d cross-node edges, per node %v; peaks: %s",
			p.Tasks, executed, r.Executions, sent, received, r.CrossNodeEdges, r.TasksPerNode, strings.Join(mem, ", "))
	}
}
