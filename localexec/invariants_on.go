//go:build race || invariants

package localexec

// invariants turns on the scheduler's invariant checks and randomizes victim
// and successor order (see scheduler.go).
const invariants = true
