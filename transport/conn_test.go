package transport

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/internal/natsembed"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// collector gathers delivered Signals (copied out of the handler).
type collector struct {
	mu   sync.Mutex
	sigs []Signal
	from []string
}

func (c *collector) handle(from string, sigs []Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range sigs {
		s.Output = append([]byte(nil), s.Output...)
		c.sigs = append(c.sigs, s)
		c.from = append(c.from, from)
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sigs)
}

func (c *collector) snapshot() []Signal {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Signal(nil), c.sigs...)
}

func sigN(run string, n int) []Signal {
	out := make([]Signal, n)
	for i := range out {
		out[i] = Signal{Run: run, Gen: 1, Src: 1, Dst: 2, Act: uint64(i + 1), Kind: SignalEdge, Output: []byte{byte(i)}}
	}
	return out
}

func TestConnectAuth(t *testing.T) {
	ts := testsupport.NATS(t, func(o *natsembed.Options) { o.User, o.Password = "hf", "s3cret" })
	ctx := testCtx(t)
	for _, opts := range [][]Option{nil, {WithUserPassword("hf", "wrong")}, {WithToken("s3cret")}} {
		c, err := Connect(ctx, ts.URL(), opts...)
		if !errors.Is(err, ErrAuth) {
			if c != nil {
				_ = c.Close()
			}
			t.Fatalf("connect with %d options: err %v, want ErrAuth", len(opts), err)
		}
	}
	c := connect(t, ts.URL(), WithUserPassword("hf", "s3cret"), WithName("n1"))
	if !c.Connected() {
		t.Fatal("not connected")
	}
}

func TestConnectToken(t *testing.T) {
	ts := testsupport.NATS(t, func(o *natsembed.Options) { o.Token = "tok" })
	if _, err := Connect(testCtx(t), ts.URL()); !errors.Is(err, ErrAuth) {
		t.Fatalf("no token: %v", err)
	}
	connect(t, ts.URL(), WithToken("tok"))
}

func TestConnectGivesUpWithContext(t *testing.T) {
	ts := testsupport.NATS(t)
	url := ts.URL()
	ts.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Connect(ctx, url, WithReconnectBackoff(10*time.Millisecond, 50*time.Millisecond))
	if !errors.Is(err, ErrConnect) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want ErrConnect and DeadlineExceeded", err)
	}
}

func TestCloseIsIdempotentAndFinal(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	sub, err := c.SubscribeSignals("n1", nil, func(string, []Signal) {})
	must(t, err)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(testCtx(t)); err != nil { // already ended with the Conn
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish("x", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("publish after close: %v", err)
	}
	if _, err := c.NewBatcher("n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscribeSignals("n1", nil, func(string, []Signal) {}); !errors.Is(err, ErrClosed) {
		t.Errorf("subscribe after close: %v", err)
	}
}

func TestRequestReply(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	sub, err := c.Subscribe("svc", func(m *nats.Msg) { _ = m.Respond(append([]byte("re:"), m.Data...)) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(testCtx(t))
	got, err := c.Request(testCtx(t), "svc", []byte("hi"))
	if err != nil || string(got) != "re:hi" {
		t.Fatalf("request = %q, %v", got, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Request(ctx, "nobody", nil); err == nil {
		t.Fatal("request to no responder succeeded")
	}
}

func TestControlMessages(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	var mu sync.Mutex
	var got []Message
	sub, err := c.SubscribeControl("n1", func(m Message) { mu.Lock(); got = append(got, m); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(testCtx(t))
	if err := c.Sync(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	must(t, c.SendControl("n1", &Assignment{Run: "r", Gen: 2, Nodes: []string{"n1"}, Owner: []uint32{0}}))
	must(t, c.SendControl("n2", &Cancel{Run: "r"})) // not ours
	must(t, c.Publish("hf.ctl.n1", []byte("garbage")))
	must(t, c.Broadcast(&Cancel{Run: "r", Gen: 2, Reason: "stop"}))
	must(t, c.SendControl("n1", &Envelope{Kind: "drain", Node: "n1"}))
	testsupport.Eventually(t, 15*time.Second, "3 control messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 3 })
	if err := c.SendControl("bad.node", &Cancel{Run: "r"}); !errors.Is(err, ErrInvalidID) {
		t.Errorf("bad node: %v", err)
	}
	testsupport.Eventually(t, 15*time.Second, "malformed counted", func() bool { return c.Stats().Malformed == 1 })
	mu.Lock()
	defer mu.Unlock()
	kinds := map[Type]Message{}
	for _, m := range got {
		kinds[m.Type()] = m
	}
	if a, ok := kinds[TypeAssignment].(*Assignment); !ok || a.Gen != 2 {
		t.Errorf("assignment = %#v", kinds[TypeAssignment])
	}
	if cl, ok := kinds[TypeCancel].(*Cancel); !ok || cl.Reason != "stop" {
		t.Errorf("cancel = %#v (the one for n2 must not arrive)", kinds[TypeCancel])
	}
	if e, ok := kinds[TypeEnvelope].(*Envelope); !ok || e.Kind != "drain" {
		t.Errorf("envelope = %#v", kinds[TypeEnvelope])
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Malformed, oversized and mismatched batches are dropped and counted; the
// subscription keeps delivering good ones.
func TestReceiverDropsBadInput(t *testing.T) {
	ts := testsupport.NATS(t)
	rx := connect(t, ts.URL(), WithLimits(Limits{MaxBatch: 4, MaxOutput: 8}))
	tx := connect(t, ts.URL())
	var col collector
	sub, err := rx.SubscribeSignals("n2", nil, col.handle)
	must(t, err)
	defer sub.Close(testCtx(t))
	must(t, rx.Sync(testCtx(t)))

	subj, _ := SignalSubject("r1", "n2", "n1")
	good := Encode(&Batch{From: "n1", Seq: 1, Signals: sigN("r1", 2)})
	must(t, tx.Publish(subj, []byte{0xde, 0xad}))
	must(t, tx.Publish(subj, good[:len(good)-3]))
	must(t, tx.Publish(subj, Encode(&Batch{From: "n1", Signals: sigN("r1", 5)})))                                                   // over MaxBatch
	must(t, tx.Publish(subj, Encode(&Batch{From: "n1", Signals: []Signal{{Run: "r1", Act: 1, Kind: 1, Output: make([]byte, 9)}}}))) // over MaxOutput
	must(t, tx.Publish(subj, Encode(&Batch{From: "n1", Signals: sigN("r2", 1)})))                                                   // run differs from subject
	must(t, tx.Publish(subj, Encode(&Batch{From: "n3", Signals: sigN("r1", 1)})))                                                   // sender differs from subject
	must(t, tx.Publish("hf.run.r1.node.n2.n3", Encode(&Batch{From: "n1", Signals: sigN("r1", 1)})))                                 // so here too
	must(t, tx.Publish(subj, good))
	testsupport.Eventually(t, 15*time.Second, "the good batch", func() bool { return col.count() == 2 })
	testsupport.Eventually(t, 15*time.Second, "counters", func() bool {
		s := rx.Stats()
		return s.Malformed == 4 && s.Oversized == 2 && s.Mismatched == 3 && s.ReceivedBatches == 1 && s.ReceivedSignals == 2
	})
	if got := col.snapshot(); got[0].Act != 1 || got[1].Act != 2 || col.from[0] != "n1" {
		t.Errorf("delivered %+v", got)
	}
}

// Repeated and stale-generation Signals do not reach the handler.
func TestReceiverDedupAndFencing(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	d := NewDeduper()
	var col collector
	sub, err := c.SubscribeSignals("n2", d, col.handle)
	must(t, err)
	defer sub.Close(testCtx(t))
	must(t, c.Sync(testCtx(t)))
	b, err := c.NewBatcher("n1", WithLinger(0))
	must(t, err)
	ctx := testCtx(t)
	for round := 0; round < 2; round++ { // everything twice
		for _, s := range sigN("r1", 10) {
			must(t, b.Add(ctx, "n2", &s))
		}
		must(t, b.Flush(ctx))
	}
	testsupport.Eventually(t, 15*time.Second, "first copies", func() bool { return d.Stats().Accepted+d.Stats().Duplicate == 20 })
	d.SetGen("r1", 2) // a new assignment: gen-1 stragglers are fenced
	stale := Signal{Run: "r1", Gen: 1, Src: 9, Dst: 2, Act: 1, Kind: SignalEdge}
	fresh := Signal{Run: "r1", Gen: 2, Src: 9, Dst: 2, Act: 1, Kind: SignalEdge}
	must(t, b.Add(ctx, "n2", &stale))
	must(t, b.Add(ctx, "n2", &fresh))
	must(t, b.Close(ctx))
	testsupport.Eventually(t, 15*time.Second, "fresh signal", func() bool { return col.count() == 11 })
	testsupport.Eventually(t, 15*time.Second, "verdicts", func() bool {
		s := d.Stats()
		return s.Accepted == 11 && s.Duplicate == 10 && s.Fenced == 1
	})
	got := col.snapshot()
	for i := 0; i < 10; i++ {
		if got[i].Act != uint64(i+1) {
			t.Fatalf("order: %+v", got)
		}
	}
	if got[10].Gen != 2 || got[10].Src != 9 {
		t.Errorf("last = %+v", got[10])
	}
}

// The server goes away with batches in flight and comes back on the same port:
// the connection reconnects by itself, what was published while it was down is
// delivered, and the JetStream record survives the restart.
func TestReconnectAfterServerRestart(t *testing.T) {
	ts := testsupport.NATS(t)
	var mu sync.Mutex
	var disc, reco int
	c := connect(t, ts.URL(),
		WithDisconnectHandler(func(error) { mu.Lock(); disc++; mu.Unlock() }),
		WithReconnectHandler(func() { mu.Lock(); reco++; mu.Unlock() }))
	ctx := testCtx(t)
	must(t, c.EnsureStreams(ctx, StreamConfig{}))
	var col collector
	sub, err := c.SubscribeSignals("n2", NewDeduper(), col.handle)
	must(t, err)
	defer sub.Close(ctx)
	must(t, c.Sync(ctx))
	b, err := c.NewBatcher("n1", WithLinger(0), WithMaxSignals(8))
	must(t, err)
	defer b.Close(ctx)
	sigs := sigN("r1", 40)
	for _, s := range sigs[:16] {
		must(t, b.Add(ctx, "n2", &s))
	}
	testsupport.Eventually(t, 15*time.Second, "before restart", func() bool { return col.count() == 16 })
	must(t, c.Sync(ctx)) // the record stream has stored them too

	ts.Stop()
	testsupport.Eventually(t, 15*time.Second, "disconnect noticed", func() bool { mu.Lock(); defer mu.Unlock(); return disc >= 1 })
	for _, s := range sigs[16:] { // published into the reconnect buffer
		must(t, b.Add(ctx, "n2", &s))
	}
	must(t, b.Flush(ctx))
	ts.Start()

	testsupport.Eventually(t, 15*time.Second, "reconnect", func() bool { mu.Lock(); defer mu.Unlock(); return reco >= 1 })
	testsupport.Eventually(t, 15*time.Second, "all 40 delivered", func() bool { return col.count() == 40 })
	for i, s := range col.snapshot() {
		if s.Act != uint64(i+1) {
			t.Fatalf("signal %d has act %d", i, s.Act)
		}
	}
	if st := c.Stats(); st.Disconnects < 1 || st.Reconnects < 1 {
		t.Errorf("stats %+v", st)
	}
	// The record survives the restart: the 16 stored before it are still
	// there. Batches flushed from the reconnect buffer can reach the server
	// before JetStream has recovered its streams, and a plain publish is not
	// stored then (doc.go: recover with ReplaySignals, or use WithAck), so
	// the later 24 are not required to be in the record.
	testsupport.Eventually(t, 15*time.Second, "record holds the 16 stored before the restart", func() bool {
		n := 0
		err := c.ReplaySignals(ctx, "r1", "", func(_ string, b *Batch) error { n += len(b.Signals); return nil })
		return err == nil && n >= 16
	})
}

// SubscribeBatches hands over whole batches, sender and batch number
// included, with no Deduper: a repeated batch comes again.
func TestSubscribeBatches(t *testing.T) {
	ts := testsupport.NATS(t)
	rx := connect(t, ts.URL())
	tx := connect(t, ts.URL())
	var mu sync.Mutex
	var got []Batch
	sub, err := rx.SubscribeBatches("n2", func(b *Batch) {
		mu.Lock()
		defer mu.Unlock()
		c := Batch{From: b.From, Seq: b.Seq, Signals: append([]Signal(nil), b.Signals...)}
		got = append(got, c)
	})
	must(t, err)
	defer sub.Close(testCtx(t))
	must(t, rx.Sync(testCtx(t)))
	subj, _ := SignalSubject("r1", "n2", "n1")
	one := Encode(&Batch{From: "n1", Seq: 7, Signals: sigN("r1", 2)})
	must(t, tx.Publish(subj, []byte{0xde, 0xad})) // malformed: dropped
	must(t, tx.Publish(subj, one))
	must(t, tx.Publish(subj, one))
	testsupport.Eventually(t, 15*time.Second, "both copies", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	mu.Lock()
	defer mu.Unlock()
	for _, b := range got {
		if b.From != "n1" || b.Seq != 7 || len(b.Signals) != 2 || b.Signals[1].Act != 2 {
			t.Fatalf("batch %+v", b)
		}
	}
	if _, err := rx.SubscribeBatches("bad.node", func(*Batch) {}); !errors.Is(err, ErrInvalidID) {
		t.Fatalf("bad node: %v", err)
	}
}

// A slow consumer's drop is counted by its Subscription before a handler
// of any later message of the Conn runs (the node's start rule reads it
// when it takes an Assignment), and OnSlowConsumer hears of it after.
func TestSlowConsumerDropCountedBeforeLaterMessages(t *testing.T) {
	ts := testsupport.NATS(t)
	rx := connect(t, ts.URL())
	tx := connect(t, ts.URL())
	heard := make(chan struct{}, 1)
	defer rx.OnSlowConsumer(func() {
		select {
		case heard <- struct{}{}:
		default:
		}
	})()
	release := make(chan struct{})
	slow, err := rx.Subscribe("t.slow", func(*nats.Msg) { <-release })
	must(t, err)
	defer slow.Close(testCtx(t))
	defer close(release)
	must(t, slow.subs[0].SetPendingLimits(1, -1))
	seen := make(chan uint64, 1)
	later, err := rx.Subscribe("t.later", func(*nats.Msg) { seen <- slow.Dropped() })
	must(t, err)
	defer later.Close(testCtx(t))
	must(t, rx.Sync(testCtx(t)))
	if d := slow.Dropped(); d != 0 {
		t.Fatalf("dropped %d before anything was sent", d)
	}
	for range 4 { // one in the handler, one pending, the rest dropped
		must(t, tx.Publish("t.slow", []byte{1}))
	}
	must(t, tx.Publish("t.later", []byte{2}))
	select {
	case d := <-seen:
		if d == 0 {
			t.Fatal("a later message was handled before the slow consumer's drop was counted")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the later message never came")
	}
	select {
	case <-heard:
	case <-time.After(15 * time.Second):
		t.Fatal("OnSlowConsumer was not called")
	}
}

// Stop ends a subscription without handing on what the client holds for
// it (Close would: a drain, which looks every 100 ms whether the messages
// on the way have come), and returns once its handler has returned for the
// last time.
func TestStopDropsWhatIsPending(t *testing.T) {
	ts := testsupport.NATS(t)
	rx := connect(t, ts.URL())
	tx := connect(t, ts.URL())
	in := make(chan struct{}, 1)
	release := make(chan struct{})
	var calls atomic.Int32
	sub, err := rx.Subscribe("t.wake", func(*nats.Msg) {
		if calls.Add(1) == 1 {
			in <- struct{}{}
			<-release
		}
	})
	must(t, err)
	must(t, rx.Sync(testCtx(t)))
	for range 3 { // one in the handler, two held by the client
		must(t, tx.Publish("t.wake", []byte{1}))
	}
	<-in
	testsupport.Eventually(t, 15*time.Second, "two messages held for the handler", func() bool {
		n, _, err := sub.subs[0].Pending() // the one in the handler counts until it returns
		return err == nil && n == 3
	})
	stopped := make(chan error, 1)
	go func() { stopped <- sub.Stop(testCtx(t)) }()
	testsupport.Eventually(t, 15*time.Second, "the subscription ended", func() bool { return !sub.subs[0].IsValid() })
	close(release)
	must(t, <-stopped)
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1: the messages held at Stop are dropped", n)
	}
}

// An Assignment whose owners are the last one's (a run again of the same
// placement) shares its Owner table; one of other owners has its own.
func TestControlAssignmentSharesEqualOwners(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	got := make(chan *Assignment, 4)
	sub, err := c.SubscribeControl("n1", func(m Message) { got <- m.(*Assignment) })
	must(t, err)
	defer sub.Close(testCtx(t))
	must(t, c.Sync(testCtx(t)))
	owner := make([]uint32, 1000)
	for i := range owner {
		owner[i] = uint32(i % 3)
	}
	other := slices.Clone(owner)
	other[500] = 2 - other[500]
	for _, o := range [][]uint32{owner, owner, other} {
		must(t, c.SendControl("n1", &Assignment{Run: "r", Gen: 1, Nodes: []string{"n0", "n1", "n2"}, Owner: o}))
	}
	var as []*Assignment
	for range 3 {
		select {
		case a := <-got:
			as = append(as, a)
		case <-testCtx(t).Done():
			t.Fatalf("%d of 3 assignments came", len(as))
		}
	}
	if !slices.Equal(as[0].Owner, owner) || !slices.Equal(as[1].Owner, owner) || !slices.Equal(as[2].Owner, other) {
		t.Fatal("an assignment's owners are not the ones sent")
	}
	if &as[1].Owner[0] != &as[0].Owner[0] {
		t.Error("a run again's owners, equal to the last assignment's, were made again")
	}
	if &as[2].Owner[0] == &as[1].Owner[0] || !slices.Equal(as[1].Owner, owner) {
		t.Error("other owners were written into the last assignment's table")
	}
}

// A control message is encoded into a kept buffer, not one made each time:
// a run's Assignment is ~100 KB for 100K tasks, one a run again. (Sent on
// a closed connection, so that the in-process NATS server's allocations for
// what it reads are not counted: the message is encoded all the same.)
func TestSendControlKeepsItsBuffer(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	must(t, c.Close())
	a := &Assignment{Run: "r", Gen: 1, Nodes: []string{"n0", "n1"}, Owner: make([]uint32, 100_000)}
	if err := c.SendControl("n1", a); !errors.Is(err, ErrClosed) {
		t.Fatalf("a control message on a closed connection: %v", err)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	const sends = 50
	for range sends {
		_ = c.SendControl("n1", a)
	}
	runtime.ReadMemStats(&m1)
	// A buffer each time would be ~100 KB a message.
	if per := (m1.TotalAlloc - m0.TotalAlloc) / sends; per > 20<<10 {
		t.Fatalf("%d bytes allocated a control message of %d", per, len(Encode(a)))
	}
}
