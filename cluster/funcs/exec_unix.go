//go:build unix

package funcs

import (
	"os/exec"
	"syscall"
)

// inGroup starts cmd in a process group of its own and makes cancelling it
// kill the whole group: a shell's children die with it.
func inGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
