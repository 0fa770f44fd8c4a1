//go:build !purego

package node

// haveTSC: this architecture has a time-stamp counter rdtsc reads
// (tscClock). The purego build tag leaves the assembly out: tsc_other.go
// then, and the node stamps by its wallClock.
const haveTSC = true

// rdtsc reads the processor's time-stamp counter (tsc_amd64.s): ticks at a
// constant rate where the kernel keeps it as its clocksource (tscUsable).
// It waits for no earlier instruction: a stamp may be taken a few dozen
// cycles early.
func rdtsc() int64
