package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// A slow consumer's drops are read back from the record: the first of a
// stretch, which the client reports (Conn.OnSlowConsumer), and the later
// ones, which only its count shows (Subscription.Dropped). n1's signal
// handler is held and its subscription keeps one message pending, so it
// drops every batch of the run but the first two: those of wave 1 (src's
// fan-out) and, after the node has read its record back twice (a second
// apart), those of wave 2, released by the test then. The run ends while
// n1's handler is still held, each task done once, as all on one node.
func TestSlowConsumerDropsReadBack(t *testing.T) {
	const width = 1200 // three batches or more a wave
	wave2 := make(chan struct{})
	reg := funcs.Default()
	reg.MustRegister(funcs.Entry{Name: "hold", CPU: func(ctx context.Context, _ *funcs.Call) (funcs.Result, error) {
		select {
		case <-wave2:
			return funcs.Result{}, nil
		case <-ctx.Done():
			return funcs.Result{}, ctx.Err()
		}
	}})
	c := newCluster(t, nodeSpec{reg: reg}, nodeSpec{reg: reg})
	ctx := testCtx(t, 90*time.Second)
	n1 := c.nodes[1]
	var text strings.Builder
	text.WriteString("name: waves\ntasks:\n  - {name: src, func: noop}\n  - {name: gate, func: hold, succeed: [src]}\n")
	sink := make([]string, 0, 2*width)
	for i := range width {
		fmt.Fprintf(&text, "  - {name: a%d, func: noop, succeed: [src]}\n  - {name: b%d, func: noop, succeed: [gate]}\n", i, i)
		sink = append(sink, fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i))
	}
	fmt.Fprintf(&text, "  - {name: sink, func: noop, succeed: [%s]}\n", strings.Join(sink, ", "))
	file, g := parseFlowWith(t, "waves.yaml", text.String(), reg)
	close(wave2)
	base := c.runFlow(ctx, file, make([]uint32, len(g.Vertices)), runOpts{})
	if base.failed != nil {
		t.Fatalf("all on n0: %+v", base.failed)
	}
	wave2 = make(chan struct{})
	split := placement(g, 2, nil, func(v int) int {
		if p := g.Vertices[v].Path; p[0] == 'a' || p[0] == 'b' {
			return 1
		}
		return 0
	})

	held := make(chan struct{})
	gate := func() { <-held }
	n1.batchGate.Store(&gate)
	defer close(held)
	n1.mu.Lock()
	err := n1.sigSub.SetPendingLimits(1, -1)
	n1.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	before := n1.Stats()
	done := make(chan *outcome, 1)
	go func() { done <- c.runFlow(ctx, file, split, runOpts{}) }()
	testsupport.Eventually(t, 60*time.Second, "n1 reads its record back twice after wave 1's drops", func() bool {
		return n1.Stats().ReadBacks >= before.ReadBacks+2 && n1.Stats().SignalsReplayed >= before.SignalsReplayed+width-1024
	})
	dropped := n1.sigDropped()
	if dropped == 0 {
		t.Fatal("n1 dropped nothing of wave 1")
	}
	close(wave2)
	var got *outcome
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatalf("the run did not end: n1 dropped %d batches in all (%d before wave 2), read back %d times",
			n1.sigDropped(), dropped, n1.Stats().ReadBacks-before.ReadBacks)
	}
	if got.failed != nil {
		t.Fatalf("failed: %+v", got.failed)
	}
	if n1.sigDropped() == dropped {
		t.Fatal("n1 dropped nothing of wave 2: the test did not test the stretch's later drops")
	}
	compare(t, "split, n1's handler held", base.tasks, got.tasks)
}
