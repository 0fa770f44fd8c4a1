package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// TestCarriedStartStamps: on the node's tscClock, a static task's
// activation that its worker comes to straight from another takes that
// one's end stamp as its start (localexec.EmplaceCarried) instead of a
// clock read: in a chain on one worker every task but the first starts
// exactly when the one before ended, and every activation still starts no
// later than it ends.
func TestCarriedStartStamps(t *testing.T) {
	c := newCluster(t, nodeSpec{cpus: 1})
	ctx := testCtx(t, time.Minute)
	const n = 20
	var b strings.Builder
	b.WriteString("name: chain\ntasks:\n  - {name: t0, func: noop}\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "  - {name: t%d, func: noop, succeed: [t%d]}\n", i, i-1)
	}
	file, g := parseFlow(t, b.String())
	out := c.runFlow(ctx, file, make([]uint32, len(g.Vertices)), runOpts{})
	if out.failed != nil {
		t.Fatalf("failed: %+v", out.failed)
	}
	start, end := map[string]int64{}, map[string]int64{}
	err := c.leader.conn.ReplayEvents(ctx, out.run, func(e *transport.TaskEvent) error {
		if e.State == transport.TaskDone {
			p := g.Vertices[e.Task].Path
			start[p], end[p] = e.Start.UnixNano(), e.End.UnixNano()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(start) != n {
		t.Fatalf("%d tasks done, want %d", len(start), n)
	}
	for i := range n {
		p := fmt.Sprintf("t%d", i)
		if start[p] == 0 || start[p] > end[p] {
			t.Fatalf("%s: start %d, end %d", p, start[p], end[p])
		}
		if i > 0 {
			// (A clock rebase between that took the stamps
			// back stamps the start as the end: run.event.)
			if prev := end[fmt.Sprintf("t%d", i-1)]; start[p] != prev && (start[p] != end[p] || end[p] >= prev) {
				t.Errorf("%s starts at %d, %d ns from its predecessor's end %d: not carried", p, start[p], start[p]-prev, prev)
			}
		}
	}
}
