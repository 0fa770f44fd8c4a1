package node

import (
	"testing"
	"time"
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
