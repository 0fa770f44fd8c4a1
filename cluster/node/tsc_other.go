//go:build !amd64

package node

// haveTSC: no time-stamp counter is read on this architecture; the node
// stamps by its wallClock (tscClock, tscUsable).
const haveTSC = false

func rdtsc() int64 { return 0 }
