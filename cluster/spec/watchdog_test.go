package spec_test

import (
	"fmt"
	"time"
)

// watchdog turns an input that takes far too long into a crash the fuzzer
// records: the parser must never hang. Call the returned stop when done.
func watchdog(data []byte) func() bool {
	t := time.AfterFunc(30*time.Second, func() {
		panic(fmt.Sprintf("spec: input took over 30s: %q", data))
	})
	return t.Stop
}
