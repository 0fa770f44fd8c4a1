//go:build amd64 && !purego

package localexec

import "unsafe"

// prefetch asks for the cache line at p without waiting for it
// (PREFETCHT0): unlike a load, it holds back no instruction after it. p may
// be any address; a prefetch never faults.
//
//go:noescape
func prefetch(p unsafe.Pointer)
