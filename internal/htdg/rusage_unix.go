//go:build unix

package htdg

import (
	"runtime"
	"syscall"
	"time"
)

// CPUTime is the user+system CPU time this process has used.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// MaxRSS is the process's peak resident set size in bytes (getrusage
// ru_maxrss: KiB on Linux, bytes on Darwin).
func MaxRSS() uint64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	if runtime.GOOS == "darwin" {
		return uint64(ru.Maxrss)
	}
	return uint64(ru.Maxrss) * 1024
}
