package coord

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/transport"
)

// busyRun starts a leading coordinator and a busy fake node n1, and
// submits run id of a flow of two tasks, a and b after it, both n1's,
// and waits until it is assigned.
func busyRun(t *testing.T) (c *Server, n1 *fakeNode, id string) {
	t.Helper()
	url := testsupport.NATS(t).URL()
	c = leadingCoord(t, url, nil)
	n1 = startFakeNode(t, "n1", url, []string{c.GossipAddr()}, 2, 0, func(n *fakeNode) { n.busy = true })
	testsupport.Eventually(t, 10*time.Second, "n1 alive", func() bool { return nodeState(c, "n1") == proto.NodeAlive })
	id, err := c.Submit("f.yaml", []byte("name: f\ntasks:\n  - {name: a, func: noop}\n  - {name: b, func: hash, succeed: [a]}\n"))
	must(t, err)
	testsupport.Eventually(t, 10*time.Second, "the run assigned", func() bool {
		r, ok := c.run(id)
		return ok && len(r.Assignment) == 2
	})
	return c, n1, id
}

// cursorConsumer is the name of the consumer cc's cursor keeps ("" none).
func cursorConsumer(cc *statusCache) string {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.cur.cons == nil {
		return ""
	}
	return cc.cur.cons.CachedInfo().Name
}

// A status cache's event cursor keeps its consumer between reads, and
// loses no event when that consumer is gone (removed by the server after
// a minute unread) or has handed a message to someone else (a fetch cut
// short: a gap in its consumer sequences): it is made again from the last
// event folded, and the table shows every event.
func TestEventCursorRecovers(t *testing.T) {
	c, n1, id := busyRun(t)
	ctx := ctxFor(t, 60*time.Second)
	execs := func() (a, b uint64) {
		t.Helper()
		var st proto.RunStatus
		if code, body, err := get(ctx, c.HTTPAddr(), "/v1/runs/"+id, &st); err != nil || code != http.StatusOK {
			t.Fatalf("status: %d %s %v", code, body, err)
		}
		return st.Tasks[0].Executions, st.Tasks[1].Executions
	}
	testsupport.Eventually(t, 10*time.Second, "both tasks done", func() bool { a, b := execs(); return a == 1 && b == 1 })
	consumer := func() string { return cursorConsumer(c.cacheOf(id)) }
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

	// A message taken from the consumer by another fetch: a gap. The
	// server acks a publish before it tells the stream's consumers of the
	// message (eventCursor), so a fetch that does not wait can find the
	// kept consumer empty on a busy machine: the theft waits for it, up to
	// the test's deadline.
	publish(1, 5)
	cons, err := st.Consumer(ctx, second)
	must(t, err)
	wait, _ := ctx.Deadline()
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Until(wait)))
	must(t, err)
	stolen := 0
	for range batch.Messages() {
		stolen++
	}
	if stolen != 1 {
		t.Fatalf("took %d messages from the cursor's consumer, want 1 (%v)", stolen, batch.Error())
	}
	// The gap shows when the kept consumer hands on the next message, which
	// for the same reason can come a read or more after the ack: the reads
	// are done again until it does.
	publish(0, 4)
	testsupport.Eventually(t, 30*time.Second, "executions 4 and 5 after a gap", func() bool { a, b := execs(); return a == 4 && b == 5 })
	if third := consumer(); third == "" || third == second {
		t.Fatalf("no consumer made again after the gap: %q (was %q)", third, second)
	}
}

// The leader's record check (checkRecord, before a success verdict) sees
// every event stored when it starts: an event whose publish was acked just
// before. The NATS server acks a publish before it tells the stream's
// consumers of the message (on another goroutine), so a consumer kept
// between reads can still answer "no messages" right after the ack; the
// check reads through a consumer made for it, which counts what is stored,
// with the kept one set aside, not yet removed (the leader removes it
// after the check's outcome is taken). Many other consumers on the stream
// make that window wide: the old cursor missed the event in a good share
// of the rounds.
func TestCheckRecordSeesAckedEvents(t *testing.T) {
	c, n1, id := busyRun(t)
	ctx := ctxFor(t, 120*time.Second)
	r, _ := c.run(id)

	// Other consumers of the run's events, each signalled of every message.
	st, err := c.eventStream(ctx)
	must(t, err)
	filter, err := transport.RunEventsFilter(id)
	must(t, err)
	for range 200 {
		_, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{FilterSubject: filter, AckPolicy: jetstream.AckNonePolicy,
			InactiveThreshold: time.Minute, MemoryStorage: true})
		must(t, err)
	}

	// Task a fails, then is done again, activation after activation; each
	// check after the publish is acked must see the latest.
	// A status read makes the cursor's consumer; the check reads through
	// another, and sets the kept one aside for its caller to remove (the
	// leader: after the check's outcome is taken): it is there until then.
	consumer := func() string { return cursorConsumer(c.cacheOf(id)) }
	_, err = c.runStatus(ctx, id)
	must(t, err)
	kept := consumer()
	_, _, stale, err := c.checkRecordAside(ctx, r)
	must(t, err)
	if now := consumer(); kept == "" || now == "" || now == kept || stale == nil || stale.CachedInfo().Name != kept {
		t.Fatalf("the check read through consumer %q, the status read's was %q (set aside: %v): want a new one, the old one aside", now, kept, stale != nil)
	}
	if _, err := st.Consumer(ctx, kept); err != nil {
		t.Fatalf("the consumer set aside, before its caller removes it: %v", err)
	}
	c.dropConsumer(ctx, stale)
	if _, err := st.Consumer(ctx, kept); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the kept consumer after the check: %v, want it removed", err)
	}
	// checkRecord removes it itself.
	_, err = c.runStatus(ctx, id)
	must(t, err)
	kept = consumer()
	_, _, err = c.checkRecord(ctx, r)
	must(t, err)
	if _, err := st.Consumer(ctx, kept); kept == "" || !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the kept consumer %q after checkRecord: %v, want it removed", kept, err)
	}
	const rounds = 200
	missed := 0
	for i := range rounds {
		state := transport.TaskDone
		if i%2 == 0 {
			state = transport.TaskFailed
		}
		if i%2 == 0 {
			_, err := c.runStatus(ctx, id) // a status read: the consumer it keeps is what the check sets aside
			must(t, err)
		}
		must(t, n1.nc.PublishEvents(ctx, transport.TaskEvent{Run: id, Gen: r.Gen, Task: 0, Node: "n1", State: state, Act: uint64(i + 2), Executions: uint64(i + 2)}))
		// As the leader checks: the consumer set aside (the last check's,
		// or the status read's of every other round) is still there while
		// the check reads, and goes after.
		_, failed, stale, err := c.checkRecordAside(ctx, r)
		must(t, err)
		c.dropConsumer(ctx, stale)
		if got := slices.Contains(failed, "a"); got != (state == transport.TaskFailed) {
			missed++
		}
	}
	if missed > 0 {
		t.Fatalf("%d of %d checks right after an acked publish missed it", missed, rounds)
	}
}

// The leader removes the status cursor's consumer its record check set
// aside once the verdict is applied (or refused): it does not stay until the server
// drops it a minute unread.
func TestLeaderDropsTheConsumerSetAside(t *testing.T) {
	c, n1, id := busyRun(t)
	ctx := ctxFor(t, 60*time.Second)
	_, err := c.runStatus(ctx, id) // the cursor keeps a consumer
	must(t, err)
	kept := cursorConsumer(c.cacheOf(id))
	if kept == "" {
		t.Fatal("the status read kept no consumer")
	}
	st, err := c.eventStream(ctx)
	must(t, err)
	// n1 is idle from now on and says so, as its heartbeat would: the
	// leader probes, hears it idle again, and checks the record.
	n1.idle.Store(true)
	r, _ := c.run(id)
	n1.term(id, r.Gen, 0)
	testsupport.Eventually(t, 20*time.Second, "the run succeeds", func() bool { return runState(c, id) == proto.RunSucceeded })
	// Well inside the consumer's minute unread (eventCursorIdle).
	testsupport.Eventually(t, 20*time.Second, "the consumer set aside removed", func() bool {
		_, err := st.Consumer(ctx, kept)
		return errors.Is(err, jetstream.ErrConsumerNotFound)
	})
}

// verdictWokenRead runs a long poll on run id whose first read is done
// before a verdict of state is applied (finish), and returns the progress
// its answer saw and the reads of the event stream the woken read made
// (the wait's first read, which always reads the events, left out). The
// tick is an hour: no look but the verdict's wakes it.
func verdictWokenRead(t *testing.T, ctx context.Context, c *Server, id, state string) (got proto.RunProgress, reads int64, ok bool) {
	t.Helper()
	defer func(d time.Duration) { statusWaitTick = d }(statusWaitTick)
	statusWaitTick = time.Hour
	v, err := c.statusVersion(ctx, id)
	must(t, err)
	base := c.eventReads.Load()
	woke := make(chan bool, 1)
	go func() {
		answered, err := c.awaitChange(ctx, id, v, time.Hour, func(cc *statusCache, r Run) { // neither its wait nor its tick ends it
			got = cc.fold.progress(r, cc.nv)
		})
		if err != nil {
			t.Error(err)
		}
		woke <- answered
	}()
	// The first read (under the cache's lock, which the woken read waits
	// for) has begun.
	testsupport.Eventually(t, 10*time.Second, "the wait's first read", func() bool { return c.eventReads.Load() > base })
	must(t, c.apply(&Command{Op: OpRunFinish, Finish: &Finish{ID: id, State: state, At: time.Now()}}))
	select {
	case answered := <-woke:
		if answered && !proto.Finished(got.State) {
			// Another change (the busy node's report, a command of its
			// own) woke the wait before the verdict: nothing to learn from
			// this run; the caller tries a new one.
			t.Logf("the wait answered before the verdict (state %q): trying again", got.State)
			return got, 0, false
		}
		if !answered || got.State != state {
			t.Fatalf("the answer after the verdict: answered %v, state %q; want %s", answered, got.State, state)
		}
	case <-ctx.Done():
		t.Fatal("a waiting status read did not see the verdict applied")
	}
	return got, c.eventReads.Load() - base - 1, true
}

// wokenTries bounds the runs verdictWokenRead's callers try: a wait that
// another change answers first is rare (2 runs of 12 under -race at load ~4).
const wokenTries = 5

// A long poll woken by a success verdict this server's record check
// passed at the run's generation answers from the run's state without a
// read of the event stream (awaitChange), and its tallies are the record's
// as the check folded it into the same cache.
func TestVerdictWokenReadHasTheCheckedTallies(t *testing.T) {
	for try := 1; ; try++ {
		if verdictWokenChecked(t) {
			return
		}
		if try == wokenTries {
			t.Fatalf("in %d runs, another change answered the wait before the verdict every time", try)
		}
	}
}

func verdictWokenChecked(t *testing.T) bool {
	c, n1, id := busyRun(t)
	ctx := ctxFor(t, 60*time.Second)
	r := checkedBothDone(t, ctx, c, n1, id)
	cc := c.cacheOf(id)
	cc.mu.Lock()
	checked := cc.fold.progress(r, cc.nv).Counts
	cc.mu.Unlock()
	got, reads, ok := verdictWokenRead(t, ctx, c, id, proto.RunSucceeded)
	if ok && (reads != 0 || got.Counts != checked || got.Counts.Done != 2) {
		t.Fatalf("the read the checked verdict woke: %d reads of the events, tallies %+v; want none, the check's %+v (both tasks done)", reads, got.Counts, checked)
	}
	return ok
}

// A long poll woken by a verdict this server did not check (a failed or
// cancelled one has no check; a success another leader checked) reads the
// events: the summary it answers is whole.
func TestUncheckedVerdictWokenReadReadsTheEvents(t *testing.T) {
	for _, state := range []string{proto.RunCancelled, proto.RunFailed, proto.RunSucceeded} {
		t.Run(state, func(t *testing.T) {
			for try := 1; ; try++ {
				c, _, id := busyRun(t)
				ctx := ctxFor(t, 60*time.Second)
				_, reads, ok := verdictWokenRead(t, ctx, c, id, state)
				if ok {
					if reads < 1 { // more when the wait also looked again (an event's wake, statusRechecks)
						t.Fatalf("the read a %s verdict woke made %d reads of the events, want at least 1", state, reads)
					}
					return
				}
				if try == wokenTries {
					t.Fatalf("in %d runs, another change answered the wait before the verdict every time", try)
				}
			}
		})
	}
}

// A long poll whose tick (or a command applied) finds an event's wake
// pending takes it and reads the events: the wake is not lost to a read of
// the state alone; and a read that missed the event (the kept consumer
// hears of it after the wake) is done again at the next looks. With the
// tick firing every millisecond, a good share of the events' wakes meet it
// in the wait's select (the wake comes during the wait's first read).
func TestEventWakeNotLostToTheTick(t *testing.T) {
	c, n1, id := busyRun(t)
	ctx := ctxFor(t, 120*time.Second)
	r, _ := c.run(id)
	defer func(d time.Duration, n int) { statusWaitTick, statusRechecks = d, n }(statusWaitTick, statusRechecks)
	// The rechecks span a second, as they do at the 100 ms tick: at 10
	// they would span 10 ms, which a busy machine can pass before the
	// kept consumer hears of the event.
	statusWaitTick, statusRechecks = time.Millisecond, 1000
	for i := range 12 {
		v, err := c.statusVersion(ctx, id)
		must(t, err)
		done := make(chan bool, 1)
		go func() {
			answered, err := c.awaitChange(ctx, id, v, 20*time.Second, func(*statusCache, Run) {})
			if err != nil {
				t.Error(err)
			}
			done <- answered
		}()
		state := transport.TaskDone
		if i%2 == 0 {
			state = transport.TaskFailed
		}
		must(t, n1.nc.PublishEvents(ctx, transport.TaskEvent{Run: id, Gen: r.Gen, Task: 0, Node: "n1", State: state, Act: uint64(i + 2), Executions: uint64(i + 2)}))
		if !<-done {
			v2, err := c.statusVersion(ctx, id)
			t.Fatalf("round %d: the wait ended at its deadline, not with the event's change (version %s, now %s, %v)", i, v, v2, err)
		}
	}
}

// The leader's record check folds into a status cache that keeps the
// check's proof (Fold.KeepProof): the rows proved as they are folded.
// (A follower's caches keep none: TestFoldKeepsNoProofUnlessAsked.)
func TestLeaderCheckKeepsTheProof(t *testing.T) {
	c, n1, id := busyRun(t)
	ctx := ctxFor(t, 60*time.Second)
	checkedBothDone(t, ctx, c, n1, id)
	cc := c.cacheOf(id)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.fold.proof.plan == nil || cc.fold.proof.n != 2 {
		t.Fatalf("the checked fold's proof: plan %v, %d vertices proved; want both", cc.fold.proof.plan != nil, cc.fold.proof.n)
	}
}

// checkedBothDone stores both tasks of busyRun's run id done by n1 and has
// the record check (c's, the leader's) pass on them: it fails t unless the
// check finds nothing owed or failed. It returns the run as checked.
func checkedBothDone(t *testing.T, ctx context.Context, c *Server, n1 *fakeNode, id string) Run {
	t.Helper()
	r, _ := c.run(id)
	for task := range uint32(2) {
		must(t, n1.nc.PublishEvents(ctx, transport.TaskEvent{Run: id, Gen: r.Gen, Task: task, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1}))
	}
	owed, failed, err := c.checkRecord(ctx, r)
	must(t, err)
	if len(owed) != 0 || len(failed) != 0 {
		t.Fatalf("the check: owed %v, failed %v; want none", owed, failed)
	}
	return r
}

// startedWait starts a long poll on run id (awaitChange, a wait of 20 s,
// answer called as there) and returns once its first read is done and
// found no change: the wait's subscription to the run's notices, made
// before the read's requests on the same connection, is the server's.
// done receives whether a read answered. A wait another change ended
// first (the busy node's, a command) is started again.
func startedWait(t *testing.T, ctx context.Context, c *Server, id string, answer func(*statusCache, Run)) (done chan bool) {
	t.Helper()
	for {
		v, err := c.statusVersion(ctx, id)
		must(t, err)
		reads := c.eventReads.Load()
		done = make(chan bool, 1)
		go func() {
			answered, err := c.awaitChange(ctx, id, v, 20*time.Second, answer)
			if err != nil {
				t.Error(err)
			}
			done <- answered
		}()
		// The first read has counted; the cache's lock is free again once
		// it is done.
		testsupport.Eventually(t, 10*time.Second, "the wait's first read", func() bool { return c.eventReads.Load() > reads || len(done) > 0 })
		cc := c.cacheOf(id)
		cc.mu.Lock()
		//lint:ignore SA2001 taken only to wait for the read that holds it
		cc.mu.Unlock()
		if len(done) == 0 {
			return done
		}
		<-done
	}
}

// A waiting status read is woken by the notice a node sends once its
// events are stored: the read that answers the wait is one a notice woke.
// Without the notice a look at the tick would still find the event within
// a second (statusRechecks), so the answer alone shows nothing. A tick's
// look may answer first now and then (it came between the store and the
// notice, or the notice's read came before the kept consumer heard of the
// event): the test waits again.
func TestNoticeWakesAWaitingRead(t *testing.T) {
	const noticeTries = 10 // a look at the tick answered 2 waits of 10 at load ~2.5
	c, n1, id := busyRun(t)
	ctx := ctxFor(t, 60*time.Second)
	r, _ := c.run(id)
	for try := 1; ; try++ {
		done := startedWait(t, ctx, c, id, func(*statusCache, Run) {})
		base := c.noticeAnswers.Load()
		must(t, n1.nc.PublishEvents(ctx, transport.TaskEvent{Run: id, Gen: r.Gen, Task: 0, Node: "n1", State: transport.TaskDone, Act: uint64(try + 1), Executions: uint64(try + 1)}))
		if !<-done {
			t.Fatal("the wait ended at its deadline, not with the event's change")
		}
		if c.noticeAnswers.Load() > base {
			return
		}
		if try == noticeTries {
			t.Fatalf("in %d waits on an event, no read a notice woke answered one", try)
		}
		t.Logf("try %d: a look at the tick answered the wait, not the notice's read: trying again", try)
	}
}

// A waiting status read is woken by the notice of a stored event, not by
// the event itself: the coordinator's connection is sent a run's events
// once (the read's copy, from the stream), not a second time for the
// wake-up (a 100K-task run's report is ~800 KB). The read that answered
// must have folded the event (another change may end the wait between its
// start and the event's publish, before the event could be sent to it):
// the test waits again if not.
func TestWaitIsNotSentTheEvents(t *testing.T) {
	c, n1, id := busyRun(t)
	ctx := ctxFor(t, 60*time.Second)
	r, _ := c.run(id)
	nc := c.nc.NATS()
	const size = 200 << 10
	for try := 1; ; try++ {
		folded := false
		done := startedWait(t, ctx, c, id, func(cc *statusCache, _ Run) {
			a := cc.fold.vertAgg(1)
			folded = a != nil && a.act == uint64(try+1) && len(cc.fold.output(1)) == size
		})
		in := nc.Stats().InBytes
		must(t, n1.nc.PublishEvents(ctx, transport.TaskEvent{Run: id, Gen: r.Gen, Task: 1, Node: "n1", State: transport.TaskDone, Act: uint64(try + 1), Executions: 1, Output: bytes.Repeat([]byte{'x'}, size)}))
		if !<-done {
			t.Fatal("the wait ended at its deadline, not with the event's change")
		}
		if !folded {
			if try == wokenTries {
				t.Fatalf("in %d waits, another change answered the wait before the event every time", try)
			}
			t.Logf("try %d: another change answered the wait before the event: trying again", try)
			// The event is read before the next try counts its bytes.
			testsupport.Eventually(t, 10*time.Second, "the event folded", func() bool {
				in := false
				must(t, c.withStatusOf(ctx, id, true, func(cc *statusCache, _ Run) {
					a := cc.fold.vertAgg(1)
					in = a != nil && a.act == uint64(try+1)
				}))
				return in
			})
			continue
		}
		must(t, nc.Flush()) // what the server sent before it is in
		if got := nc.Stats().InBytes - in; got > size*3/2 {
			t.Fatalf("the coordinator was sent %d bytes for a wait on one event of %d", got, size)
		}
		return
	}
}

// A read's room for reports, reused by the next read of any run, keeps
// nothing of the messages it decoded once cleared: not the outputs of the
// report decoded last, nor those of a longer one decoded before it.
func TestReportRoomClearKeepsNoMessage(t *testing.T) {
	report := func(n int) []byte {
		tr := &transport.TaskReport{Run: "r1", Gen: 1, Node: "n1"}
		for i := range n {
			tr.Tasks = append(tr.Tasks, transport.TaskDelta{Task: uint32(2 * i), State: transport.TaskDone, Act: 1, Executions: 1, Output: []byte("out"), Error: "e"})
		}
		return tr.AppendWire(nil)
	}
	room := new(reportRoom)
	lim := transport.DefaultLimits
	for _, n := range []int{10, 2} {
		if err := room.decode(report(n), lim); err != nil || len(room.tr.Tasks) != n {
			t.Fatalf("decoding a report of %d: %d deltas, %v", n, len(room.tr.Tasks), err)
		}
	}
	room.clear()
	for i, d := range room.tr.Tasks[:cap(room.tr.Tasks)] {
		if d.Output != nil || d.Error != "" {
			t.Fatalf("delta %d of the room's array still holds %q, %q", i, d.Output, d.Error)
		}
	}
}
