package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/gpu"
	"github.com/hetflow/hetflow/localexec"
	"github.com/hetflow/hetflow/transport"
)

// Errors of the node agent, wrapped with %w where they are returned.
var (
	// ErrConfig: New was given an unusable Config.
	ErrConfig = errors.New("node: bad configuration")
	// ErrClosed: the node was closed (or Start was called twice).
	ErrClosed = errors.New("node: closed")
	// ErrRefused: an Assignment could not be run here; the node sends a fail
	// envelope with the reason.
	ErrRefused = errors.New("node: assignment refused")
	// ErrTimeout: one activation of a task ran past its `timeout:`.
	ErrTimeout = errors.New("node: task timed out")
)

// Defaults of the Config fields left zero.
const (
	DefaultHeartbeat   = 500 * time.Millisecond
	DefaultEventLinger = 500 * time.Millisecond
)

// Bounds on what the node keeps for runs it does not run (yet). The early
// buffer (Signals that arrived before their run's Assignment) is bounded in
// runs, in Signals per run, in Signals in all and in time: a run whose
// Assignment has not come within Config.EarlyTTL of its first early Signal,
// or the oldest run when the buffer is full, is evicted. Nothing evicted is
// lost: a run that starts reads the node's record of its Signals once
// (replayRun), which holds every batch published to the node; evictions are
// counted (Stats.SignalsEvicted).
const (
	maxEarlyRuns    = 256     // runs with Signals that arrived before their Assignment
	maxEarlySignals = 4096    // such Signals per run
	maxEarlyTotal   = 1 << 16 // such Signals in all
	maxEndedRuns    = 4096    // runs remembered as released (late Assignments ignored)
	// DefaultEarlyTTL is how long the Signals of a run not (yet) assigned
	// here are kept (Config.EarlyTTL).
	DefaultEarlyTTL = 30 * time.Second
)

// Membership is the part of the gossip ring the node drives: Drain leaves it
// before closing. *member.List satisfies it.
type Membership interface {
	Leave(timeout time.Duration) error
}

// Config configures a Node. ID and Conn are required.
type Config struct {
	// ID is the node's id: its control subject, its signal subject and the
	// name Assignments use (transport.ValidateID).
	ID string
	// Conn is the node's NATS connection. The node does not close it.
	Conn *transport.Conn
	// Registry holds the functions the node runs (nil: funcs.Default()).
	Registry *funcs.Registry
	// CPUs is the number of CPU workers (0: GOMAXPROCS).
	CPUs int
	// GPUs is the number of GPU devices the executor opens from the build's
	// backend (sim: that many simulated devices). 0: none. Ignored when
	// Devices is set.
	GPUs int
	// Devices are GPU devices opened by the caller, who closes them after
	// the node.
	Devices []*gpu.Device
	// ExecutorOptions are appended to the executor's options.
	ExecutorOptions []localexec.Option
	// BatchOptions configure the node's Signal batcher.
	BatchOptions []transport.BatchOption
	// Streams, when set, makes Start create (or update) the JetStream
	// streams; otherwise the coordinator is expected to have made them. A
	// node connected with its own credential may not (natsauth.NodePermissions).
	Streams *transport.StreamConfig
	// HTTP is the node's HTTP address, advertised in Meta.
	HTTP string
	// Membership, when set, is left by Drain.
	Membership Membership
	// Logger receives the node's log (nil: discarded).
	Logger *slog.Logger
	// Now stamps events, times how long an activation has run (running
	// events) and ages the early buffer (nil: time.Now).
	Now func() time.Time
	// EarlyTTL is how long Signals that came before their run's Assignment
	// are kept for it (0: DefaultEarlyTTL); the run's record supplies them
	// again once it starts.
	EarlyTTL time.Duration
	// Heartbeat is the TermReport period of an active run (0: 500ms).
	Heartbeat time.Duration
	// EventLinger bounds how long a change of a task's state waits before
	// the report that carries it leaves (0: 500ms); a run's reports to the
	// leader (idle, heartbeat, end) send what changed at once, and so do
	// a task's failure and a task still running RunningAfter after it
	// began.
	EventLinger time.Duration
}

// Stats are the node's counters.
type Stats struct {
	RunsActive       int    // runs held now
	Assignments      uint64 // Assignments taken (a re-sent one is not counted again)
	AssignmentCopies uint64 // copies of an Assignment already held that came again (acked again, else ignored)
	PlansNeeded      uint64 // Assignments that named by digest a plan this node did not hold (asked for it: an Ack with NeedPlan)
	Refused          uint64 // Assignments refused
	// Assignments made for an earlier process of this node id (a restart):
	// ignored, the leader moves their parts.
	AssignmentsOtherBoot uint64
	PlansCached          int    // compiled plans held for the next run with the same plan
	PlansReused          uint64 // Assignments whose plan was compiled already (not decoded again)
	BuildsReused         uint64 // runs that took the taskflow an earlier run of their plan built (reuse.go)
	TasksExecuted        uint64 // function executions, retries included
	SignalsSent          uint64 // Signals handed to the Batcher
	PicksRecorded        uint64 // condition picks of a successor on this node, recorded for a replay (Batcher.AddPick)
	SignalsReceived      uint64 // Signals accepted (new, after fencing) and scheduled into a run
	SignalsDuplicate     uint64 // Signals dropped as seen before (by the dedup set, or their batch was taken whole before)
	SignalsFenced        uint64 // Signals whose sender does not own their source in the generation in force
	SignalsTakenOver     uint64 // Signals read back from the record for tasks taken over from lost nodes
	SignalsDropped       uint64 // accepted Signals that fit no edge, run or buffer here
	SignalsLate          uint64 // Signals of a run that had already ended here (a copy read from the record, a batch sent twice): nothing owed
	SignalsEarly         uint64 // Signals that came before their run's Assignment (kept, then delivered)
	SignalsEvicted       uint64 // such Signals not kept (their run expired, or the buffer was full): the record supplies them
	SignalsReplayed      uint64 // Signals missed during a NATS outage and read back from the record
	StartReads           uint64 // runs that read their record at their start: the node may have lost a Signal of theirs (mayHaveLostLocked)
	Rereads              uint64 // reads of a run's record that found it behind the Signals the early buffer evicted: read again (replaySignals)
	ReadBacks            uint64 // times the node read back the held runs' records: after a reconnect or a slow consumer's drops
	EventsPublished      uint64 // task deltas (a task's values in a TaskReport) stored in JetStream
	EventReports         uint64 // TaskReports stored (each of the deltas of some tasks of one run)
	EventVolumeCuts      uint64 // volume kicks: a run table's crossings of cutRows rows (by chunk) first changed since its last cut; not publishes (kicks pending together wake one, and a kick served after another cut may cut little)
	EventErrors          uint64 // task deltas that could not be stored
	Failures             uint64 // fail envelopes sent
	// CounterClockOff: the time-stamp counter strayed from the monotonic
	// clock, and activations are stamped by the wall clock for good
	// (tscClock; logged when it happened).
	CounterClockOff bool

	// Messages on the node's subjects dropped undecoded, counted by its
	// Conn (transport.Stats): malformed (oversized ones included), over a
	// decoder limit, a Signal batch whose run is not its subject's.
	MessagesMalformed, MessagesOversized, MessagesMismatched uint64
}

type counters struct {
	tasks                            spread // Stats.TasksExecuted: added to by every activation
	assignments, refused             atomic.Uint64
	otherBoot                        atomic.Uint64 // Stats.AssignmentsOtherBoot
	assignmentCopies                 atomic.Uint64
	planNeeded                       atomic.Uint64 // Stats.PlansNeeded
	sent, received, dropped, failure atomic.Uint64
	early, fenced, replayed, evicted atomic.Uint64
	startReads                       atomic.Uint64 // Stats.StartReads
	rereads                          atomic.Uint64 // Stats.Rereads
	readBacks                        atomic.Uint64 // Stats.ReadBacks
	late                             atomic.Uint64
	picks                            atomic.Uint64 // Stats.PicksRecorded
	takenOver, duplicate             atomic.Uint64
	buildsReused                     atomic.Uint64 // Stats.BuildsReused
}

// spread is a counter every worker adds to at once: a cell of its own
// cache line per shard, the shard picked by the caller (the worker, where
// it knows it: workerShard; else the vertex), so that activations running
// at once do not add to one line. Load sums the cells (each only grows, so neither does the sum).
type spread struct {
	cells [16]struct {
		n atomic.Uint64
		_ [56]byte
	}
}

func (c *spread) Add(shard int, d uint64) { c.cells[shard&15].n.Add(d) }

func (c *spread) Load() (sum uint64) {
	for i := range c.cells {
		sum += c.cells[i].n.Load()
	}
	return sum
}

// Node is a hetflow node agent: it takes Assignments from the leader, runs
// its part of each run on a localexec executor, trades Signals with the
// other nodes of the run and reports progress and termination counters.
type Node struct {
	cfg     Config
	id      string
	boot    string // random per New: Meta.Boot
	conn    *transport.Conn
	reg     *funcs.Registry
	graphs  graphCache // compiled plans by hash, shared by runs with one plan
	builds  buildCache // taskflows of ended runs, for the next run of their plan (reuse.go)
	ex      *localexec.Executor
	batcher *transport.Batcher
	events  *eventPub
	log     *slog.Logger
	now     func() time.Time
	// clock stamps activations (stamp) when fastClock: no Config.Now.
	clock     tscClock
	fastClock bool

	mu       sync.Mutex
	runs     map[string]*run
	early    map[string]*earlyRun
	earlyQ   []earlyRef // early's runs by first arrival; stale entries skipped
	earlyN   int        // Signals in early
	earlySeq uint64
	// unread is, for runs not held here, the newest batch of each sender
	// with a Signal the early buffer evicted (its record must be read up
	// to there when the run starts: takeUnreadLocked); unreadQ its runs by
	// first eviction, to bound it.
	unread   map[string]map[unreadKey]uint64
	unreadQ  []string
	ended    map[string]uint64 // run → last generation released
	endedQ   []string
	refused  map[runGen]error
	started  bool
	closed   bool
	draining bool
	drained  chan struct{}
	drainEnd bool // drained is closed

	// lossBase is losses() just before Start subscribed (valid once
	// subscribed is set); metaEarly says Meta was read before Start's
	// subscriptions were in force (mayHaveLostLocked).
	lossBase   uint64
	subscribed atomic.Bool
	metaEarly  atomic.Bool

	ctlSub, sigSub, pingSub *transport.Subscription
	flushKick               chan struct{} // a run went idle: publish the waiting Signals now
	replayKick              chan struct{} // NATS reconnected: read what was missed from the record
	replayOne               chan string   // a run started: read its record once
	flushStop               chan struct{}
	flushDone               chan struct{}
	unhook                  func()                 // removes the OnReconnect and OnSlowConsumer hooks
	batchGate               atomic.Pointer[func()] // tests only: called before each batch is taken
	// recordGate (tests only) is asked of each batch a read of the record
	// meets: false makes the read pass it by, as a batch the record stream
	// has not stored yet (the server stores what it delivers live later,
	// on the stream's own goroutine).
	recordGate atomic.Pointer[func(from string, seq uint64) bool]
	// rereads are the runs whose record a read found behind what the node
	// received (run.unread; the flusher's, which reads them again).
	rereads   map[string]struct{}
	wg        sync.WaitGroup // run goroutines
	closeOnce sync.Once
	closeErr  error
	stats     counters
	scratch   acceptScratch // under mu
}

// acceptScratch is the storage run.apply reuses for every batch, so that
// accepting a batch does not allocate (under Node.mu).
type acceptScratch struct {
	q deliveries
}

type runGen struct {
	run string
	gen uint64
}

// New builds a node: its executor (workers start now), its batcher and its
// event publisher. Call Start to take work, and Close (or Drain) to stop.
func New(cfg Config) (*Node, error) {
	if err := transport.ValidateID("node", cfg.ID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.Conn == nil {
		return nil, fmt.Errorf("%w: node %s: no NATS connection", ErrConfig, cfg.ID)
	}
	if cfg.CPUs < 0 || cfg.GPUs < 0 || cfg.Heartbeat < 0 || cfg.EventLinger < 0 || cfg.EarlyTTL < 0 {
		return nil, fmt.Errorf("%w: node %s: negative CPUs, GPUs, heartbeat, event or early-buffer settings", ErrConfig, cfg.ID)
	}
	if cfg.Registry == nil {
		cfg.Registry = funcs.Default()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	fast := cfg.Now == nil // activations stamp with the node's tscClock
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.EventLinger == 0 {
		cfg.EventLinger = DefaultEventLinger
	}
	if cfg.EarlyTTL == 0 {
		cfg.EarlyTTL = DefaultEarlyTTL
	}
	b, err := cfg.Conn.NewBatcher(cfg.ID, cfg.BatchOptions...)
	if err != nil {
		return nil, fmt.Errorf("%w: node %s: %w", ErrConfig, cfg.ID, err)
	}
	// Every task here is a wrapper that reads and writes its vertex's
	// state: a successor's line asked for before it runs comes in under it.
	opts := []localexec.Option{localexec.WithWarmSuccessors()}
	if cfg.CPUs > 0 {
		opts = append(opts, localexec.WithWorkers(cfg.CPUs))
	}
	if len(cfg.Devices) > 0 {
		opts = append(opts, localexec.WithDevices(cfg.Devices...))
	} else {
		opts = append(opts, localexec.WithGPUs(cfg.GPUs))
	}
	opts = append(opts, cfg.ExecutorOptions...)
	ex := localexec.NewExecutor(opts...)
	if err := ex.Err(); err != nil {
		ex.Close()
		b.Close(context.Background())
		return nil, fmt.Errorf("%w: node %s: executor: %w", ErrConfig, cfg.ID, err)
	}
	var bootBytes [6]byte
	_, _ = rand.Read(bootBytes[:])
	n := &Node{
		boot:      hex.EncodeToString(bootBytes[:]),
		cfg:       cfg,
		id:        cfg.ID,
		conn:      cfg.Conn,
		reg:       cfg.Registry,
		graphs:    newGraphCache(maxCachedVertices),
		builds:    newBuildCache(maxBuiltVertices),
		ex:        ex,
		batcher:   b,
		log:       cfg.Logger.With("node", cfg.ID),
		now:       cfg.Now,
		fastClock: fast,
		clock:     tscClock{on: fast && tscUsable()},
		runs:      map[string]*run{},
		early:     map[string]*earlyRun{},
		ended:     map[string]uint64{},
		refused:   map[runGen]error{},
		drained:   make(chan struct{}),

		flushKick:  make(chan struct{}, 1),
		replayKick: make(chan struct{}, 1),
		replayOne:  make(chan string, 64),
		flushStop:  make(chan struct{}),
		flushDone:  make(chan struct{}),
	}
	n.clock.log = n.log
	n.events = newEventPub(cfg.Conn, cfg.EventLinger, n.log)
	n.events.quiet = n.quiet
	return n, nil
}

// ID returns the node's id.
func (n *Node) ID() string { return n.id }

// Executor returns the node's executor (for observers and stats).
func (n *Node) Executor() *localexec.Executor { return n.ex }

// Meta is what the node advertises in the membership ring.
func (n *Node) Meta() proto.Meta {
	if !n.subscribed.Load() {
		n.metaEarly.Store(true) // the boot may be known before the node listens: mayHaveLostLocked
	}
	return proto.Meta{Role: proto.RoleNode, ID: n.id, HTTP: n.cfg.HTTP, CPUs: n.ex.NumCPUWorkers(), GPUs: len(n.ex.Devices()), Boot: n.boot}
}

// Start subscribes to the node's control and signal subjects: from now on
// the node takes Assignments. It fails after Close or on a second call.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	if n.closed || n.started {
		n.mu.Unlock()
		return fmt.Errorf("%w: node %s: Start after Close or Start", ErrClosed, n.id)
	}
	n.started = true
	// After a reconnect or a slow consumer's drop, read back what the held
	// runs may have missed.
	kick := func() {
		select {
		case n.replayKick <- struct{}{}:
		default:
		}
	}
	unReconnect, unSlow := n.conn.OnReconnect(kick), n.conn.OnSlowConsumer(kick)
	n.unhook = func() { unReconnect(); unSlow() }
	// The losses counted from before the subscriptions on: one in between
	// makes every run read its record at its start (mayHaveLostLocked).
	n.lossBase = n.losses()
	n.mu.Unlock()
	go n.flusher() // runs iff started; Close stops it
	if n.cfg.Streams != nil {
		if err := n.conn.EnsureStreams(ctx, *n.cfg.Streams); err != nil {
			return fmt.Errorf("node %s: %w", n.id, err)
		}
	}
	n.events.start()
	// No Deduper in the subscription: the node fences by ownership and dedups
	// itself (runproto.Run.Batch), since after a loss a live sender's Signals
	// of an older generation are still good.
	sig, err := n.conn.SubscribeBatches(n.id, n.onBatch)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.id, err)
	}
	ctl, err := n.conn.SubscribeControl(n.id, n.onControl)
	if err != nil {
		sig.Close(ctx)
		return fmt.Errorf("node %s: %w", n.id, err)
	}
	ping, err := n.answerPings()
	if err != nil {
		sig.Close(ctx)
		ctl.Close(ctx)
		return fmt.Errorf("node %s: %w", n.id, err)
	}
	n.mu.Lock()
	n.sigSub, n.ctlSub, n.pingSub = sig, ctl, ping
	n.mu.Unlock()
	// Make sure the server has the interest before anyone is told we are up.
	if err := n.conn.Sync(ctx); err != nil {
		return fmt.Errorf("node %s: %w", n.id, err)
	}
	n.subscribed.Store(true)
	n.log.Info("node started", "cpus", n.ex.NumCPUWorkers(), "gpus", len(n.ex.Devices()))
	return nil
}

// Drain stops taking new runs, waits until every run the node holds has
// been released by the leader (its Cancel, "finished" or not) or ctx ends,
// leaves the membership ring when one is configured, and closes the node.
func (n *Node) Drain(ctx context.Context) error {
	n.mu.Lock()
	n.draining = true
	n.checkDrainedLocked()
	ch := n.drained
	n.mu.Unlock()
	n.log.Info("draining")
	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = fmt.Errorf("node %s: drain: %w", n.id, ctx.Err())
	}
	if m := n.cfg.Membership; m != nil {
		if lerr := m.Leave(time.Second); lerr != nil {
			err = errors.Join(err, fmt.Errorf("node %s: leaving the ring: %w", n.id, lerr))
		}
	}
	return errors.Join(err, n.Close())
}

func (n *Node) checkDrainedLocked() {
	if n.draining && len(n.runs) == 0 && !n.drainEnd {
		n.drainEnd = true
		close(n.drained)
	}
}

// Close cancels every run the node holds, waits for them, stops the
// subscriptions, the publisher, the batcher and the executor. It does not
// close the Conn. It is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.close() })
	return n.closeErr
}

func (n *Node) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n.mu.Lock()
	n.closed = true
	ctl, sig, ping := n.ctlSub, n.sigSub, n.pingSub
	n.mu.Unlock()
	var errs []error
	if ctl != nil {
		errs = append(errs, ctl.Close(ctx))
	}
	if ping != nil {
		errs = append(errs, ping.Close(ctx))
	}
	n.mu.Lock()
	runs := make([]*run, 0, len(n.runs))
	for _, r := range n.runs {
		runs = append(runs, r)
	}
	n.mu.Unlock()
	for _, r := range runs {
		r.requestStop("node closing")
	}
	n.wg.Wait()
	if sig != nil {
		errs = append(errs, sig.Close(ctx))
	}
	n.events.close()
	n.mu.Lock()
	started := n.started
	n.mu.Unlock()
	if started {
		n.unhook()
		close(n.flushStop)
		<-n.flushDone
	}
	errs = append(errs, n.batcher.Close(ctx))
	errs = append(errs, n.ex.Close())
	n.log.Info("node closed")
	return errors.Join(errs...)
}

// ForgetPlans drops every plan the node compiled, as a restart does: an
// Assignment that names a plan by digest is then asked for again (an Ack
// with NeedPlan, Stats.PlansNeeded). For tests of a node that lost its
// plans; the runs it holds keep theirs.
func (n *Node) ForgetPlans() { n.graphs.forget() }

// Stats returns a snapshot of the node's counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	active := len(n.runs)
	n.mu.Unlock()
	cs := n.conn.Stats()
	cached, reused := n.graphs.stats()
	return Stats{
		RunsActive:           active,
		PlansCached:          cached,
		PlansReused:          reused,
		BuildsReused:         n.stats.buildsReused.Load(),
		Assignments:          n.stats.assignments.Load(),
		AssignmentCopies:     n.stats.assignmentCopies.Load(),
		PlansNeeded:          n.stats.planNeeded.Load(),
		Refused:              n.stats.refused.Load(),
		AssignmentsOtherBoot: n.stats.otherBoot.Load(),
		TasksExecuted:        n.stats.tasks.Load(),
		SignalsSent:          n.stats.sent.Load(),
		PicksRecorded:        n.stats.picks.Load(),
		SignalsReceived:      n.stats.received.Load(),
		SignalsDuplicate:     n.stats.duplicate.Load(),
		SignalsFenced:        n.stats.fenced.Load(),
		SignalsTakenOver:     n.stats.takenOver.Load(),
		SignalsDropped:       n.stats.dropped.Load(),
		SignalsLate:          n.stats.late.Load(),
		SignalsEarly:         n.stats.early.Load(),
		SignalsEvicted:       n.stats.evicted.Load(),
		SignalsReplayed:      n.stats.replayed.Load(),
		StartReads:           n.stats.startReads.Load(),
		Rereads:              n.stats.rereads.Load(),
		ReadBacks:            n.stats.readBacks.Load(),
		EventsPublished:      n.events.published.Load(),
		EventReports:         n.events.reports.Load(),
		EventVolumeCuts:      n.events.volumeCuts.Load(),
		EventErrors:          n.events.errors.Load(),
		Failures:             n.stats.failure.Load(),
		CounterClockOff:      n.clock.isOff(),

		MessagesMalformed: cs.Malformed, MessagesOversized: cs.Oversized, MessagesMismatched: cs.Mismatched,
	}
}

// flusher publishes the Batcher's waiting Signals as soon as a run goes
// idle, without waiting for the linger, and apart from the run's report
// (which waits for its events to be stored). Each second it also checks
// the counter clock's base (tscClock.check).
func (n *Node) flusher() {
	defer close(n.flushDone)
	again := time.NewTimer(time.Hour)
	again.Stop()
	defer again.Stop()
	var dropped uint64 // sigDropped when the record was last read back
	drops := time.NewTicker(replayAgain)
	defer drops.Stop()
	// reread reads again the runs whose record was behind (rereads), from
	// rereadFirst after the read on, twice as long each time up to
	// replayAgain, while one is.
	reread := time.NewTimer(time.Hour)
	reread.Stop()
	defer reread.Stop()
	wait, armed := rereadFirst, false
	for {
		if len(n.rereads) == 0 {
			wait = rereadFirst
		} else if !armed {
			reread.Reset(wait)
			armed, wait = true, min(2*wait, replayAgain)
		}
		select {
		case <-n.flushStop:
			return
		case <-reread.C:
			armed = false
			runs := make([]string, 0, len(n.rereads))
			for run := range n.rereads {
				runs = append(runs, run)
			}
			clear(n.rereads)
			for _, run := range runs {
				n.replaySignals(run)
			}
		case <-n.flushKick:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := n.batcher.Flush(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
				n.log.Warn("flushing signals", "err", err)
			}
			cancel()
		case <-n.replayKick:
			dropped = n.sigDropped()
			n.replayMissed()
			again.Reset(replayAgain)
		case run := <-n.replayOne:
			n.replaySignals(run)
		case <-again.C:
			n.replayMissed()
		case <-drops.C:
			n.clock.check() // a counter that stopped takes no base by itself
			// The client reports only the first drop of a slow consumer's
			// stretch (OnSlowConsumer): the later ones show in the count
			// alone. Read back after them as after a reconnect.
			if d := n.sigDropped(); d != dropped {
				dropped = d
				n.replayMissed()
				again.Reset(replayAgain)
			}
		}
	}
}

// sigDropped is the signal subscription's count of a slow consumer's drops.
func (n *Node) sigDropped() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sigSub == nil {
		return 0
	}
	return n.sigSub.Dropped()
}

// replayAgain is when the record is read a second time after a reconnect:
// a peer that reconnected later may have published, from its reconnect
// buffer, Signals that reached the server before this node's interest did.
const replayAgain = time.Second

// rereadFirst is when a run's record that a read found behind what the
// node received is read again (the flusher's reread).
const rereadFirst = 10 * time.Millisecond

// replayMissed reads, after NATS came back, the record (JetStream) of the
// Signals addressed to this node for every run it holds, and hands them to
// the runs as if they had arrived: core NATS does not redeliver what was
// published while this node was away, the record has it, and the run's
// fencing and Deduper drop what did arrive. Runs on the flusher goroutine.
func (n *Node) replayMissed() {
	n.stats.readBacks.Add(1)
	n.mu.Lock()
	runs := make([]string, 0, len(n.runs))
	for id := range n.runs {
		runs = append(runs, id)
	}
	closed := n.closed
	n.mu.Unlock()
	if closed {
		return
	}
	for _, run := range runs {
		n.replaySignals(run)
	}
}

// replayRun asks the flusher goroutine to read run's record of the Signals
// addressed to this node (replaySignals); when it is busy, every run's.
func (n *Node) replayRun(run string) {
	select {
	case n.replayOne <- run:
	default:
		select {
		case n.replayKick <- struct{}{}:
		default:
		}
	}
}

// replaySignals reads the record (JetStream) of the Signals addressed to
// this node in run and hands them to the run as if they had arrived; the
// run's fencing and dedup drop what did arrive.
//
// The record stream stores a batch after the server delivered it live (on
// the stream's goroutine), so a read can miss a batch the node received: a
// run that started with Signals the early buffer evicted (run.unread) is
// read again (the flusher's reread) until the record has shown, from each
// of their senders, the newest batch with one (the stream stores one
// sender's batches in the order it published them, which is their Seq's).
func (n *Node) replaySignals(run string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	var got uint64
	gate := n.recordGate.Load()
	seen := func(from string, seq, gen uint64) bool { // taken whole already: not even decoded
		if gate != nil && !(*gate)(from, seq) {
			return true // not stored yet, as far as this read goes
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		r := n.runs[run]
		if r == nil {
			return false
		}
		r.readBack(from, gen, seq)
		k, ok := r.sm.SeenBatch(from, gen, seq)
		if ok {
			n.stats.duplicate.Add(uint64(k))
		}
		return ok
	}
	err := n.conn.ReplaySignalsSkipping(ctx, run, n.id, seen, func(_ string, b *transport.Batch) error {
		got += uint64(n.take(b)) // fencing, dedup and counting as if live
		return nil
	})
	cancel()
	n.mu.Lock()
	if r := n.runs[run]; r != nil && len(r.unread) > 0 {
		if n.rereads == nil {
			n.rereads = map[string]struct{}{} // a Node made by hand (tests)
		}
		n.rereads[run] = struct{}{}
		n.stats.rereads.Add(1)
		if r.rereadsN++; r.rereadsN == rereadsWarn {
			// Past a few seconds of reads: the record may have lost the
			// batch (a stream limit, a full disk), and the run waits for it.
			n.log.Warn("the run's record still lacks batches the early buffer evicted; reading it again each second",
				"run", run, "missing", fmt.Sprint(r.unread))
		}
	}
	n.mu.Unlock()
	n.stats.replayed.Add(got)
	if err != nil {
		n.log.Warn("reading missed signals from the record", "run", run, "err", err)
	} else if got > 0 {
		n.log.Info("signals missed on core NATS, read from the record", "run", run, "signals", got)
	}
}

// onControl handles one control message (the subscription serialises them).
func (n *Node) onControl(m transport.Message) {
	switch m := m.(type) {
	case *transport.Assignment:
		n.assign(m)
	case *transport.Cancel:
		n.cancel(m)
	case *transport.Envelope:
		if m.Kind == proto.KindProbe {
			n.probe(m)
		}
	}
}

func (n *Node) assign(a *transport.Assignment) {
	me := -1
	for i, id := range a.Nodes {
		if id == n.id {
			me = i
			break
		}
	}
	if me < 0 {
		return // not ours (a broadcast, or a stray message)
	}
	if b := a.BootOf(me); b != "" && b != n.boot {
		// Made for an earlier process under this id: this one has not its
		// state (what it ran, what it received), and the leader moves the
		// part once it sees this process's boot.
		n.stats.otherBoot.Add(1)
		n.log.Info("assignment for an earlier process of this node ignored", "run", a.Run, "gen", a.Gen, "boot", b, "mine", n.boot)
		return
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	old := n.runs[a.Run]
	if old != nil && a.Gen <= old.sm.Gen() {
		n.mu.Unlock()
		// Already running it: a copy the leader sent before our ack
		// reached it, or because the ack was lost. Ack again.
		n.stats.assignmentCopies.Add(1)
		n.sendAck(a, false)
		return
	}
	if g, ok := n.ended[a.Run]; ok && a.Gen <= g {
		n.mu.Unlock()
		return // released already: a late re-send
	}
	if err, ok := n.refused[runGen{a.Run, a.Gen}]; ok {
		n.mu.Unlock()
		n.sendFail(a.Run, "", err) // the leader may have missed it
		return
	}
	if n.draining && old == nil {
		n.mu.Unlock()
		n.log.Info("draining: assignment ignored", "run", a.Run, "gen", a.Gen)
		return
	}
	n.mu.Unlock()
	// An Assignment that names its plan by digest alone runs the plan of
	// that digest this node compiled before (checked against the digest
	// then), or none: a node that does not hold it (restarted, evicted it,
	// never had it) takes nothing and asks for it, and the leader sends the
	// Assignment again with the plan.
	var cached *cachedPlan
	if a.PlanRef() {
		cp, ok := n.graphs.held(a.PlanDigest, len(a.Owner))
		if !ok {
			n.stats.planNeeded.Add(1)
			n.log.Info("assignment names a plan this node does not hold: asking for it", "run", a.Run, "gen", a.Gen)
			n.sendAck(a, true)
			return
		}
		cached = cp
		a.Plan = cp.plan // read-only: the cache's copy
	}
	// Acknowledge receipt before building (seconds for a big flow), so the
	// leader sends no more copies meanwhile (coord.Leader.Ack).
	n.sendAck(a, false)
	if old != nil {
		// A newer generation of a run held here: nodes were lost. Keep what
		// runs here and take over what moved here (recover.go).
		if err := old.update(a); err != nil {
			n.refuse(a, err)
		}
		return
	}

	r, err := newRun(n, a, cached)
	var p *part
	if err == nil {
		p, err = r.build(r.firstIn) // the SM's Mine, found with the plan's check (planFits)
		r.firstIn = nil
	}
	n.mu.Lock()
	if err == nil && n.closed {
		err = ErrClosed
	}
	var open *localexec.OpenRun
	if err == nil {
		r.hint(p)
		open, err = n.ex.RunOpen(p.tf, r.onIdle)
	}
	if err != nil {
		n.mu.Unlock()
		r.cleanup(nil)
		if r.tab != nil {
			n.events.forget(r.tab)
		}
		n.refuse(a, err)
		return
	}
	r.addPart(p, open)
	n.runs[a.Run] = r
	var follow uint64
	if a.Gen > 1 {
		// A node new to the run at a later generation holds only tasks of
		// lost nodes: rebuild their inputs from the record (not idle until
		// the follow has caught up, from before the first report on), and
		// mark that it took the generation, as a switch does.
		follow = r.apply(r.sm.StartFollow()).follow
		r.markSwitch(a.Gen)
	}
	held := n.takeEarlyLocked(a.Run)
	r.takeEarly(held)
	r.unread = n.takeUnreadLocked(a.Run)
	// Read once the run is held: a loss counted later is a reconnect's or
	// a slow consumer's, whose replay (OnReconnect, OnSlowConsumer) covers
	// the runs held by then. A slow consumer's drop before this point is
	// in sigSub.Dropped already (counted before the Assignment was read).
	read := a.Gen > 1 || len(r.unread) > 0 || n.mayHaveLostLocked(a.BootOf(me))
	n.wg.Add(1)
	go r.loop()
	n.mu.Unlock()
	n.stats.assignments.Add(1)
	n.log.Info("run started", "run", a.Run, "gen", a.Gen, "tasks", r.nLocal, "early", earlyCount(held), "reads_record", read)
	// Signals of this run published to this node before it held the run
	// and lost by core NATS (while it reconnected, or as a slow consumer)
	// or by the early buffer are in the record: read them back once, as
	// after a reconnect (found by the run-protocol simulation,
	// cluster/runsim), unless no such loss can have happened.
	if read {
		n.stats.startReads.Add(1)
		n.replayRun(a.Run)
	}
	if follow != 0 {
		r.startFollow(follow)
	}
}

// losses counts what may have lost a Signal addressed to this node (under
// n.mu): the connection's disconnects and asynchronous errors (a slow
// consumer's drops), the batches it dropped undecoded, and the Signals the
// early buffer evicted.
func (n *Node) losses() uint64 {
	cs := n.conn.Stats()
	k := cs.Disconnects + cs.AsyncErrors + cs.Malformed + cs.Oversized + cs.Mismatched + n.stats.evicted.Load()
	if n.sigSub != nil {
		// AsyncErrors hears of a drop late, on the client's callback
		// goroutine; the subscription counts it before the client reads
		// the connection's next message (an Assignment among them).
		k += n.sigSub.Dropped()
	}
	return k
}

// mayHaveLostLocked reports whether a Signal of a generation-1 run made for
// boot (its Assignment's entry for this node) can have been lost before the
// node held the run (under n.mu), so that the run must read its record at
// its start. None can when the run was made for this very process (so its
// leader learned the boot, which the node advertises from Start on, once
// its subscriptions were in force: every Signal of the run to this node
// was published after that) and nothing has lost a Signal here since those
// subscriptions: no disconnect, no slow consumer's drop, no batch dropped
// undecoded, no early Signal evicted. An Assignment that names no boot, or
// a Meta read before Start subscribed, reads the record.
func (n *Node) mayHaveLostLocked(boot string) bool {
	return boot != n.boot || n.metaEarly.Load() || !n.subscribed.Load() || n.losses() != n.lossBase
}

// refuse records and reports an Assignment that cannot run here.
func (n *Node) refuse(a *transport.Assignment, err error) {
	err = fmt.Errorf("%w: node %s, run %s gen %d: %w", ErrRefused, n.id, a.Run, a.Gen, err)
	n.mu.Lock()
	if len(n.refused) > maxEndedRuns {
		clear(n.refused)
	}
	n.refused[runGen{a.Run, a.Gen}] = err
	n.mu.Unlock()
	n.stats.refused.Add(1)
	n.log.Warn("assignment refused", "run", a.Run, "gen", a.Gen, "err", err)
	n.sendFail(a.Run, taskOf(err), err)
}

func (n *Node) cancel(c *transport.Cancel) {
	n.mu.Lock()
	r := n.runs[c.Run]
	if r == nil {
		n.takeEarlyLocked(c.Run)
		n.takeUnreadLocked(c.Run)
		if _, ok := n.ended[c.Run]; !ok {
			n.markEndedLocked(c.Run, c.Gen)
		}
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()
	n.mu.Lock()
	gen := r.sm.Gen()
	n.mu.Unlock()
	if c.Gen != 0 && c.Gen < gen {
		return // a cancel of a generation we no longer run
	}
	r.requestStop(c.Reason)
}

func (n *Node) markEndedLocked(run string, gen uint64) {
	if _, ok := n.ended[run]; !ok {
		n.endedQ = append(n.endedQ, run)
		if len(n.endedQ) > maxEndedRuns {
			delete(n.ended, n.endedQ[0])
			n.endedQ = n.endedQ[1:]
		}
	}
	if gen > n.ended[run] {
		n.ended[run] = gen
	}
}

func (n *Node) probe(e *transport.Envelope) {
	wave, err := proto.ProbeWave(e.Body)
	if err != nil {
		n.log.Warn("bad probe", "run", e.Run, "err", err)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if r := n.runs[e.Run]; r != nil {
		r.probe(wave)
	}
}

// onBatch handles one Signal batch of the node's subscription (the
// subscription serialises batches). A Signal of a run the node has not been
// assigned yet is kept until its Assignment comes.
func (n *Node) onBatch(b *transport.Batch) {
	if g := n.batchGate.Load(); g != nil {
		(*g)() // a test holds the signal subscription's handler
	}
	n.take(b)
}

// take is onBatch; it returns how many Signals were new to a run held here.
// A batch's Signals all belong to one run (its subject names it): each
// stretch of one run's Signals is accepted at once.
func (n *Node) take(b *transport.Batch) (fresh int) {
	from, sigs := b.From, b.Signals
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := 0; i < len(sigs); {
		run := sigs[i].Run
		j := i + 1
		for j < len(sigs) && sigs[j].Run == run {
			j++
		}
		if r := n.runs[run]; r != nil {
			fresh += r.take(from, b.Seq, i, sigs[i:j], i == 0 && j == len(sigs))
			i = j
			continue
		}
		n.earlyLocked(from, b.Seq, i, sigs[i:j], len(sigs))
		i = j
	}
	return fresh
}

// earlyRun is what the early buffer holds for one run.
type earlyRun struct {
	since time.Time // its first early Signal
	seq   uint64    // its entry in earlyQ
	held  []early   // a stretch of one batch each, in arrival order
	n     int       // Signals in held
}

type earlyRef struct {
	run string
	seq uint64
}

// earlyLocked keeps Signals of one run not (or no longer) held here until
// its Assignment comes, or drops them (under n.mu): sigs are those at
// first, first+1, … of batch seq (of size Signals) of sender from. A Signal
// the buffer cannot keep is counted as evicted, never lost: the run reads
// its record when it starts.
func (n *Node) earlyLocked(from string, seq uint64, first int, sigs []transport.Signal, size int) {
	run := sigs[0].Run
	if _, gone := n.ended[run]; gone {
		// The run ended here: its termination counted every Signal it was
		// owed, so these are copies (the record read at its start, or a
		// batch sent again after a reconnect) with nothing left to do.
		n.stats.late.Add(uint64(len(sigs)))
		return
	}
	if n.closed {
		n.stats.dropped.Add(uint64(len(sigs)))
		return
	}
	now := n.now()
	n.expireEarlyLocked(now)
	var outs outputCopy // a Signal not kept (continue, below) takes no copy
	var er *earlyRun
	var cur *early // the stretch the Signals kept go to, in er.held
	evicted := 0
	for k := range sigs {
		s := &sigs[k]
		if er == nil {
			if er = n.early[run]; er == nil {
				for len(n.early) >= maxEarlyRuns {
					n.evictOldestLocked("the buffer holds its limit of runs")
				}
				n.earlySeq++
				er = &earlyRun{since: now, seq: n.earlySeq}
				n.early[run] = er
				n.earlyQ = append(n.earlyQ, earlyRef{run, er.seq})
			}
		}
		if er.n >= maxEarlySignals {
			evicted++ // and every Signal after it: er keeps its count
			n.unreadLocked(run, from, s.Gen, seq)
			continue
		}
		own := false
		for n.earlyN >= maxEarlyTotal && !own {
			own = n.evictOldestLocked("the buffer holds its limit of signals") == run
		}
		if own {
			evicted++ // its own run was the oldest
			n.unreadLocked(run, from, s.Gen, seq)
			er, cur = nil, nil
			continue
		}
		if cur == nil {
			room := min(len(sigs)-k, maxEarlySignals-er.n)
			er.held = append(er.held, early{from: from, seq: seq, i: first + k, n: size, sigs: make([]transport.Signal, 0, room)})
			cur = &er.held[len(er.held)-1]
		}
		c := *s
		c.Output = outs.of(s.Output)
		cur.sigs = append(cur.sigs, c)
		er.n++
		n.earlyN++
	}
	if kept := len(sigs) - evicted; kept > 0 {
		n.stats.early.Add(uint64(kept))
	}
	if evicted > 0 {
		n.stats.evicted.Add(uint64(evicted))
		n.log.Debug("signals before their assignment not kept: their run holds its limit, or was evicted", "run", run, "from", from, "signals", evicted)
	}
}

// outputCopy keeps the node's own copy of a decoded Signal's Output, one
// for the Signals that share it: a fan entry decodes to Signals sharing
// their Output, as a local producer's successors share its output.
type outputCopy struct {
	src, out []byte // the Output as decoded, and its copy
	ok       bool
}

// of is the copy of b, made unless b is the Output copied last.
func (c *outputCopy) of(b []byte) []byte {
	if !c.ok || !sameOutput(b, c.src) {
		c.src, c.out, c.ok = b, clone(b), true
	}
	return c.out
}

// sameOutput reports whether a and b are one slice (a fan's Signals decode
// to Signals sharing their Output).
func sameOutput(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 && (a == nil) == (b == nil) || len(a) > 0 && &a[0] == &b[0])
}

// takeEarly decides the Signals kept before the run's Assignment (under
// n.mu), each stretch of one batch at once: a whole batch as one (so that
// its copy in the record is skipped), else from its first Signal kept.
func (r *run) takeEarly(held []early) {
	for i := range held {
		e := &held[i]
		r.take(e.from, e.seq, e.i, e.sigs, e.i == 0 && len(e.sigs) == e.n)
		// Their outputs and contexts go with the copies, dropped whole:
		// clearing them one by one cost a write barrier a pointer.
		e.sigs = nil
	}
}

// takeEarlyLocked removes run's early Signals from the buffer and returns
// them.
func (n *Node) takeEarlyLocked(run string) []early {
	er := n.early[run]
	if er == nil {
		return nil
	}
	delete(n.early, run)
	n.earlyN -= er.n
	if len(n.earlyQ) > 2*maxEarlyRuns+64 { // many stale entries: keep the live ones
		q := n.earlyQ[:0]
		for _, ref := range n.earlyQ {
			if e := n.early[ref.run]; e != nil && e.seq == ref.seq {
				q = append(q, ref)
			}
		}
		clear(n.earlyQ[len(q):])
		n.earlyQ = q
	}
	return er.held
}

// oldestEarlyLocked drops stale entries from the head of earlyQ and returns
// the oldest run held, or "".
func (n *Node) oldestEarlyLocked() (string, *earlyRun) {
	for len(n.earlyQ) > 0 {
		ref := n.earlyQ[0]
		if er := n.early[ref.run]; er != nil && er.seq == ref.seq {
			return ref.run, er
		}
		n.earlyQ[0] = earlyRef{}
		n.earlyQ = n.earlyQ[1:]
	}
	return "", nil
}

// expireEarlyLocked evicts the runs whose first early Signal is EarlyTTL old.
func (n *Node) expireEarlyLocked(now time.Time) {
	for {
		run, er := n.oldestEarlyLocked()
		if er == nil || now.Sub(er.since) < n.cfg.EarlyTTL {
			return
		}
		n.evictLocked(run, "its assignment did not come in time")
	}
}

// evictOldestLocked evicts the oldest run of the early buffer and returns
// it ("" when the buffer is empty).
func (n *Node) evictOldestLocked(why string) string {
	run, _ := n.oldestEarlyLocked()
	if run != "" {
		n.evictLocked(run, why)
	}
	return run
}

func (n *Node) evictLocked(run, why string) {
	held := n.takeEarlyLocked(run)
	for i := range held {
		for j := range held[i].sigs { // a stretch is one batch's: its generations, most often one
			if j == 0 || held[i].sigs[j].Gen != held[i].sigs[j-1].Gen {
				n.unreadLocked(run, held[i].from, held[i].sigs[j].Gen, held[i].seq)
			}
		}
	}
	k := earlyCount(held)
	n.stats.evicted.Add(uint64(k))
	n.log.Debug("signals before their assignment evicted; the run's record supplies them if it starts here",
		"run", run, "signals", k, "why", why)
}

// maxUnreadRuns bounds Node.unread (a note is a run id and a sender or
// two: about 5 MB at the bound): past it, the runs evicted first are
// forgotten, with a warning, and such a run, should it start here, reads
// its record once at its start, not until the record shows its evicted
// batches (the store-lag hole the note closes is open again for it).
// rereadsWarn is the read of a run found behind that logs a warning
// (about 4 s after its start).
const (
	maxUnreadRuns = 64 * maxEarlyRuns
	rereadsWarn   = 10
)

// unreadLocked notes that the early buffer evicted a Signal of run from
// batch seq of sender from (under n.mu).
func (n *Node) unreadLocked(run, from string, gen, seq uint64) {
	u := n.unread[run]
	if u == nil {
		if n.unread == nil {
			n.unread = map[string]map[unreadKey]uint64{} // a Node made by hand (tests)
		}
		for len(n.unreadQ) >= maxUnreadRuns {
			n.log.Warn("forgetting which batches of a run the early buffer evicted; should it start here, its record is read once, not until it shows them",
				"run", n.unreadQ[0])
			delete(n.unread, n.unreadQ[0])
			n.unreadQ = n.unreadQ[1:]
		}
		u = map[unreadKey]uint64{}
		n.unread[run] = u
		n.unreadQ = append(n.unreadQ, run)
	}
	k := unreadKey{from, gen}
	if s, ok := u[k]; !ok || seq > s {
		u[k] = seq
	}
}

// takeUnreadLocked removes and returns what unread holds for run.
func (n *Node) takeUnreadLocked(run string) map[unreadKey]uint64 {
	u := n.unread[run]
	if u == nil {
		return nil
	}
	delete(n.unread, run)
	if i := slices.Index(n.unreadQ, run); i >= 0 {
		n.unreadQ = slices.Delete(n.unreadQ, i, i+1)
	}
	return u
}

// earlyCount is how many Signals held keeps.
func earlyCount(held []early) (k int) {
	for i := range held {
		k += len(held[i].sigs)
	}
	return k
}

// sendFail tells the leader that task (a path; "" for the whole
// assignment) of run failed for good.
func (n *Node) sendFail(run, task string, err error) {
	n.stats.failure.Add(1)
	body, _ := jsonMarshal(proto.FailBody{Task: task, Error: err.Error()})
	env := &transport.Envelope{Kind: proto.KindFail, Run: run, Node: n.id, Body: body}
	if perr := n.conn.Publish(proto.FailSubject(n.id), transport.Encode(env)); perr != nil {
		n.log.Error("fail envelope not sent", "run", run, "task", task, "err", perr)
	}
}

// sendAck acknowledges the receipt of Assignment a to the leader, or
// (needPlan) says that this node does not hold the plan a names and took
// nothing.
func (n *Node) sendAck(a *transport.Assignment, needPlan bool) {
	ack := &transport.Ack{Run: a.Run, Gen: a.Gen, Node: n.id, Boot: n.boot, NeedPlan: needPlan}
	if err := n.conn.Publish(proto.AckSubject(n.id), transport.Encode(ack)); err != nil {
		n.log.Warn("assignment ack not sent", "run", a.Run, "gen", a.Gen, "err", err)
	}
}

func (n *Node) sendReport(rep *transport.TermReport) {
	if err := n.conn.Publish(proto.TermSubject(n.id), transport.Encode(rep)); err != nil {
		n.log.Warn("term report not sent", "run", rep.Run, "err", err)
	}
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
