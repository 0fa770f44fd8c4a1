package coord

import (
	"net/http"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/transport"
)

// A status cache's event cursor keeps its consumer between reads, and
// loses no event when that consumer is gone (removed by the server after
// a minute unread) or has handed a message to someone else (a fetch cut
// short: a gap in its consumer sequences): it is made again from the last
// event folded, and the table shows every event.
func TestEventCursorRecovers(t *testing.T) {
	url := testsupport.NATS(t).URL()
	c := leadingCoord(t, url, nil)
	n1 := startFakeNode(t, "n1", url, []string{c.GossipAddr()}, 2, 0, func(n *fakeNode) { n.busy = true })
	testsupport.Eventually(t, 10*time.Second, "n1 alive", func() bool { return nodeState(c, "n1") == proto.NodeAlive })
	ctx := ctxFor(t, 60*time.Second)
	id, err := c.Submit("f.yaml", []byte("name: f\ntasks:\n  - {name: a, func: noop}\n  - {name: b, func: hash, succeed: [a]}\n"))
	must(t, err)
	execs := func() (a, b uint64) {
		t.Helper()
		var st proto.RunStatus
		if code, body, err := get(ctx, c.HTTPAddr(), "/v1/runs/"+id, &st); err != nil || code != http.StatusOK {
			t.Fatalf("status: %d %s %v", code, body, err)
		}
		return st.Tasks[0].Executions, st.Tasks[1].Executions
	}
	testsupport.Eventually(t, 10*time.Second, "both tasks done", func() bool { a, b := execs(); return a == 1 && b == 1 })
	cc := c.cacheOf(id)
	consumer := func() string {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		if cc.cur.cons == nil {
			return ""
		}
		return cc.cur.cons.CachedInfo().Name
	}
	first := consumer()
	execs()
	if first == "" || consumer() != first {
		t.Fatalf("the cursor's consumer: %q, then %q; want one kept between reads", first, consumer())
	}
	publish := func(task uint32, n uint64) {
		t.Helper()
		must(t, n1.nc.PublishEvents(ctx, transport.TaskEvent{Run: id, Gen: 1, Task: task, Node: "n1", State: transport.TaskDone, Act: 1, Executions: n}))
	}

	// The consumer removed under the cursor.
	st, err := c.eventStream(ctx)
	must(t, err)
	must(t, st.DeleteConsumer(ctx, first))
	publish(0, 2)
	if a, _ := execs(); a != 2 {
		t.Fatalf("after the consumer was removed: a has %d executions, want 2", a)
	}
	second := consumer()
	if second == "" || second == first {
		t.Fatalf("no consumer made again: %q (was %q)", second, first)
	}

	// A message taken from the consumer by another fetch: a gap.
	publish(1, 5)
	cons, err := st.Consumer(ctx, second)
	must(t, err)
	batch, err := cons.FetchNoWait(1)
	must(t, err)
	stolen := 0
	for range batch.Messages() {
		stolen++
	}
	if stolen != 1 {
		t.Fatalf("took %d messages from the cursor's consumer, want 1", stolen)
	}
	publish(0, 4)
	if a, b := execs(); a != 4 || b != 5 {
		t.Fatalf("after a gap: executions %d and %d, want 4 and 5", a, b)
	}
	if third := consumer(); third == "" || third == second {
		t.Fatalf("no consumer made again after the gap: %q (was %q)", third, second)
	}
}
