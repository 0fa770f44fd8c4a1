//go:build !amd64 || purego

package localexec

import "unsafe"

// prefetch does nothing here (see prefetch_amd64.go): warming is an
// option, and on other architectures its loads alone would wait.
func prefetch(unsafe.Pointer) {}
