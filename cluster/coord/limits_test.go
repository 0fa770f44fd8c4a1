package coord

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/flowgen"
	"github.com/hetflow/hetflow/internal/testsupport"
)

func refusal(t *testing.T, err error) string {
	t.Helper()
	var inv *InvalidError
	if !errors.As(err, &inv) || !errors.Is(err, proto.ErrInvalid) || len(inv.Problems) != 1 {
		t.Fatalf("want one problem, got %v", err)
	}
	return inv.Problems[0]
}

// The run size limits are the configured ones, named in the refusal, and a
// flow within them is committed.
func TestRunSizeLimits(t *testing.T) {
	s, _ := fuzzServer(t, func(c *Config) { c.MaxTasks, c.MaxFlowBytes = 50, 2000 })
	big := flowgen.Flat(100)
	if p := refusal(t, errOf(s.Submit("big.yaml", big))); p != fmt.Sprintf("big.yaml: flow file is %d bytes, over this cluster's limit of 2000 (coordinator --max-flow-bytes)", len(big)) {
		t.Fatalf("file size: %s", p)
	}
	if p := refusal(t, errOf(s.Submit("", flowgen.WideModules(6, 9)))); p != `flow.yaml: flow "top" expands to 60 tasks, over this cluster's limit of 50 a run (coordinator --max-tasks)` {
		t.Fatalf("task count: %s", p)
	}
	if p := refusal(t, errOf(s.Submit("cyc.yaml", []byte("flows:\n  - name: a\n    tasks:\n      - {name: x, kind: module, flow: b}\n  - name: b\n    tasks:\n      - {name: y, kind: module, flow: a}\n")))); strings.Contains(p, "expands") {
		t.Fatalf("a module cycle is reported as one, not as a size: %s", p)
	}
	id, err := s.Submit("ok.yaml", flowgen.WideModules(5, 9)) // 50 tasks
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := s.run(id); !ok || len(r.Assignment) != 50 {
		t.Fatalf("the 50-task run: %+v %v", r, ok)
	}
	// Zero takes the defaults; more than the spec allows is capped.
	d, err := New(Config{ID: "d", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0"})
	if err != nil || d.cfg.MaxTasks != DefaultMaxTasks || d.cfg.MaxFlowBytes != DefaultMaxFlowBytes {
		t.Fatalf("defaults: %+v %v", d.cfg, err)
	}
}

func errOf(_ string, err error) error { return err }

// BenchmarkSubmitLimits: what refusing an oversized run costs on a real
// leading coordinator, against committing a run at the default limit
// (docs/benchmarks/bad-input.md).
func BenchmarkSubmitLimits(b *testing.B) {
	s, _ := fuzzServer(b)
	for _, c := range []struct {
		name string
		flow []byte
		ok   bool
	}{
		{"refuse-1M-task-file", flowgen.Flat(1_000_000), false},
		{"refuse-1M-tasks-by-modules", flowgen.WideModules(1000, 999), false},
		{"commit-100K-task-file", flowgen.Flat(100_000), true},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_, err := s.Submit("f.yaml", c.flow)
				if (err == nil) != c.ok {
					b.Fatalf("%s: %v", c.name, err)
				}
			}
		})
	}
	// The same 1M-task file with the limits at the spec's own caps: it is
	// parsed, validated and marshalled before its canonical JSON overflows.
	b.Run("no-limits-1M-task-file", func(b *testing.B) {
		u, _ := fuzzServer(b, func(c *Config) { c.MaxTasks, c.MaxFlowBytes = spec.MaxVertices, spec.MaxFileSize })
		flow := flowgen.Flat(1_000_000)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := u.Submit("f.yaml", flow); !errors.Is(err, proto.ErrInvalid) {
				b.Fatal(err)
			}
		}
	})
}

// holdSubmit makes s's first submit attempt stop once made: entered is
// closed there, and it goes on (calling then) once release is closed.
func holdSubmit(s *Server, then func()) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.submitHook = func() {
		once.Do(func() {
			close(entered)
			<-release
			then()
		})
	}
	return entered, release
}

// A submit retried while the first attempt is still being made (the
// client's attempt ran out while the leader worked on a large flow) waits
// for that attempt and gives its answer: the flow is parsed, validated and
// placed once. A submit of another file under the same id is not joined to
// it.
func TestSubmitRetryInFlightJoins(t *testing.T) {
	s, _ := fuzzServer(t)
	entered, release := holdSubmit(s, func() {})
	id := proto.NewRunID(time.Now())
	flow := flowgen.Flat(10)
	type answer struct {
		id  string
		err error
	}
	first, retry := make(chan answer, 1), make(chan answer, 1)
	go func() { got, err := s.SubmitID(id, "f.yaml", flow); first <- answer{got, err} }()
	<-entered
	go func() { got, err := s.SubmitID(id, "f.yaml", flow); retry <- answer{got, err} }()
	testsupport.Eventually(t, 10*time.Second, "the retry waits for the first attempt", func() bool { return s.submitsJoined.Load() == 1 })
	close(release)
	for _, ch := range []chan answer{first, retry} {
		if a := <-ch; a.id != id || a.err != nil {
			t.Fatalf("submit %s: %q, %v", id, a.id, a.err)
		}
	}
	if n := s.submitsMade.Load(); n != 1 {
		t.Fatalf("the flow was made into a run %d times, want once", n)
	}
	if _, err := s.SubmitID(id, "f.yaml", flowgen.Flat(11)); !errors.Is(err, proto.ErrInvalid) {
		t.Fatalf("another flow under the taken id: %v", err)
	}
	if n := s.submitsMade.Load(); n != 2 {
		t.Fatalf("another flow under the id: %d submits made, want 2", n)
	}
}

// A submit attempt that panics (net/http recovers it) still lets its id
// go: the retry joined to it is answered with an error, and a later retry
// of the id is made, not left waiting for ever.
func TestSubmitRetryAfterPanic(t *testing.T) {
	s, _ := fuzzServer(t)
	entered, release := holdSubmit(s, func() { panic("boom") })
	id := proto.NewRunID(time.Now())
	flow := flowgen.Flat(10)
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_, _ = s.SubmitID(id, "f.yaml", flow)
	}()
	<-entered
	retry := make(chan error, 1)
	go func() { _, err := s.SubmitID(id, "f.yaml", flow); retry <- err }()
	testsupport.Eventually(t, 10*time.Second, "the retry waits for the first attempt", func() bool { return s.submitsJoined.Load() == 1 })
	close(release)
	if p := <-panicked; p != "boom" {
		t.Fatalf("the first attempt: recovered %v, want its panic", p)
	}
	testsupport.Eventually(t, 10*time.Second, "the joined retry answered", func() bool { return len(retry) == 1 })
	if err := <-retry; !errors.Is(err, errSubmitAbandoned) {
		t.Fatalf("the joined retry: %v, want errSubmitAbandoned", err)
	}
	again := make(chan error, 1)
	go func() { _, err := s.SubmitID(id, "f.yaml", flow); again <- err }()
	testsupport.Eventually(t, 10*time.Second, "a later retry answered", func() bool { return len(again) == 1 })
	if err := <-again; err != nil {
		t.Fatalf("a later retry: %v", err)
	}
	if _, ok := s.run(id); !ok {
		t.Fatal("the later retry made no run")
	}
}
