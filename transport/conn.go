package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Option configures Connect.
type Option func(*options)

type options struct {
	name         string
	inboxPrefix  string
	user, pass   string
	token        string
	tls          *tls.Config
	minBackoff   time.Duration
	maxBackoff   time.Duration
	onDisconnect func(error)
	onReconnect  func()
	limits       Limits
	drainTimeout time.Duration
	ackTimeout   time.Duration
}

// WithName names the connection (shown by the server's monitoring); use the node id.
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithInboxPrefix makes the connection's reply subjects start with prefix
// (a secured server lets a node subscribe only to its own: see
// cluster/proto.NodeInboxPrefix).
func WithInboxPrefix(prefix string) Option { return func(o *options) { o.inboxPrefix = prefix } }

// WithUserPassword authenticates with a user and password (from the cluster secret).
func WithUserPassword(user, password string) Option {
	return func(o *options) { o.user, o.pass = user, password }
}

// WithToken authenticates with a token (from the cluster secret).
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTLS connects over TLS with cfg.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithReconnectBackoff sets the reconnect delay: it starts at min, doubles per
// failed attempt up to max, with up to 20% jitter. Reconnects never stop until Close.
// Default 50ms .. 2s. It also paces the first connection attempts in Connect.
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = min, max }
}

// WithDisconnectHandler is called (on the client's callback goroutine) when the
// connection drops; err may be nil.
func WithDisconnectHandler(f func(err error)) Option {
	return func(o *options) { o.onDisconnect = f }
}

// WithReconnectHandler is called (on the client's callback goroutine) after a
// reconnect, once subscriptions are restored. Core NATS is at-most-once: messages
// sent while the link was down may be gone, so this is the moment to re-read the
// durable record (ReplaySignals) and let the Deduper drop what was already seen.
func WithReconnectHandler(f func()) Option { return func(o *options) { o.onReconnect = f } }

// WithLimits sets the decoder limits for everything this Conn receives.
func WithLimits(l Limits) Option { return func(o *options) { o.limits = l } }

// WithDrainTimeout bounds how long Close drains (default 5s).
func WithDrainTimeout(d time.Duration) Option { return func(o *options) { o.drainTimeout = d } }

// WithAckTimeout bounds how long a JetStream publish waits for the stream's ack
// (default 5s): Batcher with WithAck, PublishEvents.
func WithAckTimeout(d time.Duration) Option { return func(o *options) { o.ackTimeout = d } }

// Stats are a Conn's counters. Signals are counted after batching (what crossed the
// wire); the Deduper counts what it accepted and dropped.
type Stats struct {
	SentSignals     uint64 // Signals published by Batchers of this Conn
	SentBatches     uint64 // batch messages published
	ReceivedBatches uint64 // batch messages received and decoded
	ReceivedSignals uint64 // Signals in them, before dedup
	Malformed       uint64 // messages dropped because they did not decode (oversized included)
	Oversized       uint64 // of Malformed, those over a Limit
	Mismatched      uint64 // messages dropped: a Signal's run, a batch's or an event's sender differs from the subject's
	Disconnects     uint64
	Reconnects      uint64
	AsyncErrors     uint64 // errors the client reported asynchronously (slow consumer, ...)
}

type counters struct {
	sentSignals, sentBatches, recvBatches, recvSignals atomic.Uint64
	malformed, oversized, mismatched                   atomic.Uint64
	disconnects, reconnects, asyncErrors               atomic.Uint64
}

// Conn is a connection to NATS (and its JetStream) with the hetflow subjects,
// decoders and counters on top. It is safe for concurrent use.
type Conn struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	limits Limits
	opts   options
	closed chan struct{} // closed by the client's ClosedHandler
	stats  counters

	ctlMu  sync.Mutex // guards ctlBuf
	ctlBuf []byte     // publishMessage's encode buffer, kept

	mu        sync.Mutex
	closing   bool
	hooks     map[int]func() // OnReconnect's, by registration
	slowHooks map[int]func() // OnSlowConsumer's, by registration
	hookSeq   int
}

// OnReconnect registers f to be called (on the client's callback goroutine:
// it must not block) each time the connection is re-established, after the
// option's WithReconnectHandler. The returned func removes it. Messages
// published to a subscriber while it was away are not redelivered by core
// NATS; a subscriber uses this to read what it missed from a stream.
func (c *Conn) OnReconnect(f func()) (remove func()) { return c.addHook(&c.hooks, f) }

// OnSlowConsumer registers f to be called (on the client's callback
// goroutine: it must not block) each time the client reports that it
// dropped messages of a subscription of this Conn as a slow consumer. The
// returned func removes it. Those messages are gone as after a disconnect;
// a subscriber uses this to read them back from a stream. The report comes
// after the drop, on another goroutine: Subscription.Dropped counts the
// drop before any later message of the Conn is handed to a handler.
func (c *Conn) OnSlowConsumer(f func()) (remove func()) { return c.addHook(&c.slowHooks, f) }

func (c *Conn) addHook(hooks *map[int]func(), f func()) (remove func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if *hooks == nil {
		*hooks = map[int]func(){}
	}
	c.hookSeq++
	k := c.hookSeq
	(*hooks)[k] = f
	return func() {
		c.mu.Lock()
		delete(*hooks, k)
		c.mu.Unlock()
	}
}

func (c *Conn) reconnected() { c.callHooks(&c.hooks) }

func (c *Conn) callHooks(hooks *map[int]func()) {
	c.mu.Lock()
	fs := make([]func(), 0, len(*hooks))
	for _, f := range *hooks {
		fs = append(fs, f)
	}
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Connect dials url (one or more comma-separated nats:// URLs) and returns once
// connected. Until then it retries with backoff until ctx ends (ErrConnect); a
// credentials refusal returns at once (ErrAuth). Once connected, the Conn
// reconnects forever on its own.
func Connect(ctx context.Context, url string, opts ...Option) (*Conn, error) {
	o := options{minBackoff: 50 * time.Millisecond, maxBackoff: 2 * time.Second, drainTimeout: 5 * time.Second, ackTimeout: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	if o.minBackoff <= 0 {
		o.minBackoff = time.Millisecond
	}
	if o.maxBackoff < o.minBackoff {
		o.maxBackoff = o.minBackoff
	}
	c := &Conn{limits: o.limits.withDefaults(), opts: o, closed: make(chan struct{})}
	nopts := []nats.Option{
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration { return backoff(o.minBackoff, o.maxBackoff, attempts) }),
		nats.DrainTimeout(o.drainTimeout),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			c.stats.disconnects.Add(1)
			if o.onDisconnect != nil {
				o.onDisconnect(err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			c.stats.reconnects.Add(1)
			if o.onReconnect != nil {
				o.onReconnect()
			}
			c.reconnected()
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(c.closed) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.stats.asyncErrors.Add(1)
			if errors.Is(err, nats.ErrSlowConsumer) {
				c.callHooks(&c.slowHooks)
			}
		}),
	}
	if o.name != "" {
		nopts = append(nopts, nats.Name(o.name))
	}
	if o.inboxPrefix != "" {
		nopts = append(nopts, nats.CustomInboxPrefix(o.inboxPrefix))
	}
	if o.user != "" || o.pass != "" {
		nopts = append(nopts, nats.UserInfo(o.user, o.pass))
	}
	if o.token != "" {
		nopts = append(nopts, nats.Token(o.token))
	}
	if o.tls != nil {
		nopts = append(nopts, nats.Secure(o.tls))
	}
	for attempt := 1; ; attempt++ {
		to := 2 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < to {
				to = max(left, time.Millisecond)
			}
		}
		nc, err := nats.Connect(url, append(nopts, nats.Timeout(to))...)
		if err == nil {
			c.nc = nc
			js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(o.ackTimeout))
			if err != nil {
				nc.Close()
				<-c.closed
				return nil, fmt.Errorf("%w: jetstream context for %s: %w", ErrConnect, url, err)
			}
			c.js = js
			return c, nil
		}
		if isAuthErr(err) {
			return nil, fmt.Errorf("%w: %s refused the credentials: %w", ErrAuth, url, err)
		}
		t := time.NewTimer(backoff(o.minBackoff, o.maxBackoff, attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: %s after %d attempts: %w (%w)", ErrConnect, url, attempt, err, ctx.Err())
		case <-t.C:
		}
	}
}

func isAuthErr(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}

// backoff is min·2^(attempt-1), capped at max, with up to 20% jitter.
func backoff(min, max time.Duration, attempt int) time.Duration {
	d := min
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// NATS is the underlying client, for what this package does not wrap.
func (c *Conn) NATS() *nats.Conn { return c.nc }

// JetStream is the JetStream context of the connection.
func (c *Conn) JetStream() jetstream.JetStream { return c.js }

// Limits are the decoder limits in force.
func (c *Conn) Limits() Limits { return c.limits }

// Connected reports whether the link is up now.
func (c *Conn) Connected() bool { return c.nc.IsConnected() }

// Stats reports the counters.
func (c *Conn) Stats() Stats {
	s := &c.stats
	return Stats{
		SentSignals: s.sentSignals.Load(), SentBatches: s.sentBatches.Load(),
		ReceivedBatches: s.recvBatches.Load(), ReceivedSignals: s.recvSignals.Load(),
		Malformed: s.malformed.Load(), Oversized: s.oversized.Load(), Mismatched: s.mismatched.Load(),
		Disconnects: s.disconnects.Load(), Reconnects: s.reconnects.Load(), AsyncErrors: s.asyncErrors.Load(),
	}
}

func (c *Conn) countBad(err error) {
	c.stats.malformed.Add(1)
	if errors.Is(err, ErrOversized) {
		c.stats.oversized.Add(1)
	}
}

func (c *Conn) check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.nc.IsClosed() {
		return ErrClosed
	}
	return nil
}

// Publish sends data on subject (core NATS, at most once). It fails with
// ErrOversized beyond the server's max payload.
func (c *Conn) Publish(subject string, data []byte) error {
	if err := c.check(); err != nil {
		return err
	}
	if mp := c.nc.MaxPayload(); mp > 0 && int64(len(data)) > mp {
		return fmt.Errorf("%w: %d bytes on %s, server max payload %d", ErrOversized, len(data), subject, mp)
	}
	if err := c.nc.Publish(subject, data); err != nil {
		return fmt.Errorf("transport: publish on %s: %w", subject, err)
	}
	return nil
}

// Sync waits until the server has processed everything published so far (a
// round trip), or ctx ends.
func (c *Conn) Sync(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("transport: sync: %w", err)
	}
	return nil
}

// Request sends data on subject and waits for one reply, or until ctx ends.
func (c *Conn) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	m, err := c.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return nil, fmt.Errorf("transport: request on %s: %w", subject, err)
	}
	return m.Data, nil
}

// SendControl publishes m to node's control subject.
func (c *Conn) SendControl(node string, m Message) error {
	subj, err := ControlSubject(node)
	if err != nil {
		return err
	}
	return c.publishMessage(subj, m)
}

// Broadcast publishes m to every node's control subscription.
func (c *Conn) Broadcast(m Message) error { return c.publishMessage(BroadcastSubject, m) }

// keptControlBuf bounds the buffer a Conn keeps to encode its control
// messages in (publishMessage): one grown past it, a first Assignment's
// with its plan, is not kept.
const keptControlBuf = 1 << 20

// publishMessage publishes m encoded on subject, encoded into the Conn's
// kept buffer: the client copies a message into its write buffer as it
// publishes it, so the buffer is free again once Publish returns. (A run's
// Assignment is ~100 KB for 100K tasks, one a run again.)
func (c *Conn) publishMessage(subject string, m Message) error {
	c.ctlMu.Lock()
	defer c.ctlMu.Unlock()
	b := m.AppendWire(c.ctlBuf[:0])
	err := c.Publish(subject, b)
	if cap(b) <= keptControlBuf {
		c.ctlBuf = b[:0]
	}
	return err
}

// Subscription is one or more NATS subscriptions with one handler. Close drains
// them and waits until their delivery goroutines are gone.
type Subscription struct {
	subs []*nats.Subscription
	done []chan struct{}
	once sync.Once
	err  error
}

func (c *Conn) subscribe(subjects []string, h nats.MsgHandler) (*Subscription, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	s := &Subscription{}
	for _, subj := range subjects {
		ns, err := c.nc.Subscribe(subj, h)
		if err != nil {
			_ = s.Close(context.Background())
			return nil, fmt.Errorf("transport: subscribe %s: %w", subj, err)
		}
		done := make(chan struct{})
		ns.SetClosedHandler(func(string) { close(done) })
		s.subs = append(s.subs, ns)
		s.done = append(s.done, done)
	}
	return s, nil
}

// Subscribe delivers every message on subject to h, one at a time.
func (c *Conn) Subscribe(subject string, h func(*nats.Msg)) (*Subscription, error) {
	return c.subscribe([]string{subject}, h)
}

// Dropped counts the messages the client dropped for this subscription as a
// slow consumer (a closed one's count no longer adds in). The client counts a
// drop on its reader goroutine before it reads the connection's next message,
// so a handler of any later message of the Conn sees it; the Conn's
// AsyncErrors and OnSlowConsumer hear of it later, on another goroutine.
func (s *Subscription) Dropped() (n uint64) {
	for _, ns := range s.subs {
		if d, err := ns.Dropped(); err == nil && d > 0 {
			n += uint64(d)
		}
	}
	return n
}

// SetPendingLimits bounds the messages and bytes each of the subscription's
// NATS subscriptions holds for its handler; past them the client drops
// what comes (a slow consumer: Dropped, OnSlowConsumer). A limit of -1 is
// none; the client's defaults are 512Ki messages and 64 MiB.
func (s *Subscription) SetPendingLimits(msgs, bytes int) error {
	for _, ns := range s.subs {
		if err := ns.SetPendingLimits(msgs, bytes); err != nil {
			return fmt.Errorf("transport: pending limits: %w", err)
		}
	}
	return nil
}

// Close drains the subscription (messages already received are handled) and waits
// for its delivery goroutines to end, or for ctx. Closing the Conn also ends it.
func (s *Subscription) Close(ctx context.Context) error {
	s.once.Do(func() {
		for _, ns := range s.subs {
			if err := ns.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) &&
				!errors.Is(err, nats.ErrBadSubscription) && !errors.Is(err, nats.ErrConnectionDraining) {
				// Draining is impossible (reconnecting): drop it instead.
				_ = ns.Unsubscribe()
			}
		}
		for _, d := range s.done {
			select {
			case <-d:
			case <-ctx.Done():
				s.err = fmt.Errorf("transport: closing subscription: %w", ctx.Err())
				return
			}
		}
	})
	return s.err
}

// Stop ends the subscription at once: the messages the client holds for
// it and has not handed to its handler yet are dropped (Close hands them
// on first), and it waits, as Close does, until the handler has returned
// for the last time, or ctx ends. For a subscription whose messages only
// wake someone: Close waits for those still on the way, and the client
// looks every 100 ms whether they have come.
func (s *Subscription) Stop(ctx context.Context) error {
	s.once.Do(func() {
		for _, ns := range s.subs {
			_ = ns.Unsubscribe() // an error: closed already, or the connection is; its handler ends either way
		}
		for _, d := range s.done {
			select {
			case <-d:
			case <-ctx.Done():
				s.err = fmt.Errorf("transport: stopping subscription: %w", ctx.Err())
				return
			}
		}
	})
	return s.err
}

// SubscribeControl delivers the control messages for node (its own subject and the
// broadcast one), decoded, to h, one at a time. Messages of one subject keep their
// order; between the two subjects no order is defined. Undecodable messages are
// dropped and counted. An Assignment whose owners are those of the Assignment
// delivered before it (a run again of the same placement) shares that one's
// Owner table, made once (400 KB for 100K tasks): h must not change it.
func (c *Conn) SubscribeControl(node string, h func(Message)) (*Subscription, error) {
	subj, err := ControlSubject(node)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex   // the two subscriptions deliver on two goroutines
	var owners []uint32 // the owner table of the last Assignment decoded
	return c.subscribe([]string{subj, BroadcastSubject}, func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		var msg Message
		var err error
		if t, perr := PeekType(m.Data); perr == nil && t == TypeAssignment {
			a := new(Assignment)
			if err = a.decodeLike(m.Data, c.limits, owners); err == nil {
				msg, owners = a, a.Owner
			}
		} else {
			msg, err = Decode(m.Data, c.limits)
		}
		if err != nil {
			c.countBad(err)
			return
		}
		h(msg)
	})
}

// SignalHandler receives the accepted Signals of one batch, in order. sigs and
// their Outputs are valid only during the call.
type SignalHandler func(from string, sigs []Signal)

// SubscribeSignals delivers the Signal batches of every run addressed to node. Each
// batch is decoded under the Conn's Limits (a malformed one is dropped and counted,
// as is one holding a Signal of another run than its subject names), passed through
// d (fencing and dedup; nil delivers everything) and handed to h with the accepted
// Signals. Batches are handled one at a time, in arrival order.
func (c *Conn) SubscribeSignals(node string, d *Deduper, h SignalHandler) (*Subscription, error) {
	return c.SubscribeBatches(node, func(b *Batch) {
		sigs := b.Signals
		if d != nil {
			sigs = d.Filter(sigs)
		}
		if len(sigs) > 0 {
			h(b.From, sigs)
		}
	})
}

// SubscribeBatches delivers every Signal batch of every run addressed to node,
// decoded and checked as SubscribeSignals does, whole (From and Seq included,
// no Deduper), one at a time in arrival order. b and its Outputs are valid
// only during the call. A receiver that fences and dedups itself uses it, and
// Seq to tell one physical batch from another with the same Signals.
func (c *Conn) SubscribeBatches(node string, h func(b *Batch)) (*Subscription, error) {
	filter, err := NodeSignalsFilter(node)
	if err != nil {
		return nil, err
	}
	var b Batch // reused: the handler runs on one goroutine
	return c.subscribe([]string{filter}, func(m *nats.Msg) {
		if c.decodeBatch(&b, m.Data, m.Subject) && len(b.Signals) > 0 {
			h(&b)
		}
	})
}

// decodeBatch decodes data, received on subject, into b and checks that
// its sender is the subject's (the server enforces the subject, not the
// body) and that every Signal belongs to the subject's run, counting what
// it drops.
func (c *Conn) decodeBatch(b *Batch, data []byte, subject string) bool {
	run, _, from, ok := parseSignalSubject(subject)
	if !ok {
		c.stats.mismatched.Add(1)
		return false
	}
	if err := b.Decode(data, c.limits); err != nil {
		c.countBad(err)
		return false
	}
	if b.From != from {
		c.stats.mismatched.Add(1)
		return false
	}
	// Decode gives every Signal the batch's one run (Version 9)
	if len(b.Signals) > 0 && b.Signals[0].Run != run {
		c.stats.mismatched.Add(1)
		return false
	}
	c.stats.recvBatches.Add(1)
	c.stats.recvSignals.Add(uint64(len(b.Signals)))
	return true
}

// Close drains the connection (subscriptions finish what they hold, pending
// publishes are sent), closes it and waits until the client's goroutines are done,
// bounded by the drain timeout. Batchers should be closed first. Calling it again
// returns nil.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		<-c.closed
		return nil
	}
	c.closing = true
	c.mu.Unlock()
	if err := c.nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrConnectionReconnecting) {
		c.nc.Close()
	}
	t := time.NewTimer(c.opts.drainTimeout + time.Second)
	defer t.Stop()
	select {
	case <-c.closed:
		return nil
	case <-t.C:
		c.nc.Close()
		<-c.closed
		return fmt.Errorf("transport: close: drain did not finish in %v", c.opts.drainTimeout)
	}
}
