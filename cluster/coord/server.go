package coord

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hetflow/hetflow/cluster/dashboard"
	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// ErrConfig is matched by a Config that New or Start refuse.
var ErrConfig = errors.New("coord: bad config")

// Default run size limits (Config.MaxTasks, Config.MaxFlowBytes). A 100K-task
// run takes about 30 s and 1.3–2.7 GiB through a dev cluster
// (docs/benchmarks/cluster.md) and every part of the control plane grows
// with it (the raft entry, the Assignment each node parses, the status
// fold); a 1M-task one would take minutes and tens of GiB, so it is refused
// (docs/benchmarks/bad-input.md). 8 MiB holds a 100K-task file with edges.
const (
	DefaultMaxTasks     = 100_000
	DefaultMaxFlowBytes = 8 << 20
)

// Config configures a coordinator Server.
type Config struct {
	ID         string   // coordinator id (transport.ValidateID); raft server id and member name
	DataDir    string   // raft log, stable store and snapshots (created if missing)
	RaftAddr   string   // host:port raft listens on; port 0 picks one
	HTTPAddr   string   // host:port of the API; port 0 picks one
	GossipAddr string   // host:port memberlist listens on; port 0 picks one
	Join       []string // gossip seeds
	Bootstrap  bool     // form a new cluster of this one server (a no-op when DataDir holds state)
	Advertise  string   // host others reach this server at; "" means each bind address's host

	NATSURL string          // NATS to connect to, or
	NATS    *transport.Conn // an existing connection (not closed by Close)
	NATSTLS *tls.Config     // with NATSURL: speak TLS to NATS, trusting its RootCAs (optional)
	// Streams, when set, is applied with EnsureStreams at Start; otherwise
	// the JetStream streams are created with defaults when missing.
	Streams *transport.StreamConfig

	Secret    proto.Secret  // NATS credentials, gossip key, API token; zero: no security
	Catalog   spec.Catalog  // functions a flow may name; nil: funcs.Default()
	Retention time.Duration // how long finished runs are kept; 0: 1h
	// MaxTasks bounds the tasks of one run after module expansion (0:
	// DefaultMaxTasks); MaxFlowBytes bounds a submitted flow file (0:
	// DefaultMaxFlowBytes). A flow over either is refused before it is
	// expanded, partitioned or committed, with an error naming the limit.
	MaxTasks     int
	MaxFlowBytes int
	// Placement is the cost model runs are placed by (PlanWith; the zero
	// value is the default model: 100 µs hops on loopback).
	Placement Placement
	// TLS, when set, serves the API over HTTPS with it (it needs a
	// certificate); every coordinator of a cluster then does, and a
	// follower forwards to the leader over HTTPS, trusting ForwardTLS (nil:
	// the system roots).
	TLS        *tls.Config
	ForwardTLS *tls.Config
	// RaftTimeout is raft's heartbeat and election timeout (default 500ms:
	// a follower misses the leader after 0.5–1 s and a new leader is elected
	// well within the 3 s the failover target allows; see the README).
	RaftTimeout time.Duration
	// InProcessNodes says the cluster's nodes run in this process (the
	// all-in-one dev cluster): gossip cannot learn anything there (a busy
	// process starves every member at once), so gossip never declares one
	// dead (Liveness.InProcess).
	InProcessNodes bool

	// oldLog plays a coordinator of a build before proto.Meta.Log (a
	// test's mixed-version cluster): it says it reads no later entry
	// form, and writes none.
	oldLog bool
	// ReadyNodes, when above 0, keeps the coordinator not ready (/healthz
	// 503, a submit refused as proto.ErrNotReady, which clients retry)
	// until that many nodes have been alive at once: a cluster that knows
	// its size (the dev cluster) is not up before its nodes are. Once
	// reached it stays reached; a node lost later is the liveness rules'
	// business, not readiness.
	ReadyNodes int
	// NodeSilence is how long a node gossip declares dead must stay unheard
	// over NATS before its tasks move (default DefaultSilence; see Liveness).
	NodeSilence time.Duration
	// MaxConns bounds the API's open connections (0: DefaultMaxConns); one
	// over it is closed at once. Each connection is also bounded in time:
	// headers 10 s, a whole request 30 s, idle keep-alive 30 s.
	MaxConns int
	Logger   *slog.Logger // nil: discard

	// httpTimes, when not zero, replaces the API's time limits (tests).
	httpTimes httpTimes
}

// Server is one coordinator: a raft replica of the FSM, a member of the
// gossip ring, the HTTP API and, while it leads, the leader loop.
type Server struct {
	cfg      Config
	catalogs catalogCache // the nodes' function catalogs (catalog.go)
	flows    flowCaches   // parsed submits and expanded run flows (flowcache.go)
	log      *slog.Logger
	fsm      *raftFSM
	reg      *prometheus.Registry
	http     *prometheus.CounterVec

	raft    *raft.Raft
	store   *boltStore
	members *member.List
	nc      *transport.Conn
	ownNC   bool
	httpLn  net.Listener
	conns   *limitListener // under httpLn: counts and bounds the API's connections
	httpSrv *http.Server
	fwd     *http.Client
	started time.Time
	nodesUp atomic.Bool          // Config.ReadyNodes were alive at once (nodesReady)
	dash    *dashboard.Dashboard // the web view at / (dashboard.go)
	dashSrc *dashSource

	kick       chan struct{} // wakes the leader loop (a run changed)
	memberKick chan struct{} // wakes the leader loop (membership changed)
	stop       chan struct{}
	wg         sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	status   map[string]*statusCache
	submits  map[string]*inflightSubmit // submits being made, by run id (SubmitParams)
	raftAddr string
	httpAddr string
	peers    map[string]peerAddrs // the other coordinators, by id (peers.go)

	// messages from peers dropped undecoded (hetflow_messages_dropped_total)
	drops     *prometheus.CounterVec
	dropMu    sync.Mutex
	dropCount map[string]uint64 // "subject reason" → count

	// verdicts and deaths (Verdicts)
	refusedMetric prometheus.Counter
	deathsMetric  *prometheus.CounterVec
	longPolls     atomic.Int64 // status reads waiting for a change (awaitChange)
	// applied is closed (and the next made) each time the FSM applies a
	// command: status reads waiting for a run's verdict (awaitChange) see
	// it when it is applied, not at their next tick.
	appliedMu                sync.Mutex
	applied                  chan struct{}
	refused, deathsConfirmed atomic.Uint64
	deathsRefuted            atomic.Uint64

	// Assignment copies sent to nodes (hetflow_assignments_sent_total)
	sentMetric prometheus.Counter
	sent       atomic.Uint64

	// the event stream's handle, looked up once (eventStream)
	evStream atomic.Pointer[jetstream.Stream]

	// submits made (parsed, validated, placed) and retries that waited
	// for one in flight instead (SubmitParams); submitHook, if set, is
	// called as each is made (tests)
	submitsMade, submitsJoined atomic.Int64
	submitHook                 func()
	// runs whose flow was validated, expanded and placed for them (not
	// taken from flowCaches.placed)
	placements atomic.Int64
	// votersRefused counts the times a leader did not add a coordinator
	// of an earlier build as a voter (syncMembers): a test waits on it.
	votersRefused atomic.Int64
	// eventReads counts the reads of the event stream a status cache made
	// (readEvents): the tests see which reads asked the stream.
	eventReads atomic.Int64
	// noticeAnswers counts the long polls answered by a read that a
	// notice of stored events woke (awaitChange): a test sees that the
	// notice, not a look at the tick, found the event.
	noticeAnswers atomic.Int64
}

// New checks cfg and returns a Server that is not started.
func New(cfg Config) (*Server, error) {
	if err := transport.ValidateID("coordinator", cfg.ID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("%w: no data directory", ErrConfig)
	}
	for what, a := range map[string]string{"raft": cfg.RaftAddr, "http": cfg.HTTPAddr, "gossip": cfg.GossipAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("%w: %s address %q: %v", ErrConfig, what, a, err)
		}
	}
	if err := cfg.Placement.Check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.Catalog == nil {
		cfg.Catalog = funcs.Default()
	}
	if cfg.Retention <= 0 {
		cfg.Retention = time.Hour
	}
	if cfg.RaftTimeout <= 0 {
		cfg.RaftTimeout = 500 * time.Millisecond
	}
	if cfg.MaxTasks <= 0 {
		cfg.MaxTasks = DefaultMaxTasks
	}
	if cfg.TLS != nil && len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetCertificate == nil {
		return nil, fmt.Errorf("%w: TLS without a certificate", ErrConfig)
	}
	if cfg.httpTimes == (httpTimes{}) {
		cfg.httpTimes = httpTimes{header: httpReadHeader, read: httpRead, write: httpWrite, idle: httpIdle}
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxFlowBytes <= 0 {
		cfg.MaxFlowBytes = DefaultMaxFlowBytes
	}
	cfg.MaxTasks = min(cfg.MaxTasks, spec.MaxVertices)
	cfg.MaxFlowBytes = min(cfg.MaxFlowBytes, spec.MaxFileSize)
	s := &Server{cfg: cfg, log: cfg.Logger, kick: make(chan struct{}, 1), memberKick: make(chan struct{}, 1),
		stop: make(chan struct{}), status: map[string]*statusCache{}, submits: map[string]*inflightSubmit{}, flows: newFlowCaches(), dropCount: map[string]uint64{}, fwd: &http.Client{Timeout: 30 * time.Second}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("coordinator", cfg.ID)
	if cfg.TLS != nil {
		s.fwd.Transport = &http.Transport{TLSClientConfig: cfg.ForwardTLS, Proxy: http.ProxyFromEnvironment}
	}
	s.fsm = &raftFSM{f: NewFSM(), changed: func() { wake(s.kick); s.broadcastApplied() }, noRanges: cfg.oldLog}
	s.initMetrics()
	return s, nil
}

// appliedCh is closed at the FSM's next applied command.
func (s *Server) appliedCh() <-chan struct{} {
	s.appliedMu.Lock()
	defer s.appliedMu.Unlock()
	if s.applied == nil {
		s.applied = make(chan struct{})
	}
	return s.applied
}

// broadcastApplied wakes everything waiting on appliedCh.
func (s *Server) broadcastApplied() {
	s.appliedMu.Lock()
	defer s.appliedMu.Unlock()
	if s.applied != nil {
		close(s.applied)
		s.applied = nil
	}
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// advertised returns host:port others reach a listener at.
func (s *Server) advertised(bind string, ln net.Addr) (string, error) {
	_, port, _ := net.SplitHostPort(ln.String())
	host := s.cfg.Advertise
	if host == "" {
		host, _, _ = net.SplitHostPort(bind)
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return "", fmt.Errorf("%w: %s listens on every interface: give an advertise host", ErrConfig, bind)
		}
	}
	return net.JoinHostPort(host, port), nil
}

// Start opens the data directory, starts raft (bootstrapping when asked
// and the directory is empty), the API, NATS and the gossip ring, and
// returns. It does not wait for a leader (see WaitLeader).
func (s *Server) Start(ctx context.Context) (err error) {
	s.mu.Lock()
	if s.closed || s.raft != nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: started twice or after Close", ErrConfig)
	}
	s.mu.Unlock()
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.started = time.Now()
	if err := s.startRaft(); err != nil {
		return err
	}
	if err := s.startNATS(ctx); err != nil {
		return err
	}
	if err := s.startHTTP(); err != nil {
		return err
	}
	if err := s.startMembers(ctx); err != nil {
		return err
	}
	s.serveHTTP()
	s.wg.Add(2)
	go s.watchLeadership()
	go s.findPeers()
	return nil
}

func (s *Server) startRaft() error {
	if err := os.MkdirAll(s.cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	s.loadPeers()
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: &slogWriter{s.log}})
	store, err := openBoltStore(filepath.Join(s.cfg.DataDir, "raft.db"))
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.store = store
	s.mu.Unlock()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(s.cfg.DataDir, 2, hl)
	if err != nil {
		return fmt.Errorf("%w: snapshot store: %w", ErrDataDir, err)
	}
	ln, err := net.Listen("tcp", s.cfg.RaftAddr)
	if err != nil {
		return fmt.Errorf("coord: raft listen: %w", err)
	}
	adv, err := s.advertised(s.cfg.RaftAddr, ln.Addr())
	if err != nil {
		ln.Close()
		return err
	}
	s.raftAddr = adv
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: newStreamLayer(ln, adv), MaxPool: 3, Timeout: 10 * time.Second, Logger: hl})

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(s.cfg.ID)
	rc.HeartbeatTimeout = s.cfg.RaftTimeout
	rc.ElectionTimeout = s.cfg.RaftTimeout
	rc.LeaderLeaseTimeout = s.cfg.RaftTimeout / 2
	rc.Logger = hl
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		trans.Close()
		return fmt.Errorf("coord: log cache: %w", err)
	}
	if s.cfg.Bootstrap {
		has, err := raft.HasExistingState(logs, store, snaps)
		if err != nil {
			trans.Close()
			return fmt.Errorf("coord: read raft state: %w", err)
		}
		if !has {
			conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: rc.LocalID, Address: raft.ServerAddress(adv)}}}
			if err := raft.BootstrapCluster(rc, logs, store, snaps, trans, conf); err != nil {
				trans.Close()
				return fmt.Errorf("coord: bootstrap: %w", err)
			}
		}
	}
	r, err := raft.NewRaft(rc, s.fsm, logs, store, snaps, trans)
	if err != nil {
		trans.Close()
		// its errors are the stores' and the snapshots' (a damaged snapshot
		// fails its checksum here)
		return fmt.Errorf("%w: start raft from %s: %w; %s", ErrDataDir, s.cfg.DataDir, err, recoverHint)
	}
	s.mu.Lock()
	s.raft = r
	s.mu.Unlock()
	return nil
}

func (s *Server) startNATS(ctx context.Context) error {
	switch {
	case s.cfg.NATS != nil:
		s.nc = s.cfg.NATS
	case s.cfg.NATSURL != "":
		opts := []transport.Option{transport.WithName(s.cfg.ID)}
		if s.cfg.Secret.NATSPassword != "" {
			opts = append(opts, transport.WithUserPassword(s.cfg.Secret.NATSUser, s.cfg.Secret.NATSPassword))
		}
		if s.cfg.NATSTLS != nil {
			opts = append(opts, transport.WithTLS(s.cfg.NATSTLS))
		}
		nc, err := transport.Connect(ctx, s.cfg.NATSURL, opts...)
		if err != nil {
			return fmt.Errorf("coord: %w", err)
		}
		s.nc, s.ownNC = nc, true
	default:
		s.log.Warn("no NATS: runs are committed but not executed")
		return nil
	}
	if s.cfg.Streams != nil {
		return s.nc.EnsureStreams(ctx, *s.cfg.Streams)
	}
	js := s.nc.JetStream()
	for _, name := range []string{transport.StreamRecord, transport.StreamEvents} {
		if _, err := js.Stream(ctx, name); err != nil {
			return s.nc.EnsureStreams(ctx, transport.StreamConfig{})
		}
	}
	return nil
}

func (s *Server) startHTTP() error {
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("coord: http listen: %w", err)
	}
	adv, err := s.advertised(s.cfg.HTTPAddr, ln.Addr())
	if err != nil {
		ln.Close()
		return err
	}
	s.conns = &limitListener{Listener: ln, max: s.cfg.MaxConns}
	ln = s.conns
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	s.mu.Lock()
	s.httpLn, s.httpAddr = ln, adv
	s.httpSrv = &http.Server{Handler: s.handler(), ReadHeaderTimeout: s.cfg.httpTimes.header, ReadTimeout: s.cfg.httpTimes.read,
		WriteTimeout: s.cfg.httpTimes.write, IdleTimeout: s.cfg.httpTimes.idle, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)} // TLS handshake errors and the like
	s.mu.Unlock()
	return nil
}

func (s *Server) serveHTTP() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.httpSrv.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", "err", err)
		}
	}()
}

func (s *Server) startMembers(ctx context.Context) error {
	// No Join here: Start would wait for a seed, and a coordinator whose
	// seeds are down must still start (findPeers keeps looking).
	mcfg := member.Config{
		ID: s.cfg.ID, BindAddr: s.cfg.GossipAddr, Advertise: s.cfg.Advertise,
		Meta:      proto.Meta{Role: proto.RoleCoordinator, ID: s.cfg.ID, Raft: s.raftAddr, HTTP: s.httpAddr, Log: s.logForms()},
		SecretKey: s.cfg.Secret.GossipKey, Logger: s.log,
		OnEvent: func(member.Event) { wake(s.memberKick) },
	}
	if s.cfg.InProcessNodes { // the dev cluster: its ring is one process's
		mcfg.NoCompression = true
	}
	ml, err := member.New(mcfg)
	if err != nil {
		return fmt.Errorf("coord: %w", err)
	}
	s.mu.Lock()
	s.members = ml
	s.mu.Unlock()
	if err := ml.Start(ctx); err != nil {
		return fmt.Errorf("coord: %w", err)
	}
	// One try now: a seed with another cluster secret fails the start, and
	// with the seeds up the ring is whole when Start returns.
	seeds, _ := s.seeds(ml.Members())
	n, err := s.joinSeeds(seeds)
	if err != nil {
		return err
	}
	if n == 0 && len(seeds) > 0 {
		s.log.Warn("no gossip seed answered yet; still looking", "seeds", seeds)
	}
	return nil
}

// watchLeadership runs the leader loop while this server leads and can lead
// (canLead); elected before it can, it hands the leadership on after
// leadGrace, and again every leadGrace while that fails.
func (s *Server) watchLeadership() {
	defer s.wg.Done()
	var term *leaderTerm
	defer func() { term.end() }()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	var ringAt, stuckSince time.Time // when canLead first held; when elected without it
	for {
		select {
		case <-s.stop:
			return
		case <-s.raft.LeaderCh():
		case <-t.C:
		}
		leading := s.raft.State() == raft.Leader
		if ringAt.IsZero() {
			if ok, _ := s.canLead(); ok {
				ringAt = time.Now()
			}
		}
		switch {
		case leading && term == nil:
			ok, why := s.canLead()
			if ok {
				// The leader loop counts "never seen in the ring" from
				// s.started: from when this server first saw its peers.
				// (No term runs now, and startTerm's go orders this write
				// before the loop's reads.)
				if ringAt.After(s.started) {
					s.started = ringAt
				}
				stuckSince = time.Time{}
				term = s.startTerm()
				continue
			}
			switch {
			case stuckSince.IsZero():
				stuckSince = time.Now()
				s.log.Warn("elected, but cannot lead yet", "why", why)
			case time.Since(stuckSince) >= leadGrace:
				stuckSince = time.Now()
				err := s.raft.LeadershipTransfer().Error()
				s.log.Warn("handed the leadership on: cannot lead", "why", why, "err", err)
			}
		case !leading:
			stuckSince = time.Time{}
			if term != nil {
				term.end()
				term = nil
			}
		}
	}
}

// leaderTerm is one run of the leader loop.
type leaderTerm struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *Server) startTerm() *leaderTerm {
	ctx, cancel := context.WithCancel(context.Background())
	t := &leaderTerm{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		s.lead(ctx)
	}()
	return t
}

// end stops the loop and waits for it; a nil term does nothing.
func (t *leaderTerm) end() {
	if t != nil {
		t.cancel()
		<-t.done
	}
}

// Close stops the leader loop, the API, the gossip membership (leaving the
// ring), raft and the stores, and joins every goroutine. It is safe to call
// more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	r, srv, ml, store := s.raft, s.httpSrv, s.members, s.store
	s.mu.Unlock()
	close(s.stop)
	s.closeDashboard() // its event streams would hold Shutdown up
	var errs []error
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		cancel()
		_ = s.httpLn.Close() // when Serve never ran
	}
	s.wg.Wait() // the leader loop and the HTTP server are gone
	if ml != nil {
		_ = ml.Leave(500 * time.Millisecond)
		errs = append(errs, ml.Shutdown())
	}
	if r != nil {
		if err := r.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("coord: raft shutdown: %w", err))
		}
	}
	if store != nil {
		errs = append(errs, store.Close())
	}
	if s.ownNC && s.nc != nil {
		errs = append(errs, s.nc.Close())
	}
	s.fwd.CloseIdleConnections()
	return errors.Join(errs...)
}

// Leader reports whether this server is the raft leader now.
func (s *Server) Leader() bool { return s.raft != nil && s.raft.State() == raft.Leader }

// ID is the server's id.
func (s *Server) ID() string { return s.cfg.ID }

// HTTPAddr is the API's advertised address (the bound port when :0 was given).
func (s *Server) HTTPAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.httpAddr
}

// RaftAddr is raft's advertised address.
func (s *Server) RaftAddr() string { return s.raftAddr }

// GossipAddr is the gossip address to name in other members' Join.
func (s *Server) GossipAddr() string { return s.members.LocalAddr() }

// WaitLeader waits until raft knows a leader (this server or another), or
// ctx ends.
func (s *Server) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if addr, _ := s.raft.LeaderWithID(); addr != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s: %w", proto.ErrNoLeader, s.cfg.ID, ctx.Err())
		case <-t.C:
		}
	}
}

// apply commits one command through raft and returns the FSM's answer.
func (s *Server) apply(c *Command) error {
	b, err := encodeCommand(c, c.Op == OpRunSubmit && s.entryRanges())
	if err != nil {
		return fmt.Errorf("coord: encode %s: %w", c.Op, err)
	}
	f := s.raft.Apply(b, 5*time.Second)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return fmt.Errorf("%w: %s: %w", proto.ErrNotLeader, c.Op, err)
		}
		return fmt.Errorf("coord: raft apply %s: %w", c.Op, err)
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return err
	}
	return nil
}

// logForms is the entry forms this coordinator says it reads
// (proto.Meta.Log): LogRanges, unless a test plays a coordinator of an
// earlier build (Config.oldLog).
func (s *Server) logForms() int {
	if s.cfg.oldLog {
		return 0
	}
	return LogRanges
}

// entryRanges reports whether a run_submit may go into the log with its
// assignment in ranges (framedRunSubmitRanges): this coordinator reads
// it, and so does every other server of the raft configuration, as the
// ring shows it (proto.Meta.Log). One the ring does not show now, or
// shows without the field, may be of an earlier build: the entry goes in
// the form every build reads. This is the cluster now, not what the log
// holds: the log may hold ranged entries from before a server left the
// ring. So a leader of this build never adds a coordinator of an earlier
// build as a voter, nor moves a known one to a new address (syncMembers);
// one downgraded in place, same id and address, after ranged entries
// were written cannot apply them (a downgrade, not supported).
func (s *Server) entryRanges() bool {
	if s.logForms() < LogRanges {
		return false
	}
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	var ms []member.Member
	for _, sv := range f.Configuration().Servers {
		if string(sv.ID) == s.cfg.ID {
			continue
		}
		if ms == nil {
			ms = s.members.Members()
		}
		i := slices.IndexFunc(ms, func(m member.Member) bool { return m.ID == string(sv.ID) })
		if i < 0 || ms[i].Meta.Role != proto.RoleCoordinator || ms[i].Meta.Log < LogRanges {
			return false
		}
	}
	return true
}

// leaderInfo names the current leader: its id, raft and HTTP addresses.
func (s *Server) leaderInfo() (proto.LeaderInfo, bool) {
	addr, id := s.raft.LeaderWithID()
	if id == "" {
		return proto.LeaderInfo{}, false
	}
	li := proto.LeaderInfo{ID: string(id), Raft: string(addr), Term: s.raft.CurrentTerm()}
	if string(id) == s.cfg.ID {
		li.HTTP = s.HTTPAddr()
	} else if m, ok := s.members.Member(string(id)); ok && m.Meta.HTTP != "" {
		li.HTTP = m.Meta.HTTP
	} else {
		s.mu.Lock()
		li.HTTP = s.peers[string(id)].HTTP // from peersFile: the ring has not shown it yet
		s.mu.Unlock()
	}
	return li, true
}

// slogWriter turns hclog's lines into slog records.
type slogWriter struct{ log *slog.Logger }

func (w *slogWriter) Write(b []byte) (int, error) {
	w.log.Warn(string(trimNL(b)))
	return len(b), nil
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
