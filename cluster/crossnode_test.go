package cluster_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/htdg"
)

// A layered DAG of hash tasks on three nodes, run again and again: the
// planner (with coord.Placement Spread: its cost model would keep these
// tiny tasks on one node) spreads every level over the nodes, so about a third of its
// ~1,600 edges cross nodes, and a hash task's output covers its predecessors' outputs,
// so a lost, late or repeated Signal shows as a hung run, a wrong sink
// hash or a task that ran twice. (The bench once saw a run of this shape
// stop with tasks pending and none running.) Every run must succeed, with
// each task run once and every sink's output the hash the flow defines.
func TestManyCrossNodeEdgesRunExactlyOnce(t *testing.T) {
	const tasks, runs = 800, 10
	g, err := htdg.Generate(tasks, 7, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := spec.NewFlow("crossnode")
	ts := make([]*spec.TaskBuilder, g.N)
	hasSucc := make([]bool, g.N)
	for i := range g.N {
		ts[i] = b.Task(fmt.Sprintf("t%d", i)).Func(funcs.Hash)
		for _, p := range g.Preds[i] {
			ts[i].Succeed(ts[p])
			hasSucc[p] = true
		}
	}
	fl, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	file, err := spec.NewFile(spec.Options{Funcs: funcs.Default()}, fl)
	if err != nil {
		t.Fatal(err)
	}
	text, err := file.JSON()
	if err != nil {
		t.Fatal(err)
	}
	// what the flow defines: t_i = SHA-256(name, outputs of its
	// predecessors), in the generator's (topological) order
	want := make([][32]byte, g.N)
	for i := range g.N {
		in := map[string][]byte{}
		for _, p := range g.Preds[i] {
			in[fmt.Sprintf("t%d", p)] = want[p][:]
		}
		want[i] = funcs.HashOf(fmt.Sprintf("t%d", i), in)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 3, SimGPUs: -1, Placement: coord.Placement{Spread: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := d.Client()
	for r := range runs {
		id, err := c.Submit(ctx, "crossnode.json", text)
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		st, err := c.Wait(wctx, id, nil)
		wcancel()
		if err != nil {
			if st, err2 := c.Status(ctx, id); err2 == nil {
				left := map[string]int{}
				for _, ts := range st.Tasks {
					left[ts.State]++
				}
				t.Fatalf("run %d: %v; task states %v", r, err, left)
			}
			t.Fatalf("run %d: %v", r, err)
		}
		if st.State != proto.RunSucceeded || len(st.Tasks) != g.N {
			t.Fatalf("run %d: %s with %d tasks: %s", r, st.State, len(st.Tasks), st.Error)
		}
		nodes := map[string]bool{}
		nodeOf := make([]string, g.N)
		for _, ts := range st.Tasks {
			var i int
			if _, err := fmt.Sscanf(ts.Name, "t%d", &i); err != nil {
				t.Fatalf("run %d: task %q", r, ts.Name)
			}
			nodes[ts.Node] = true
			nodeOf[i] = ts.Node
			if ts.State != proto.TaskDone || ts.Activations != 1 || ts.Executions != 1 {
				t.Fatalf("run %d: task %s %s, %d activations, %d executions; want done, 1, 1", r, ts.Name, ts.State, ts.Activations, ts.Executions)
			}
			if !hasSucc[i] && ts.Output != hex.EncodeToString(want[i][:]) {
				t.Fatalf("run %d: sink %s output %s, want %x", r, ts.Name, ts.Output, want[i])
			}
		}
		cross := 0
		for i := range g.N {
			for _, p := range g.Preds[i] {
				if nodeOf[p] != nodeOf[i] {
					cross++
				}
			}
		}
		if len(nodes) != 3 || cross < g.Edges/4 {
			t.Fatalf("run %d: tasks ran on %d nodes with %d of %d edges across them; the test wants all 3 and at least a quarter across", r, len(nodes), cross, g.Edges)
		}
		if r == 0 {
			t.Logf("%d of %d edges cross nodes", cross, g.Edges)
		}
	}
}
