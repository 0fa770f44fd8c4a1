package node

import (
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

// nanos is the time an activation begins or ends (its TaskReport's start
// and end, its flight's start), in Unix nanoseconds: Config.Now's, or the
// node's wallClock when none was set. The activation path carries it as
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
// and end, its flight's start): Config.Now's, or the node's wallClock when
// none was set.
func (n *Node) stamp() time.Time {
	if n.fastClock {
		return time.Unix(0, n.clock.nanos())
	}
	return n.now()
}
