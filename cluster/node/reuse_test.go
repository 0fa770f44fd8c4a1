package node

import (
	"strings"
	"testing"
	"time"
)

// TestRunAgainReusesBuild: a run of a plan run here before takes the
// taskflow and vertex table the earlier run built, and nothing of that run
// leaks into it: every task of the mixed flow (loops counting by their
// State, a multi-condition, a subflow, modules with a loop inside, outputs
// hashed across nodes) runs as often and outputs what it did the first
// time, on one node and split over two.
func TestRunAgainReusesBuild(t *testing.T) {
	c := newCluster(t, nodeSpec{}, nodeSpec{})
	text := strings.Replace(mixedFlow, "      - {name: gsax, func: saxpy, domain: gpu, args: {n: 5000, a: 3}, succeed: [init]}\n", "", 1)
	file, g := parseFlow(t, text)
	ctx := testCtx(t, 120*time.Second)
	for name, own := range map[string][]uint32{
		"one node": placement(g, 1, nil, func(int) int { return 0 }),
		"split":    placement(g, 2, nil, func(v int) int { return v }),
	} {
		first := c.runFlow(ctx, file, own, runOpts{})
		if first.failed != nil {
			t.Fatalf("%s: failed: %+v", name, first.failed)
		}
		for i := range 3 {
			before := []Stats{c.nodes[0].Stats(), c.nodes[1].Stats()}
			got := c.runFlow(ctx, file, own, runOpts{})
			if got.failed != nil {
				t.Fatalf("%s, run %d: failed: %+v", name, i+2, got.failed)
			}
			compare(t, name+" again", first.tasks, got.tasks)
			for k, n := range c.nodes {
				s := n.Stats()
				if s.Assignments == before[k].Assignments {
					continue
				}
				if s.BuildsReused != before[k].BuildsReused+1 {
					t.Fatalf("%s, run %d: %s reused %d builds, then %d; want one more", name, i+2, n.ID(), before[k].BuildsReused, s.BuildsReused)
				}
			}
		}
	}
}

// TestBusyRunLeavesNoBuild: a run released while its tasks still run (a
// cancel) keeps no build for the next run of its plan.
func TestBusyRunLeavesNoBuild(t *testing.T) {
	c := newCluster(t, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, loopFlow)
	own := make([]uint32, len(g.Vertices))
	out := c.runFlow(ctx, file, own, runOpts{stopAfter: 200 * time.Millisecond, noRelease: true})
	if out.failed != nil || out.waves != 0 {
		t.Fatalf("the endless run ended by itself: %+v, waves %d", out.failed, out.waves)
	}
	c.release(ctx, out.run, "cancelled")
	if n, _, _ := c.nodes[0].builds.c.Stats(); n != 0 {
		t.Fatalf("%d builds kept after a busy run", n)
	}
}
