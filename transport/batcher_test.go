package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hetflow/hetflow/internal/natsembed"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// batchRig: one Conn sending, one receiving raw batches on node n2's subjects.
type batchRig struct {
	tx, rx *Conn
	mu     sync.Mutex
	got    []Batch // decoded, in arrival order
	subs   []string
}

func newBatchRig(t *testing.T, mods ...func(*natsembed.Options)) *batchRig {
	ts := testsupport.NATS(t, mods...)
	r := &batchRig{tx: connect(t, ts.URL(), WithAckTimeout(500*time.Millisecond)), rx: connect(t, ts.URL())}
	filter, _ := NodeSignalsFilter("n2")
	sub, err := r.rx.Subscribe(filter, func(m *nats.Msg) {
		b, err := DecodeBatch(m.Data, Limits{})
		if err != nil {
			t.Errorf("batch on %s does not decode: %v", m.Subject, err)
			return
		}
		for i := range b.Signals {
			b.Signals[i].Output = append([]byte(nil), b.Signals[i].Output...)
		}
		r.mu.Lock()
		r.got = append(r.got, b)
		r.subs = append(r.subs, m.Subject)
		r.mu.Unlock()
	})
	must(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	must(t, r.rx.Sync(testCtx(t)))
	return r
}

func (r *batchRig) batches() []Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Batch(nil), r.got...)
}

// settle waits until everything tx published has reached rx's handler: a
// round trip on each side orders it.
func (r *batchRig) settle(t *testing.T, wantBatches int) []Batch {
	t.Helper()
	must(t, r.tx.Sync(testCtx(t)))
	testsupport.Eventually(t, 15*time.Second, fmt.Sprintf("%d batches", wantBatches), func() bool { return len(r.batches()) >= wantBatches })
	must(t, r.rx.Sync(testCtx(t)))
	return r.batches()
}

func sizes(bs []Batch) []int {
	var out []int
	for _, b := range bs {
		out = append(out, len(b.Signals))
	}
	return out
}

func TestBatcherFlushesOnCount(t *testing.T) {
	r := newBatchRig(t)
	clk := &fakeClock{}
	b, err := r.tx.NewBatcher("n1", WithMaxSignals(4), WithClock(clk))
	must(t, err)
	ctx := testCtx(t)
	for _, s := range sigN("r1", 10) {
		must(t, b.Add(ctx, "n2", &s))
	}
	got := r.settle(t, 2)
	if fmt.Sprint(sizes(got)) != "[4 4]" {
		t.Fatalf("batches %v, want [4 4] before the rest is flushed", sizes(got))
	}
	must(t, b.Flush(ctx))
	got = r.settle(t, 3)
	if fmt.Sprint(sizes(got)) != "[4 4 2]" {
		t.Fatalf("batches %v", sizes(got))
	}
	act := uint64(1)
	for i, bt := range got {
		if bt.From != "n1" || bt.Seq != uint64(i+1) {
			t.Errorf("batch %d from %q seq %d", i, bt.From, bt.Seq)
		}
		for _, s := range bt.Signals {
			if s.Act != act || s.Output[0] != byte(act-1) {
				t.Fatalf("order broken at act %d: %+v", act, s)
			}
			act++
		}
	}
	must(t, b.Close(ctx))
	if st := r.tx.Stats(); st.SentBatches != 3 || st.SentSignals != 10 {
		t.Errorf("stats %+v", st)
	}
}

// TestBatcherAddAll: Signals handed over at once, of two runs, leave in
// order and cut into batches as Adds one by one would be.
func TestBatcherAddAll(t *testing.T) {
	r := newBatchRig(t)
	b, err := r.tx.NewBatcher("n1", WithMaxSignals(4), WithClock(&fakeClock{}))
	must(t, err)
	ctx := testCtx(t)
	var sigs []*Signal
	for _, run := range []string{"r1", "r2"} {
		for _, s := range sigN(run, 6) {
			sigs = append(sigs, &s)
		}
	}
	must(t, b.AddAll(ctx, "n2", sigs))
	must(t, b.Flush(ctx))
	got := r.settle(t, 4)
	if fmt.Sprint(sizes(got)) != "[4 2 4 2]" && fmt.Sprint(sizes(got)) != "[4 4 2 2]" {
		t.Fatalf("batches %v", sizes(got))
	}
	next := map[string]uint64{"r1": 1, "r2": 1}
	for _, bt := range got {
		for _, s := range bt.Signals {
			if s.Act != next[s.Run] {
				t.Fatalf("run %s: act %d, want %d", s.Run, s.Act, next[s.Run])
			}
			next[s.Run]++
		}
	}
	bad := &Signal{Run: "r1", Src: 1, Dst: 2} // no activation
	if err := b.AddAll(ctx, "n2", []*Signal{sigs[0], bad}); !errors.Is(err, ErrInvalidSignal) {
		t.Fatalf("a malformed Signal among others: %v", err)
	}
	must(t, b.Close(ctx))
}

// A source activation's edges to one node travel as one fan entry (Version
// 6), split where the batch is full, and decode to the Signals added, in
// order; Signals that differ in more than Dst, and picks, are entries of
// their own.
func TestBatcherFans(t *testing.T) {
	r := newBatchRig(t)
	b, err := r.tx.NewBatcher("n1", WithMaxSignals(8), WithClock(&fakeClock{}))
	must(t, err)
	ctx := testCtx(t)
	out := []byte("out")
	var want []Signal
	for d := range 11 { // one activation of 1, to 11 tasks: a fan of 8, then one of 3
		want = append(want, Signal{Run: "r1", Gen: 2, Src: 1, Dst: uint32(20 + d), Act: 5, Kind: SignalEdge, Output: out, DstAct: 5, Ctx: []uint64{4}})
	}
	want = append(want,
		Signal{Run: "r1", Gen: 2, Src: 1, Dst: 40, Act: 5, Kind: SignalEdge, Output: out, DstAct: 6, Ctx: []uint64{4}}, // another DstAct
		Signal{Run: "r1", Gen: 2, Src: 1, Dst: 41, Act: 5, Kind: SignalEdge, Output: []byte("other"), DstAct: 5, Ctx: []uint64{4}},
		Signal{Run: "r1", Gen: 2, Src: 1, Dst: 42, Act: 5, Kind: SignalChoice, DstAct: 1},
		Signal{Run: "r1", Gen: 2, Src: 1, Dst: 43, Act: 5, Kind: SignalChoice, DstAct: 1},
		Signal{Run: "r1", Gen: 2, Src: 2, Dst: 44, Act: 1, Kind: SignalEdge, DstAct: 1},
		Signal{Run: "r1", Gen: 2, Src: 2, Dst: 45, Act: 1, Kind: SignalEdge, DstAct: 1})
	ptrs := make([]*Signal, len(want))
	for i := range want {
		ptrs[i] = &want[i]
	}
	must(t, b.AddAll(ctx, "n2", ptrs))
	must(t, b.Flush(ctx))
	got := r.settle(t, 3)
	if fmt.Sprint(sizes(got)) != "[8 8 1]" {
		t.Fatalf("batches of %v Signals, want [8 8 1]", sizes(got))
	}
	var all []Signal
	for _, bt := range got {
		all = append(all, bt.Signals...)
	}
	if len(all) != len(want) {
		t.Fatalf("%d Signals, want %d", len(all), len(want))
	}
	for i := range want {
		if fmt.Sprint(all[i]) != fmt.Sprint(want[i]) {
			t.Fatalf("Signal %d: %+v, want %+v", i, all[i], want[i])
		}
	}
	if st := r.tx.Stats(); st.SentSignals != uint64(len(want)) || st.SentBatches != 3 {
		t.Fatalf("sent %d Signals in %d batches, want %d in 3", st.SentSignals, st.SentBatches, len(want))
	}
	must(t, b.Close(ctx))
}

func TestBatcherFlushesOnBytes(t *testing.T) {
	r := newBatchRig(t)
	b, err := r.tx.NewBatcher("n1", WithMaxBytes(1000), WithLinger(0))
	must(t, err)
	ctx := testCtx(t)
	for i := 0; i < 5; i++ {
		s := Signal{Run: "r1", Src: 1, Dst: 2, Act: uint64(i + 1), Kind: SignalEdge, Output: make([]byte, 400)}
		must(t, b.Add(ctx, "n2", &s))
	}
	must(t, b.Close(ctx))
	got := r.settle(t, 3)
	// 400-byte outputs: three do not fit in 1000 bytes, so two per batch.
	if fmt.Sprint(sizes(got)) != "[2 2 1]" {
		t.Fatalf("batches %v", sizes(got))
	}
}

func TestBatcherLinger(t *testing.T) {
	r := newBatchRig(t)
	clk := &fakeClock{}
	b, err := r.tx.NewBatcher("n1", WithClock(clk))
	must(t, err)
	ctx := testCtx(t)
	sigs := sigN("r1", 6)
	for _, s := range sigs[:3] {
		must(t, b.Add(ctx, "n2", &s))
	}
	if clk.armed() != 1 {
		t.Fatalf("%d timers armed, want 1 per waiting batch", clk.armed())
	}
	if st := r.tx.Stats(); st.SentBatches != 0 {
		t.Fatalf("sent before the linger expired: %+v", st)
	}
	if clk.fire() != 1 {
		t.Fatal("no timer fired")
	}
	got := r.settle(t, 1)
	if fmt.Sprint(sizes(got)) != "[3]" {
		t.Fatalf("after linger: %v", sizes(got))
	}
	// A timer whose batch already left (here by Flush) is stopped.
	for _, s := range sigs[3:] {
		must(t, b.Add(ctx, "n2", &s))
	}
	must(t, b.Flush(ctx))
	if clk.armed() != 0 {
		t.Fatalf("%d timers still armed after flush", clk.armed())
	}
	must(t, b.Close(ctx))
	got = r.settle(t, 2)
	if fmt.Sprint(sizes(got)) != "[3 3]" {
		t.Fatalf("batches %v", sizes(got))
	}
}

// The production clock: a batch left alone goes out after its linger.
func TestBatcherRealLinger(t *testing.T) {
	r := newBatchRig(t)
	b, err := r.tx.NewBatcher("n1")
	must(t, err)
	ctx := testCtx(t)
	s := sigN("r1", 1)[0]
	must(t, b.Add(ctx, "n2", &s))
	testsupport.Eventually(t, 15*time.Second, "linger flush", func() bool { return len(r.batches()) == 1 })
	must(t, b.Close(ctx))
}

// Destinations are separate batches on separate subjects.
func TestBatcherPerDestination(t *testing.T) {
	r := newBatchRig(t)
	var col collector
	other, err := r.rx.SubscribeSignals("n3", nil, col.handle)
	must(t, err)
	defer other.Close(testCtx(t))
	must(t, r.rx.Sync(testCtx(t)))
	b, err := r.tx.NewBatcher("n1", WithLinger(0))
	must(t, err)
	ctx := testCtx(t)
	for i, s := range append(sigN("r1", 4), sigN("r2", 4)...) {
		node := "n2"
		if i%2 == 1 {
			node = "n3"
		}
		must(t, b.Add(ctx, node, &s))
	}
	must(t, b.Forget("r1"))
	must(t, b.Close(ctx))
	got := r.settle(t, 2)
	if fmt.Sprint(sizes(got)) != "[2 2]" {
		t.Fatalf("n2 batches %v", sizes(got))
	}
	r.mu.Lock()
	subs := fmt.Sprint(r.subs)
	r.mu.Unlock()
	if subs != "[hf.run.r1.node.n2.n1 hf.run.r2.node.n2.n1]" {
		t.Errorf("subjects %s", subs)
	}
	testsupport.Eventually(t, 15*time.Second, "n3's signals", func() bool { return col.count() == 4 })
}

// A run forgotten and then sent to again gets a fresh destination, one
// that Flush publishes: the destination the Batcher added to last (found
// without the map) is not one Forget dropped.
func TestBatcherAddAfterForget(t *testing.T) {
	r := newBatchRig(t)
	b, err := r.tx.NewBatcher("n1", WithLinger(0))
	must(t, err)
	ctx := testCtx(t)
	sigs := sigN("r1", 2)
	must(t, b.Add(ctx, "n2", &sigs[0]))
	must(t, b.Forget("r1")) // flushes the first
	must(t, b.Add(ctx, "n2", &sigs[1]))
	must(t, b.Flush(ctx))
	got := r.settle(t, 2)
	if fmt.Sprint(sizes(got)) != "[1 1]" {
		t.Fatalf("batches %v, want the Signal before Forget and the one after", sizes(got))
	}
	must(t, b.Close(ctx))
}

func TestBatcherRejects(t *testing.T) {
	r := newBatchRig(t, func(o *natsembed.Options) { o.MaxPayload = 4096 })
	b, err := r.tx.NewBatcher("n1", WithLinger(0))
	must(t, err)
	ctx := testCtx(t)
	for _, tc := range []struct {
		node string
		s    Signal
		want error
	}{
		{"n2", Signal{Run: "r1", Act: 0, Kind: SignalEdge}, ErrInvalidSignal},
		{"n2", Signal{Run: "r.1", Act: 1, Kind: SignalEdge}, ErrInvalidID},
		{"n2", Signal{Run: "r1", Act: 1, Kind: 7}, ErrInvalidSignal},
		{"n 2", Signal{Run: "r1", Act: 1, Kind: SignalEdge}, ErrInvalidID},
		{"n2", Signal{Run: "r1", Act: 1, Kind: SignalEdge, Output: make([]byte, 5000)}, ErrOversized},
	} {
		if err := b.Add(ctx, tc.node, &tc.s); !errors.Is(err, tc.want) {
			t.Errorf("Add(%q, %+v): %v, want %v", tc.node, tc.s.Run, err, tc.want)
		}
	}
	// Waiting signals survive a rejected one.
	ok := sigN("r1", 1)[0]
	must(t, b.Add(ctx, "n2", &ok))
	// The run checked last is not checked again; another one still is.
	if err := b.Add(ctx, "n2", &Signal{Run: "r1.x", Act: 1, Kind: SignalEdge}); !errors.Is(err, ErrInvalidID) {
		t.Errorf("a bad run id after a good one: %v, want ErrInvalidID", err)
	}
	bad := Signal{Run: "r1", Act: 2, Kind: SignalEdge, Output: make([]byte, 5000)}
	if err := b.Add(ctx, "n2", &bad); !errors.Is(err, ErrOversized) {
		t.Fatalf("oversized: %v", err)
	}
	must(t, b.Close(ctx))
	if got := r.settle(t, 1); fmt.Sprint(sizes(got)) != "[1]" || got[0].Signals[0].Act != 1 {
		t.Fatalf("batches %v", sizes(got))
	}
	if err := b.Add(ctx, "n2", &ok); !errors.Is(err, ErrClosed) {
		t.Errorf("after close: %v", err)
	}
	if _, err := r.tx.NewBatcher("a.b"); !errors.Is(err, ErrInvalidID) {
		t.Errorf("bad from: %v", err)
	}
}

// Many goroutines adding to one destination: every Signal arrives exactly once.
func TestBatcherConcurrentAdd(t *testing.T) {
	r := newBatchRig(t)
	b, err := r.tx.NewBatcher("n1", WithMaxSignals(16))
	must(t, err)
	ctx := testCtx(t)
	const workers, per = 4, 250
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				s := Signal{Run: "r1", Src: uint32(w), Dst: 2, Act: uint64(i + 1), Kind: SignalEdge}
				if err := b.Add(ctx, "n2", &s); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	must(t, b.Close(ctx))
	must(t, r.tx.Sync(ctx))
	testsupport.Eventually(t, 15*time.Second, "all signals", func() bool {
		n := 0
		for _, bt := range r.batches() {
			n += len(bt.Signals)
		}
		return n == workers*per
	})
	next := make([]uint64, workers)
	for _, bt := range r.batches() {
		for _, s := range bt.Signals {
			if s.Act != next[s.Src]+1 {
				t.Fatalf("worker %d: act %d after %d", s.Src, s.Act, next[s.Src])
			}
			next[s.Src] = s.Act
		}
	}
}

// With WithAck, Flush returns once the record stream has stored the batches, and
// reports an error when there is no stream to store them.
func TestBatcherAck(t *testing.T) {
	r := newBatchRig(t)
	ctx := testCtx(t)
	b, err := r.tx.NewBatcher("n1", WithAck(), WithLinger(0), WithMaxSignals(3))
	must(t, err)
	s := sigN("r1", 1)[0]
	must(t, b.Add(ctx, "n2", &s))
	if err := b.Flush(ctx); err == nil {
		t.Fatal("flush with no record stream succeeded")
	}
	must(t, r.tx.EnsureStreams(ctx, StreamConfig{}))
	for _, s := range sigN("r1", 7) {
		must(t, b.Add(ctx, "n2", &s))
	}
	must(t, b.Close(ctx))
	st, err := r.tx.JetStream().Stream(ctx, StreamRecord)
	must(t, err)
	info, err := st.Info(ctx)
	must(t, err)
	if info.State.Msgs != 3 { // batches of 3, 3, 1
		t.Fatalf("record holds %d messages, want 3", info.State.Msgs)
	}
	// Core subscribers see acked batches too.
	r.settle(t, 4)
}

// A run's picks (AddPick) leave before any batch of the same run that was
// queued after them, whichever destination fills first; they go to
// PicksNode, which no node's subscription matches.
func TestBatcherPicksGoFirst(t *testing.T) {
	r := newBatchRig(t)
	var mu sync.Mutex
	var subs []string
	for _, run := range []string{"r1", "r2"} {
		filter, err := RunSignalsFilter(run)
		must(t, err)
		sub, err := r.rx.Subscribe(filter, func(m *nats.Msg) {
			mu.Lock()
			subs = append(subs, m.Subject)
			mu.Unlock()
		})
		must(t, err)
		defer sub.Close(context.Background())
	}
	must(t, r.rx.Sync(testCtx(t)))
	clk := &fakeClock{}
	b, err := r.tx.NewBatcher("n1", WithMaxSignals(2), WithClock(clk))
	must(t, err)
	ctx := testCtx(t)
	if err := b.AddPick(ctx, &Signal{Run: "r1", Gen: 1, Src: 1, Dst: 2, Act: 1, Kind: SignalEdge}); !errors.Is(err, ErrInvalidSignal) {
		t.Fatalf("a pick that is no choice: %v, want ErrInvalidSignal", err)
	}
	must(t, b.AddPick(ctx, &Signal{Run: "r2", Gen: 1, Src: 7, Dst: 8, Act: 1, Kind: SignalChoice}))
	must(t, b.AddPick(ctx, &Signal{Run: "r1", Gen: 1, Src: 3, Dst: 4, Act: 1, Kind: SignalChoice}))
	for _, s := range sigN("r1", 2) { // fills n2's batch: it leaves now, r1's pick before it
		must(t, b.Add(ctx, "n2", &s))
	}
	got := r.settle(t, 1)
	if fmt.Sprint(sizes(got)) != "[2]" {
		t.Fatalf("n2 got %v", sizes(got))
	}
	testsupport.Eventually(t, 15*time.Second, "two batches of r1", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(subs) >= 2
	})
	mu.Lock()
	order := fmt.Sprint(subs)
	mu.Unlock()
	if order != "[hf.run.r1.node.all.n1 hf.run.r1.node.n2.n1]" {
		t.Fatalf("published %s: r1's pick must go first, r2's must wait", order)
	}
	must(t, b.Close(ctx))
	testsupport.Eventually(t, 15*time.Second, "r2's pick at close", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(subs) == 3 && subs[2] == "hf.run.r2.node.all.n1"
	})
	if n := len(r.batches()); n != 1 {
		t.Fatalf("node n2's subscription got %d batches; picks are for the record only", n)
	}
}

// Picks a failed publish did not send stay queued, ahead of the run's
// other batches: a branch never leaves without its pick.
func TestBatcherKeepsPicksAFailedPublishLost(t *testing.T) {
	r := newBatchRig(t)
	clk := &fakeClock{}
	b, err := r.tx.NewBatcher("n1", WithClock(clk))
	must(t, err)
	ctx := testCtx(t)
	must(t, b.AddPick(ctx, &Signal{Run: "r1", Gen: 1, Src: 3, Dst: 4, Act: 1, Kind: SignalChoice}))
	s := sigN("r1", 1)[0]
	must(t, b.Add(ctx, "n2", &s))
	r.tx.nc.Close() // every publish fails from now on
	if err := b.Flush(ctx); err == nil {
		t.Fatal("flush on a closed connection: no error")
	}
	b.mu.Lock()
	picks, sigs := b.dests[destKey{"r1", PicksNode}].n, b.dests[destKey{"r1", "n2"}].n
	b.mu.Unlock()
	if picks != 1 || sigs != 1 {
		t.Fatalf("after the failed flush: %d picks and %d signals queued, want both kept (1, 1)", picks, sigs)
	}
}

// A wait for acks ends with ErrClosed when the connection is closed for
// good: no ack can come then, and the client would settle the future only
// at its ack timeout (here an hour; a node whose connection was closed
// used to wait out the 5 s default at each flush).
func TestAckWaitEndsWhenTheConnectionCloses(t *testing.T) {
	ts := testsupport.NATS(t)
	ctx := testCtx(t)
	tx, rx := connect(t, ts.URL(), WithAckTimeout(time.Hour)), connect(t, ts.URL())
	// A subscriber that never answers: the publish has a responder, and
	// its ack never comes.
	sub, err := rx.Subscribe("hf.test.silent", func(*nats.Msg) {})
	must(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	must(t, rx.Sync(ctx))
	f, err := tx.js.PublishMsgAsync(&nats.Msg{Subject: "hf.test.silent", Data: []byte("x")})
	must(t, err)
	must(t, tx.Sync(ctx))
	tx.nc.Close()
	if err := tx.waitAcks(ctx, []jetstream.PubAckFuture{f}); !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting for an ack on a closed connection: %v, want ErrClosed", err)
	}
}
