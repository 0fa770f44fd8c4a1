//go:build !race && !invariants

package localexec

const invariants = false
