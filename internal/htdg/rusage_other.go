//go:build !unix

package htdg

import "time"

// CPUTime is not measured off unix: utilisation figures read 0.
func CPUTime() time.Duration { return 0 }

// MaxRSS is not measured off unix.
func MaxRSS() uint64 { return 0 }
