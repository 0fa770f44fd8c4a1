package node

import (
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

// calibratedTSC is a tscClock whose scale is measured (skipped where the
// counter is not the clocksource).
func calibratedTSC(t *testing.T) *tscClock {
	if !tscUsable() {
		t.Skip("the time-stamp counter is not this machine's clocksource")
	}
	c := &tscClock{on: true}
	testsupport.Eventually(t, 10*time.Second, "the counter's scale measured", func() bool {
		c.nanos()
		b := c.base.Load()
		return b != nil && b.mult != 0
	})
	return c
}

// TestTSCClockStampsTheWallClock: a tscClock's stamps, from the counter
// once its scale is measured (and the wall clock's before), lie between
// the wall clock's readings on either side of them, within the clock's
// tolerance, on goroutines stamping at once across rebases (the base
// taken again every few stamps here).
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
						c.base.Store(&old)
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

// TestTSCClockTurnsOffWhereTheCounterStrays: a base whose scale disagrees
// with the monotonic clock by more than tscTolerance over the span to the
// next (as a counter out of step across cores, or at another rate, would),
// or a counter that went back by more than that, switches the clock to
// the wall clock's stamps for good.
func TestTSCClockTurnsOffWhereTheCounterStrays(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  func(b tscBase, ticks100ms int64) tscBase
	}{
		{"a scale twice the counter's", func(b tscBase, ticks int64) tscBase {
			b.tsc, b.mono, b.mult = b.tsc-ticks, b.mono-int64(100*time.Millisecond), b.mult*2
			return b
		}},
		{"a counter gone back", func(b tscBase, ticks int64) tscBase {
			b.tsc += ticks
			return b
		}},
	} {
		c := calibratedTSC(t)
		c.nanos()
		b := *c.base.Load()
		ticks := int64(float64(100*time.Millisecond) * float64(uint64(1)<<32) / float64(b.mult))
		bad := tc.bad(b, ticks)
		bad.span = 0 // the next stamp takes a base again, and checks this one
		c.base.Store(&bad)
		// The next stamp checks the bad base, unless its readings were
		// paired too loosely (preempted between): then a later one does.
		testsupport.Eventually(t, 10*time.Second, tc.name+": the clock off the counter", func() bool {
			lo := time.Now().UnixNano()
			ns := c.nanos()
			hi := time.Now().UnixNano()
			stampBetween(t, tc.name, ns, lo, hi, int64(time.Millisecond))
			if got := c.base.Load(); !got.off && got != &bad {
				t.Fatalf("%s: a new base replaced the bad one: %+v", tc.name, got)
			}
			return c.base.Load().off
		})
		if t.Failed() {
			return
		}
		for range 10 {
			lo := time.Now().UnixNano()
			ns := c.nanos()
			hi := time.Now().UnixNano()
			if !stampBetween(t, tc.name+", after", ns, lo, hi, int64(time.Millisecond)) {
				return
			}
		}
		if got := c.base.Load(); !got.off {
			t.Fatalf("%s: the clock went back to the counter: %+v", tc.name, got)
		}
	}
}

// TestTSCClockOffStampsTheWallClock: a tscClock that does not read the
// counter (not amd64, or not the clocksource) stamps wallClock's stamps.
func TestTSCClockOffStampsTheWallClock(t *testing.T) {
	var c tscClock
	for range 10 {
		lo := time.Now().UnixNano()
		ns := c.nanos()
		hi := time.Now().UnixNano()
		if !stampBetween(t, "off", ns, lo, hi, int64(time.Millisecond)) {
			return
		}
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
		for b.Loop() {
			sink += c.nanos()
		}
	})
	_ = sink
}
