package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// freeJoinFlow is a join whose strong predecessors complete unequal numbers
// of times (issue 12): a once, body four times (a do-while through cond).
// j takes their five completions as its join counter of 2 does on one
// node, in rounds of two whichever predecessor gave them: it runs twice,
// and one completion stays in the counter. Its body sleeps %d ms a round.
const freeJoinFlow = `
name: freejoin
tasks:
  - {name: a, func: hash}
  - {name: init, func: hash}
  - {name: body, func: sleep, args: {ms: %d}, succeed: [init]}
  - {name: cond, kind: condition, func: loop, args: {n: 3}, succeed: [body], precede: [body, done]}
  - {name: done, func: hash}
  - {name: j, func: hash, succeed: [a, body]}
`

// checkFreeJoin: every task done with the activations of one node's
// executor: body and cond 4, j 2 (five completions into a counter of 2),
// the rest 1.
func checkFreeJoin(t *testing.T, label string, got map[string]*taskFold) {
	t.Helper()
	want := map[string]uint64{"a": 1, "init": 1, "body": 4, "cond": 4, "done": 1, "j": 2}
	for name, acts := range want {
		f := got[name]
		if f == nil || f.state != transport.TaskDone || f.acts != acts {
			t.Fatalf("%s: %s: %v, want done with %d activations\n%s", label, name, f, acts, summary(got))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d tasks reported, want %d\n%s", label, len(got), len(want), summary(got))
	}
}

// TestFreeJoinEndsAsOnOneNode: the flow across three nodes (a, the loop and
// j each on its own) ends as on one node, every task done with the same
// activations; before runproto's free joins its run never went idle
// (body's Signals for j's activations 3 and 4 waited for ever).
func TestFreeJoinEndsAsOnOneNode(t *testing.T) {
	c := newCluster(t, nodeSpec{}, nodeSpec{}, nodeSpec{})
	file, g := parseFlow(t, fmt.Sprintf(freeJoinFlow, 30))
	ctx := testCtx(t, 60*time.Second)

	one := c.runFlow(ctx, file, placement(g, 3, nil, func(int) int { return 0 }), runOpts{})
	if one.failed != nil {
		t.Fatalf("one node: failed: %+v", one.failed)
	}
	checkFreeJoin(t, "one node", one.tasks)

	own := placement(g, 3, nil, func(v int) int {
		switch v {
		case byName(g, "a"):
			return 0
		case byName(g, "j"):
			return 2
		}
		return 1
	})
	three := c.runFlow(ctx, file, own, runOpts{})
	if three.failed != nil {
		t.Fatalf("three nodes: failed: %+v", three.failed)
	}
	checkFreeJoin(t, "three nodes", three.tasks)
	compare(t, "three nodes", one.tasks, three.tasks)
}

// TestFreeJoinAfterALoss: the node running the loop is lost after two
// rounds; its new owner runs the loop again from the record, and j's node
// takes the re-sent Signals as duplicates. The run ends with the
// activations of one node, as without the loss.
func TestFreeJoinAfterALoss(t *testing.T) {
	hb := 100 * time.Millisecond
	c := newCluster(t, nodeSpec{heartbeat: hb}, nodeSpec{heartbeat: hb}, nodeSpec{heartbeat: hb})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, fmt.Sprintf(freeJoinFlow, 300)) // 2 of 4 rounds pass well apart from the 100 ms polls
	own := make([]uint32, len(g.Vertices))
	for _, name := range []string{"init", "body", "cond", "done"} {
		own[byName(g, name)] = 1
	}
	own[byName(g, "j")] = 2
	body := byName(g, "body")
	lostAt := uint64(0)
	runID, asg := c.runLosing(ctx, file, g, own, lossStep{node: 1, when: func(run string, i int) bool {
		lostAt = c.acts(i, run, body)
		return lostAt >= 2
	}})
	t.Logf("lost n1 after %d rounds; gen %d owners %v of %v", lostAt, asg.Gen, asg.Owner, asg.Nodes)
	if lostAt >= 4 {
		t.Fatalf("the loop had ended (%d rounds) before the loss", lostAt)
	}
	checkFreeJoin(t, "after a loss", c.fold(ctx, runID))
}
