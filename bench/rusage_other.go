//go:build !unix

package bench

import "time"

// cpuTime is not measured off unix: utilisation figures read 0.
func cpuTime() time.Duration { return 0 }
