package transport

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testServer is a real embedded nats-server with JetStream on a file store in a
// temp dir, on a random loopback port.
type testServer struct {
	t    testing.TB
	opts server.Options
	s    *server.Server
	url  string
}

func startServer(t testing.TB, mods ...func(*server.Options)) *testServer {
	t.Helper()
	ts := &testServer{t: t, opts: server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}}
	for _, m := range mods {
		m(&ts.opts)
	}
	ts.start()
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) start() {
	ts.t.Helper()
	o := ts.opts
	s, err := server.NewServer(&o)
	if err != nil {
		ts.t.Fatalf("nats server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		ts.t.Fatalf("nats server not ready")
	}
	ts.s = s
	// Pin the port so a restart comes back on the same address.
	ts.opts.Port = s.Addr().(*net.TCPAddr).Port
	ts.url = fmt.Sprintf("nats://127.0.0.1:%d", ts.opts.Port)
}

func (ts *testServer) stop() {
	if ts.s != nil {
		ts.s.Shutdown()
		ts.s.WaitForShutdown()
		ts.s = nil
	}
}

func (ts *testServer) restart() {
	ts.t.Helper()
	ts.stop()
	ts.start()
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func connect(t testing.TB, url string, opts ...Option) *Conn {
	t.Helper()
	opts = append([]Option{WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond), WithDrainTimeout(2 * time.Second)}, opts...)
	c, err := Connect(testCtx(t), url, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// fakeClock fires linger timers only when the test says so.
type fakeClock struct {
	mu     sync.Mutex
	timers []*fakeTimer
}

type fakeTimer struct {
	c     *fakeClock
	f     func()
	d     time.Duration
	state int // 0 armed, 1 fired, 2 stopped
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, f: f, d: d}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.state != 0 {
		return false
	}
	t.state = 2
	return true
}

// fire runs every armed timer and reports how many ran. Call it without holding
// any Batcher lock (it runs the callbacks on the caller's goroutine).
func (c *fakeClock) fire() int {
	c.mu.Lock()
	var due []*fakeTimer
	for _, t := range c.timers {
		if t.state == 0 {
			t.state = 1
			due = append(due, t)
		}
	}
	c.timers = nil
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
	return len(due)
}

func (c *fakeClock) armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if t.state == 0 {
			n++
		}
	}
	return n
}
