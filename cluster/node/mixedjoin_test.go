package node

import (
	"fmt"
	"testing"
	"time"
)

// mixedJoinFlow has t with two strong predecessors (a, b) and a condition
// predecessor (c, which picks t once, after a).
const mixedJoinFlow = `
name: mixedjoin
tasks:
  - {name: a, func: hash}
  - {name: b, func: sleep, args: {ms: 50}}
  - {name: c, kind: condition, func: loop, args: {n: 1}, succeed: [a], precede: [t]}
  - {name: t, func: hash, succeed: [a, b]}
`

// A task with strong and condition predecessors runs the same on one node
// and across nodes, whatever the timing: once for the condition's pick and
// once for the round of its strong predecessors (docs/design.md, The local
// runtime; issue 14: it ran
// once or twice by timing, and differently in a cluster). A remote strong
// predecessor and a remote pick reach it through the node's proxies, which
// are localexec's strong and weak edges, so the one rule holds for both.
func TestMixedJoinAcrossPlacements(t *testing.T) {
	c := newCluster(t, nodeSpec{}, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, mixedJoinFlow)
	at := func(names ...string) []uint32 { // the named tasks on n1, the rest on n0
		own := make([]uint32, len(g.Vertices))
		for _, n := range names {
			own[byName(g, n)] = 1
		}
		return own
	}
	for _, own := range [][]uint32{at(), at("t"), at("c"), at("a", "c"), at("b"), at("a", "b", "c")} {
		label := fmt.Sprint(own)
		got := c.runFlow(ctx, file, own, runOpts{})
		if got.failed != nil {
			t.Fatalf("%s: failed: %+v", label, got.failed)
		}
		if f := got.tasks["t"]; f == nil || f.acts != 2 || f.executions() != 2 {
			t.Fatalf("placement %s: t %v, want 2 activations (the pick, and the round of a and b)", label, f)
		}
	}
}
