package member

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// eventLog collects the events a List delivers.
type eventLog struct {
	mu  sync.Mutex
	evs []Event
}

func (e *eventLog) add(ev Event) { e.mu.Lock(); e.evs = append(e.evs, ev); e.mu.Unlock() }

func (e *eventLog) has(kind EventKind, id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.evs {
		if ev.Kind == kind && ev.Member.ID == id {
			return true
		}
	}
	return false
}

func start(t *testing.T, id string, key []byte, join []string, evs *eventLog) *List {
	t.Helper()
	cfg := Config{ID: id, BindAddr: "127.0.0.1:0", Join: join, SecretKey: key,
		Meta: proto.Meta{Role: proto.RoleNode, ID: id, CPUs: 2}}
	if evs != nil {
		cfg.OnEvent = evs.add
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Shutdown() })
	return l
}

func stateOf(l *List, id string) string {
	m, ok := l.Member(id)
	if !ok {
		return ""
	}
	return m.State
}

func alive(l *List) int {
	n := 0
	for _, m := range l.Members() {
		if m.State == proto.NodeAlive {
			n++
		}
	}
	return n
}

func threeMembers(t *testing.T, key []byte, evs *eventLog) (a, b, c *List) {
	a = start(t, "a", key, nil, evs)
	b = start(t, "b", key, []string{a.LocalAddr()}, nil)
	c = start(t, "c", key, []string{"127.0.0.1:1", a.LocalAddr(), b.LocalAddr()}, nil) // a dead seed is skipped
	for _, l := range []*List{a, b, c} {
		testsupport.Eventually(t, 5*time.Second, "every member sees three alive", func() bool { return alive(l) == 3 })
	}
	return a, b, c
}

func TestJoinMetaAndEvents(t *testing.T) {
	var evs eventLog
	a, b, c := threeMembers(t, nil, &evs)
	m, ok := c.Member("a")
	if !ok || m.Meta.ID != "a" || m.Meta.Role != proto.RoleNode || m.Meta.CPUs != 2 || m.Addr != a.LocalAddr() {
		t.Fatalf("c sees a as %+v", m)
	}
	testsupport.Eventually(t, 5*time.Second, "join events for b and c", func() bool { return evs.has(EventJoin, "b") && evs.has(EventJoin, "c") })

	if err := b.UpdateMeta(proto.Meta{Role: proto.RoleNode, ID: "b", CPUs: 8, GPUs: 2}); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 5*time.Second, "a and c see b's new metadata", func() bool {
		ma, _ := a.Member("b")
		mc, _ := c.Member("b")
		return ma.Meta.GPUs == 2 && mc.Meta.CPUs == 8
	})
	testsupport.Eventually(t, 5*time.Second, "update event", func() bool { return evs.has(EventUpdate, "b") })
}

func TestShutdownIsDeadLeaveIsLeft(t *testing.T) {
	var evs eventLog
	a, b, c := threeMembers(t, nil, &evs)

	if err := c.Shutdown(); err != nil { // a crash: no Leave
		t.Fatal(err)
	}
	start := time.Now()
	testsupport.Eventually(t, 5*time.Second, "a and b declare c dead", func() bool {
		return stateOf(a, "c") == proto.NodeDead && stateOf(b, "c") == proto.NodeDead
	})
	t.Logf("crash detected in %v", time.Since(start).Round(10*time.Millisecond))
	if !evs.has(EventFail, "c") {
		t.Fatal("no fail event for c")
	}

	if err := b.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 5*time.Second, "a sees b left", func() bool { return stateOf(a, "b") == proto.NodeLeft })
	testsupport.Eventually(t, 5*time.Second, "leave event", func() bool { return evs.has(EventLeave, "b") })
	if evs.has(EventFail, "b") {
		t.Fatal("b left on purpose but was reported failed")
	}
	if err := b.Leave(time.Second); err != nil {
		t.Fatalf("a second Leave: %v", err)
	}
}

// A member without the ring's key, or with another one, cannot join; the
// refusal is told apart from an unreachable seed (ErrKey) and ends Start at
// once, well before its context would.
func TestWrongKeyCannotJoin(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	a, _, _ := threeMembers(t, key, nil)
	plain := start(t, "plain", nil, nil, nil)
	for _, c := range []struct {
		k    []byte
		seed *List
	}{{[]byte("fedcba9876543210fedcba9876543210"), a}, {nil, a}, {key, plain}} {
		l, err := New(Config{ID: "intruder", BindAddr: "127.0.0.1:0", Join: []string{c.seed.LocalAddr()}, SecretKey: c.k, Retry: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = l.Start(ctx)
		expired := ctx.Err()
		cancel()
		if !errors.Is(err, ErrJoin) || !errors.Is(err, ErrKey) || expired != nil {
			t.Fatalf("key %q into %s: want ErrJoin and ErrKey before the deadline, got %v (context: %v)", c.k, c.seed.cfg.ID, err, expired)
		}
		_ = l.Shutdown()
	}
	// An unreachable seed is not a key problem: Start retries until ctx ends.
	l, err := New(Config{ID: "late", BindAddr: "127.0.0.1:0", Join: []string{"127.0.0.1:1"}, SecretKey: key, Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = l.Start(ctx)
	cancel()
	if !errors.Is(err, ErrJoin) || errors.Is(err, ErrKey) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unreachable seed: %v", err)
	}
	_ = l.Shutdown()
	for _, m := range []*List{a, plain} {
		if _, ok := m.Member("intruder"); ok {
			t.Fatalf("the intruder got into %s's table", m.cfg.ID)
		}
	}
	testsupport.Eventually(t, 10*time.Second, "a sees its ring of three alive", func() bool { return alive(a) == 3 })
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{BindAddr: "127.0.0.1:0"},
		{ID: "x", BindAddr: "nowhere"},
		{ID: "x", BindAddr: "127.0.0.1:0", SecretKey: []byte("short")},
		{ID: "x", BindAddr: "127.0.0.1:0", Meta: proto.Meta{Role: string(make([]byte, 600))}},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: want ErrConfig, got %v", cfg.ID, err)
		}
	}
	l, err := New(Config{ID: "x", BindAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.UpdateMeta(proto.Meta{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("UpdateMeta before Start: %v", err)
	}
	if err := l.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("Start after Shutdown: %v", err)
	}
}
