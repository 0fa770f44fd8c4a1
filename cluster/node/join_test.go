package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// surplusFlow is a join whose strong predecessors complete unequal numbers
// of times (issue 12): a once, body four times (a do-while through cond).
// Activation k of j takes the k-th completion of each: j runs once, and
// body's last three completions stay in j's activation 2, which a never
// fills — idle state, not work owed.
// Its body sleeps %d ms a round.
const surplusFlow = `
name: surplus
tasks:
  - {name: a, func: hash}
  - {name: init, func: hash}
  - {name: body, func: sleep, args: {ms: %d}, succeed: [init]}
  - {name: cond, kind: condition, func: loop, args: {n: 3}, succeed: [body], precede: [body, done]}
  - {name: done, func: hash}
  - {name: j, func: hash, succeed: [a, body]}
`

// checkSurplus: every task done, as on one node, with the activations one
// node's executor can give: body 4 and cond 4, the rest 1, and j's within
// what a join counter of 2 fed 5 completions allows (1 or 2) — across nodes
// exactly 1 (wantJ), by the rule above.
func checkSurplus(t *testing.T, label string, got map[string]*taskFold, wantJ uint64) {
	t.Helper()
	want := map[string]uint64{"a": 1, "init": 1, "body": 4, "cond": 4, "done": 1}
	for name, acts := range want {
		f := got[name]
		if f == nil || f.state != transport.TaskDone || f.acts != acts {
			t.Fatalf("%s: %s: %v, want done with %d activations\n%s", label, name, f, acts, summary(got))
		}
	}
	j := got["j"]
	if j == nil || j.state != transport.TaskDone || j.acts < 1 || j.acts > 2 || (wantJ != 0 && j.acts != wantJ) {
		t.Fatalf("%s: j: %v, want done with %d activation(s)\n%s", label, j, max(wantJ, 1), summary(got))
	}
}

// TestJoinSurplusEndsAsOnOneNode: the flow across three nodes (a, the loop
// and j each on its own) ends, with every task done, as on one node; before
// the surplus rule its run never went idle (body's Signals for j's
// activations 3 and 4 waited for ever).
func TestJoinSurplusEndsAsOnOneNode(t *testing.T) {
	c := newCluster(t, nodeSpec{}, nodeSpec{}, nodeSpec{})
	file, g := parseFlow(t, fmt.Sprintf(surplusFlow, 30))
	ctx := testCtx(t, 60*time.Second)

	one := c.runFlow(ctx, file, placement(g, 3, nil, func(int) int { return 0 }), runOpts{})
	if one.failed != nil {
		t.Fatalf("one node: failed: %+v", one.failed)
	}
	checkSurplus(t, "one node", one.tasks, 0)

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
	checkSurplus(t, "three nodes", three.tasks, 1)
	t.Logf("j: %d activation(s) on one node, %d across three", one.tasks["j"].acts, three.tasks["j"].acts)
}

// TestJoinSurplusAfterALoss: the node running the loop is lost after two
// rounds; its new owner runs the loop again from the record, and j's node
// takes the re-sent Signals as duplicates. The run ends with j run once and
// the loop's four rounds, as without the loss.
func TestJoinSurplusAfterALoss(t *testing.T) {
	hb := 100 * time.Millisecond
	c := newCluster(t, nodeSpec{heartbeat: hb}, nodeSpec{heartbeat: hb}, nodeSpec{heartbeat: hb})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, fmt.Sprintf(surplusFlow, 300)) // 2 of 4 rounds pass well apart from the 100 ms polls
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
	checkSurplus(t, "after a loss", c.fold(ctx, runID), 1)
}
