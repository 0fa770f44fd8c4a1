package transport

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hetflow/hetflow/internal/testsupport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t testing.TB) context.Context { return testsupport.Context(t, 20*time.Second) }

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
