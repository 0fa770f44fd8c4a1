//go:build unix

package funcs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/internal/testsupport"
)

func execReg(t *testing.T, allow ...string) *funcs.Registry {
	t.Helper()
	reg := funcs.Default()
	if err := reg.EnableExec(allow); err != nil {
		t.Fatal(err)
	}
	return reg
}

func execCall(args funcs.Args, inputs map[string][]byte) *funcs.Call {
	return &funcs.Call{Run: "r1", Task: "x", Path: "x", Args: args, Inputs: inputs, Activation: 1}
}

func TestExecIsOffByDefault(t *testing.T) {
	if _, ok := funcs.Default().Lookup("exec"); ok {
		t.Fatal("the default registry has exec")
	}
	if err := funcs.Default().EnableExec(nil); !errors.Is(err, funcs.ErrBadEntry) {
		t.Errorf("EnableExec without an allow-list: %v", err)
	}
}

func TestExecStdoutInputsAndStdin(t *testing.T) {
	reg := execReg(t, "/bin/sh", "cat")
	ctx := context.Background()
	in := map[string][]byte{"words": []byte("a b c"), "more": []byte("d e")}
	res, err := reg.Invoke(ctx, "exec", execCall(funcs.Args{"cmd": "/bin/sh", "args": []any{"-c", `cat words; echo " $1 $HETFLOW_TASK $HETFLOW_ACTIVATION"; cat "$HETFLOW_INPUTS/more"; echo " $GREETING"`, "sh", int64(42)},
		"env": map[string]any{"GREETING": "hi"}}, in))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Output), "a b c 42 x 1\nd e hi\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	res, err = reg.Invoke(ctx, "exec", execCall(funcs.Args{"cmd": "cat", "stdin": "words"}, in))
	if err != nil || string(res.Output) != "a b c" {
		t.Errorf("cat with stdin: %q %v", res.Output, err)
	}
	// Without stdin: the process reads nothing (not the node's stdin).
	res, err = reg.Invoke(ctx, "exec", execCall(funcs.Args{"cmd": "cat"}, nil))
	if err != nil || len(res.Output) != 0 {
		t.Errorf("cat without stdin: %q %v", res.Output, err)
	}
	// The node's environment stays out.
	t.Setenv("HETFLOW_TOKEN", "secret")
	res, err = reg.Invoke(ctx, "exec", execCall(funcs.Args{"cmd": "/bin/sh", "args": []any{"-c", `echo "[$HETFLOW_TOKEN]"`}}, nil))
	if err != nil || string(res.Output) != "[]\n" {
		t.Errorf("the node's environment leaked: %q %v", res.Output, err)
	}
}

func TestExecFailures(t *testing.T) {
	reg := execReg(t, "/bin/sh")
	ctx := context.Background()
	_, err := reg.Invoke(ctx, "exec", execCall(funcs.Args{"cmd": "/bin/sh", "args": []any{"-c", "echo starting; for i in 1 2 3 4 5 6 7 8 9; do echo line $i >&2; done; echo 'it broke' >&2; exit 3"}}, nil))
	if !errors.Is(err, funcs.ErrFailed) || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "it broke") {
		t.Errorf("exit 3: %v", err)
	}
	_, err = reg.Invoke(ctx, "exec", execCall(funcs.Args{"cmd": "/bin/echo", "args": []any{"x"}}, nil))
	if !errors.Is(err, funcs.ErrExecDenied) || !strings.Contains(err.Error(), `"/bin/echo" is not in this node's --exec-allow list (/bin/sh)`) {
		t.Errorf("a program outside the allow-list: %v", err)
	}
	_, err = reg.Invoke(ctx, "exec", execCall(funcs.Args{"cmd": "/bin/sh", "stdin": "nope"}, nil))
	if !errors.Is(err, funcs.ErrBadArg) {
		t.Errorf("stdin naming no input: %v", err)
	}
	// A long stderr: the error carries its tail.
	_, err = reg.Invoke(ctx, "exec", execCall(funcs.Args{"cmd": "/bin/sh", "args": []any{"-c", "i=0; while [ $i -lt 2000 ]; do echo noise $i >&2; i=$((i+1)); done; echo the-end >&2; exit 1"}}, nil))
	if err == nil || !strings.Contains(err.Error(), "the-end") || strings.Contains(err.Error(), "noise 0\n") || len(err.Error()) > funcs.ExecStderrTail+200 {
		t.Errorf("stderr tail: %d bytes: %.300s", len(err.Error()), err)
	}
	// More stdout than a task output may hold: killed, failed.
	start := time.Now()
	_, err = reg.Invoke(ctx, "exec", execCall(funcs.Args{"cmd": "/bin/sh", "args": []any{"-c", "while :; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done"}}, nil))
	if !errors.Is(err, funcs.ErrFailed) || !strings.Contains(err.Error(), "stdout over") {
		t.Errorf("endless stdout: %v (after %v)", err, time.Since(start))
	}
}

func TestExecArgsAreChecked(t *testing.T) {
	reg := execReg(t, "/bin/sh")
	info, ok := reg.Func("exec")
	if !ok || info.CheckArgs == nil {
		t.Fatal("exec has no argument check")
	}
	for _, bad := range []map[string]any{
		{},
		{"cmd": 3},
		{"cmd": "/bin/sh", "args": "-c true"},
		{"cmd": "/bin/sh", "args": []any{map[string]any{}}},
		{"cmd": "/bin/sh", "env": map[string]any{"HETFLOW_RUN": "x"}},
		{"cmd": "/bin/sh", "env": map[string]any{"A": 1}},
		{"cmd": "/bin/sh", "shell": true},
	} {
		if err := info.CheckArgs(bad); err == nil {
			t.Errorf("args %v accepted", bad)
		}
	}
	if err := info.CheckArgs(map[string]any{"cmd": "/bin/sh", "args": []any{"-c", int64(1), 2.5, true}, "stdin": "a", "env": map[string]any{"A": "b"}}); err != nil {
		t.Errorf("good args: %v", err)
	}
}

// Cancelling (a run's cancel, a task's timeout) kills the process and the
// children it started: its whole process group.
func TestExecCancelKillsTheProcessGroup(t *testing.T) {
	reg := execReg(t, "/bin/sh")
	pidFile := filepath.Join(t.TempDir(), "pid")
	for _, how := range []string{"cancel", "timeout"} {
		t.Run(how, func(t *testing.T) {
			os.Remove(pidFile)
			var ctx context.Context
			var cancel context.CancelFunc
			if how == "cancel" {
				ctx, cancel = context.WithCancel(context.Background())
			} else {
				ctx, cancel = context.WithTimeout(context.Background(), testsupport.Scale(500*time.Millisecond))
			}
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := reg.Invoke(ctx, "exec", execCall(funcs.Args{"cmd": "/bin/sh", "args": []any{"-c", `sleep 300 & echo $! > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; wait`},
					"env": map[string]any{"PIDFILE": pidFile}}, nil))
				done <- err
			}()
			var pid int
			testsupport.Eventually(t, 20*time.Second, "the grandchild's pid", func() bool {
				b, err := os.ReadFile(pidFile)
				if err != nil {
					return false
				}
				pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
				return err == nil
			})
			if how == "cancel" {
				cancel()
			}
			select {
			case err := <-done:
				if err == nil || !errors.Is(err, ctx.Err()) {
					t.Errorf("Invoke after %s: %v", how, err)
				}
			case <-time.After(testsupport.Scale(20 * time.Second)):
				t.Fatal("Invoke did not return after the cancel")
			}
			testsupport.Eventually(t, 20*time.Second, "the grandchild (sleep) gone", func() bool { return gone(pid) })
		})
	}
}

// gone reports whether pid no longer runs (exited, or a zombie waiting
// for init to reap it).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}
