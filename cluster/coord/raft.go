package coord

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// raftFSM adapts the pure FSM to raft.FSM: it locks around it and reports
// every applied entry to changed.
type raftFSM struct {
	mu      sync.RWMutex
	f       *FSM
	changed func()
	// noRanges plays a build before framedRunSubmitRanges (Config.oldLog):
	// such an entry is undecodable to it, as it was to that build.
	noRanges bool
	ranged   atomic.Uint64 // run_submits applied in ranges (a test reads which form the log holds)
}

func (r *raftFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	ranged := len(l.Data) > 0 && l.Data[0] == framedRunSubmitRanges
	var err error
	if ranged && r.noRanges {
		err = fmt.Errorf("%w: undecodable command: a build before the ranged run_submit", ErrCommand)
	} else {
		r.mu.Lock()
		err = r.f.ApplyEntry(l.Data)
		r.mu.Unlock()
	}
	if ranged && err == nil {
		r.ranged.Add(1)
	}
	if r.changed != nil {
		r.changed()
	}
	if err != nil {
		return err
	}
	return nil
}

func (r *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, err := r.f.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("coord: snapshot: %w", err)
	}
	return snapshot(b), nil
}

func (r *raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("coord: read snapshot: %w", err)
	}
	r.mu.Lock()
	err = r.f.Restore(b)
	r.mu.Unlock()
	if r.changed != nil {
		r.changed()
	}
	return err
}

// read runs fn with the FSM under the read lock.
func (r *raftFSM) read(fn func(f *FSM)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn(r.f)
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("coord: write snapshot: %w", err)
	}
	return sink.Close()
}

func (s snapshot) Release() {}

// streamLayer is raft's TCP stream layer with an advertised address that may
// be a host name (compose service names) and a port picked at listen time.
// It tracks its connections, both ways, and closes them all on Close: raft's
// NetworkTransport leaves a handler goroutine blocked on every accepted
// connection otherwise, until the peer hangs up.
type streamLayer struct {
	ln  net.Listener
	adv strAddr

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func newStreamLayer(ln net.Listener, adv string) *streamLayer {
	return &streamLayer{ln: ln, adv: strAddr(adv), conns: map[*trackedConn]struct{}{}}
}

func (s *streamLayer) track(c net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, s: s}
	s.conns[tc] = struct{}{}
	return tc, nil
}

func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	return s.track(c)
}

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	return s.track(c)
}

func (s *streamLayer) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = map[*trackedConn]struct{}{}
	s.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
	return err
}

func (s *streamLayer) Addr() net.Addr { return s.adv }

type trackedConn struct {
	net.Conn
	s *streamLayer
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

type strAddr string

func (a strAddr) Network() string { return "tcp" }
func (a strAddr) String() string  { return string(a) }
