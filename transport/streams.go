package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamConfig shapes the two JetStream streams.
type StreamConfig struct {
	// Replicas per stream (default 1; 3 on a clustered NATS).
	Replicas int
	// MaxAge drops messages older than this (default 7 days; runs should be purged
	// with PurgeRun when they are forgotten anyway).
	MaxAge time.Duration
	// MaxBytes caps each stream (default unlimited); the oldest messages go first.
	MaxBytes int64
	// Memory keeps the streams in memory instead of files (tests, dev mode).
	Memory bool
}

// EnsureStreams creates the record stream (StreamRecord: every signal batch, on
// hf.run.*.node.*.*) and the event stream (StreamEvents: every TaskEvent, on
// hf.evt.*.*), or updates them to cfg. The record stream captures the core NATS
// signal subjects, so a Batcher's plain publishes are recorded with no second send.
func (c *Conn) EnsureStreams(ctx context.Context, cfg StreamConfig) error {
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 7 * 24 * time.Hour
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = -1
	}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	for _, sc := range []jetstream.StreamConfig{
		{Name: StreamRecord, Description: "hetflow: cross-node signal batches (edges and condition outcomes)", Subjects: []string{recordSubjects}},
		{Name: StreamEvents, Description: "hetflow: per-task progress events", Subjects: []string{eventSubjects}},
	} {
		sc.Storage = storage
		sc.Replicas = cfg.Replicas
		sc.MaxAge = cfg.MaxAge
		sc.MaxBytes = cfg.MaxBytes
		sc.Retention = jetstream.LimitsPolicy
		sc.Discard = jetstream.DiscardOld
		if _, err := c.js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("%w: ensure stream %s: %w", ErrNoJetStream, sc.Name, err)
		}
	}
	return nil
}

// eventBatchBytes bounds one stored EventBatch (a batch is cut before it).
const eventBatchBytes = 256 << 10

// PublishEvents records evs in the event stream and waits until every one is
// stored, or ctx ends. The events of one (run, node) go to EventSubject(run,
// node) together, as EventBatch messages of up to Limits.MaxBatch events and
// about 256 KiB, in their order: one stored message per batch, not per event.
func (c *Conn) PublishEvents(ctx context.Context, evs ...TaskEvent) error {
	if err := c.check(); err != nil {
		return err
	}
	type group struct {
		subj string
		evs  []TaskEvent
	}
	var groups []*group
	bySubj := map[string]*group{}
	for i := range evs {
		subj, err := EventSubject(evs[i].Run, evs[i].Node)
		if err != nil {
			return fmt.Errorf("transport: task event %d: %w", i, err)
		}
		g := bySubj[subj]
		if g == nil {
			g = &group{subj: subj}
			bySubj[subj] = g
			groups = append(groups, g)
		}
		g.evs = append(g.evs, evs[i])
	}
	var futs []jetstream.PubAckFuture
	publish := func(subj string, b []byte) error {
		f, err := c.js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: b}, jetstream.WithExpectStream(StreamEvents))
		if err != nil {
			return fmt.Errorf("transport: publish task events on %s: %w", subj, err)
		}
		futs = append(futs, f)
		return nil
	}
	for _, g := range groups {
		var buf []byte // the events of the batch being built, without its header
		n := 0
		flush := func() error {
			if n == 0 {
				return nil
			}
			msg := appendArrayHeader(appendHeader(make([]byte, 0, len(buf)+16), TypeEventBatch, 1), n)
			msg = append(msg, buf...)
			buf, n = buf[:0], 0
			return publish(g.subj, msg)
		}
		for i := range g.evs {
			mark := len(buf)
			buf = g.evs[i].appendFields(appendArrayHeader(buf, taskEventFields))
			n++
			if n > 1 && len(buf) > eventBatchBytes { // this one overflows: it starts the next batch
				tail := append([]byte(nil), buf[mark:]...)
				buf, n = buf[:mark], n-1
				if err := flush(); err != nil {
					return errors.Join(err, c.waitAcks(ctx, futs))
				}
				buf, n = append(buf, tail...), 1
			}
			if n >= c.limits.MaxBatch {
				if err := flush(); err != nil {
					return errors.Join(err, c.waitAcks(ctx, futs))
				}
			}
		}
		if err := flush(); err != nil {
			return errors.Join(err, c.waitAcks(ctx, futs))
		}
	}
	if err := c.waitAcks(ctx, futs); err != nil {
		return err
	}
	for _, g := range groups {
		c.noticeStored(g.evs[0].Run, g.evs[0].Node)
	}
	return nil
}

// noticeStored tells whoever waits for run's next events that node's
// events just acked are stored: a core message with no body on
// EventNoticeSubject(run, node), after the acks, so that a reader it wakes
// finds them in the stream (a kept consumer may hear of them a moment
// later: a reader reads again). A waiting status read subscribes to these
// rather than to the events (RunEventNoticesFilter). Core NATS loses a
// message now and then, and a lost notice is a wake lost, not an event: the
// reader finds the events at a later look, at its tick or at the latest at
// its deadline. A publish that fails part-way sends none: what it stored is
// found the same way. A publish's error is the connection's, which the next
// publish of events meets.
func (c *Conn) noticeStored(run, node string) {
	if subj, err := EventNoticeSubject(run, node); err == nil {
		_ = c.nc.Publish(subj, nil)
	}
}

// PublishReports records the TaskReports trs in the event stream, each on
// EventSubject(report's run, report's node), in order, as messages of up
// to about 256 KiB (a long report is cut into several, each a TaskReport
// of some of its deltas), and waits until every one is stored, or ctx
// ends. It is for tests and tools that hold whole TaskReports: a node
// writes its deltas with NewReportWriter and stores them with a
// ReportSend (Conn.SendReports), each message from a base of its own.
func (c *Conn) PublishReports(ctx context.Context, trs ...*TaskReport) error {
	ws := make([]*ReportWriter, len(trs))
	for i, tr := range trs {
		ws[i] = tr.writer()
	}
	return c.PublishWritten(ctx, ws...)
}

// ReplaySignals reads the record of run from its first batch to the last one stored
// when it catches up, in stream order, and hands each decodable batch to fn with
// the node it was addressed to. node restricts it to batches for one node ("" for
// all). Undecodable batches are counted and skipped. The Batch and its Outputs are
// valid only during the call. fn's error stops the replay and is returned.
//
// A new owner of tasks replays the whole run (node "") and keeps the Signals whose
// Dst it now owns; Deduper.AdmitReplayed drops what it already had (Admit would
// fence the history, which was sent under older generations).
func (c *Conn) ReplaySignals(ctx context.Context, run, node string, fn func(node string, b *Batch) error) error {
	return c.ReplaySignalsSkipping(ctx, run, node, nil, fn)
}

// ReplaySignalsSkipping is ReplaySignals that does not decode the batches
// skip names (by sender, batch number and the Gen of the first Signal:
// PeekBatch): a node reading its own
// record back skips what it took already.
func (c *Conn) ReplaySignalsSkipping(ctx context.Context, run, node string, skip func(from string, seq, gen uint64) bool, fn func(node string, b *Batch) error) error {
	filter, err := RunSignalsFilter(run)
	if err != nil {
		return err
	}
	if node != "" {
		if filter, err = runNodeSignalsFilter(run, node); err != nil {
			return err
		}
	}
	var b Batch
	return c.replay(ctx, StreamRecord, filter, func(m jetstream.Msg) error {
		_, to, sender, _ := parseSignalSubject(m.Subject())
		if skip != nil {
			if from, seq, gen, _, ok := PeekBatch(m.Data(), c.limits); ok && from == sender && skip(from, seq, gen) {
				return nil
			}
		}
		if !c.decodeBatch(&b, m.Data(), m.Subject()) {
			return nil
		}
		return fn(to, &b)
	})
}

// ReplayEvents reads every TaskEvent of run stored so far, in stream order (a
// task's later events supersede its earlier ones; a TaskReport's deltas come
// as the TaskEvents they stand for). Undecodable events are counted
// and skipped. fn's error stops the replay and is returned.
func (c *Conn) ReplayEvents(ctx context.Context, run string, fn func(*TaskEvent) error) error {
	filter, err := RunEventsFilter(run)
	if err != nil {
		return err
	}
	return c.replay(ctx, StreamEvents, filter, func(m jetstream.Msg) error {
		var stop error
		from := eventSender(m.Subject())
		err := EachEvent(m.Data(), c.limits, func(e *TaskEvent) error {
			if e.Run != run || e.Node != from {
				c.stats.mismatched.Add(1)
				return nil
			}
			if err := fn(e); err != nil {
				stop = err
				return err
			}
			return nil
		})
		if stop != nil {
			return stop
		}
		if err != nil {
			c.countBad(err)
		}
		return nil
	})
}

// replay reads every message of stream matching filter through an ephemeral
// consumer, until none is pending (caught up) or ctx ends.
func (c *Conn) replay(ctx context.Context, stream, filter string, fn func(jetstream.Msg) error) error {
	if err := c.check(); err != nil {
		return err
	}
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("%w: stream %s: %w", ErrNoJetStream, stream, err)
	}
	cons, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject:     filter,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
	})
	if err != nil {
		return fmt.Errorf("transport: replay %s from %s: %w", filter, stream, err)
	}
	name := cons.CachedInfo().Name
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.DeleteConsumer(dctx, name) // else the server drops it after InactiveThreshold
	}()
	// Ask for exactly what is pending, so a fetch returns as soon as it is filled
	// instead of waiting out its expiry.
	pending := cons.CachedInfo().NumPending
	for pending > 0 {
		wait := 2 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < wait {
				wait = left
			}
		}
		if err := ctx.Err(); err != nil || wait <= time.Millisecond {
			return fmt.Errorf("transport: replay %s: %d messages not read: %w", filter, pending, context.DeadlineExceeded)
		}
		batch, err := cons.Fetch(int(min(pending, 512)), jetstream.FetchMaxWait(wait))
		if err != nil {
			return fmt.Errorf("transport: replay %s: %w", filter, err)
		}
		var ferr error
		for m := range batch.Messages() {
			if ferr != nil {
				continue // drain the batch
			}
			meta, err := m.Metadata()
			if err != nil {
				ferr = fmt.Errorf("transport: replay %s: %w", filter, err)
				continue
			}
			if err := fn(m); err != nil {
				ferr = err
				continue
			}
			pending = meta.NumPending
		}
		if ferr != nil {
			return ferr
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("transport: replay %s: %w", filter, err)
		}
	}
	return nil
}

// PurgeRun deletes the record and the events of run from both streams.
func (c *Conn) PurgeRun(ctx context.Context, run string) error {
	sig, err := RunSignalsFilter(run)
	if err != nil {
		return err
	}
	evt, _ := RunEventsFilter(run)
	for _, p := range []struct{ stream, filter string }{{StreamRecord, sig}, {StreamEvents, evt}} {
		s, err := c.js.Stream(ctx, p.stream)
		if err != nil {
			return fmt.Errorf("%w: stream %s: %w", ErrNoJetStream, p.stream, err)
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(p.filter)); err != nil {
			return fmt.Errorf("transport: purge %s from %s: %w", p.filter, p.stream, err)
		}
	}
	return nil
}

// Follow is a running FollowSignals: Stop ends it.
type Follow struct {
	cc   jetstream.ConsumeContext
	once sync.Once
}

// Stop ends the follow and waits until its handler has returned for the last
// time. It is idempotent.
func (f *Follow) Stop() {
	f.once.Do(func() {
		f.cc.Stop()
		<-f.cc.Closed()
	})
}

// FollowSignals reads the record of run from its first batch on and keeps
// following it, through an ordered consumer, until Stop: every decodable batch
// goes to fn with its stream sequence and the node it was addressed to (one call
// at a time, in stream order; the Batch and its Outputs are valid only during the
// call). caughtUp (may be nil) is called once, after fn has seen every batch that
// was stored when the follow started (at once when there were none).
//
// A node that takes over the tasks of lost nodes follows its run's record so that
// it sees every Signal that was sent to them, those sent before the takeover and
// those that senders not yet told of it send after.
func (c *Conn) FollowSignals(ctx context.Context, run string, fn func(seq uint64, node string, b *Batch), caughtUp func()) (*Follow, error) {
	filter, err := RunSignalsFilter(run)
	if err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	s, err := c.js.Stream(ctx, StreamRecord)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrNoJetStream, StreamRecord, err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("transport: follow %s: %w", filter, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("transport: follow %s: stream info: %w", filter, err)
	}
	last := info.State.LastSeq // everything up to it was stored before the follow began
	var once sync.Once
	done := func() {
		if caughtUp != nil {
			once.Do(caughtUp)
		}
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("transport: follow %s: consumer info: %w", filter, err)
	}
	if ci.NumPending == 0 {
		done()
	}
	var b Batch // one handler call at a time
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		_, to, _, _ := parseSignalSubject(m.Subject())
		if c.decodeBatch(&b, m.Data(), m.Subject()) {
			fn(meta.Sequence.Stream, to, &b)
		}
		if meta.NumPending == 0 || meta.Sequence.Stream >= last {
			done()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("transport: follow %s: %w", filter, err)
	}
	return &Follow{cc: cc}, nil
}
