package testsupport

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/internal/natsembed"
)

// fakeTB records Fatalf and ends the goroutine, as testing's does.
type fakeTB struct {
	testing.TB // methods the helpers do not call panic
	mu         sync.Mutex
	failed     bool
	msg        string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Failed() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.failed }

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn with f on a goroutine of its own (Fatalf ends it) and
// returns the Fatalf message, "" if none, and how long fn took.
func (f *fakeTB) run(fn func(testing.TB)) (string, time.Duration) {
	start := time.Now()
	done := make(chan struct{})
	go func() { defer close(done); fn(f) }()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg, time.Since(start)
}

func TestEventuallySucceeds(t *testing.T) {
	n := 0
	Eventually(t, 10*time.Second, "the third check", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("%d checks, want 3", n)
	}
	var f fakeTB
	if msg, _ := f.run(func(tb testing.TB) { Eventually(tb, 0, "a condition that holds", func() bool { return true }) }); msg != "" {
		t.Fatalf("a condition that holds at once, with no time to wait: %s", msg)
	}
}

func TestEventuallyTimesOut(t *testing.T) {
	var f fakeTB
	checks := 0
	msg, took := f.run(func(tb testing.TB) {
		Eventually(tb, 30*time.Millisecond, "the moon", func() bool { checks++; return false })
	})
	if !strings.Contains(msg, "timed out waiting for the moon: not within") || !strings.Contains(msg, "30ms nominal") {
		t.Fatalf("message %q", msg)
	}
	if min := Scale(30 * time.Millisecond); took < min {
		t.Fatalf("gave up after %v, before the deadline %v", took, min)
	}
	if checks < 3 {
		t.Fatalf("%d checks in %v", checks, took)
	}
}

func TestEventuallyStateQuotesTheLastState(t *testing.T) {
	var f fakeTB
	n := 0
	msg, _ := f.run(func(tb testing.TB) {
		EventuallyState(tb, 20*time.Millisecond, "done", func() (bool, string) { n++; return false, fmt.Sprint("check ", n) })
	})
	if want := fmt.Sprintf("; last: check %d", n); !strings.HasSuffix(msg, want) {
		t.Fatalf("message %q, want it to end with %q", msg, want)
	}
}

func TestEventuallyCtxEndsWithTheContext(t *testing.T) {
	var f fakeTB
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	msg, took := f.run(func(tb testing.TB) { EventuallyCtx(tb, ctx, "the sun", func() bool { return false }) })
	if !strings.Contains(msg, "timed out waiting for the sun") || !strings.Contains(msg, "context canceled") {
		t.Fatalf("message %q", msg)
	}
	if took > 5*time.Second {
		t.Fatalf("took %v after the context ended", took)
	}
	// A context already done: one check, then the failure.
	f = fakeTB{}
	checks := 0
	msg, _ = f.run(func(tb testing.TB) { EventuallyCtx(tb, ctx, "x", func() bool { checks++; return false }) })
	if msg == "" || checks != 1 {
		t.Fatalf("done context: %d checks, message %q", checks, msg)
	}
}

// A test that has already failed does not wait out the deadline.
func TestEventuallyGivesUpOnAFailedTest(t *testing.T) {
	f := fakeTB{failed: true}
	msg, took := f.run(func(tb testing.TB) { Eventually(tb, time.Hour, "the end", func() bool { return false }) })
	if !strings.Contains(msg, "gave up waiting for the end") || took > 5*time.Second {
		t.Fatalf("after %v: %q", took, msg)
	}
}

func TestParseFactor(t *testing.T) {
	for v, want := range map[string]float64{"": defaultFactor, "1": 1, "2.5": 2.5, "0.5": 0.5} {
		if got, err := parseFactor(v); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"0", "-1", "x", "NaN", "Inf", "1e9"} {
		if _, err := parseFactor(v); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
	if got := scaleBy(10*time.Second, 1.5); got != 15*time.Second {
		t.Errorf("scaleBy: %v", got)
	}
}

// The variable reaches Scale: this test runs itself again with it set.
func TestScaleFromEnv(t *testing.T) {
	if os.Getenv("TESTSUPPORT_CHILD") != "" {
		fmt.Printf("scaled=%v\n", Scale(2*time.Second))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestScaleFromEnv$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TESTSUPPORT_CHILD=1", ScaleEnv+"=3")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "scaled=6s") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestNATSRestartsOnTheSamePortAndStore(t *testing.T) {
	ns := NATS(t)
	url := ns.URL()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := nc.JetStream()
	if _, err := js.AddStream(&nats.StreamConfig{Name: "S", Subjects: []string{"s"}, Storage: nats.FileStorage}); err != nil {
		t.Fatalf("JetStream: %v", err)
	}
	nc.Close()
	ns.Restart()
	if ns.URL() != url {
		t.Fatalf("URL %s after a restart, was %s", ns.URL(), url)
	}
	nc, err = nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = nc.JetStream()
	if _, err := js.StreamInfo("S"); err != nil {
		t.Fatalf("the stream did not survive the restart: %v", err)
	}
}

func TestNATSOptions(t *testing.T) {
	ns := NATS(t, func(o *natsembed.Options) { o.Token = "tok"; o.MaxPayload = 4096 })
	if _, err := nats.Connect(ns.URL(), nats.Timeout(time.Second)); err == nil {
		t.Fatal("connected without the token")
	}
	nc, err := nats.Connect(ns.URL(), nats.Token("tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.MaxPayload() != 4096 {
		t.Fatalf("max payload %d", nc.MaxPayload())
	}
}

// TestScenarios checks that Scenarios hands each case its input and
// position, keeps comments, and rewrites the expected outputs.
func TestScenarios(t *testing.T) {
	file := filepath.Join(t.TempDir(), "s.txt")
	text := "# a comment\nupper a\nb\n----\nstale\n\nupper c\n----\nC\n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var ats []string
	do := func(at string, in []string) []string {
		ats = append(ats, at)
		return []string{strings.ToUpper(strings.Join(in[1:], "")) + strings.ToUpper(strings.TrimPrefix(in[0], "upper "))}
	}
	Scenarios(t, file, true, do)
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := "# a comment\nupper a\nb\n----\nBA\n\nupper c\n----\nC\n"; string(got) != want {
		t.Fatalf("rewritten:\n%s\nwant:\n%s", got, want)
	}
	if want := []string{file + ":2", file + ":7"}; !slices.Equal(ats, want) {
		t.Fatalf("positions %v, want %v", ats, want)
	}
	Scenarios(t, file, false, do) // now every case matches
}
