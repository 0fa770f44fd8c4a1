package node

import (
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
// of the monotonic clock (wallClock.nanos: time.Since, a vDSO call): 19 ns
// a stamp here against 35 (BenchmarkStampClock). Else, and while the scale is not measured yet
// (the node's first tscCalibrate), stamps are wallClock's.
//
// The scale is the monotonic clock's nanoseconds per tick over the span
// between a base and the one before it (at least tscCalibrate; the first
// scale is measured over that, the later ones over about a second), so a
// stamp is off the wall clock by what wallClock's are (the wall clock's
// slew or step since the base) plus the scale's error over at most a
// second: a base's counter readings are at most tscPairTicks apart
// before a scale is known and tscPairWidth after, so the first scale is
// within 1e-3 (50 µs over 50 ms; 1 ms over the second it serves at
// worst) and a later one within 5e-5, in practice well under a
// microsecond a second. Each base checks the one
// before: where the counter strays from the monotonic clock by more than
// tscTolerance (a counter not in step across cores, or not at a constant
// rate), the clock switches to wallClock's stamps for good. A rebase
// between an activation's two stamps can take them back by the scale's
// error: run.event then stamps its start as its end. Only shown times are
// stamps: no timeout, failure or verdict reads one.
type tscClock struct {
	on   bool      // the counter is read (tscUsable); else every stamp is wall's
	wall wallClock // stamps while the scale is measured, or when the counter is not read
	base atomic.Pointer[tscBase]
}

// tscBase is a reading of the counter and the two clocks, taken together
// (tscPair), and the scale from the counter to nanoseconds.
type tscBase struct {
	tsc  int64  // the counter
	mono int64  // monotonic nanoseconds since monoEpoch
	ns   int64  // Unix nanoseconds
	mult uint64 // nanoseconds a tick, 32.32 fixed point; 0: not measured yet
	span int64  // the ticks the base serves (tscRebase at mult); 0: none, stamps are wall's
	off  bool   // the counter strayed: stamps are wall's for good
}

const (
	tscRebase    = int64(time.Second)
	tscCalibrate = int64(50 * time.Millisecond)
	tscTolerance = int64(2 * time.Millisecond)  // over NTP's slew of the monotonic clock (500 µs a second)
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

// nanos is the wall clock now, in Unix nanoseconds.
func (c *tscClock) nanos() int64 {
	if !c.on {
		return c.wall.nanos()
	}
	t := rdtsc()
	if b := c.base.Load(); b != nil {
		if d := t - b.tsc; uint64(d) < uint64(b.span) {
			return b.ns + scaleTicks(uint64(d), b.mult)
		}
	}
	return c.rebase(t)
}

// tscPair reads the counter on either side of a time.Now, three times,
// and returns the narrowest: the counter at the middle, the time, and how
// many ticks apart the two counter readings were.
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

// rebase takes a new base for a stamp whose counter reading t the current
// base does not serve (none yet, or older than tscRebase, or t before it)
// and returns the stamp: the wall clock's, read with the base.
func (c *tscClock) rebase(t int64) int64 {
	old := c.base.Load()
	if old != nil && old.off {
		return c.wall.nanos()
	}
	if old != nil && old.mult == 0 {
		// The scale not measured yet: until tscCalibrate after the first
		// base (by the wall clock's stamp, one clock read; the scale itself
		// is measured by the monotonic clock), stamps are the wall clock's.
		if ns := c.wall.nanos(); ns-old.ns < tscCalibrate && ns >= old.ns {
			return ns
		}
	}
	tick, now, width := tscPair()
	if width < 0 || old != nil && old.mult != 0 && scaleTicks(uint64(width), old.mult) > tscPairWidth ||
		(old == nil || old.mult == 0) && width > tscPairTicks {
		return c.wall.nanos() // paired too loosely (preempted between): the next stamp tries again
	}
	nb := &tscBase{tsc: tick, mono: int64(now.Sub(monoEpoch)), ns: now.UnixNano()}
	if old != nil {
		dt, dm := tick-old.tsc, nb.mono-old.mono
		if old.mult != 0 && dm <= 2*tscRebase {
			var strayed int64 // |the monotonic span the counter gives - the span|
			if dt >= 0 {
				strayed = scaleTicks(uint64(dt), old.mult) - dm
			} else {
				strayed = scaleTicks(uint64(-dt), old.mult) + dm
			}
			if strayed > tscTolerance || strayed < -tscTolerance {
				c.base.Store(&tscBase{off: true})
				return nb.ns
			}
		}
		switch {
		case dt > 0 && uint64(dm)>>32 < uint64(dt) && dm >= tscCalibrate && (old.mult == 0 || dm <= 4*tscRebase):
			if q, _ := bits.Div64(uint64(dm)>>32, uint64(dm)<<32, uint64(dt)); q > 0 && q < 1<<40 {
				nb.mult = q
			}
		default:
			nb.mult = old.mult // too soon, too long ago (a suspend may lie between), or the counter went back
		}
	}
	if nb.mult != 0 {
		if q, _ := bits.Div64(uint64(tscRebase)>>32, uint64(tscRebase)<<32, nb.mult); q < 1<<62 {
			nb.span = int64(q)
		}
	}
	c.base.Store(nb)
	return nb.ns
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
