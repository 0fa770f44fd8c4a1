package node

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetflow/hetflow/internal/testsupport"
)

// TestWallClock: a stamp is the base's offset plus the monotonic clock
// while the base is under a second old, and a base older than that (or
// one from a later monotonic reading) is taken again from time.Now.
func TestWallClock(t *testing.T) {
	var c wallClock
	near := func(ns int64) bool { // within an hour of time.Now: the base was taken again
		d := time.Now().UnixNano() - ns
		return d < int64(time.Hour) && d > -int64(time.Hour)
	}
	if ns := c.nanos(); !near(ns) {
		t.Fatalf("first stamp %d is not the wall clock's %d", ns, time.Now().UnixNano())
	}
	const off = int64(48 * time.Hour) // a base no wall clock gives
	m1 := int64(time.Since(monoEpoch))
	c.base.Store(&clockBase{mono: m1, off: off})
	ns := c.nanos()
	m2 := int64(time.Since(monoEpoch))
	switch {
	case m2-m1 < rebase:
		if ns < off+m1 || ns > off+m2 {
			t.Fatalf("stamp %d is not the base's offset %d plus the monotonic clock in [%d, %d]", ns, off, m1, m2)
		}
	case !near(ns): // the machine stalled past the base's second: taken again
		t.Fatalf("stamp %d after a stale base is not the wall clock", ns)
	}
	for _, b := range []clockBase{{mono: m2 - 2*rebase, off: off}, {mono: m2 + rebase, off: off}} {
		c.base.Store(&b)
		if ns := c.nanos(); !near(ns) {
			t.Fatalf("stamp %d from base %+v is not the wall clock", ns, b)
		}
		if got := c.base.Load(); got.off == off {
			t.Fatalf("base %+v was not taken again", b)
		}
	}
}

// stampBetween reports (t.Errorf) unless stamp ns of clock what lies
// between Unix nanoseconds lo and hi, give or take tol.
func stampBetween(t testing.TB, what string, ns, lo, hi, tol int64) bool {
	t.Helper()
	if ns < lo-tol || ns > hi+tol {
		t.Errorf("%s: stamp %d outside [%d, %d] by more than %d ns", what, ns, lo, hi, tol)
		return false
	}
	return true
}

// stampsTheWallClock checks ten stamps of c against time.Now read on
// either side (within a millisecond).
func stampsTheWallClock(t *testing.T, c *tscClock, what string) bool {
	t.Helper()
	for range 10 {
		lo := time.Now().UnixNano()
		ns := c.nanos()
		hi := time.Now().UnixNano()
		if !stampBetween(t, what, ns, lo, hi, int64(time.Millisecond)) {
			return false
		}
	}
	return true
}

// calibratedTSC is a tscClock whose scale is measured and checked, so
// that the counter stamps (skipped where the counter is not the
// clocksource).
func calibratedTSC(t *testing.T) *tscClock {
	if !tscUsable() {
		t.Skip("the time-stamp counter is not this machine's clocksource")
	}
	c := &tscClock{on: true}
	testsupport.Eventually(t, 60*time.Second, "the counter's scale measured and checked", func() bool {
		c.nanos()
		b := c.base.Load()
		if b != nil && b.off {
			t.Fatalf("the counter was found to stray from the monotonic clock: %+v", b)
		}
		return b != nil && b.span != 0
	})
	return c
}

// TestTSCClockStampsTheWallClock: a tscClock's stamps, from the counter
// once its scale is checked (and the wall clock's before), lie between
// the wall clock's readings on either side of them, within the clock's
// tolerance, on goroutines stamping at once across rebases (the base
// taken again every few stamps here). Bounds only: a goroutine stalled
// between its readings widens them.
func TestTSCClockStampsTheWallClock(t *testing.T) {
	c := calibratedTSC(t)
	tol := tscTolerance + int64(time.Millisecond) // the scale's error and the wall clock's slew
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				if g == 0 && i%7 == 0 { // a base older than tscRebase: taken again at the next stamp
					if b := c.base.Load(); b != nil && !b.off {
						old := *b
						old.span = 1
						c.base.CompareAndSwap(b, &old) // not over a base another goroutine installed since, one off included
					}
				}
				lo := time.Now().UnixNano()
				ns := c.nanos()
				hi := time.Now().UnixNano()
				if !stampBetween(t, "tscClock", ns, lo, hi, tol) {
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if b := c.base.Load(); b.off {
		t.Fatalf("the counter was found to stray from the monotonic clock: %+v", b)
	}
}

// TestNextBase: the base a reading of the counter and the two clocks makes
// after another, on synthetic readings (a counter at 2 GHz, the wall clock
// 1e18 ns after the monotonic one unless a case moves it): a first scale
// measured only over tscCalibrate to 2*tscRebase and a later one only
// over tscRebase/2 to 2*tscRebase, in which the wall clock moved as the
// monotonic one did; a base serves stamps only once its scale was
// checked, the first over half a second at least; a scale checked against the monotonic clock over every span,
// however long, the clock off where the counter strayed by more than
// tscTolerance and 1/tscStrayPart of it; a reading paired too loosely
// refused.
func TestNextBase(t *testing.T) {
	const (
		ghz  = 2                        // ticks a nanosecond
		mult = uint64(1) << 31          // 0.5 ns a tick, 32.32 fixed point
		near = mult + mult/10_000       // a scale 1e-4 off: within the tolerance over any span up to 5 s
		span = tscRebase * ghz          // the ticks of a base that serves at mult
		t0   = int64(1) << 40           // the counter at the old base
		m0   = int64(10 * time.Second)  // the monotonic clock at the old base
		w0   = int64(1e18)              // the wall clock's offset from the monotonic one
		ms   = int64(time.Millisecond)  //
		sec  = int64(time.Second)       //
		tick = int64(ghz * time.Second) // the ticks of a second
	)
	first := &tscBase{tsc: t0, mono: m0, ns: m0 + w0}
	unchecked := &tscBase{tsc: t0, mono: m0, ns: m0 + w0, mult: near}
	known := &tscBase{tsc: t0, mono: m0, ns: m0 + w0, mult: near, span: span}
	scaled := func(mult uint64) *tscBase { return &tscBase{tsc: t0, mono: m0, ns: m0 + w0, mult: mult, span: span} }
	const (
		refused  = iota // nil: paired too loosely
		off             // {off: true}
		unscaled        // a base with no scale
		measured        // the scale measured over the span: mult
		kept            // the old base's scale
	)
	for _, tc := range []struct {
		name   string
		old    *tscBase
		dt, dm int64 // the reading's counter and monotonic clock from old's
		dw     int64 // the wall clock's move apart from the monotonic one since old
		width  int64 // the reading's pair width, ticks
		want   int
		serves bool // the new base serves stamps (span)
	}{
		{name: "the first base", want: unscaled, width: 100},
		{name: "the first base, paired loosely", want: refused, width: tscPairTicks + 1},
		{name: "the first base, the counter back between its readings", want: refused, width: -1},
		{name: "the first scale, over 50 ms", old: first, dt: 50 * ms * ghz, dm: 50 * ms, want: measured},
		{name: "the first scale, over 40 ms", old: first, dt: 40 * ms * ghz, dm: 40 * ms, want: unscaled},
		{name: "the first scale, over 1.5 s", old: first, dt: 1500 * ms * ghz, dm: 1500 * ms, want: measured},
		{name: "the first scale, over 3 s", old: first, dt: 3 * tick, dm: 3 * sec, want: unscaled},
		{name: "the first scale, over 5 s", old: first, dt: 5 * tick, dm: 5 * sec, want: unscaled},
		{name: "the first scale, over a suspend: counter 20 s, monotonic 3 s", old: first, dt: 20 * tick, dm: 3 * sec, dw: 17 * sec, want: unscaled},
		{name: "the first scale, over a suspend: counter 20 s, monotonic 1.5 s", old: first, dt: 20 * tick, dm: 1500 * ms, dw: 18500 * ms, want: unscaled},
		{name: "the first scale, over a step of the wall clock", old: first, dt: tick, dm: sec, dw: 3 * ms, want: unscaled},
		{name: "the first scale, the counter back", old: first, dt: -tick, dm: sec, want: unscaled},
		{name: "the first scale, paired loosely", old: first, dt: tick, dm: sec, width: tscPairTicks + 1, want: refused},
		{name: "the first scale checked over 0.6 s", old: unchecked, dt: 600 * ms * ghz, dm: 600 * ms, want: measured, serves: true},
		{name: "the first scale checked over 1 ms (a wall step): not serving", old: unchecked, dt: ms * ghz, dm: ms, dw: sec, want: kept},
		{name: "the first scale checked over 0.4 s: not serving", old: unchecked, dt: 400 * ms * ghz, dm: 400 * ms, want: kept},
		{name: "the first scale checked over 3 s", old: unchecked, dt: 3 * tick, dm: 3 * sec, want: kept, serves: true},
		{name: "the first scale strays", old: unchecked, dt: 600*ms*ghz + 10*ms*ghz, dm: 600 * ms, want: off},
		{name: "a gap of 1 s", old: known, dt: tick, dm: sec, want: measured, serves: true},
		{name: "a gap of 0.2 s", old: known, dt: 200 * ms * ghz, dm: 200 * ms, want: kept, serves: true},
		{name: "a gap of 1.5 s", old: known, dt: 1500 * ms * ghz, dm: 1500 * ms, want: measured, serves: true},
		{name: "a gap of 3 s", old: known, dt: 3 * tick, dm: 3 * sec, want: kept, serves: true},
		{name: "a gap of 5 s", old: known, dt: 5 * tick, dm: 5 * sec, want: kept, serves: true},
		{name: "a gap of an hour", old: known, dt: 3600 * tick, dm: 3600 * sec, want: kept, serves: true},
		{name: "a gap of 1 s over a step of the wall clock", old: known, dt: tick, dm: sec, dw: -sec, want: kept, serves: true},
		{name: "a stamp on another core a little before the base", old: known, dt: -1000, dm: 0, want: kept, serves: true},
		{name: "a counter 3.9 ms ahead over 1 s", old: scaled(mult), dt: tick + 39*ms*ghz/10, dm: sec, want: measured, serves: true},
		{name: "a counter 4.1 ms ahead over 1 s", old: scaled(mult), dt: tick + 41*ms*ghz/10, dm: sec, want: off},
		{name: "a counter 4.1 ms behind over 1 s", old: scaled(mult), dt: tick - 41*ms*ghz/10, dm: sec, want: off},
		{name: "a counter 100 ms ahead 2.1 s after", old: known, dt: 2200 * ms * ghz, dm: 2100 * ms, want: off},
		{name: "a counter 5% fast 2.1 s after", old: scaled(mult), dt: 2100 * ms * ghz * 105 / 100, dm: 2100 * ms, want: off},
		{name: "a counter gone back", old: known, dt: -tick, dm: sec, want: off},
		{name: "a counter gone back 3 ms at once", old: known, dt: -3 * ms * ghz, dm: 0, want: off},
		{name: "a scale 0.15 of the counter's, 3 s", old: scaled(mult * 15 / 100), dt: 3 * tick, dm: 3 * sec, want: off},
		{name: "a scale 0.15 of the counter's, 7 s", old: scaled(mult * 15 / 100), dt: 7 * tick, dm: 7 * sec, want: off},
		{name: "a scale twice the counter's, 1.5 s", old: scaled(2 * mult), dt: 1500 * ms * ghz, dm: 1500 * ms, want: off},
		{name: "a suspend: counter 20 s, monotonic 3 s", old: known, dt: 20 * tick, dm: 3 * sec, dw: 17 * sec, want: off},
		{name: "a scale known, paired loosely", old: known, dt: tick, dm: sec, width: tscPairWidth * ghz * 11 / 10, want: refused},
		{name: "a scale known, paired within 20 µs", old: known, dt: tick, dm: sec, width: tscPairWidth * ghz * 9 / 10, want: measured, serves: true},
	} {
		tick, mono := t0+tc.dt, m0+tc.dm
		nb := nextBase(tc.old, tick, mono, mono+w0+tc.dw, tc.width)
		var got int
		switch {
		case nb == nil:
			got = refused
		case nb.off:
			got = off
		case nb.tsc != tick || nb.mono != mono || nb.ns != mono+w0+tc.dw:
			t.Errorf("%s: base %+v is not the reading's", tc.name, *nb)
			continue
		case nb.mult == 0:
			got = unscaled
		case tc.old != nil && nb.mult == tc.old.mult:
			got = kept
		case nb.mult == uint64(tc.dm)<<32/uint64(tc.dt):
			got = measured
		default:
			t.Errorf("%s: scale %d, neither measured (%d) nor kept", tc.name, nb.mult, uint64(tc.dm)<<32/uint64(tc.dt))
			continue
		}
		if got != tc.want {
			t.Errorf("%s: got %d (%+v), want %d (refused, off, unscaled, measured, kept)", tc.name, got, nb, tc.want)
			continue
		}
		if nb == nil || nb.off {
			continue
		}
		if nb.back != tc.width {
			t.Errorf("%s: the base serves readings %d ticks before it, its pair's width is %d", tc.name, nb.back, tc.width)
		}
		if serves := nb.span != 0; serves != tc.serves {
			t.Errorf("%s: the base serves stamps: %v (span %d), want %v", tc.name, serves, nb.span, tc.serves)
		} else if serves && (scaleTicks(uint64(nb.span), nb.mult) > tscRebase || scaleTicks(uint64(nb.span+2), nb.mult) < tscRebase) {
			t.Errorf("%s: span %d ticks is not tscRebase at scale %d", tc.name, nb.span, nb.mult)
		}
	}
	if o := (&tscBase{off: true}); nextBase(o, t0, m0, w0, 0) != o {
		t.Error("a base after one off is not the one off")
	}
}

// TestTSCBaseServesBefore: a base that serves stamps serves a counter
// reading before its own by at most its pair's width, scaled back from it;
// not one earlier, nor one at or after it (nanos serves those), nor any
// while its scale is not checked.
func TestTSCBaseServesBefore(t *testing.T) {
	b := &tscBase{tsc: 1000_000, ns: 1e18, mult: 1 << 31, span: 2e9, back: 400}
	for _, tc := range []struct {
		t    int64
		want int64
		ok   bool
	}{
		{b.tsc - 1, 1e18 - 0, true}, // half a nanosecond, rounded down
		{b.tsc - 2, 1e18 - 1, true},
		{b.tsc - 400, 1e18 - 200, true},
		{b.tsc - 401, 0, false},
		{b.tsc, 0, false},
		{b.tsc + 1, 0, false},
	} {
		if ns, ok := b.servesBefore(tc.t); ns != tc.want || ok != tc.ok {
			t.Errorf("reading %d before the base: (%d, %v), want (%d, %v)", b.tsc-tc.t, ns, ok, tc.want, tc.ok)
		}
	}
	unchecked := *b
	unchecked.span = 0
	var none *tscBase
	for _, u := range []*tscBase{&unchecked, none} {
		if _, ok := u.servesBefore(b.tsc - 1); ok {
			t.Errorf("base %+v served a reading before it", u)
		}
	}
}

// TestTSCClockInstall: a base after another takes its place only if the
// other is still there, so that of rebases at once one wins; a base off
// takes any place, and none replaces it, nor does a stamp take a base
// again once the clock is off (its stamps are the wall clock's), on
// every architecture.
func TestTSCClockInstall(t *testing.T) {
	c := &tscClock{on: true}
	a, b, d := &tscBase{tsc: 1}, &tscBase{tsc: 2}, &tscBase{tsc: 3}
	if !c.install(nil, a) || c.base.Load() != a {
		t.Fatal("the first base was not installed")
	}
	if !c.install(a, b) || c.base.Load() != b {
		t.Fatal("a base after the one there was not installed")
	}
	if c.install(a, d) || c.base.Load() != b {
		t.Fatal("a base after one no longer there replaced the newer")
	}
	off := &tscBase{off: true}
	if !c.install(a, off) || c.base.Load() != off {
		t.Fatal("a base off after one no longer there was not installed")
	}
	if c.install(off, d) || c.install(b, d) || c.base.Load() != off {
		t.Fatal("a base replaced one off")
	}
	if !stampsTheWallClock(t, c, "off") {
		return
	}
	if c.base.Load() != off {
		t.Fatal("a stamp of a clock off took a base")
	}

	// Rebases at once after one base, one of them finding the counter
	// strayed: one other base at most was installed before the one off,
	// and the clock ends off whatever their order.
	c = &tscClock{on: true}
	c.base.Store(a)
	var wg sync.WaitGroup
	var won sync.Map
	for i := range 8 {
		wg.Go(func() {
			nb := &tscBase{tsc: int64(10 + i), off: i == 5}
			if c.install(a, nb) && !nb.off {
				won.Store(i, true)
			}
		})
	}
	wg.Wait()
	n := 0
	won.Range(func(any, any) bool { n++; return true })
	if got := c.base.Load(); !got.off || n > 1 {
		t.Fatalf("after rebases at once: base %+v, %d normal bases installed", got, n)
	}
}

// TestTSCClockCheck: check takes a new base only where the serving base is
// over 2*tscRebase old by the monotonic clock: a counter that stood still
// since switches the clock off, one that kept its rate gets an ordinary
// base; a fresh base, one not serving, and a clock that does not read the
// counter are left as they are.
func TestTSCClockCheck(t *testing.T) {
	c := calibratedTSC(t)
	b := c.base.Load()
	ticks := int64(uint64(3*tscRebase) << 32 / b.mult) // 3 s at the scale
	mono := int64(time.Since(monoEpoch))
	for _, tc := range []struct {
		name string
		on   bool
		b    *tscBase
	}{
		{"a fresh base", true, &tscBase{tsc: rdtsc(), mono: mono, ns: time.Now().UnixNano(), mult: b.mult, span: b.span, back: b.back}},
		{"a base not serving", true, &tscBase{tsc: rdtsc(), mono: mono - 3*tscRebase, ns: time.Now().UnixNano() - 3*tscRebase, mult: b.mult}},
		{"a clock not reading the counter", false, &tscBase{tsc: rdtsc(), mono: mono - 3*tscRebase, ns: time.Now().UnixNano() - 3*tscRebase, mult: b.mult, span: b.span}},
	} {
		c := &tscClock{on: tc.on}
		c.base.Store(tc.b)
		c.check()
		if c.base.Load() != tc.b {
			t.Errorf("%s: check took a new base %+v", tc.name, c.base.Load())
		}
	}

	// A counter that kept its rate since a base 3 s old: a new base, serving.
	kept := &tscClock{on: true}
	kept.base.Store(&tscBase{tsc: b.tsc - ticks, mono: b.mono - 3*tscRebase, ns: b.ns - 3*tscRebase, mult: b.mult, span: b.span, back: b.back})
	// A counter that stood still since a base 3 s old: off.
	stopped := &tscClock{on: true}
	stopped.base.Store(&tscBase{tsc: rdtsc(), mono: mono - 3*tscRebase, ns: time.Now().UnixNano() - 3*tscRebase, mult: b.mult, span: b.span, back: b.back})
	testsupport.Eventually(t, 10*time.Second, "check took a base after each old one", func() bool {
		kept.check() // a pair taken too loosely leaves the base: tried again
		stopped.check()
		return int64(time.Since(monoEpoch))-kept.base.Load().mono < 2*tscRebase && stopped.isOff()
	})
	if nb := kept.base.Load(); nb.off || nb.span == 0 {
		t.Errorf("a counter that kept its rate: base %+v", nb)
	}
}

// TestNodeChecksTheCounter: a started node's flusher checks a counter that
// stood still since its base (no stamp takes a base then) and switches its
// clock off.
func TestNodeChecksTheCounter(t *testing.T) {
	n := newCluster(t, nodeSpec{}).nodes[0]
	if !n.clock.on {
		t.Skip("the time-stamp counter is not this machine's clocksource")
	}
	mono := int64(time.Since(monoEpoch))
	n.clock.base.Store(&tscBase{tsc: rdtsc(), mono: mono - 3*tscRebase, ns: time.Now().UnixNano() - 3*tscRebase, mult: 1 << 31, span: 2e9})
	testsupport.Eventually(t, 30*time.Second, "the counter clock off", func() bool { return n.Stats().CounterClockOff })
}

// lockedBuffer is a log's output, written and read under a lock.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestNodeClockReadsTheCounter: a node made without Config.Now stamps by
// its tscClock, reading the counter exactly where it is the clocksource;
// a counter found to stray is logged once by the node's logger and shown
// in its Stats. A node with Config.Now stamps by that.
func TestNodeClockReadsTheCounter(t *testing.T) {
	conn := connect(t, testsupport.NATS(t).URL(), "clock")
	var out lockedBuffer
	n, err := New(Config{ID: "n1", Conn: conn, CPUs: 1, Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if !n.fastClock || n.clock.on != tscUsable() {
		t.Errorf("a node without Config.Now: fastClock %v, the counter read %v, the counter the clocksource %v", n.fastClock, n.clock.on, tscUsable())
	}
	if n.Stats().CounterClockOff {
		t.Error("a new node's counter clock is off")
	}
	// Two rebases at once after one base, both finding the counter strayed
	// (20e9 ticks, 5 s at the base's scale, over 3 s of the monotonic clock,
	// as over a suspend): logged once.
	old := &tscBase{tsc: 1 << 40, mono: int64(time.Second), ns: 1e18, mult: 1 << 30, span: 4e9}
	n.clock.base.Store(old)
	for range 2 {
		nb := nextBase(old, old.tsc+20e9, old.mono+int64(3*time.Second), old.ns+int64(3*time.Second), 100)
		if nb == nil || !nb.off || !n.clock.install(old, nb) {
			t.Fatalf("a strayed counter's base %+v not installed", nb)
		}
	}
	if !n.Stats().CounterClockOff {
		t.Error("Stats do not show the counter clock off")
	}
	if got := strings.Count(out.String(), "time-stamp counter strayed"); got != 1 {
		t.Errorf("the counter's stray logged %d times, want once:\n%s", got, out.String())
	}
	_ = n.Close()
	fixed := time.Unix(7, 0)
	n, err = New(Config{ID: "n2", Conn: conn, CPUs: 1, Now: func() time.Time { return fixed }})
	if err != nil {
		t.Fatal(err)
	}
	if n.fastClock || n.clock.on || n.nanos() != fixed.UnixNano() {
		t.Errorf("a node with Config.Now: fastClock %v, the counter read %v, stamp %d", n.fastClock, n.clock.on, n.nanos())
	}
	_ = n.Close()
}

// TestTSCClockOffStampsTheWallClock: a tscClock that does not read the
// counter (not amd64, or not the clocksource) stamps wallClock's stamps.
func TestTSCClockOffStampsTheWallClock(t *testing.T) {
	var c tscClock
	if !stampsTheWallClock(t, &c, "off") {
		return
	}
	if c.base.Load() != nil {
		t.Fatal("a tscClock that is off took a base of the counter")
	}
}

// BenchmarkStampClock is a stamp of each clock an activation may be
// stamped with: the node's wallClock (the monotonic clock) and its
// tscClock (the counter).
func BenchmarkStampClock(b *testing.B) {
	var sink int64
	b.Run("wall", func(b *testing.B) {
		var c wallClock
		for b.Loop() {
			sink += c.nanos()
		}
	})
	b.Run("tsc", func(b *testing.B) {
		if !tscUsable() {
			b.Skip("the time-stamp counter is not this machine's clocksource")
		}
		c := &tscClock{on: true}
		deadline := time.Now().Add(time.Minute)
		for cb := c.base.Load(); (cb == nil || cb.span == 0) && time.Now().Before(deadline); cb = c.base.Load() {
			sink += c.nanos() // the scale measured and checked first: until then stamps are the wall clock's
		}
		if cb := c.base.Load(); cb == nil || cb.span == 0 {
			b.Fatalf("the counter's scale not checked in a minute: %+v", cb)
		}
		for b.Loop() {
			sink += c.nanos()
		}
	})
	_ = sink
}
