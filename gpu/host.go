package gpu

import "sync/atomic"

// Host is a host thread as the timed sim models it (see SimProfileEnv): the time, in the
// model, until which the thread is blocked waiting on a device. A launch from a Host starts no
// earlier, and the Host's thread really sleeps only when that time is far ahead of wall time.
// Give each goroutine that launches graphs a Host of its own (the executor's GPU workers have
// one each) and launch with Graph.LaunchFrom; Graph.Launch and the stream calls find the
// calling goroutine's own Host by its id, which costs a stack walk per call. A Host must not
// be used by two goroutines at once. Other backends ignore it.
type Host struct {
	at atomic.Int64 // ns since the model's origin; <= wall time means "not blocked"
}

// NewHost returns a Host that is not blocked.
func NewHost() *Host { return &Host{} }
