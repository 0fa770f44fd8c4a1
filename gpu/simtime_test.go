//go:build !cuda

package gpu

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is wall time under the test's control: it moves only when the test (or a kernel
// body) advances it, or when the model sleeps (by the sleep plus late).
type fakeClock struct {
	mu     sync.Mutex
	t      time.Duration
	late   time.Duration
	sleeps []time.Duration
}

func (c *fakeClock) now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.t += d + c.late
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t += d
	c.mu.Unlock()
}

func (c *fakeClock) slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// testProfile has round figures: 1 byte/ps of device memory (1 MB = 1 µs), 1 flop/ps, 1 byte/ns
// each way on the host link.
var testProfile = Profile{
	Name: "test", MemBandwidth: 1e12, FP32: 1e12, H2DBandwidth: 1e9, D2HBandwidth: 1e9,
	CopyLatency: time.Microsecond, LaunchLatency: 10 * time.Microsecond, KernelOverhead: 2 * time.Microsecond,
	Slack: time.Millisecond,
}

const us = time.Microsecond

// timedDevs opens n timed sim devices of p on a fake clock, closed at the end of the test.
func timedDevs(t *testing.T, n int, p Profile) ([]*Device, *fakeClock) {
	t.Helper()
	c := &fakeClock{}
	w := newSimWorld(c, curGoid, 0)
	devs, err := openSim(n, &p, w)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range devs {
			d.Close()
		}
	})
	return devs, c
}

// busyKernel declares arg 0 bytes of work; its body does nothing unless arg 1 is nonzero,
// when it advances the test's clock by that many ns (a body that outlasts its model).
func busyKernel(c *fakeClock, declared bool) *Kernel {
	k := &Kernel{
		Name:   "busy",
		Params: []reflect.Type{reflect.TypeFor[int64](), reflect.TypeFor[int64]()},
		Go: func(b *Block, args []any) {
			if c != nil {
				c.advance(time.Duration(args[1].(int64)))
			}
		},
	}
	if declared {
		k.Work = func(_, _ Dim3, args []any) Work { return Work{Bytes: args[0].(int64)} }
	}
	return k
}

// chainGraph is the HTDG's GPU task on d in the test profile: h2d of 8000 bytes (9 µs), a
// 12 µs kernel, d2h of 8000 bytes (9 µs), in a chain.
func chainGraph(t *testing.T, d *Device) *Graph {
	t.Helper()
	x := mustAlloc[float32](t, d, 2000)
	hx := make([]float32, 2000)
	g := NewGraph(d)
	a := H2D(g, x, hx)
	b := g.Kernel(busyKernel(nil, true), D1(1), D1(1), int64(1e7), int64(0))
	a.Precede(b)
	b.Precede(D2H(g, hx, x))
	return g
}

func launch(t *testing.T, g *Graph) {
	t.Helper()
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
}

func hostAt(d *Device) time.Duration { return d.tm.w.hostNow(d.tm.w.host()) }

func TestProfileRoofline(t *testing.T) {
	p := testProfile
	for _, c := range []struct {
		w    Work
		want time.Duration
	}{
		{Work{}, 2 * us},                        // overhead only
		{Work{Bytes: 1e6}, 3 * us},              // memory-bound: 1 MB at 1 TB/s
		{Work{Bytes: 1e6, Flops: 5e6}, 7 * us},  // compute-bound: 5 Mflop at 1 Tflop/s
		{Work{Bytes: 8e6, Flops: 1e6}, 10 * us}, // memory-bound again
		{Work{Bytes: 1}, 2*us + 1},              // rounded up to the ns
	} {
		if got := p.KernelTime(c.w); got != c.want {
			t.Errorf("KernelTime(%+v) = %v, want %v", c.w, got, c.want)
		}
	}
	for _, c := range []struct {
		k     NodeKind
		bytes int
		want  time.Duration
	}{
		{KindH2D, 4000, 5 * us}, {KindD2H, 8000, 9 * us}, // latency + bytes at 1 GB/s
		{KindD2D, 1e6, 4 * us},    // a kernel reading and writing 1 MB
		{KindMemset, 1e6, 3 * us}, // a kernel writing 1 MB
	} {
		if got := p.CopyTime(c.k, c.bytes); got != c.want {
			t.Errorf("CopyTime(%v, %d) = %v, want %v", c.k, c.bytes, got, c.want)
		}
	}
	// the default profile's SAXPY over 1K elements: latency-bound, a few ns of HBM time
	h := H200
	w := Saxpy.Work(D1(4), D1(256), []any{int32(1024), float32(1), (*Buffer[float32])(nil), (*Buffer[float32])(nil)})
	if w != (Work{Bytes: 12 * 1024, Flops: 2048}) {
		t.Fatalf("Saxpy work %+v", w)
	}
	if got, want := h.KernelTime(w), h.KernelOverhead+3*time.Nanosecond; got != want {
		t.Errorf("H200 saxpy 1K: %v, want %v", got, want)
	}
}

func TestTimedEngineQueues(t *testing.T) {
	devs, _ := timedDevs(t, 1, testProfile)
	d := devs[0]
	k := busyKernel(nil, true)
	g := NewGraph(d)
	// two independent kernels of 10 µs: one compute engine, so the second waits for the first
	g.Kernel(k, D1(1), D1(1), int64(1e7), int64(0))
	g.Kernel(k, D1(1), D1(1), int64(1e7), int64(0))
	launch(t, g)
	if got, want := hostAt(d), 10*us+2*12*us; got != want {
		t.Errorf("two kernels: host at %v, want %v (launch latency + 2×(overhead+10µs))", got, want)
	}
	st := d.SimStats()
	if st.Ops != 2 || st.Busy[engCompute] != 24*us || st.Busy[engH2D] != 0 || st.Modeled != 24*us {
		t.Errorf("stats %+v", st)
	}
}

func TestTimedCopyComputeOverlap(t *testing.T) {
	devs, _ := timedDevs(t, 1, testProfile)
	d := devs[0]
	k := busyKernel(nil, true)
	x := mustAlloc[float32](t, d, 2000)
	hx := make([]float32, 2000) // 8000 bytes: 9 µs each way
	g := NewGraph(d)
	H2D(g, x, hx)
	D2H(g, hx, x)
	g.Kernel(k, D1(1), D1(1), int64(1e7), int64(0)) // 12 µs
	launch(t, g)
	if got, want := hostAt(d), 10*us+12*us; got != want {
		t.Errorf("independent h2d, d2h, kernel: host at %v, want %v (they overlap on three engines)", got, want)
	}
	// the same three in a chain add up
	g2 := NewGraph(d)
	a := H2D(g2, x, hx)
	b := g2.Kernel(k, D1(1), D1(1), int64(1e7), int64(0))
	c := D2H(g2, hx, x)
	a.Precede(b)
	b.Precede(c)
	t0 := hostAt(d)
	launch(t, g2)
	if got, want := hostAt(d)-t0, 10*us+9*us+12*us+9*us; got != want {
		t.Errorf("chain h2d→kernel→d2h: took %v in the model, want %v", got, want)
	}
}

func TestTimedHostIsBlocked(t *testing.T) {
	devs, c := timedDevs(t, 2, testProfile)
	chain := func(d *Device) *Graph { return chainGraph(t, d) }
	const one = 10*us + 9*us + 12*us + 9*us
	// one goroutine launching twice: the second launch starts after the first ended in the
	// model (the host thread was blocked), though wall time has not moved at all
	g := chain(devs[0])
	launch(t, g)
	launch(t, g)
	if got := hostAt(devs[0]); got != 2*one {
		t.Errorf("two launches from one goroutine: host at %v, want %v", got, 2*one)
	}
	// the same goroutine on another device: it is still blocked until 2*one
	launch(t, chain(devs[1]))
	if got := hostAt(devs[1]); got != 3*one {
		t.Errorf("then a launch on device 1: host at %v, want %v", got, 3*one)
	}
	// two goroutines each launching once on a fresh device at once: their operations overlap
	// across the engines and queue on each, so it ends between one launch plus one stage
	// (perfect pipelining) and two launches
	d := openTimedLike(t, devs[0])
	g1, g2 := chain(d), chain(d)
	var wg sync.WaitGroup
	var ends [2]time.Duration
	for i, gg := range []*Graph{g1, g2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := gg.Launch(); err != nil {
				t.Error(err)
			}
			ends[i] = hostAt(d)
		}()
	}
	wg.Wait()
	base := c.now()
	last := max(ends[0], ends[1]) - base
	if last < one+12*us || last > 2*one-10*us {
		t.Errorf("two goroutines, one device: last ends %v after the start, want within [%v, %v]", last, one+12*us, 2*one-10*us)
	}
	if len(c.slept()) != 0 {
		t.Errorf("slept %v with the model µs ahead of wall time", c.slept())
	}
}

// openTimedLike opens one more device in d's world and profile.
func openTimedLike(t *testing.T, d *Device) *Device {
	t.Helper()
	p := d.tm.p
	devs, err := openSim(1, &p, d.tm.w)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devs[0].Close() })
	return devs[0]
}

func TestTimedHostDoesNotWaitBehindWall(t *testing.T) {
	devs, c := timedDevs(t, 1, testProfile)
	d := devs[0]
	k := busyKernel(c, true)
	c.advance(time.Second) // wall time is far past the (idle) device's timeline
	g := NewGraph(d)
	g.Kernel(k, D1(1), D1(1), int64(1e7), int64(0))
	launch(t, g)
	if got, want := hostAt(d), time.Second+10*us+12*us; got != want {
		t.Errorf("host at %v, want %v: work starts at wall time, not where the timeline was", got, want)
	}
	// a body that outlasts its model: the kernel ends when the body does, and the host, which
	// is then behind wall time, does not wait
	g2 := NewGraph(d)
	g2.Kernel(k, D1(1), D1(1), int64(1e7), int64(5*time.Millisecond))
	before := c.now()
	launch(t, g2)
	if got := hostAt(d); got != c.now() || c.now() != before+5*time.Millisecond {
		t.Errorf("body-bound kernel: host at %v, wall %v (want both at the body's end %v)", got, c.now(), before+5*time.Millisecond)
	}
	st := d.SimStats()
	if len(c.slept()) != 0 || st.Sleeps != 0 || st.BodyBound != 1 || st.Syncs != 2 {
		t.Errorf("slept %v, stats %+v: want no sleep, 1 body-bound op, 2 syncs", c.slept(), st)
	}
	// a kernel without declared work costs its overhead plus its body
	nk := busyKernel(c, false)
	g3 := NewGraph(d)
	g3.Kernel(nk, D1(1), D1(1), int64(0), int64(3*us))
	m0 := d.SimStats().Modeled
	launch(t, g3)
	if got := d.SimStats().Modeled - m0; got != 2*us+3*us {
		t.Errorf("undeclared kernel with a 3µs body: charged %v, want overhead 2µs + 3µs", got)
	}
}

func TestTimedHostSleepsWhenAhead(t *testing.T) {
	devs, c := timedDevs(t, 1, testProfile)
	d := devs[0]
	k := busyKernel(c, true)
	g := NewGraph(d)
	g.Kernel(k, D1(1), D1(1), int64(5e9), int64(0)) // 5 ms of memory traffic
	launch(t, g)
	end := 10*us + 2*us + 5*time.Millisecond
	if s := c.slept(); len(s) != 1 || s[0] != end {
		t.Fatalf("slept %v, want one sleep of %v (the model was ahead by more than the slack)", s, end)
	}
	// a small launch now does not sleep: the host is level with wall time
	g2 := NewGraph(d)
	g2.Kernel(k, D1(1), D1(1), int64(1e7), int64(0))
	launch(t, g2)
	if s := c.slept(); len(s) != 1 {
		t.Fatalf("slept %v after a 22µs launch", s)
	}
	// sleeps that wake late: the lateness is counted, and learnt (the next sleep is shorter)
	c.late = 500 * us
	for range 3 {
		launch(t, g)
	}
	s := c.slept()
	st := d.SimStats()
	if len(s) != 4 || st.Sleeps != 4 || st.Late <= 0 || !(s[3] < s[2] && s[2] < s[1]) {
		t.Errorf("sleeps %v, stats %+v: want 4, late > 0, each shorter than the one before", s, st)
	}
}

func TestTimedStreams(t *testing.T) {
	devs, _ := timedDevs(t, 1, testProfile)
	d := devs[0]
	k := busyKernel(nil, true)
	x := mustAlloc[float32](t, d, 2000)
	hx := make([]float32, 2000)
	s1, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Destroy()
	defer s2.Destroy()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	sync2 := func(s ...*Stream) {
		for _, st := range s {
			if err := st.Synchronize(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// a copy on one stream and a kernel on another overlap
	must(H2DAsync(s1, x, hx))
	must(s2.Launch(k, D1(1), D1(1), int64(1e7), int64(0)))
	sync2(s1, s2)
	if got, want := hostAt(d), 10*us+12*us; got != want {
		t.Errorf("copy ‖ kernel on two streams: host at %v, want %v", got, want)
	}
	// on one stream they run in order
	t0 := hostAt(d)
	must(H2DAsync(s1, x, hx))
	must(s1.Launch(k, D1(1), D1(1), int64(1e7), int64(0)))
	sync2(s1)
	if got, want := hostAt(d)-t0, 10*us+9*us+12*us; got != want {
		t.Errorf("copy then kernel on one stream: %v, want %v", got, want)
	}
	// an event orders a kernel on s2 after a copy on s1
	e, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	t0 = hostAt(d)
	must(H2DAsync(s1, x, hx))
	must(s1.Record(e))
	must(s2.Wait(e))
	must(s2.Launch(k, D1(1), D1(1), int64(1e7), int64(0)))
	sync2(s2)
	if got, want := hostAt(d)-t0, 10*us+9*us+12*us; got != want {
		t.Errorf("kernel on s2 after an event recorded behind a copy on s1: %v, want %v", got, want)
	}
	if err := e.Synchronize(); err != nil || !e.Query() {
		t.Errorf("event: %v, query %v", err, e.Query())
	}
	// a synchronous write is a copy the host waits for
	t0 = hostAt(d)
	if err := x.Write(hx); err != nil {
		t.Fatal(err)
	}
	if got, want := hostAt(d)-t0, 10*us+9*us; got != want {
		t.Errorf("Buffer.Write of 8000 bytes: %v, want %v", got, want)
	}
}

// The timed sim computes what the plain sim does: results are the Go bodies', bit for bit.
func TestTimedResultsBitExact(t *testing.T) {
	t.Setenv(SimProfileEnv, "h200")
	d := openDev(t)
	if d.SimProfile() == nil || d.SimProfile().Name != "h200" {
		t.Fatalf("profile %v", d.SimProfile())
	}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 5000
	hx, hy := randF32(r, n), randF32(r, n)
	want := plainSaxpy(3, hx, hy)
	x, y := mustAlloc[float32](t, d, n), mustAlloc[float32](t, d, n)
	g := NewGraph(d)
	a, b := H2D(g, x, hx), H2D(g, y, hy)
	k := SaxpyNode(g, n, 3, x, y)
	k.Succeed(a, b).Precede(D2H(g, hy, y))
	launch(t, g)
	for i := range want {
		if hy[i] != want[i] {
			t.Fatalf("y[%d] = %v, want %v", i, hy[i], want[i])
		}
	}
	st := d.SimStats()
	if st.Ops != 4 || st.Modeled <= 0 || st.Busy[engH2D] <= 0 || st.Busy[engD2H] <= 0 || st.Busy[engCompute] <= 0 {
		t.Errorf("stats %v", st)
	}
	SettleModel(d) // returns (the model is at most µs ahead)
}

func TestLookupProfile(t *testing.T) {
	for _, v := range []string{"", "off", " "} {
		if p, err := LookupProfile(v); p != nil || err != nil {
			t.Errorf("%q: %v, %v; want the plain sim", v, p, err)
		}
	}
	for name, want := range Profiles {
		p, err := LookupProfile(name)
		if err != nil || *p != want {
			t.Errorf("%q: %+v, %v", name, p, err)
		}
		if err := want.Validate(); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}
	if _, err := LookupProfile("h300"); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "h100, h200") {
		t.Errorf("unknown name: %v", err)
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok.json", `{"name":"mine","mem_bytes_per_s":1e12,"fp32_flops_per_s":1e12,"h2d_bytes_per_s":1e9,"d2h_bytes_per_s":1e9,"copy_latency_ns":1000,"launch_latency_ns":10000,"kernel_overhead_ns":2000,"timer_slack_ns":1000000}`)
	p, err := LookupProfile(ok)
	if err != nil || *p != (Profile{Name: "mine", MemBandwidth: 1e12, FP32: 1e12, H2DBandwidth: 1e9, D2HBandwidth: 1e9,
		CopyLatency: us, LaunchLatency: 10 * us, KernelOverhead: 2 * us, Slack: time.Millisecond}) {
		t.Errorf("file: %+v, %v", p, err)
	}
	for i, c := range []struct{ body, want string }{
		{`{"name":"x","mem_bytes_per_s":1e12,"fp32_flops_per_s":1e12,"h2d_bytes_per_s":1e9,"d2h_bytes_per_s":-1}`, "d2h_bytes_per_s"},
		{`{"name":"x","mem_bytes_per_s":1e12,"fp32_flops_per_s":1e12,"h2d_bytes_per_s":1e9,"d2h_bytes_per_s":1e9,"hbm":3}`, `unknown field "hbm"`},
		{`{"name":"x","mem_bytes_per_s":1e12,"fp32_flops_per_s":1e12,"h2d_bytes_per_s":1e9,"d2h_bytes_per_s":1e9,"copy_latency_ns":-5}`, "copy_latency_ns"},
		{`{"mem_bytes_per_s":1e12`, "bad3.json"},
	} {
		f := write(fmt.Sprintf("bad%d.json", i), c.body)
		if _, err := LookupProfile(f); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrConfig naming %s", c.body, err, c.want)
		}
	}
	if _, err := LookupProfile(filepath.Join(dir, "missing.json")); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
}

func TestOpenReadsProfileEnv(t *testing.T) {
	t.Setenv(SimProfileEnv, "h100")
	d := openDev(t)
	if p := d.SimProfile(); p == nil || p.Name != "h100" {
		t.Errorf("profile %v", p)
	}
	t.Setenv(SimProfileEnv, "nope")
	if _, err := Open(1); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), SimProfileEnv) {
		t.Errorf("bad profile: %v, want ErrConfig naming %s", err, SimProfileEnv)
	}
	t.Setenv(SimProfileEnv, "")
	devs := openDevs(t, 1)
	if devs[0].SimProfile() != nil || devs[0].SimStats() != (SimStats{}) {
		t.Errorf("empty %s: timed", SimProfileEnv)
	}
}

// An engine's timeline: an operation takes the earliest gap at or after it is ready, so work
// ready earlier goes before work booked further ahead; bookings that touch merge.
func TestTimelineGaps(t *testing.T) {
	var tl timeline
	for _, c := range []struct{ ready, d, want time.Duration }{
		{100, 10, 100}, // [100,110)
		{0, 10, 0},     // before it: [0,10)
		{0, 95, 110},   // the gap [10,100) is too short
		{5, 20, 10},    // fits in [10,100)
		{0, 70, 30},    // [30,100) is exactly 70
		{0, 0, 0},      // zero length: no booking
		{50, 5, 205},   // everything up to 205 is taken
	} {
		if got := tl.book(c.ready, c.d); got != c.want {
			t.Errorf("book(%d, %d) = %d, want %d (timeline %v)", c.ready, c.d, got, c.want, tl.iv)
		}
	}
	if len(tl.iv) != 1 || tl.iv[0] != (interval{0, 210}) {
		t.Errorf("timeline %v, want one merged interval [0,210)", tl.iv)
	}
	tl.book(300, 10)
	tl.extend(300, 320) // a body that outlasted its model
	if tl.end() != 320 || tl.book(305, 1) != 320 {
		t.Errorf("after extend: %v", tl.iv)
	}
	tl.prune(1000) // all of it ended before the horizon
	if len(tl.iv) != 0 || tl.book(0, 5) != 0 {
		t.Errorf("after prune: %v", tl.iv)
	}
}

// Two Hosts on one goroutine are two host threads: a launch from the second does not wait
// for the first, only for the engines.
func TestTimedLaunchFromHosts(t *testing.T) {
	devs, _ := timedDevs(t, 1, testProfile)
	d := devs[0]
	g := chainGraph(t, d)
	h1, h2 := NewHost(), NewHost()
	if err := g.LaunchFrom(h1); err != nil {
		t.Fatal(err)
	}
	if err := g.LaunchFrom(h2); err != nil {
		t.Fatal(err)
	}
	// h1: h2d [10,19) kernel [19,31) d2h [31,40); h2, ready at 10 too, queues on each engine:
	// h2d [19,28) kernel [31,43) d2h [43,52)
	if h1.at.Load() != int64(40*us) || h2.at.Load() != int64(52*us) || hostAt(d) != 0 {
		t.Errorf("h1 at %v, h2 at %v, the goroutine's own host at %v; want 40µs, 52µs, 0",
			time.Duration(h1.at.Load()), time.Duration(h2.at.Load()), hostAt(d))
	}
}

// A kernel whose Work function panics or returns negative work fails its launch with
// ErrKernel naming the kernel; the device stays usable.
func TestTimedBadWork(t *testing.T) {
	devs, _ := timedDevs(t, 1, testProfile)
	d := devs[0]
	for _, c := range []struct {
		work func(_, _ Dim3, _ []any) Work
		want string
	}{
		{func(_, _ Dim3, _ []any) Work { panic("boom") }, "its Work function: "},
		{func(_, _ Dim3, _ []any) Work { return Work{Bytes: -1} }, "returned"},
	} {
		k := &Kernel{Name: "badwork", Go: func(*Block, []any) {}, Work: c.work}
		g := NewGraph(d)
		g.Kernel(k, D1(1), D1(1))
		err := g.Launch()
		if !errors.Is(err, ErrKernel) || !strings.Contains(err.Error(), "badwork") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("launch: %v, want ErrKernel naming badwork and %q", err, c.want)
		}
	}
	launch(t, chainGraph(t, d)) // still usable
}

// SettleModel sleeps until the devices' booked work ends (less the timer's lateness), and not
// at all when wall time is past it.
func TestSettleModel(t *testing.T) {
	c := &fakeClock{}
	w := newSimWorld(c, curGoid, 100*us)
	p := testProfile
	devs, err := openSim(2, &p, w)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, d := range devs {
			d.Close()
		}
	}()
	h := NewHost()
	g := chainGraph(t, devs[1])
	if err := g.LaunchFrom(h); err != nil { // ends at 40 µs in the model, host not asleep
		t.Fatal(err)
	}
	SettleModel(devs...)
	SettleModel(devs[0]) // an idle device: nothing to wait for
	if s := c.slept(); len(s) != 0 {
		t.Fatalf("slept %v for a 40µs lead under a 100µs lateness", s)
	}
	g2 := NewGraph(devs[1])
	g2.Kernel(busyKernel(nil, true), D1(1), D1(1), int64(5e8), int64(0)) // 500 µs
	if err := g2.LaunchFrom(NewHost()); err != nil {
		t.Fatal(err)
	}
	end := devs[1].tm.idleAt()
	SettleModel(devs...)
	if s := c.slept(); len(s) != 1 || s[0] != end-100*us {
		t.Errorf("slept %v, want once for %v (the model's end less the lateness)", s, end-100*us)
	}
}
