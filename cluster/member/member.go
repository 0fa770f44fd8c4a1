package member

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/hetflow/hetflow/cluster/proto"
)

// Errors of this package.
var (
	ErrConfig  = errors.New("member: bad config")
	ErrJoin    = errors.New("member: cannot join")
	ErrClosed  = errors.New("member: shut down")
	ErrStarted = errors.New("member: already started")
	// ErrKey: a seed answered but the gossip keys differ (no key, or another
	// cluster secret). Start fails with it at once (with ErrJoin) instead of
	// retrying: waiting cannot fix a wrong key.
	ErrKey = errors.New("member: gossip key mismatch (no cluster secret, or another one)")
)

// Timing holds memberlist's failure-detection settings. The zero Timing means
// Tuned().
type Timing struct {
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	SuspicionMult  int
	GossipInterval time.Duration
}

// Tuned is the timing of docs/cluster-protocol.md: a crash is detected in
// about one second on a LAN.
func Tuned() Timing {
	return Timing{ProbeInterval: 200 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond, SuspicionMult: 2, GossipInterval: 50 * time.Millisecond}
}

// Config configures a List.
type Config struct {
	ID        string   // member name: the coordinator or node id
	BindAddr  string   // host:port to listen on (TCP and UDP); port 0 picks one
	Advertise string   // host others reach this member at; "" means BindAddr's host
	Join      []string // seeds (host:port); empty starts a new ring
	Meta      proto.Meta
	SecretKey []byte // 16, 24 or 32 bytes: encrypt and authenticate gossip; nil: none
	Timing    Timing // zero: Tuned()
	// NoCompression sends gossip as it is, not LZW-compressed (memberlist
	// reads both): for members on one machine (the dev cluster), where a
	// packet's compression (a 72 KB writer allocated each) saves nothing.
	NoCompression bool
	Retry         time.Duration // pause between join attempts (default 250ms)
	// Rejoin is how often the seeds are joined again while some member is
	// dead (healing a partition); default 2s, negative disables.
	Rejoin time.Duration
	// OnEvent receives membership changes, one at a time, in order, on a
	// goroutine of the List (never on memberlist's own).
	OnEvent func(Event)
	Logger  *slog.Logger // nil: discard
}

// State values of a Member are proto.NodeAlive, NodeSuspect, NodeDead, NodeLeft.

// Member is one member of the ring as this process sees it.
type Member struct {
	ID    string
	Addr  string // gossip host:port
	State string // proto.NodeAlive, NodeSuspect, NodeDead or NodeLeft
	Meta  proto.Meta
	Since time.Time // when State last changed
}

// EventKind says what changed.
type EventKind int

// Event kinds.
const (
	EventJoin   EventKind = iota + 1 // a member became alive
	EventUpdate                      // a member's metadata changed
	EventLeave                       // a member left on purpose (Leave)
	EventFail                        // a member was declared dead
)

func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventLeave:
		return "leave"
	case EventFail:
		return "fail"
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is one membership change.
type Event struct {
	Kind   EventKind
	Member Member
}

// leaveMsg prefixes the user message a leaving member sends to every member
// before memberlist's own leave, so they can tell "left" from "dead"
// (memberlist does not expose the difference).
const leaveMsg = "hf-leave:"

type entry struct {
	m       Member
	leaving bool
	lastAck time.Time
}

// List is this process's membership in the ring: a memberlist instance with a
// table of members (alive, suspect, dead, left) and an event feed.
type List struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	ml      *memberlist.Memberlist
	meta    []byte
	members map[string]*entry
	queue   []Event
	started bool
	left    bool
	closed  bool

	wake chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

// New checks cfg and returns a List that is not started.
func New(cfg Config) (*List, error) {
	if cfg.ID == "" {
		return nil, fmt.Errorf("%w: empty id", ErrConfig)
	}
	if _, _, err := net.SplitHostPort(cfg.BindAddr); err != nil {
		return nil, fmt.Errorf("%w: bind address %q: %v", ErrConfig, cfg.BindAddr, err)
	}
	if n := len(cfg.SecretKey); n != 0 && n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("%w: secret key must be 16, 24 or 32 bytes, got %d", ErrConfig, n)
	}
	if cfg.Timing == (Timing{}) {
		cfg.Timing = Tuned()
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 250 * time.Millisecond
	}
	if cfg.Rejoin == 0 {
		cfg.Rejoin = 2 * time.Second
	}
	l := &List{cfg: cfg, log: cfg.Logger, members: map[string]*entry{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	meta, err := encodeMeta(cfg.Meta)
	if err != nil {
		return nil, err
	}
	l.meta = meta
	return l, nil
}

func encodeMeta(m proto.Meta) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: meta: %v", ErrConfig, err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: meta is %d bytes, the limit is %d", ErrConfig, len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// Start creates the memberlist instance and joins the seeds, retrying until
// one answers or ctx ends (ErrJoin). A seed that answers with another gossip
// key (or none where we have one, or one where we have none) fails it at
// once with ErrJoin and ErrKey. With no seeds it starts a new ring.
// On error the List is shut down.
func (l *List) Start(ctx context.Context) error {
	l.mu.Lock()
	if l.started || l.closed {
		l.mu.Unlock()
		return ErrStarted
	}
	l.started = true
	l.mu.Unlock()
	mc, err := l.memberlistConfig()
	if err != nil {
		return err
	}
	// Create calls the delegates (which lock l.mu): do not hold it here.
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("member: start %s on %s: %w", l.cfg.ID, l.cfg.BindAddr, err)
	}
	l.mu.Lock()
	l.ml = ml
	l.mu.Unlock()

	l.wg.Add(1)
	go l.deliver()
	if len(l.cfg.Join) > 0 {
		if err := l.join(ctx); err != nil {
			l.Shutdown()
			return err
		}
	}
	if l.cfg.Rejoin > 0 && len(l.cfg.Join) > 0 {
		l.wg.Add(1)
		go l.rejoin()
	}
	return nil
}

func (l *List) memberlistConfig() (*memberlist.Config, error) {
	host, port, _ := net.SplitHostPort(l.cfg.BindAddr)
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return nil, fmt.Errorf("%w: bind port %q", ErrConfig, port)
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = l.cfg.ID
	mc.BindAddr = host
	mc.BindPort = p
	if host == "" {
		mc.BindAddr = "0.0.0.0"
	}
	if l.cfg.Advertise != "" {
		mc.AdvertiseAddr = l.cfg.Advertise
	} else if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		mc.AdvertiseAddr = host
	}
	mc.AdvertisePort = p
	t := l.cfg.Timing
	mc.ProbeInterval, mc.ProbeTimeout, mc.SuspicionMult, mc.GossipInterval = t.ProbeInterval, t.ProbeTimeout, t.SuspicionMult, t.GossipInterval
	mc.EnableCompression = !l.cfg.NoCompression
	mc.TCPTimeout = 2 * time.Second
	mc.PushPullInterval = 5 * time.Second
	mc.GossipToTheDeadTime = 5 * time.Second
	mc.DeadNodeReclaimTime = time.Second // a restarted member may come back under its name
	if len(l.cfg.SecretKey) > 0 {
		mc.SecretKey = l.cfg.SecretKey
	}
	mc.Delegate = (*delegate)(l)
	mc.Events = (*events)(l)
	mc.Ping = (*pings)(l)
	mc.Logger = log.New(&logWriter{l.log}, "", 0)
	return mc, nil
}

func (l *List) join(ctx context.Context) error {
	var last error
	for {
		l.mu.Lock()
		ml := l.ml
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return ErrClosed
		}
		n, err := ml.Join(l.cfg.Join)
		if n > 0 {
			l.log.Debug("joined", "id", l.cfg.ID, "contacted", n)
			return nil
		}
		last = err
		if err != nil && keyMismatch(err) {
			return fmt.Errorf("%w: %s via %v: %w: %v", ErrJoin, l.cfg.ID, l.cfg.Join, ErrKey, err)
		}
		t := time.NewTimer(l.cfg.Retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %s via %v: %v (%w)", ErrJoin, l.cfg.ID, l.cfg.Join, last, ctx.Err())
		case <-l.stop:
			t.Stop()
			return ErrClosed
		case <-t.C:
		}
	}
}

// Join contacts addrs (host:port) once and merges their view of the ring
// into this one, returning how many answered; a member that restarted, or
// that the others saw leave, is back in their ring when it contacts one of
// them. A seed with another gossip key gives an error matching ErrKey.
// Unlike Start it does not retry: callers that keep looking for seeds
// (coordinators, which seed from the raft configuration) loop themselves.
func (l *List) Join(addrs []string) (int, error) {
	l.mu.Lock()
	ml, closed := l.ml, l.closed
	l.mu.Unlock()
	if ml == nil || closed {
		return 0, ErrClosed
	}
	n, err := ml.Join(addrs)
	if n == 0 && err != nil && keyMismatch(err) {
		return 0, fmt.Errorf("%w: %s via %v: %w: %v", ErrJoin, l.cfg.ID, addrs, ErrKey, err)
	}
	return n, err
}

// keyMismatch tells memberlist's errors for a seed whose gossip key differs
// from ours (memberlist has no sentinels for them).
func keyMismatch(err error) bool {
	s := strings.ToLower(err.Error())
	for _, m := range []string{"no installed keys could decrypt", "remote state is encrypted and encryption is not configured",
		"encryption is configured but remote state is not encrypted"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// rejoin joins the seeds again while a member is dead, so the two halves of a
// healed partition find each other.
func (l *List) rejoin() {
	defer l.wg.Done()
	t := time.NewTicker(l.cfg.Rejoin)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		dead := false
		for _, e := range l.members {
			dead = dead || e.m.State == proto.NodeDead
		}
		ml, left := l.ml, l.left
		l.mu.Unlock()
		if dead && !left {
			_, _ = ml.Join(l.cfg.Join)
		}
	}
}

// LocalAddr is the gossip address others reach this member at.
func (l *List) LocalAddr() string {
	l.mu.Lock()
	ml := l.ml
	l.mu.Unlock()
	if ml == nil {
		return ""
	}
	// Not under l.mu: LocalNode takes memberlist's node lock, which
	// memberlist holds while it calls our event delegate, which takes l.mu.
	return ml.LocalNode().Address()
}

// Members lists every member seen (this one included), sorted by id.
// A member memberlist holds alive but whose direct probes went unanswered
// for more than a few probe intervals is reported suspect.
func (l *List) Members() []Member {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	limit := l.suspectAfter()
	out := make([]Member, 0, len(l.members))
	for id, e := range l.members {
		m := e.m
		if m.State == proto.NodeAlive && id != l.cfg.ID && !e.lastAck.IsZero() && now.Sub(e.lastAck) > limit {
			m.State = proto.NodeSuspect
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// suspectAfter: a member is probed about once per (members-1) probe
// intervals; missing two rounds makes it suspect. l.mu is held.
func (l *List) suspectAfter() time.Duration {
	n := max(len(l.members)-1, 1)
	// memberlist stretches its probe interval by its health score when the
	// process is slow; so does the limit.
	health := 1
	if l.ml != nil {
		health += l.ml.GetHealthScore()
	}
	return time.Duration((2*n+1)*health)*l.cfg.Timing.ProbeInterval + l.cfg.Timing.ProbeTimeout
}

// Member returns one member by id.
func (l *List) Member(id string) (Member, bool) {
	for _, m := range l.Members() {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// UpdateMeta replaces this member's metadata and gossips it.
func (l *List) UpdateMeta(m proto.Meta) error {
	b, err := encodeMeta(m)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if l.ml == nil || l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.meta = b
	ml := l.ml
	l.mu.Unlock()
	if err := ml.UpdateNode(time.Second); err != nil {
		return fmt.Errorf("member: update meta: %w", err)
	}
	return nil
}

// Leave tells the ring this member leaves on purpose (others see it left,
// not dead) and waits up to timeout for the news to go out. The List keeps
// running until Shutdown.
func (l *List) Leave(timeout time.Duration) error {
	l.mu.Lock()
	if l.ml == nil || l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	if l.left {
		l.mu.Unlock()
		return nil
	}
	l.left = true
	ml := l.ml
	l.mu.Unlock()
	msg := []byte(leaveMsg + l.cfg.ID)
	for _, n := range ml.Members() {
		if n.Name != l.cfg.ID {
			_ = ml.SendReliable(n, msg) // best effort: a member that misses it sees "dead"
		}
	}
	if err := ml.Leave(timeout); err != nil {
		return fmt.Errorf("member: leave: %w", err)
	}
	return nil
}

// Shutdown stops gossiping (without Leave, others detect this member as
// dead), stops the event delivery and joins the List's goroutines. Events
// not yet delivered are dropped. Calling it again does nothing.
func (l *List) Shutdown() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	ml := l.ml
	l.mu.Unlock()
	close(l.stop)
	var err error
	if ml != nil {
		err = ml.Shutdown()
	}
	l.wg.Wait()
	if err != nil {
		return fmt.Errorf("member: shutdown: %w", err)
	}
	return nil
}

func (l *List) deliver() {
	defer l.wg.Done()
	for {
		select {
		case <-l.stop:
			return
		case <-l.wake:
		}
		for {
			l.mu.Lock()
			if len(l.queue) == 0 || l.closed {
				l.mu.Unlock()
				break
			}
			ev := l.queue[0]
			l.queue = l.queue[1:]
			l.mu.Unlock()
			if l.cfg.OnEvent != nil {
				l.cfg.OnEvent(ev)
			}
		}
	}
}

// record updates the table and queues an event; l.mu is held.
func (l *List) record(kind EventKind, n *memberlist.Node, state string) {
	e := l.members[n.Name]
	if e == nil {
		e = &entry{}
		l.members[n.Name] = e
	}
	var meta proto.Meta
	if len(n.Meta) > 0 {
		if err := json.Unmarshal(n.Meta, &meta); err != nil {
			l.log.Warn("member: undecodable metadata", "member", n.Name, "err", err)
		}
	}
	now := time.Now()
	if e.m.State != state {
		e.m.Since = now
	}
	e.m = Member{ID: n.Name, Addr: n.Address(), State: state, Meta: meta, Since: e.m.Since}
	if kind == EventJoin {
		e.leaving = false
		e.lastAck = now // joining is a sign of life
	}
	l.queue = append(l.queue, Event{Kind: kind, Member: e.m})
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

type events List

func (ev *events) NotifyJoin(n *memberlist.Node) {
	l := (*List)(ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.record(EventJoin, n, proto.NodeAlive)
}

func (ev *events) NotifyUpdate(n *memberlist.Node) {
	l := (*List)(ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.record(EventUpdate, n, proto.NodeAlive)
}

func (ev *events) NotifyLeave(n *memberlist.Node) {
	l := (*List)(ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.members[n.Name]
	if (e != nil && e.leaving) || (n.Name == l.cfg.ID && l.left) {
		l.record(EventLeave, n, proto.NodeLeft)
	} else {
		l.record(EventFail, n, proto.NodeDead)
	}
}

type delegate List

func (d *delegate) NodeMeta(limit int) []byte {
	l := (*List)(d)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.meta) > limit {
		return nil
	}
	return bytes.Clone(l.meta)
}

func (d *delegate) NotifyMsg(b []byte) {
	l := (*List)(d)
	if id, ok := bytes.CutPrefix(b, []byte(leaveMsg)); ok {
		l.mu.Lock()
		if e := l.members[string(id)]; e != nil {
			e.leaving = true
		}
		l.mu.Unlock()
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

type pings List

func (p *pings) AckPayload() []byte { return nil }

func (p *pings) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	l := (*List)(p)
	l.mu.Lock()
	if e := l.members[other.Name]; e != nil {
		e.lastAck = time.Now()
	}
	l.mu.Unlock()
}

// logWriter turns memberlist's "[LEVEL] text" lines into slog records.
type logWriter struct{ log *slog.Logger }

func (w *logWriter) Write(b []byte) (int, error) {
	s := string(bytes.TrimSpace(b))
	lvl := slog.LevelDebug
	switch {
	case bytes.Contains(b, []byte("[ERR]")):
		lvl = slog.LevelError
	case bytes.Contains(b, []byte("[WARN]")):
		lvl = slog.LevelWarn
	case bytes.Contains(b, []byte("[INFO]")):
		lvl = slog.LevelInfo
	}
	w.log.Log(context.Background(), lvl, s)
	return len(b), nil
}

var _ io.Writer = (*logWriter)(nil)
