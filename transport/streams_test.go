package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hetflow/hetflow/internal/natsembed"
	"github.com/hetflow/hetflow/internal/testsupport"
)

func TestReplaySignals(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	ctx := testCtx(t)
	must(t, c.EnsureStreams(ctx, StreamConfig{}))
	must(t, c.EnsureStreams(ctx, StreamConfig{MaxAge: time.Hour})) // idempotent, updates
	// Nothing recorded yet: replay returns at once.
	n := 0
	must(t, c.ReplaySignals(ctx, "r1", "", func(string, *Batch) error { n++; return nil }))
	if n != 0 {
		t.Fatalf("empty replay saw %d", n)
	}
	b, err := c.NewBatcher("n1", WithLinger(0), WithMaxSignals(10), WithAck())
	must(t, err)
	for i := 0; i < 1200; i++ {
		s := Signal{Run: "r1", Gen: 1, Src: 1, Dst: uint32(i % 3), Act: uint64(i/3 + 1), Kind: SignalEdge, Output: []byte("o")}
		must(t, b.Add(ctx, fmt.Sprintf("n%d", 2+i%3), &s))
	}
	other := sigN("r2", 5)
	for _, s := range other {
		must(t, b.Add(ctx, "n2", &s))
	}
	must(t, b.Close(ctx))
	// Everything of r1, across several fetches, in order per destination.
	per := map[string]uint64{}
	total := 0
	must(t, c.ReplaySignals(ctx, "r1", "", func(node string, bt *Batch) error {
		for _, s := range bt.Signals {
			if s.Run != "r1" || s.Act != per[node]+1 {
				return fmt.Errorf("node %s: %+v after act %d", node, s, per[node])
			}
			per[node] = s.Act
			total++
		}
		return nil
	}))
	if total != 1200 || per["n2"] != 400 || per["n3"] != 400 || per["n4"] != 400 {
		t.Fatalf("replayed %d: %v", total, per)
	}
	// Only what was addressed to one node.
	total = 0
	must(t, c.ReplaySignals(ctx, "r1", "n3", func(node string, bt *Batch) error {
		if node != "n3" {
			return fmt.Errorf("batch for %s", node)
		}
		total += len(bt.Signals)
		return nil
	}))
	if total != 400 {
		t.Fatalf("n3 got %d", total)
	}
	// fn's error stops the replay.
	stop := errors.New("stop")
	if err := c.ReplaySignals(ctx, "r1", "", func(string, *Batch) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("err %v", err)
	}
	// Purging r1 leaves r2.
	must(t, c.PurgeRun(ctx, "r1"))
	total = 0
	must(t, c.ReplaySignals(ctx, "r1", "", func(_ string, bt *Batch) error { total++; return nil }))
	must(t, c.ReplaySignals(ctx, "r2", "", func(_ string, bt *Batch) error { total += 100 * len(bt.Signals); return nil }))
	if total != 500 {
		t.Fatalf("after purge: %d", total)
	}
	if err := c.ReplaySignals(ctx, "bad.run", "", nil); !errors.Is(err, ErrInvalidID) {
		t.Errorf("bad run: %v", err)
	}
}

// A node takes over tasks after a failure: it replays the run's record for its
// new tasks; its Deduper drops what it had already received live.
func TestNewOwnerReplaysThroughDedup(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	ctx := testCtx(t)
	must(t, c.EnsureStreams(ctx, StreamConfig{}))
	b, err := c.NewBatcher("n1", WithLinger(0), WithAck())
	must(t, err)
	// Gen 1: task 2 lives on n2, task 3 on n3.
	for act := uint64(1); act <= 5; act++ {
		must(t, b.Add(ctx, "n2", &Signal{Run: "r", Gen: 1, Src: 1, Dst: 2, Act: act, Kind: SignalEdge}))
		must(t, b.Add(ctx, "n3", &Signal{Run: "r", Gen: 1, Src: 1, Dst: 3, Act: act, Kind: SignalChoice}))
	}
	must(t, b.Flush(ctx))
	// n3 dies; gen 2 moves task 3 to n2, which had seen all of task 2's edges.
	d := NewDeduper()
	for act := uint64(1); act <= 5; act++ {
		d.Admit(&Signal{Run: "r", Gen: 1, Src: 1, Dst: 2, Act: act, Kind: SignalEdge})
	}
	d.SetGen("r", 2)
	mine := map[uint32]bool{2: true, 3: true}
	var got []Signal
	must(t, c.ReplaySignals(ctx, "r", "", func(_ string, bt *Batch) error {
		for i := range bt.Signals {
			s := &bt.Signals[i]
			if !mine[s.Dst] {
				continue
			}
			if d.Admit(s) != Fenced { // gen-1 history is behind the live fence...
				return fmt.Errorf("replayed %+v not fenced by Admit", s)
			}
			if d.AdmitReplayed(s) == Accept { // ...but true, so a replay admits it
				got = append(got, *s)
			}
		}
		return nil
	}))
	if d.Gen("r") != 2 {
		t.Fatalf("replay moved the fence to %d", d.Gen("r"))
	}
	if len(got) != 5 {
		t.Fatalf("new owner accepted %d signals, want the 5 for task 3", len(got))
	}
	for _, s := range got {
		if s.Dst != 3 || s.Kind != SignalChoice {
			t.Fatalf("unexpected %+v", s)
		}
	}
	// Task 1 re-runs under gen 2 and repeats its edges: all duplicates.
	must(t, b.Add(ctx, "n2", &Signal{Run: "r", Gen: 2, Src: 1, Dst: 3, Act: 4, Kind: SignalChoice}))
	must(t, b.Close(ctx))
	if v := d.Admit(&Signal{Run: "r", Gen: 2, Src: 1, Dst: 3, Act: 4, Kind: SignalChoice}); v != Duplicate {
		t.Fatalf("repeat after takeover: %v", v)
	}
}

func TestEventsPublishReplayAndSurviveRestart(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	ctx := testCtx(t)
	must(t, c.EnsureStreams(ctx, StreamConfig{}))
	start := time.Unix(1700000000, 0)
	var evs []TaskEvent
	for i := 0; i < 50; i++ {
		evs = append(evs, TaskEvent{Run: "r1", Gen: 1, Task: uint32(i % 5), Node: "n1", State: TaskDone,
			Act: uint64(i/5 + 1), Executions: uint64(i/5 + 1), Start: start, End: start.Add(time.Millisecond)})
	}
	evs[49].Output = []byte("sink")
	must(t, c.PublishEvents(ctx, evs...))
	must(t, c.PublishEvents(ctx, TaskEvent{Run: "r2", Node: "n2", State: TaskRunning}))
	if err := c.PublishEvents(ctx, TaskEvent{Run: "r1", Node: "bad node"}); !errors.Is(err, ErrInvalidID) {
		t.Fatalf("bad node: %v", err)
	}
	ts.Restart()
	testsupport.Eventually(t, 15*time.Second, "reconnect", func() bool { return c.Connected() })
	// Rebuild the status of r1: the latest event per task wins.
	latest := map[uint32]TaskEvent{}
	count := 0
	// Each attempt gets a deadline of its own: a replay reads until it has
	// caught up or its context ends, and a server still recovering its
	// store can hold the first attempt past the test's whole context.
	testsupport.Eventually(t, 15*time.Second, "replay after restart", func() bool {
		count = 0
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		err := c.ReplayEvents(actx, "r1", func(e *TaskEvent) error {
			ev := *e
			ev.Output = append([]byte(nil), e.Output...)
			latest[e.Task] = ev
			count++
			return nil
		})
		return err == nil && count == 50
	})
	if len(latest) != 5 || latest[4].Act != 10 || string(latest[4].Output) != "sink" || !latest[0].Start.Equal(start) {
		t.Fatalf("rebuilt status %+v", latest)
	}
}

// A node's events of one run are stored as few EventBatch messages, cut
// at about 256 KiB, and read back one by one in their order.
func TestEventsAreStoredInBatches(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	ctx := testCtx(t)
	must(t, c.EnsureStreams(ctx, StreamConfig{}))
	var evs []TaskEvent
	for i := 0; i < 3000; i++ {
		e := TaskEvent{Run: "r3", Gen: 1, Task: uint32(i), Node: []string{"n1", "n2"}[i%2], State: TaskDone, Act: 1, Executions: 1}
		if i%1000 == 7 {
			e.Output = bytes.Repeat([]byte{byte(i)}, 200<<10) // forces cuts
		}
		evs = append(evs, e)
	}
	must(t, c.PublishEvents(ctx, evs...))
	var got []uint32
	must(t, c.ReplayEvents(ctx, "r3", func(e *TaskEvent) error {
		if e.Output != nil && (len(e.Output) != 200<<10 || e.Output[0] != byte(e.Task)) {
			t.Errorf("task %d: output of %d bytes", e.Task, len(e.Output))
		}
		got = append(got, e.Task)
		return nil
	}))
	if len(got) != len(evs) {
		t.Fatalf("replayed %d events, want %d", len(got), len(evs))
	}
	last := map[uint32]bool{} // per node, tasks come in publication order
	prev := [2]int{-2, -1}
	for _, task := range got {
		k := task % 2
		if int(task) <= prev[k] || last[task] {
			t.Fatalf("task %d out of order after %d", task, prev[k])
		}
		prev[k], last[task] = int(task), true
	}
	filter, _ := RunEventsFilter("r3")
	msgs := 0
	must(t, c.replay(ctx, StreamEvents, filter, func(jetstream.Msg) error { msgs++; return nil }))
	if msgs < 4 || msgs > 8 { // n1: one batch; n2: cut before each 200 KiB output after the first
		t.Fatalf("%d events stored as %d messages: want a few batches cut at ~256 KiB", len(evs), msgs)
	}
	t.Logf("%d events stored as %d messages", len(evs), msgs)
}

// A node's TaskReport is stored as messages cut at about 256 KiB, each a
// report of some of its deltas, and read back (EachEvent, ReplayEvents) as
// the TaskEvents they stand for, in order, with the run, generation and
// node of the report.
func TestTaskReportsAreCutAndReadAsEvents(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	ctx := testCtx(t)
	must(t, c.EnsureStreams(ctx, StreamConfig{}))
	start := time.Unix(1700000000, 0)
	var trs []*TaskReport
	for k, node := range []string{"n1", "n2"} {
		tr := &TaskReport{Run: "r4", Gen: uint64(k + 1), Node: node}
		for i := 0; i < 20000; i++ {
			d := TaskDelta{Task: uint32(i), State: TaskDone, Act: 1, Executions: 1, Start: start.Add(time.Duration(i)).UnixNano(), End: start.Add(time.Duration(2 * i)).UnixNano()}
			if i%5000 == 7 {
				d.Output = bytes.Repeat([]byte{byte(i)}, 100<<10)
			}
			if i == 19999 {
				d.Name, d.State, d.Error = "p/c", TaskFailed, "boom"
			}
			tr.Tasks = append(tr.Tasks, d)
		}
		trs = append(trs, tr)
	}
	must(t, c.PublishReports(ctx, trs...))
	next := map[string]int{}
	must(t, c.ReplayEvents(ctx, "r4", func(e *TaskEvent) error {
		i := next[e.Node]
		next[e.Node]++
		k := map[string]int{"n1": 0, "n2": 1}[e.Node]
		d := trs[k].Tasks[i]
		if e.Run != "r4" || e.Gen != uint64(k+1) || e.Task != d.Task || e.Name != d.Name || e.State != d.State || e.Error != d.Error ||
			!bytes.Equal(e.Output, d.Output) || !e.Start.Equal(time.Unix(0, d.Start)) || !e.End.Equal(time.Unix(0, d.End)) {
			t.Fatalf("event %d of %s: %+v, want %v", i, e.Node, e, d)
		}
		return nil
	}))
	if next["n1"] != 20000 || next["n2"] != 20000 {
		t.Fatalf("replayed %v events, want 20000 of each node", next)
	}
	filter, _ := RunEventsFilter("r4")
	msgs := 0
	must(t, c.replay(ctx, StreamEvents, filter, func(m jetstream.Msg) error {
		msgs++
		if len(m.Data()) > reportBytes {
			t.Errorf("a stored report of %d bytes, over %d", len(m.Data()), reportBytes)
		}
		return nil
	}))
	if msgs < 4 || msgs > 16 { // each report is ~0.5 MB (four outputs of 100 KiB): two messages at the least
		t.Fatalf("2 reports of 20000 tasks stored as %d messages: want a few, cut at ~256 KiB", msgs)
	}
	t.Logf("2 reports of 20000 tasks stored as %d messages", msgs)
}

func TestNoJetStream(t *testing.T) {
	ts := testsupport.NATS(t, func(o *natsembed.Options) { o.NoJetStream = true })
	c := connect(t, ts.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.EnsureStreams(ctx, StreamConfig{}); !errors.Is(err, ErrNoJetStream) {
		t.Errorf("EnsureStreams: %v", err)
	}
	if err := c.ReplaySignals(ctx, "r", "", func(string, *Batch) error { return nil }); !errors.Is(err, ErrNoJetStream) {
		t.Errorf("ReplaySignals: %v", err)
	}
}

func TestReplayCountsMalformed(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	ctx := testCtx(t)
	must(t, c.EnsureStreams(ctx, StreamConfig{Memory: true}))
	subj, _ := SignalSubject("r1", "n2", "n1")
	_, err := c.JetStream().Publish(ctx, subj, []byte("junk"))
	must(t, err)
	_, err = c.JetStream().Publish(ctx, subj, Encode(&Batch{From: "n1", Signals: sigN("r1", 2)}))
	must(t, err)
	evSubj, _ := EventSubject("r1", "n2")
	_, err = c.JetStream().Publish(ctx, evSubj, []byte{0x91})
	must(t, err)
	n := 0
	must(t, c.ReplaySignals(ctx, "r1", "", func(_ string, b *Batch) error { n += len(b.Signals); return nil }))
	must(t, c.ReplayEvents(ctx, "r1", func(*TaskEvent) error { n += 100; return nil }))
	if n != 2 || c.Stats().Malformed != 2 {
		t.Fatalf("n=%d stats %+v", n, c.Stats())
	}
}

func TestFollowSignals(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	ctx := testCtx(t)
	must(t, c.EnsureStreams(ctx, StreamConfig{}))
	// An empty record is caught up at once; later batches still come.
	var mu sync.Mutex
	got := map[string][]uint64{} // addressee → acts, in order
	var seqs []uint64
	caught := make(chan struct{})
	f, err := c.FollowSignals(ctx, "r1", func(seq uint64, node string, b *Batch) {
		mu.Lock()
		defer mu.Unlock()
		seqs = append(seqs, seq)
		for _, s := range b.Signals {
			got[node] = append(got[node], s.Act)
		}
	}, func() { close(caught) })
	must(t, err)
	select {
	case <-caught:
	case <-ctx.Done():
		t.Fatal("an empty record never caught up")
	}
	b, err := c.NewBatcher("n1", WithLinger(0), WithMaxSignals(1), WithAck())
	must(t, err)
	for i := 1; i <= 20; i++ {
		s := Signal{Run: "r1", Gen: 1, Src: 1, Dst: 2, Act: uint64(i), Kind: SignalEdge}
		must(t, b.Add(ctx, fmt.Sprintf("n%d", 2+i%2), &s))
		o := Signal{Run: "r2", Gen: 1, Src: 1, Dst: 2, Act: uint64(i), Kind: SignalEdge}
		must(t, b.Add(ctx, "n2", &o))
	}
	must(t, b.Flush(ctx))
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got["n2"]) + len(got["n3"])
	}
	testsupport.EventuallyCtx(t, ctx, "the live batches", func() bool { return count() == 20 })
	f.Stop()
	f.Stop() // idempotent
	mu.Lock()
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("stream sequences out of order: %v", seqs)
		}
	}
	if len(got["n2"]) != 10 || got["n2"][0] != 2 || got["n3"][0] != 1 {
		t.Fatalf("follow saw %v", got)
	}
	mu.Unlock()

	// A second follow starts with a record of 20 batches: it is caught up only
	// after it has seen them all, and it sees what comes after too.
	var n atomic.Int64
	var atCatch int64 = -1
	caught2 := make(chan struct{})
	f2, err := c.FollowSignals(ctx, "r1", func(uint64, string, *Batch) { n.Add(1) }, func() { atCatch = n.Load(); close(caught2) })
	must(t, err)
	defer f2.Stop()
	select {
	case <-caught2:
	case <-ctx.Done():
		t.Fatal("never caught up")
	}
	if atCatch != 20 {
		t.Fatalf("caught up after %d batches, want 20", atCatch)
	}
	s := Signal{Run: "r1", Gen: 2, Src: 1, Dst: 2, Act: 21, Kind: SignalEdge}
	must(t, b.Add(ctx, "n4", &s))
	must(t, b.Close(ctx))
	testsupport.EventuallyCtx(t, ctx, "a batch after the catch-up", func() bool { return n.Load() == 21 })
	if _, err := c.FollowSignals(ctx, "bad.run", nil, nil); !errors.Is(err, ErrInvalidID) {
		t.Errorf("bad run: %v", err)
	}
}

// A publish of written reports that fails leaves their messages as they
// were, to be published again, and stored whole when they are; and their
// buffers are never kept for the next writers, not even once a later
// attempt stores them: the failed attempt's futures may still send them
// again. A publish that succeeds at once keeps its buffers.
func TestPublishWrittenFailsAndIsTriedAgain(t *testing.T) {
	kept := useKeptBufs(t)
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	ctx := testCtx(t)
	must(t, c.EnsureStreams(ctx, StreamConfig{}))
	write := func(run string) *ReportWriter {
		w := NewReportWriter(run, 1, "n1", 0) // no hint: every message in a kept buffer
		for i := range 30000 {
			at := int64(1700000000000000000) + int64(i)*1000
			d := TaskDelta{Task: uint32(i), State: TaskDone, Act: 1, Executions: 1, Start: at, End: at + 500}
			if i%3000 == 1 {
				d.Output = bytes.Repeat([]byte{byte(i)}, 20<<10)
			}
			w.Add(&d)
		}
		w.Finish()
		return w
	}
	stored := func(run string) [][]byte {
		filter, _ := RunEventsFilter(run)
		var got [][]byte
		must(t, c.replay(ctx, StreamEvents, filter, func(m jetstream.Msg) error {
			got = append(got, bytes.Clone(m.Data()))
			return nil
		}))
		return got
	}

	w := write("r6")
	bufs := slices.Clone(w.bufs)
	want := clonedMessages(w)
	if len(bufs) < 2 || len(want) != len(bufs) {
		t.Fatalf("%d messages in %d kept buffers, want a few, each in one", len(want), len(bufs))
	}
	bad := NewReportWriter("r6.x", 1, "n1", 0) // no subject: the attempt fails after w's messages went
	bad.Finish()
	if err := c.PublishWritten(ctx, w, bad); err == nil {
		t.Fatal("a report of a run named r6.x published")
	}
	_ = write("r7") // the next writers, after the failure, take no buffer of w's
	if !reflect.DeepEqual(w.Messages(), want) {
		t.Fatal("a failed publish changed the messages it leaves to publish again")
	}
	must(t, c.PublishWritten(ctx, w))
	for i, p := range bufs {
		if kept.put(p) {
			t.Fatalf("buffer %d of %d of a report whose first publish failed kept for the next writers", i, len(bufs))
		}
	}
	if got := stored("r6"); !reflect.DeepEqual(got, append(slices.Clone(want), want...)) {
		t.Fatalf("%d messages stored, want the %d written twice (the failed attempt's acked, then the retry's)", len(got), len(want))
	}

	w = write("r8")
	bufs = slices.Clone(w.bufs)
	must(t, c.PublishWritten(ctx, w))
	for i, p := range bufs {
		if !kept.put(p) {
			t.Fatalf("buffer %d of %d of a report stored at once not kept", i, len(bufs))
		}
	}
}

// PublishReports (a ReportSend of finished writers) and PublishEvents tell
// of the events they stored with a notice of no body on the run's notice
// subject, once a (run, node) and a call, sent after the acks: a reader it
// wakes finds the events stored.
func TestEventNotices(t *testing.T) {
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	ctx := testCtx(t)
	must(t, c.EnsureStreams(ctx, StreamConfig{Memory: true}))
	notices := runNotices(t, ctx, c, "r1")
	stored := func() (n int) {
		must(t, c.ReplayEvents(ctx, "r1", func(*TaskEvent) error { n++; return nil }))
		return n
	}
	notice := func(node string, events int) {
		t.Helper()
		select {
		case m := <-notices:
			if subj, _ := EventNoticeSubject("r1", node); m.Subject != subj || len(m.Data) != 0 {
				t.Fatalf("a notice on %s of %d bytes, want one on %s of none", m.Subject, len(m.Data), subj)
			}
			if n := stored(); n != events {
				t.Fatalf("the notice came with %d events of r1 stored, want %d", n, events)
			}
		case <-ctx.Done():
			t.Fatalf("no notice of %s's stored events", node)
		}
	}
	// Two reports of r1 by n1 (two writers), one of r2: one notice on r1's.
	big := &TaskReport{Run: "r1", Gen: 1, Node: "n1"}
	for i := range 3000 {
		big.Tasks = append(big.Tasks, TaskDelta{Task: uint32(i), State: TaskDone, Act: 1, Executions: 1, Output: bytes.Repeat([]byte{'x'}, 200)})
	}
	must(t, c.PublishReports(ctx, big, &TaskReport{Run: "r2", Gen: 1, Node: "n1", Tasks: []TaskDelta{{Task: 1, State: TaskDone, Act: 1}}},
		&TaskReport{Run: "r1", Gen: 1, Node: "n1", Tasks: []TaskDelta{{Task: 3000, State: TaskDone, Act: 1}}}))
	notice("n1", 3001)
	must(t, c.PublishEvents(ctx, TaskEvent{Run: "r2", Node: "n2", Task: 1, State: TaskDone, Act: 1},
		TaskEvent{Run: "r1", Node: "n2", Task: 2, State: TaskDone, Act: 1}, TaskEvent{Run: "r1", Node: "n2", Task: 3, State: TaskDone, Act: 1}))
	notice("n2", 3003)
	must(t, c.nc.Flush()) // a second notice would be in by now
	if len(notices) != 0 {
		t.Fatalf("%d more notices: one a (run, node) and a call", len(notices))
	}
}

// A ReportSend publishes each message of a writer added to it as the
// writer ends it: the first message of a report is stored while the rest
// is still being written (a node's cut has the leader read its first
// messages meanwhile). Wait then waits for every ack; what is stored is
// every message, in the order written, and the buffers are kept for the
// next writers. A writer added with messages ended already has them
// published first. The notice of stored events goes once Wait has seen
// every ack, not as the first messages are stored: one for the two
// writers of a (run, node).
func TestReportSendStoresEachMessageAsItEnds(t *testing.T) {
	kept := useKeptBufs(t)
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	ctx := testCtx(t)
	must(t, c.EnsureStreams(ctx, StreamConfig{}))

	notices := runNotices(t, ctx, c, "r9")

	before := NewReportWriter("r9", 1, "n1", 0) // ended before it is added: published at Add
	for i := range 10 {
		before.Add(streamDelta(i))
	}
	before.Finish()
	s := c.SendReports()
	s.Add(before)
	w := NewReportWriter("r9", 2, "n1", 0)
	s.Add(w)
	i := addUntilEnded(w, 10)
	waitStored(t, ctx, c, "r9", 2, fmt.Sprintf("gen 1's message (published at Add) and gen 2's first (ended at its task %d), before gen 2's report is finished", i-1))
	must(t, c.nc.Flush()) // a notice sent as the first messages were stored would be in by now
	if len(notices) != 0 {
		t.Fatalf("%d notices of r9's events before Wait saw them all acked, want none", len(notices))
	}
	addDeltas(w, i, 3*i)
	w.Finish()
	want := clonedMessages(before, w)
	bufs := append(slices.Clone(before.bufs), w.bufs...)
	if len(want) < 4 {
		t.Fatalf("%d messages written, want at least 4", len(want))
	}
	must(t, s.Wait(ctx))
	if got, err := storedData(ctx, c, "r9"); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%d messages stored (%v), want the %d written, in order", len(got), err, len(want))
	}
	select {
	case m := <-notices:
		if subj, _ := EventNoticeSubject("r9", "n1"); m.Subject != subj {
			t.Fatalf("a notice on %s, want one on %s", m.Subject, subj)
		}
	case <-ctx.Done():
		t.Fatal("no notice of r9's stored events after Wait")
	}
	must(t, c.nc.Flush())
	if len(notices) != 0 {
		t.Fatalf("%d more notices: one a (run, node) and a send", len(notices))
	}
	for j, p := range bufs {
		if !kept.put(p) {
			t.Fatalf("buffer %d of %d of reports stored not kept", j, len(bufs))
		}
	}
}

// A connection closed in the middle of a streamed cut, after its first
// message is stored: the next message's publish fails with the client's
// own error (connection closed), and Wait says ErrClosed, so that a node
// answers its flushes at once rather than retrying on a connection that
// can store nothing. No buffer of the send is kept for the next writers
// (the client may still hold the messages it published), and the writer's
// messages, published again (here on another connection), are stored
// whole: after the first attempt's first message, every one, in order, so
// the leader's fold reads every task.
func TestReportSendClosedMidCut(t *testing.T) {
	kept := useKeptBufs(t)
	ts := testsupport.NATS(t)
	c := connect(t, ts.URL())
	ctx := testCtx(t)
	must(t, c.EnsureStreams(ctx, StreamConfig{}))
	other := connect(t, ts.URL())

	s := c.SendReports()
	w := NewReportWriter("r10", 1, "n1", 0) // no hint: every message in a kept buffer
	s.Add(w)
	i := addUntilEnded(w, 0)
	waitStored(t, ctx, other, "r10", 1, fmt.Sprintf("the first message (ended at task %d) before the connection is closed", i-1))
	must(t, c.Close())
	i = addDeltas(w, i, 3*i)
	w.Finish()
	bufs := slices.Clone(w.bufs)
	want := clonedMessages(w)
	if len(want) < 3 || len(bufs) != len(want) {
		t.Fatalf("%d messages in %d kept buffers, want a few, each in one", len(want), len(bufs))
	}
	err := s.Wait(ctx)
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after a close mid-cut: %v, want ErrClosed", err)
	}
	must(t, other.PublishWritten(ctx, w))
	for j, p := range bufs {
		if kept.put(p) {
			t.Fatalf("buffer %d of %d of a send that failed mid-cut kept for the next writers", j, len(bufs))
		}
	}
	got, err := storedData(ctx, other, "r10")
	if err != nil || !reflect.DeepEqual(got, append([][]byte{want[0]}, want...)) {
		t.Fatalf("%d messages stored (%v), want the first (stored before the close), then the %d written", len(got), err, len(want))
	}
	var tasks int
	for _, b := range got[1:] {
		var tr TaskReport
		must(t, tr.Decode(b, Limits{}))
		tasks += len(tr.Tasks)
	}
	if tasks != i {
		t.Fatalf("the retry stored %d tasks, want the %d written", tasks, i)
	}
}

// runNotices subscribes c to the notices of run's stored events (on any
// node's subject) until the test ends, and returns the channel they come
// on. The server has the subscription when it returns.
func runNotices(t *testing.T, ctx context.Context, c *Conn, run string) chan *nats.Msg {
	t.Helper()
	notices := make(chan *nats.Msg, 16)
	filter, err := RunEventNoticesFilter(run)
	must(t, err)
	sub, err := c.Subscribe(filter, func(m *nats.Msg) { notices <- m })
	must(t, err)
	t.Cleanup(func() { _ = sub.Stop(context.Background()) })
	must(t, c.nc.Flush())
	return notices
}

// clonedMessages is a copy of the messages ws have written, in turn: what
// a send must store, kept apart from the buffers it may hand on.
func clonedMessages(ws ...*ReportWriter) [][]byte {
	var msgs [][]byte
	for _, w := range ws {
		for _, b := range w.Messages() {
			msgs = append(msgs, bytes.Clone(b))
		}
	}
	return msgs
}

// addUntilEnded adds streamDelta(from), streamDelta(from+1) and on to w
// until w has ended its first message, and returns the next task.
func addUntilEnded(w *ReportWriter, from int) (next int) {
	for next = from; len(w.Messages()) == 0; next++ {
		w.Add(streamDelta(next))
	}
	return next
}

// addDeltas adds the n deltas of tasks from to from+n-1 to w (streamDelta)
// and returns the next task.
func addDeltas(w *ReportWriter, from, n int) (next int) {
	for next = from; next < from+n; next++ {
		w.Add(streamDelta(next))
	}
	return next
}

// streamDelta is task i's delta of the streamed sends' tests: done, a
// microsecond after task i-1 began.
func streamDelta(i int) *TaskDelta {
	s := int64(1700000000000000000) + int64(i)*1000
	return &TaskDelta{Task: uint32(i), State: TaskDone, Act: 1, Executions: 1, Start: s, End: s + 500}
}

// storedData is the data of the messages of run's reports stored in the
// event stream, in order.
func storedData(ctx context.Context, c *Conn, run string) ([][]byte, error) {
	filter, err := RunEventsFilter(run)
	if err != nil {
		return nil, err
	}
	var got [][]byte
	err = c.replay(ctx, StreamEvents, filter, func(m jetstream.Msg) error {
		got = append(got, bytes.Clone(m.Data()))
		return nil
	})
	return got, err
}

// waitStored waits until n messages of run's reports are stored (what:
// which they are, and by when), or fails saying what was stored by then.
// Each read of the stream has a deadline of its own, so the last one, at
// ctx's end, still says what the stream holds.
func waitStored(t *testing.T, ctx context.Context, c *Conn, run string, n int, what string) {
	t.Helper()
	testsupport.EventuallyCtx(t, ctx, what, func() bool {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := storedData(rctx, c, run)
		if ctx.Err() != nil {
			t.Logf("not stored: %s: %d messages of %s stored, want %d (read: %v)", what, len(got), run, n, err)
		}
		return err == nil && len(got) == n
	})
}
