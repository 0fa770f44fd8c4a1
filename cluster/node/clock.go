package node

import (
	"log/slog"
	"math"
	"math/bits"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// wallClock is the wall clock an activation stamps its start and end with
// when the node has no Config.Now: time.Now reads two clocks (the wall and
// the monotonic one, two vDSO calls), this one reads the monotonic clock
// and adds the wall clock's offset from it, taken from a time.Now at most
// rebase ago. So a stamp is to the nanosecond, and off the wall clock by
// what the wall clock was slewed (NTP: at most 500 µs a second) or stepped
// since the offset was taken: a step shows in the stamps within a second.
// A rebase between an activation's two stamps can take the slew back
// (microseconds): run.event then stamps its start as its end.
type wallClock struct {
	base atomic.Pointer[clockBase]
}

type clockBase struct {
	mono int64 // monotonic nanoseconds since monoEpoch when off was taken
	off  int64 // Unix nanoseconds minus monotonic nanoseconds since monoEpoch
}

// monoEpoch anchors the monotonic readings (time.Since of it reads the
// monotonic clock alone).
var monoEpoch = time.Now()

const rebase = int64(time.Second)

// nanos is the wall clock now, in Unix nanoseconds.
func (c *wallClock) nanos() int64 {
	m := int64(time.Since(monoEpoch))
	if b := c.base.Load(); b != nil && m-b.mono < rebase && m >= b.mono {
		return b.off + m
	}
	t := time.Now()
	mm := int64(t.Sub(monoEpoch))
	c.base.Store(&clockBase{mono: mm, off: t.UnixNano() - mm})
	return t.UnixNano()
}

// tscClock is the clock a node without Config.Now stamps activations with
// (Node.nanos): where the processor's time-stamp counter is the kernel's
// clocksource (tscUsable, decided when the node is made: on), a stamp is
// the counter read (rdtsc) and scaled from a base, a (counter, wall
// clock, monotonic clock) reading at most tscRebase ago, instead of a read
// of the monotonic clock (wallClock.nanos: time.Since, a vDSO call): 15-20 ns
// a stamp here against 33-45 (BenchmarkStampClock). Else, and while the
// scale is measured and checked (a node's first 50 ms and another half
// second at least by the monotonic clock, a stamp then reading the counter
// and the monotonic clock twice), stamps are wallClock's.
//
// Each base is taken from the one before by nextBase. A scale is the
// monotonic clock's nanoseconds a tick over the span between two bases,
// measured only over a span of tscCalibrate to 2*tscRebase (the first
// scale) or tscRebase/2 to 2*tscRebase (a later one) in which the wall
// clock moved as the monotonic one did (no suspend or step between): a
// base's counter readings are at most tscPairTicks apart before a scale is
// known and tscPairWidth after, and its time.Now lies between them, so for
// a counter at 1 GHz or more the first scale is within 1e-3 (25 µs at
// either end over 50 ms) and a later one within 7e-5 (25 µs at the first
// scaled base, 10 µs at the next, over half a second) where the counter
// keeps its rate, in practice well under a microsecond a second. Every base checks the scale of the one before against the
// monotonic clock over the span between them, however long: where the
// counter strays by more than tscTolerance plus 1/tscStrayPart of the span
// (a counter not in step across cores, not at a constant rate, or run on
// through a suspend the monotonic clock did not count; or, spuriously, a
// change of the monotonic clock's rate by NTP's slew between the span a
// scale was measured over and the span it is checked over), the clock
// switches to wallClock's stamps for good. The counter stamps only from a base whose
// scale passed that check, the first over half a second at least: a scale
// that serves agreed with the monotonic clock within 6e-3 (2 ms and 2e-3
// over half a second) over the span it was measured or checked over, and
// serves about tscRebase (its base's span, in ticks at the scale). So a
// stamp is off the wall clock by what wallClock's are (the wall clock's
// slew or step since the base) plus the scale's error over that second,
// and the change of the monotonic clock's slew since the scale was
// measured over that second: well under a millisecond where the counter
// keeps its rate and the slew changes little (ntpd slews by at most 5e-4;
// chrony by up to 8.3e-2 by default, moving stamps by as much, and
// switching the clock off at the next base where past the check's
// tolerance). Whatever the
// counter did, a stamp is at most tscRebase ahead (a counter that jumped
// ahead is served up to its base's span; the next base switches the clock
// off), and at most about 2*tscRebase plus the node's flusher's second
// behind (a counter that stopped or slowed takes no base: check takes one
// once the base is 2*tscRebase old, and switches the clock off), longer
// only while the flusher is held up. A rebase between an activation's two
// stamps can take them back by the scale's error: run.event then stamps
// its start as its end. Stamps are shown
// times and the timing of running events only (the RunningAfter flight
// scan compares a flight's start stamp with a stamp of now, scanFlights:
// the scale's error moves a running event's publication by as much); no
// verdict, failure or timeout of a task reads one.
type tscClock struct {
	on   bool         // the counter is read (tscUsable); else every stamp is wall's
	log  *slog.Logger // told once when the counter strays (nil: nothing)
	wall wallClock    // stamps while the scale is measured, or when the counter is not read
	base atomic.Pointer[tscBase]
}

// isOff reports whether the counter strayed from the monotonic clock, so
// that the clock stamps by the wall clock for good (Stats.CounterClockOff).
func (c *tscClock) isOff() bool {
	b := c.base.Load()
	return b != nil && b.off
}

// tscBase is a reading of the counter and the two clocks, taken together
// (tscPair), and the scale from the counter to nanoseconds.
type tscBase struct {
	tsc  int64  // the counter
	mono int64  // monotonic nanoseconds since monoEpoch
	ns   int64  // Unix nanoseconds
	mult uint64 // nanoseconds a tick, 32.32 fixed point; 0: not measured yet
	span int64  // the ticks the base serves (tscRebase at mult); 0: none (the scale not checked yet), stamps are wall's
	back int64  // the ticks its counter readings were apart: a reading before tsc by at most that is served too (servesBefore)
	off  bool   // the counter strayed: stamps are wall's for good
}

const (
	tscRebase    = int64(time.Second)
	tscCalibrate = int64(50 * time.Millisecond)
	tscTolerance = int64(2 * time.Millisecond)  // the most a counter may stray over a span, besides tscStrayPart of it
	tscStrayPart = 500                          // a counter may stray by 1/tscStrayPart of a span: the first scale's 1e-3, and a change of the monotonic clock's rate by NTP's slew of up to 1e-3 between the spans (ntpd's slew is at most 5e-4; chrony's up to 8.3e-2 by default, so a large correction can switch the clock off: spurious, the stamps then the wall clock's)
	tscPairWidth = int64(20 * time.Microsecond) // the most a base's readings are apart, once a scale is known
	tscPairTicks = 50_000                       // and before (20–50 µs at 1–2.5 GHz)
)

// tscUsable reports whether this machine's time-stamp counter may stamp
// activations: read on amd64, and the kernel's clocksource (which it is
// only where the kernel found it constant-rate and in step across cores,
// and stops being when its watchdog finds otherwise).
var tscUsable = sync.OnceValue(func() bool {
	if !haveTSC {
		return false
	}
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && strings.TrimSpace(string(b)) == "tsc"
})

// scaleTicks is d ticks in nanoseconds at mult (32.32 fixed point).
func scaleTicks(d, mult uint64) int64 {
	hi, lo := bits.Mul64(d, mult)
	return int64(hi<<32 | lo>>32)
}

// scaleSpan is d ticks (either sign) in nanoseconds at mult, saturated
// at ±math.MaxInt64.
func scaleSpan(d int64, mult uint64) int64 {
	u := uint64(d)
	if d < 0 {
		u = -u
	}
	hi, lo := bits.Mul64(u, mult)
	ns := int64(math.MaxInt64)
	if hi < 1<<31 {
		ns = int64(hi<<32 | lo>>32)
	}
	if d < 0 {
		return -ns
	}
	return ns
}

// nanos is the wall clock now, in Unix nanoseconds.
func (c *tscClock) nanos() int64 {
	if !c.on {
		return c.wall.nanos()
	}
	b := c.base.Load()
	if b != nil && b.off {
		return c.wall.nanos()
	}
	t := rdtsc()
	if b != nil {
		if d := t - b.tsc; uint64(d) < uint64(b.span) {
			return b.ns + scaleTicks(uint64(d), b.mult)
		}
	}
	return c.rebase(b, t)
}

// check takes a new base, and so checks the counter against the monotonic
// clock (nextBase), where the base that serves stamps was taken over
// 2*tscRebase ago by the monotonic clock. A counter that stopped or slowed
// stays within its base's span, so no stamp takes a base and its stamps
// would fall behind without bound: the node's flusher calls check every
// replayAgain (a second). Where the counter kept its rate the new base is
// an ordinary one.
func (c *tscClock) check() {
	if !c.on {
		return
	}
	b := c.base.Load()
	if b == nil || b.off || b.span == 0 || int64(time.Since(monoEpoch))-b.mono <= 2*tscRebase {
		return
	}
	c.rebase(b, rdtsc())
}

// tscPair reads the counter on either side of a time.Now, three times,
// and returns the narrowest: the counter at the middle, the time, and how
// many ticks apart the two counter readings were (-1: the counter went
// back each time).
func tscPair() (tick int64, now time.Time, width int64) {
	width = -1
	for range 3 {
		a := rdtsc()
		n := time.Now()
		b := rdtsc()
		if b >= a && (width < 0 || b-a < width) {
			tick, now, width = a+(b-a)/2, n, b-a
		}
	}
	return tick, now, width
}

// rebase returns the stamp whose counter reading t base old, the one the
// stamp loaded, does not serve (none yet, its scale not checked yet, older
// than tscRebase, or t before it): old's where t is before it by no more
// than its readings were apart, else the wall clock's, read with a new
// base taken after old.
func (c *tscClock) rebase(old *tscBase, t int64) int64 {
	if ns, ok := old.servesBefore(t); ok {
		return ns
	}
	if old != nil && old.span == 0 {
		// The scale not measured yet, or measured and not checked yet:
		// until tscCalibrate after the base, or half a second to check
		// the first scale over, both by the monotonic clock (a step of the
		// wall clock does not end the wait; nextBase measures and checks by
		// the monotonic clock too), stamps are the wall clock's.
		wait := tscCalibrate
		if old.mult != 0 {
			wait = tscRebase / 2
		}
		if m := int64(time.Since(monoEpoch)) - old.mono; m < wait && m >= 0 {
			return c.wall.nanos()
		}
	}
	tick, now, width := tscPair()
	if width < 0 {
		return c.wall.nanos()
	}
	nb := nextBase(old, tick, int64(now.Sub(monoEpoch)), now.UnixNano(), width)
	if nb == nil {
		return now.UnixNano() // paired too loosely (preempted between): the next stamp tries again
	}
	c.install(old, nb)
	return nb.ns
}

// servesBefore returns the stamp of a counter reading t before b's, if b
// serves stamps and t is before it by no more than b's counter readings
// were apart (b.back): a reading on another core, or one the processor
// took a little early, in the same instant as b's to b's precision.
func (b *tscBase) servesBefore(t int64) (int64, bool) {
	if b == nil || b.span == 0 {
		return 0, false
	}
	if d := b.tsc - t; d > 0 && d <= b.back {
		return b.ns - scaleTicks(uint64(d), b.mult), true
	}
	return 0, false
}

// install makes nb, nextBase's after old, the clock's base, and reports
// whether it did: a base off at once, whatever base is there (the first
// one off logged); another only in place of old. So of rebases at once
// after one base one wins (each stamp is its own reading, valid), and
// none replaces a base off however long it was held up: once off the
// clock stays off.
func (c *tscClock) install(old, nb *tscBase) bool {
	if nb.off {
		if prev := c.base.Swap(nb); (prev == nil || !prev.off) && c.log != nil && old != nil {
			c.log.Warn("the time-stamp counter strayed from the monotonic clock: activations are stamped by the wall clock from now on",
				"counter", time.Duration(scaleSpan(nb.tsc-old.tsc, old.mult)), "monotonic", time.Duration(nb.mono-old.mono))
		}
		return true
	}
	return (old == nil || !old.off) && c.base.CompareAndSwap(old, nb)
}

// nextBase is the base that a reading of the counter (tick), the monotonic
// clock (mono, nanoseconds since monoEpoch) and the wall clock (ns, Unix
// nanoseconds) makes after base old (nil: none), the two counter readings
// around the clocks' width ticks apart (tscPair): nil where they are too
// far apart for the base (the stamp is the wall clock's, a later one tries
// again), {off: true} (the reading kept) where the counter strayed from
// the monotonic clock since old by more than tscTolerance and
// 1/tscStrayPart of the span, checked whenever old has a scale, whatever
// the span. Else the new base, its scale measured over the span from old
// where the span's error is bounded (see tscClock), else old's (0: none
// yet, so that the first scale is measured again, over a span from this
// base); it serves stamps (span) once its scale was checked, that is
// when old had one and served, or when old's (the first) scale was checked
// over half a second at least. A base with the first scale checked over
// less (a rebase before the wait ended) does not serve: the half second
// is waited again from it.
func nextBase(old *tscBase, tick, mono, ns, width int64) *tscBase {
	if old != nil && old.off {
		return old
	}
	scaled := old != nil && old.mult != 0
	switch {
	case width < 0,
		!scaled && width > tscPairTicks,
		scaled && scaleSpan(width, old.mult) > tscPairWidth:
		return nil
	}
	nb := &tscBase{tsc: tick, mono: mono, ns: ns, back: width}
	if old != nil {
		dt, dm := tick-old.tsc, mono-old.mono
		if scaled {
			adm := dm
			if adm < 0 {
				adm = -adm
			}
			if d := scaleSpan(dt, old.mult) - dm; d > tscTolerance+adm/tscStrayPart || d < -tscTolerance-adm/tscStrayPart {
				return &tscBase{tsc: tick, mono: mono, ns: ns, off: true}
			}
		}
		least := tscCalibrate // the first scale: over at least tscCalibrate, within 1e-3
		if scaled {
			least = tscRebase / 2 // a later one: over at least half a second, within 7e-5
		}
		if dw := ns - old.ns - dm; dt > 0 && dm >= least && dm <= 2*tscRebase && dw <= tscTolerance && dw >= -tscTolerance {
			// dm < 2^32: the quotient fits (dt > 0 = dm>>32).
			if q, _ := bits.Div64(uint64(dm)>>32, uint64(dm)<<32, uint64(dt)); q > 0 && q < 1<<40 {
				nb.mult = q
			}
		}
		if nb.mult == 0 {
			nb.mult = old.mult // too soon, too long ago, a suspend or a step between, or the counter went back
		}
	}
	if scaled && (old.span != 0 || mono-old.mono >= tscRebase/2) {
		if q, _ := bits.Div64(uint64(tscRebase)>>32, uint64(tscRebase)<<32, nb.mult); q < 1<<62 {
			nb.span = int64(q)
		}
	}
	return nb
}

// nanos is the time an activation begins or ends (its TaskReport's start
// and end, its flight's start), in Unix nanoseconds: Config.Now's, or the
// node's tscClock when none was set. The activation path carries it as
// it is, into the task row (eventPub.record), with no time.Time between.
func (n *Node) nanos() int64 {
	if n.fastClock {
		return n.clock.nanos()
	}
	return transport.UnixNanos(n.now())
}

// unixStamp is stamp ns (Unix nanoseconds, 0: none) as a time.Time.
func unixStamp(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// stamp is the time an activation begins or ends (its TaskReport's start
// and end, its flight's start): Config.Now's, or the node's tscClock when
// none was set.
func (n *Node) stamp() time.Time {
	if n.fastClock {
		return time.Unix(0, n.clock.nanos())
	}
	return n.now()
}
