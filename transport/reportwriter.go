package transport

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReportWriter writes a TaskReport as its deltas come, one at a time,
// straight into the messages that store it: TaskReport messages of at
// most reportBytes (but at least one entry each), a run of deltas inRange
// as one range entry, any other delta as a delta entry, as PublishReports
// stores a TaskReport. A node cuts its task table into one
// (cluster/node), without the report's deltas made first: a 100K-task
// run's deltas are 10 MB, which the cut wrote and the encoding read again.
//
// A message's base (the time its entries' times count from, no later than
// any of them) is set by its first entry, a margin before its earliest
// time (baseMargin, widened by each message begun for a time before its
// base), or 0 for a single delta with a zero time; a delta with a time
// before the base begins the next message, with a base of its own. What a node cuts at
// once are the tasks that ended since its last cut, in the order of their
// vertices, most of them within milliseconds of one another: the first
// message's base serves them all but for a clock set back.
type ReportWriter struct {
	Run  string
	Gen  uint64
	Node string

	fixed bool // base is the whole report's, for every message (TaskReport.writer)
	hint  int  // the tasks expected (0: unknown), for a message's room
	tasks int

	msgs [][]byte
	bufs []*[]byte // taken from reportBufs, put back once stored (ReportSend.Wait)

	send *ReportSend // publishes each message as it ends (nil: none)
	sent int         // msgs published by send
	subj string      // EventSubject of Run and Node (send's)

	b       []byte // the message at hand, its head's room at the front (nil: none begun)
	head    int    // that room
	base    int64
	based   bool // the message at hand has its base (its first entry's, or fixed)
	entries int

	pend    TaskDelta // the delta before, not written yet: it may begin a range
	hasPend bool
	r0      TaskDelta // the open range's first task (its task, state, activation and executions)
	rn      int       // the open range's tasks (0: none open)
	rcount  int       // where the open range's count and times' length go (endRange)
	rtimes  int
	splits  int // messages ended for a time before their base
}

// baseMargin is how long before its first entry's earliest time a
// message's base is at first (a node's tasks of one cut end in no strict
// order); each message begun for a time before its base doubles it, so
// that times in any order begin at most some 40 messages of their own.
const baseMargin = 1 << 20 // ~1 ms

// NewReportWriter returns a writer of a report of run under gen from node,
// of about tasks tasks (0: unknown), whose messages are written into
// buffers a ReportSend's Wait puts back for the next writers once stored.
func NewReportWriter(run string, gen uint64, node string, tasks int) *ReportWriter {
	return &ReportWriter{Run: run, Gen: gen, Node: node, hint: tasks}
}

// Add writes d, or holds it until the next delta (or Finish) shows
// whether a range begins with it; d's Output is read until then.
func (w *ReportWriter) Add(d *TaskDelta) {
	w.tasks++
	if w.rn > 0 {
		if w.rn < maxRange && inRange(&w.r0, d, w.rn, w.base) && len(w.b)+rangeTaskSize <= reportBytes {
			w.b = appendTimes(w.b, d, w.base)
			w.rn++
			return
		}
		w.endRange()
	}
	if w.hasPend {
		w.hasPend = false
		if w.beginRange(&w.pend, d) {
			return
		}
		w.writeDelta(&w.pend)
	}
	w.pend, w.hasPend = *d, true
}

// Finish writes what Add holds and ends the last message.
func (w *ReportWriter) Finish() {
	if w.rn > 0 {
		w.endRange()
	}
	if w.hasPend {
		w.hasPend = false
		w.writeDelta(&w.pend)
	}
	w.pend = TaskDelta{}
	w.endMessage()
}

// Tasks is how many deltas were added.
func (w *ReportWriter) Tasks() int { return w.tasks }

// Messages are the report's messages (after Finish), in order; they are
// the writer's until stored.
func (w *ReportWriter) Messages() [][]byte { return w.msgs }

// beginRange begins a range entry of p and d when d continues p, both
// without output or error, and reports whether it did.
func (w *ReportWriter) beginRange(p, d *TaskDelta) bool {
	if !continues(p, p, 0) || !continues(p, d, 1) {
		return false
	}
	lo := earliest(earliest(0, p.Start, p.End), d.Start, d.End)
	if w.entries > 0 {
		if early := !w.fixed && (!w.rangeFits(p) || !w.rangeFits(d)); early || len(w.b)+rangeHeadSize+2*rangeTaskSize > reportBytes {
			w.endMessage()
			w.early(early)
		}
	}
	w.begin(lo)
	if !w.rangeFits(p) || !w.rangeFits(d) {
		return false // times too far apart for one base (2⁶³ ns): a delta entry
	}
	w.b, w.rcount, w.rtimes = appendRangeHead(w.b, p)
	w.b = appendTimes(w.b, p, w.base)
	w.b = appendTimes(w.b, d, w.base)
	w.r0 = TaskDelta{Task: p.Task, State: p.State, Act: p.Act, Executions: p.Executions}
	w.rn = 2
	w.entries++
	return true
}

// rangeFits says whether a range entry of the message at hand can hold
// d's times.
func (w *ReportWriter) rangeFits(d *TaskDelta) bool {
	return rangeTime(d.Start, w.base) && rangeTime(d.End, w.base)
}

// earliest is the earliest of lo and the times ts that are not 0 (0: none
// is; lo 0 is none).
func earliest(lo int64, ts ...int64) int64 {
	for _, t := range ts {
		if t != 0 && (lo == 0 || t < lo) {
			lo = t
		}
	}
	return lo
}

// writeDelta writes d as a delta entry.
func (w *ReportWriter) writeDelta(d *TaskDelta) {
	lo := min(d.Start, d.End) // 0 too: a delta entry's times count from base
	if w.entries > 0 {
		if before := lo < w.base; before || len(w.b)+deltaSize(d) > reportBytes { // before only where the base is not fixed: a fixed one is the earliest of all
			// A zero time (none: a running task's end) before the base
			// begins a message of base 0 all the same (a delta entry's
			// times are at or after its base), but it is no clock set
			// back: the margin stays.
			t := earliest(0, d.Start, d.End)
			early := before && t != 0 && t < w.base
			w.endMessage()
			w.early(early)
		}
	}
	w.begin(lo)
	w.b = d.appendFields(w.b, w.base)
	w.entries++
}

// begin makes sure a message is begun and has a base: one with no entry
// yet takes lo's (unless fixed).
func (w *ReportWriter) begin(lo int64) {
	if w.b == nil {
		if w.head == 0 {
			var scratch [128]byte
			w.head = len(appendReportPre(scratch[:0], w.Run, w.Gen, w.Node, math.MinInt64)) + 5 // the widest base and entries' header
		}
		// The tasks still to write by the hint: the one held and the one
		// after it are added already. A hint the tasks added passed (a
		// node's cut counts its marked chunks before it reads them, and
		// writers go on marking) says nothing of what is left: unknown,
		// as 0 is (TestReportWriterOutgrowsItsHint).
		left := w.hint - w.tasks + 2
		room := w.head + 64 + 24*max(left, 1) // ~24 bytes a task (a range's take 2 to 20, ~8 in a no-op run's)
		// A room of a quarter of a kept buffer or more takes one (put back
		// once stored): a run again's last cut, some thousands of tasks,
		// made an array of ~0.2 MB of its own each run.
		if w.hint >= w.tasks && room < reportBytes/4 {
			w.b = make([]byte, w.head, min(room, reportBytes))
		} else {
			p, _ := reportBufs.Get().(*[]byte)
			if p == nil {
				b := make([]byte, 0, reportBytes)
				p = &b
			}
			w.bufs = append(w.bufs, p)
			w.b = (*p)[:w.head]
		}
	}
	if w.entries == 0 && !w.fixed {
		w.based = false
	}
	if !w.based {
		w.base, w.based = lo, true
		if lo != 0 {
			m := int64(baseMargin) << min(w.splits, 40)
			w.base = max(lo, math.MinInt64+m) - m
		}
	}
}

// early notes a message ended for a time before its base (a wider margin
// for the next).
func (w *ReportWriter) early(early bool) {
	if early {
		w.splits++
	}
}

// endRange writes the open range's count and times' length.
func (w *ReportWriter) endRange() {
	endRange(w.b, w.rcount, w.rtimes, w.rn)
	w.rn = 0
}

// endMessage writes the head of the message at hand, if it has an entry,
// into the room before them, and adds it to the messages.
func (w *ReportWriter) endMessage() {
	if w.rn > 0 {
		w.endRange()
	}
	if w.entries == 0 {
		return
	}
	var scratch [128]byte
	h := appendArrayHeader(appendReportPre(scratch[:0], w.Run, w.Gen, w.Node, w.base), w.entries)
	off := w.head - len(h)
	copy(w.b[off:], h)
	w.msgs = append(w.msgs, w.b[off:])
	w.b, w.entries = nil, 0
	w.based = w.fixed
	if w.send != nil {
		w.send.publish(w)
	}
}

// PublishWritten stores the messages of reports written (ReportWriter,
// after Finish) in JetStream, in order, and waits for their acks: a
// ReportSend of writers already finished, with its contract. Once all are
// stored their buffers are kept for the next writers, the writers are
// spent and the notice of stored events is sent; on an error nothing is,
// and the same messages may be published again, but their buffers are
// never kept, even once a later attempt stores them.
func (c *Conn) PublishWritten(ctx context.Context, ws ...*ReportWriter) error {
	s := c.SendReports()
	s.Add(ws...)
	return s.Wait(ctx)
}

// ReportSend stores reports' messages in JetStream as they are written:
// each message a writer added to it ends (its last one at Finish) is
// published at once, asynchronously, and Wait waits for every ack. A node
// cutting its task table into reports so has its first messages stored,
// and read by the leader, while it writes the rest, rather than every
// message after the whole cut. The messages go out in the order they are
// ended: a writer's in its order, and those of writers added in turn
// (Add) after what the writers before had ended by then.
//
// Once Wait has seen every message acked, the writers' buffers are kept
// for the next writers, the writers are spent, and one notice of stored
// events goes out a (run, node) of the writers (noticeStored), so that a
// status read waiting for the run's events reads them now. On any error
// (a publish refused, a refusal in an ack, ctx, the connection closed)
// none of that is done: the writers forget this send (a later one, or
// PublishWritten, publishes all their messages again) and their buffers
// are never kept. After an error no further message is published: Wait
// returns it. A ReportSend is for one goroutine at a time (a node's cut
// holds its publisher's lock), and is spent by Wait.
type ReportSend struct {
	c    *Conn
	ws   []*ReportWriter
	futs []jetstream.PubAckFuture
	err  error
}

// SendReports begins a ReportSend on c.
func (c *Conn) SendReports() *ReportSend {
	s := &ReportSend{c: c}
	s.err = c.check()
	return s
}

// Add publishes the messages each writer of ws has ended, in turn, and,
// until Wait, each message it ends from now on as it ends it.
func (s *ReportSend) Add(ws ...*ReportWriter) {
	for _, w := range ws {
		s.ws = append(s.ws, w)
		w.send, w.sent = s, 0
		if s.err == nil {
			w.subj, s.err = EventSubject(w.Run, w.Node)
			if s.err != nil {
				s.err = fmt.Errorf("transport: task report: %w", s.err)
			}
		}
		for range w.msgs {
			s.publish(w)
		}
	}
}

// publish publishes w's next message not published yet, unless an
// earlier publish failed.
func (s *ReportSend) publish(w *ReportWriter) {
	b := w.msgs[w.sent]
	w.sent++
	if s.err != nil {
		return
	}
	f, err := s.c.js.PublishMsgAsync(&nats.Msg{Subject: w.subj, Data: b}, jetstream.WithExpectStream(StreamEvents))
	if err != nil {
		s.err = fmt.Errorf("transport: publish a task report on %s: %w", w.subj, err)
		return
	}
	s.futs = append(s.futs, f)
}

// Wait waits until every message published is acked, and returns the
// first error of the send, if any, with those of the acks (see
// ReportSend); an error of a send whose connection is closed by then is
// ErrClosed. A writer added must be finished (Finish) before it.
func (s *ReportSend) Wait(ctx context.Context) error {
	for _, w := range s.ws {
		w.send = nil
	}
	err := errors.Join(s.err, s.c.waitAcks(ctx, s.futs))
	if err != nil && !errors.Is(err, ErrClosed) && s.c.check() != nil {
		// Closed during the send: a publish then fails with the client's
		// own error (draining, closed), which says nothing a caller can
		// tell from a refusal; the caller retries only what it can still
		// store (a node's publisher answers its flushes at once).
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	if err != nil {
		// A message of this attempt not acked may still be the client's:
		// an async publish keeps it beside its ack's future and sends it
		// again on an ack timeout or no responders, for seconds after
		// waitAcks gave up, and a later attempt's acks say nothing of the
		// earlier one's futures. Its buffer, were it kept for the next
		// writers, could be written over while the client sends it again.
		for _, w := range s.ws {
			w.bufs, w.sent = nil, 0
		}
		return err
	}
	// Every message is stored, and no attempt before failed (its buffers
	// would be gone): the client holds none of them any more (it copies a
	// message into its write buffer as it publishes it, and keeps it beside
	// the ack's future only to publish it again until acked).
	for _, w := range s.ws {
		for _, p := range w.bufs {
			reportBufs.Put(p) // a message that grew past its room (an output) is in an array of its own: this one is free too
		}
		w.bufs, w.msgs, w.sent = nil, nil, 0
	}
	// Whoever waits for a run's next events hears of these now that they
	// are stored: one notice a (run, node) a send (noticeStored).
	for i, w := range s.ws {
		if !slices.ContainsFunc(s.ws[:i], func(o *ReportWriter) bool { return o.Run == w.Run && o.Node == w.Node }) {
			s.c.noticeStored(w.Run, w.Node)
		}
	}
	return nil
}

// bufPool keeps buffers: a sync.Pool (reportBufs), or a test's, which
// keeps every one.
type bufPool interface {
	Get() any
	Put(any)
}

// reportBufs are message buffers of reportBytes' room for reports' messages
// (ReportWriter), put back once stored: a 100K-task run's report at its
// end is ~0.8 MB of messages, where a run again allocates ~8 MB in all.
var reportBufs bufPool = new(sync.Pool)
