//go:build !amd64 || purego

package node

// haveTSC: no time-stamp counter is read on this architecture, or in a
// purego build (no assembly); the node stamps by its wallClock (tscClock,
// tscUsable).
const haveTSC = false

func rdtsc() int64 { return 0 }
