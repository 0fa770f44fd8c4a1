package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/transport"
)

// eventCursor reads one run's events from the event stream through a pull
// consumer it keeps between reads, so that a status read of a run asks the
// stream only for what is new: one request that comes back empty when
// nothing is (where a consumer made and deleted a read cost three, the
// ~2 ms floor of every read). The consumer hands each message once
// (AckNone); its consumer sequences are consecutive, so a message lost on
// the way (a fetch cut short) shows as a gap, and then, as on any error,
// the consumer is dropped and the next read makes one again from the last
// stream sequence folded. A consumer not read for eventCursorIdle is
// removed by the server (a cursor finding it gone makes one again). A kept
// consumer can lag the stream: the server acks a publish before it tells
// its consumers, so a read right after an ack may miss that message (it
// comes with a later read); what must see everything stored (the leader's
// record check) sets the consumer aside first (aside) and reads through a
// new one. The status cache's lock guards it.
type eventCursor struct {
	cons      jetstream.Consumer
	delivered uint64 // consumer sequence of the last message handed on
}

// reportRoom is where a read decodes the reports it hands on: the deltas
// of the report last decoded (reused for the next) and their runs
// (TaskReport.DecodeRuns). A read takes one from reportRooms and puts it
// back: a cursor is a run's, and kept long after the run ended, so room of
// its own was dropped after each read, and each read of a 100K-task run's
// report (~0.4 MB of deltas, ~5K ranges) made it again.
type reportRoom struct {
	tr   transport.TaskReport
	runs []uint32
	used int // the most deltas a decode set since the room was cleared
}

var reportRooms = sync.Pool{New: func() any { return new(reportRoom) }}

// decode decodes the report data into room.tr (TaskReport.DecodeRuns).
func (room *reportRoom) decode(data []byte, lim transport.Limits) error {
	err := room.tr.DecodeRuns(data, lim, &room.runs)
	room.used = max(room.used, len(room.tr.Tasks))
	return err
}

// clear drops what the deltas decoded since the last clear alias (the
// messages' bytes: an output, a name, an error), theirs and those of a
// longer report decoded before the last.
func (room *reportRoom) clear() {
	clear(room.tr.Tasks[:room.used])
	room.tr.Run, room.tr.Node, room.used = "", "", 0
}

// putReportRoom clears room and hands it back to reportRooms.
func putReportRoom(room *reportRoom) {
	room.clear()
	reportRooms.Put(room)
}

// eventSink takes a run's events as a cursor reads them: a TaskReport
// whole (report: a node's report as DecodeRuns leaves it, delta i standing
// for runs[i] consecutive tasks; valid only during the call), any other
// stored event one at a time (event).
type eventSink struct {
	event  func(*transport.TaskEvent)
	report func(tr *transport.TaskReport, runs []uint32)
}

// aside takes the cursor's consumer from it and returns it (nil: none),
// for the caller to remove (dropConsumer): the next read makes one again,
// which counts every message stored by then.
func (cur *eventCursor) aside() jetstream.Consumer {
	cons := cur.cons
	cur.cons = nil
	return cons
}

// dropConsumer removes consumer cons (nil: none) of the event stream, as
// deleteConsumer does.
func (s *Server) dropConsumer(ctx context.Context, cons jetstream.Consumer) {
	if cons != nil {
		s.deleteConsumer(ctx, cons)
	}
}

// deleteConsumer removes consumer cons of the event stream, as far as the
// server answers within a while (else it removes it once idle), even when
// ctx has ended.
func (s *Server) deleteConsumer(ctx context.Context, cons jetstream.Consumer) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if st, err := s.eventStream(dctx); err == nil {
		_ = st.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}
}

// eventCursorIdle is how long the server keeps a cursor's consumer unread.
const eventCursorIdle = time.Minute

// eventBatch is the most messages one fetch asks for.
const eventBatch = 512

// errEventGap: the cursor's consumer skipped a message (one was lost on
// the way); the consumer is made again from the last one folded.
var errEventGap = errors.New("coord: event cursor: a message was skipped")

// read hands fn run's decodable events stored after stream sequence seq,
// in order, and returns the last sequence read: what eventsAfter does, with
// the consumer kept. A dropped consumer is made again once in the same
// read.
func (cur *eventCursor) read(ctx context.Context, s *Server, run string, seq uint64, fn eventSink) (uint64, error) {
	filter, err := transport.RunEventsFilter(run)
	if err != nil {
		return seq, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	room := reportRooms.Get().(*reportRoom)
	defer putReportRoom(room)
	for attempt := 0; ; attempt++ {
		fresh := cur.cons == nil
		if fresh {
			if cur.cons, err = s.eventConsumer(ctx, filter, seq, eventCursorIdle); err != nil {
				return seq, fmt.Errorf("coord: events of %s: %w", run, err)
			}
			cur.delivered = 0
		}
		seq, err = cur.fetch(s, run, seq, room, fn)
		if err == nil {
			return seq, nil
		}
		cur.cons = nil // gone, or where it stands is unknown: made again from seq
		if fresh || attempt > 0 || ctx.Err() != nil {
			return seq, fmt.Errorf("coord: events of %s: %w", run, err)
		}
	}
}

// fetch reads what the cursor's consumer holds for it now, decoding its
// reports into room.
func (cur *eventCursor) fetch(s *Server, run string, seq uint64, room *reportRoom, fn eventSink) (uint64, error) {
	lim := s.nc.Limits()
	for {
		batch, err := cur.cons.FetchNoWait(eventBatch)
		if err != nil {
			return seq, err
		}
		got := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return seq, err
			}
			if meta.Sequence.Consumer != cur.delivered+1 {
				return seq, errEventGap
			}
			cur.delivered = meta.Sequence.Consumer
			got++
			if meta.Sequence.Stream <= seq {
				continue // folded already (not expected: the consumer starts after seq)
			}
			seq = meta.Sequence.Stream
			if t, err := transport.PeekType(m.Data()); err == nil && t == transport.TypeTaskReport {
				// A node's report (the common case): decoded into the
				// room and handed on whole, no TaskEvent made a delta.
				if room.decode(m.Data(), lim) == nil && room.tr.Run == run && room.tr.Node == proto.SenderOf(m.Subject()) {
					fn.report(&room.tr, room.runs)
				}
				continue
			}
			eachRunEvent(m, run, lim, fn.event)
		}
		room.clear() // let the messages' bytes go
		if err := batch.Error(); err != nil {
			return seq, err
		}
		if got < eventBatch {
			return seq, nil
		}
	}
}

// eachRunEvent hands fn the events of stored message m that are run's and
// from the node its subject names; a malformed message is skipped.
func eachRunEvent(m jetstream.Msg, run string, lim transport.Limits, fn func(*transport.TaskEvent)) {
	from := proto.SenderOf(m.Subject())
	_ = transport.EachEvent(m.Data(), lim, func(e *transport.TaskEvent) error {
		if e.Run == run && e.Node == from {
			fn(e)
		}
		return nil
	})
}

// eventConsumer makes a consumer of the event stream's messages matching
// filter after stream sequence seq, that the server removes once unread
// for idle.
func (s *Server) eventConsumer(ctx context.Context, filter string, seq uint64, idle time.Duration) (jetstream.Consumer, error) {
	st, err := s.eventStream(ctx)
	if err != nil {
		return nil, err
	}
	cc := jetstream.ConsumerConfig{FilterSubject: filter, AckPolicy: jetstream.AckNonePolicy,
		InactiveThreshold: idle, MemoryStorage: true, DeliverPolicy: jetstream.DeliverAllPolicy}
	if seq > 0 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	}
	cons, err := st.CreateConsumer(ctx, cc)
	if err != nil {
		s.evStream.Store(nil) // looked up again next time
		return nil, err
	}
	return cons, nil
}

// eventStream is the event stream's handle, looked up once (a request)
// and kept.
func (s *Server) eventStream(ctx context.Context) (jetstream.Stream, error) {
	if st := s.evStream.Load(); st != nil {
		return *st, nil
	}
	st, err := s.nc.JetStream().Stream(ctx, transport.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", transport.ErrNoJetStream, err)
	}
	s.evStream.Store(&st)
	return st, nil
}
