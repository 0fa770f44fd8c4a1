package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Clock arms the Batcher's linger timers. The default uses time.AfterFunc; tests
// inject one they fire by hand.
type Clock interface {
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is an armed Clock callback.
type Timer interface {
	// Stop cancels the callback and reports whether it had not run yet.
	Stop() bool
}

type realClock struct{}

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// BatchOption configures a Batcher.
type BatchOption func(*batchOptions)

type batchOptions struct {
	maxSignals int
	maxBytes   int
	linger     time.Duration
	clock      Clock
	ack        bool
}

// WithMaxSignals flushes a destination's batch when it holds n Signals (default
// 512; 1 sends every Signal alone).
func WithMaxSignals(n int) BatchOption { return func(o *batchOptions) { o.maxSignals = n } }

// WithMaxBytes flushes a destination's batch when its encoding reaches n bytes
// (default 64 KiB, never more than the server's max payload).
func WithMaxBytes(n int) BatchOption { return func(o *batchOptions) { o.maxBytes = n } }

// WithLinger flushes a batch at the latest d after its first Signal was added
// (default 200µs). 0 disables the timer: batches leave only when full or on Flush.
func WithLinger(d time.Duration) BatchOption { return func(o *batchOptions) { o.linger = d } }

// WithClock replaces the clock that arms linger timers.
func WithClock(c Clock) BatchOption { return func(o *batchOptions) { o.clock = c } }

// WithAck publishes batches through JetStream: Flush (and Close) wait until the
// record stream has stored every batch sent so far, and report a failure to store.
// Without it, batches go out as plain core NATS messages, which the record stream
// still captures, but nobody waits for it.
func WithAck() BatchOption { return func(o *batchOptions) { o.ack = true } }

// Batcher accumulates Signals per (run, destination node) and publishes each
// destination's batch as one message on SignalSubject(run, node, from) when it is full
// (count or bytes), when its linger expires, or on Flush. Signals to one
// destination leave in the order they were added. Safe for concurrent use.
//
// Each Signal is encoded once, straight into its destination's buffer; the batch
// header's count and sequence number are patched in at flush time, so adding a
// Signal does not allocate.
type Batcher struct {
	c    *Conn
	from string
	o    batchOptions

	mu     sync.Mutex
	dests  map[destKey]*dest
	last   *dest    // the destination added to last (a node's completions mostly go to one): dests' entry
	dsts   []uint32 // addAll's scratch
	closed bool
	seq    uint64
	acks   []jetstream.PubAckFuture
	err    error          // first error of a timer-driven flush, reported by Flush
	timers sync.WaitGroup // armed linger callbacks not yet finished or stopped
	// valid is the run id addAll checked last (a node's completions
	// mostly send Signals of one run): not checked again, one completion
	// after another.
	valid atomic.Pointer[string]
}

type destKey struct{ run, node string }

type dest struct {
	key     destKey
	subject string
	buf     []byte
	n       int // entries in buf (a fan is one)
	sigs    int // Signals in buf (a fan's count each)
	timer   Timer
	epoch   uint64
}

// Offsets of the patched fields in a batch buffer: fixarray(6), type, version,
// then from (variable), then seq as uint64 (9 bytes), then the run
// (variable), then the array32 header.
const (
	seqWidth   = 9
	countWidth = 5
)

// NewBatcher returns a Batcher that sends as node from.
func (c *Conn) NewBatcher(from string, opts ...BatchOption) (*Batcher, error) {
	if err := ValidateID("node", from); err != nil {
		return nil, err
	}
	o := batchOptions{maxSignals: 512, maxBytes: 64 << 10, linger: 200 * time.Microsecond, clock: realClock{}}
	for _, f := range opts {
		f(&o)
	}
	if o.maxSignals < 1 {
		o.maxSignals = 1
	}
	if o.maxSignals > c.limits.MaxBatch {
		o.maxSignals = c.limits.MaxBatch
	}
	if mp := int(c.nc.MaxPayload()); mp > 0 && (o.maxBytes <= 0 || o.maxBytes > mp) {
		o.maxBytes = mp
	}
	if o.maxBytes <= 0 {
		o.maxBytes = 64 << 10
	}
	if o.clock == nil {
		o.clock = realClock{}
	}
	return &Batcher{c: c, from: from, o: o, dests: make(map[destKey]*dest)}, nil
}

func (d *dest) header(from string) {
	d.buf = appendHeader(d.buf[:0], TypeBatch, batchFields)
	d.buf = appendStr(d.buf, from)
	d.buf = append(d.buf, mpUint64, 0, 0, 0, 0, 0, 0, 0, 0)
	d.buf = appendStr(d.buf, d.key.run) // once a batch (Version 9)
	d.buf = appendArray32Header(d.buf)
}

// headerLen is the length of d's batch header (dest.header).
func (b *Batcher) headerLen(d *dest) int {
	return 3 + strLen(b.from) + seqWidth + strLen(d.key.run) + countWidth
}

// strLen is len(appendStr(nil, s)).
func strLen(s string) int {
	switch n := len(s); {
	case n < 32:
		return 1 + n
	case n <= math.MaxUint8:
		return 2 + n
	case n <= math.MaxUint16:
		return 3 + n
	default:
		return 5 + n
	}
}

// Add queues s for node. It returns ErrInvalidSignal for a malformed Signal,
// ErrInvalidID for a bad node, ErrOversized when s alone would not fit in one
// message, ErrClosed after Close, or the error of a flush it triggered.
func (b *Batcher) Add(ctx context.Context, node string, s *Signal) error {
	return b.AddAll(ctx, node, []*Signal{s})
}

// AddAll is Add for each of sigs, in order, under one lock (a task that
// completes with many successors on one node hands them over at once). A
// malformed or oversized Signal is refused before any is queued; a flush
// that fails stops it there, the Signals before queued or sent.
func (b *Batcher) AddAll(ctx context.Context, node string, sigs []*Signal) error {
	if node == PicksNode {
		return ValidateID("node", node) // reserved: AddPick's
	}
	return b.addAll(node, sigs)
}

func (b *Batcher) addAll(node string, sigs []*Signal) error {
	known := "" // a run id checked already: a batch's Signals share one
	if p := b.valid.Load(); p != nil {
		known = *p
	}
	for _, s := range sigs {
		if err := s.validate(known); err != nil {
			return err
		}
		if s.Run != known {
			run := s.Run // a copy of the header: s is the caller's
			b.valid.Store(&run)
			known = run
		}
		if len(s.Output) > b.c.limits.MaxOutput {
			return fmt.Errorf("%w: run %s edge %d->%d: output of %d bytes, limit %d", ErrOversized, s.Run, s.Src, s.Dst, len(s.Output), b.c.limits.MaxOutput)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	var d *dest
	for i := 0; i < len(sigs); {
		s := sigs[i]
		if d == nil || d.key.run != s.Run {
			key := destKey{s.Run, node}
			if d = b.last; d == nil || d.key != key { // else found without hashing the run and node
				if d = b.dests[key]; d == nil {
					subj, err := SignalSubject(s.Run, node, b.from)
					if node == PicksNode {
						subj, err = picksSubject(s.Run, b.from)
					}
					if err != nil {
						return err
					}
					d = &dest{key: key, subject: subj}
					b.dests[key] = d
				}
				b.last = d
			}
		}
		// A stretch of edges of one source activation (equal but for Dst)
		// is one fan entry, up to what the batch has room for.
		j := i + 1
		for j < len(sigs) && j-i < b.o.maxSignals-d.sigs && fans(s, sigs[j]) {
			j++
		}
		var dsts []uint32
		if j-i > 1 {
			dsts = b.dsts[:0]
			for _, f := range sigs[i:j] {
				dsts = append(dsts, f.Dst)
			}
			b.dsts = dsts
		}
		if err := b.addLocked(d, s, dsts); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// fans reports whether a and b can share a fan entry: Signals of strong
// edges of one source activation, equal but for Dst.
func fans(a, b *Signal) bool {
	return a.Kind == SignalEdge && b.Kind == SignalEdge && a.Run == b.Run && a.Gen == b.Gen && a.Src == b.Src &&
		a.Act == b.Act && a.DstAct == b.DstAct && sameBytes(a.Output, b.Output) && slices.Equal(a.Ctx, b.Ctx)
}

// sameBytes is bytes.Equal (at once for one slice: the runtime's compare
// checks the pointers first), nil apart from empty.
func sameBytes(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

// AddPick records a condition's pick: s (a SignalChoice from the condition
// to the successor it picked) is queued for PicksNode, so it reaches only
// the record stream. The run's picks are always published before the
// batches of the same run queued after them to any node: flushing a
// destination flushes its run's picks first. A node that publishes a
// condition's picks before the Signals of the branch they start makes the
// record hold every pick whose consequences reached it, in front of them
// (docs/cluster-protocol.md, "Condition replay").
func (b *Batcher) AddPick(ctx context.Context, s *Signal) error {
	if s.Kind != SignalChoice {
		return fmt.Errorf("%w: run %s edge %d->%d: a pick is a choice signal", ErrInvalidSignal, s.Run, s.Src, s.Dst)
	}
	return b.addAll(PicksNode, []*Signal{s})
}

// AddSwitched records that this node switched to generation gen of run
// and fences by that generation's owners from then on: a SignalSwitched
// for PicksNode, published like a pick (AddPick), so only the record holds
// it. Whatever the node accepted before it switched reached the record
// before the mark.
func (b *Batcher) AddSwitched(ctx context.Context, run string, gen uint64) error {
	return b.addAll(PicksNode, []*Signal{{Run: run, Gen: gen, Act: 1, Kind: SignalSwitched}})
}

// addLocked queues s on d (b.mu held), flushing when the batch is full;
// with dsts (two or more), as one fan entry for a Signal to each.
func (b *Batcher) addLocked(d *dest, s *Signal, dsts []uint32) error {
	if d.n == 0 {
		d.header(b.from)
	}
	k := max(1, len(dsts))
	mark := len(d.buf)
	d.buf = appendArrayHeader(d.buf, entryFields)
	d.buf = s.appendFan(d.buf, dsts)
	if len(d.buf) > b.o.maxBytes && d.n > 0 {
		// It does not fit beside what is queued: send those, start afresh with it.
		enc := append([]byte(nil), d.buf[mark:]...)
		d.buf = d.buf[:mark]
		if err := b.flushDest(d); err != nil {
			return err
		}
		d.header(b.from)
		d.buf = append(d.buf, enc...)
	}
	if mp := int(b.c.nc.MaxPayload()); mp > 0 && len(d.buf) > mp {
		size := len(d.buf) - b.headerLen(d)
		if d.n == 0 {
			d.buf = d.buf[:0]
		} else {
			d.buf = d.buf[:mark]
		}
		return fmt.Errorf("%w: run %s edge %d->%d: signal of %d bytes exceeds the server's max payload %d", ErrOversized, s.Run, s.Src, s.Dst, size, mp)
	}
	d.n++
	d.sigs += k
	if d.sigs >= b.o.maxSignals || len(d.buf) >= b.o.maxBytes {
		return b.flushDest(d)
	}
	if d.n == 1 && b.o.linger > 0 {
		d.epoch++
		epoch := d.epoch
		b.timers.Add(1)
		d.timer = b.o.clock.AfterFunc(b.o.linger, func() { b.linger(d, epoch) })
	}
	return nil
}

// linger is the timer callback: flush d if the batch it was armed for is still
// waiting.
func (b *Batcher) linger(d *dest, epoch uint64) {
	defer b.timers.Done()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || d.epoch != epoch || d.n == 0 {
		return
	}
	d.timer = nil
	if err := b.flushDest(d); err != nil && b.err == nil {
		b.err = err
	}
}

// flushDest publishes d's batch, after its run's picks (AddPick) when d is
// not itself the picks; b.mu is held.
func (b *Batcher) flushDest(d *dest) error {
	if d.n == 0 {
		return nil
	}
	if d.key.node != PicksNode {
		if p := b.dests[destKey{d.key.run, PicksNode}]; p != nil && p.n > 0 {
			if err := b.flushDest(p); err != nil {
				return err
			}
		}
	}
	if d.timer != nil {
		if d.timer.Stop() {
			b.timers.Done()
		}
		d.timer = nil
	}
	d.epoch++
	b.seq++
	at := 3 + strLen(b.from) // fixarray, type, version, from
	binary.BigEndian.PutUint64(d.buf[at+1:], b.seq)
	putArray32Count(d.buf, b.headerLen(d)-countWidth, d.n)
	n, sigs := d.n, d.sigs
	d.n, d.sigs = 0, 0
	var err error
	if b.o.ack {
		data := append([]byte(nil), d.buf...)
		var fut jetstream.PubAckFuture
		fut, err = b.c.js.PublishMsgAsync(&nats.Msg{Subject: d.subject, Data: data}, jetstream.WithExpectStream(StreamRecord))
		if err == nil {
			b.acks = append(b.acks, fut)
		}
	} else {
		err = b.c.nc.Publish(d.subject, d.buf) // copies into the client's buffer
	}
	if err != nil {
		if d.key.node == PicksNode {
			// Kept for the next flush, which sends them before anything of
			// the run: a branch never leaves without its pick.
			d.n, d.sigs = n, sigs
		} else {
			d.buf = d.buf[:0]
		}
		return fmt.Errorf("transport: batch of %d signals to %s: %w", sigs, d.subject, err)
	}
	d.buf = d.buf[:0]
	b.c.stats.sentBatches.Add(1)
	b.c.stats.sentSignals.Add(uint64(sigs))
	return nil
}

// Flush publishes every waiting batch and, with WithAck, waits until the record
// stream has stored all batches sent so far, or ctx ends. It returns the first
// error since the last Flush, including one from a linger-driven flush.
func (b *Batcher) Flush(ctx context.Context) error {
	b.mu.Lock()
	err := b.flushAll()
	acks := b.acks
	b.acks = nil
	b.mu.Unlock()
	return errors.Join(err, b.c.waitAcks(ctx, acks))
}

func (b *Batcher) flushAll() error {
	var errs []error
	if b.err != nil {
		errs = append(errs, b.err)
		b.err = nil
	}
	for _, d := range b.dests {
		if err := b.flushDest(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitAcks waits for acks, or until ctx ends or the connection is closed
// for good: the client settles a future only by its ack or its timeout
// (WithAckTimeout), and no ack comes on a closed connection, so a node
// whose connection was closed would otherwise wait out the timeout at
// every flush. An ack the client had handed over before the close still
// counts: each future is looked at before the close is.
func (c *Conn) waitAcks(ctx context.Context, acks []jetstream.PubAckFuture) error {
	var errs []error
	refused := func(f jetstream.PubAckFuture, err error) {
		errs = append(errs, fmt.Errorf("transport: record stream refused batch on %s: %w", f.Msg().Subject, err))
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
			continue
		case err := <-f.Err():
			refused(f, err)
			continue
		default:
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			refused(f, err)
		case <-c.closed:
			return errors.Join(append(errs, fmt.Errorf("transport: waiting for record stream acks: %w", ErrClosed))...)
		case <-ctx.Done():
			return errors.Join(append(errs, fmt.Errorf("transport: waiting for record stream acks: %w", ctx.Err()))...)
		}
	}
	return errors.Join(errs...)
}

// Forget drops the (empty) per-destination state of run, for when the run ends.
// Waiting Signals of run are flushed first.
func (b *Batcher) Forget(run string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for k, d := range b.dests {
		if k.run == run {
			errs = append(errs, b.flushDest(d))
			delete(b.dests, k)
			if b.last == d {
				b.last = nil
			}
		}
	}
	return errors.Join(errs...)
}

// Close flushes what is waiting, stops the linger timers, waits for their callbacks
// and (WithAck) for the stream's acks, or ctx. Add fails with ErrClosed afterwards.
func (b *Batcher) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	err := b.flushAll()
	b.closed = true
	acks := b.acks
	b.acks = nil
	b.mu.Unlock()
	b.timers.Wait()
	return errors.Join(err, b.c.waitAcks(ctx, acks))
}
