//go:build !unix

package funcs

import "os/exec"

// inGroup: without process groups, cancelling kills the process alone.
func inGroup(cmd *exec.Cmd) {}
