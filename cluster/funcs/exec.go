package funcs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hetflow/hetflow/cluster/spec"
)

// ErrExecDenied is an exec task naming a program outside the node's
// allow-list.
var ErrExecDenied = errors.New("funcs: program not allowed")

// ExecName is the name of the exec built-in.
const ExecName = "exec"

// Limits of the exec built-in.
const (
	// ExecMaxOutput is the most stdout an exec task may write: the largest
	// task output the cluster carries (transport.DefaultLimits.MaxOutput).
	// A process that writes more is killed and its task fails.
	ExecMaxOutput = MaxOutput
	// ExecStderrTail is how much of the end of stderr a failed exec task's
	// error carries.
	ExecStderrTail = 2 << 10
	// execWaitDelay bounds the wait for the process's pipes after it was
	// killed (a grandchild outside its process group may hold them).
	execWaitDelay = 2 * time.Second
)

// EnableExec registers the exec built-in, allowed to run exactly the
// programs of allow (as a task names them: an absolute path, or a name
// looked up in the node's PATH). It is off unless a node is started with
// an allow-list (node --exec-allow): whoever may submit flows to the cluster
// may then run these programs, with these arguments, as the node's user.
//
//	exec {cmd, args, stdin, env}
//
// cmd is the program; args a list of its arguments (strings, numbers or
// bools); the process runs in a new empty directory holding one file per
// strong predecessor with output, named after it, which is also
// $HETFLOW_INPUTS; stdin, when given, names the predecessor whose output is
// the process's standard input (else it reads nothing); env adds variables
// to the small environment it gets (PATH, HOME and HETFLOW_RUN, HETFLOW_TASK,
// HETFLOW_ACTIVATION, HETFLOW_ATTEMPT, HETFLOW_INPUTS; nothing else of the
// node's). Its stdout is the task's output (at most ExecMaxOutput bytes).
// A non-zero exit fails the task with the exit status and the tail of
// stderr; retries: re-run it. Cancellation and timeout: kill its whole
// process group.
func (r *Registry) EnableExec(allow []string) error {
	if len(allow) == 0 {
		return fmt.Errorf("%w: exec needs an allow-list of programs", ErrBadEntry)
	}
	allowed := map[string]bool{}
	for _, p := range allow {
		p = strings.TrimSpace(p)
		if p == "" {
			return fmt.Errorf("%w: exec allow-list has an empty entry", ErrBadEntry)
		}
		allowed[p] = true
	}
	list := make([]string, 0, len(allowed))
	for p := range allowed {
		list = append(list, p)
	}
	sort.Strings(list)
	return r.Register(Entry{
		Name:  ExecName,
		Kind:  spec.KindStatic,
		Doc:   "runs a program of the node's allow-list (" + strings.Join(list, ", ") + "); stdout is the output",
		Check: checkExecArgs,
		Args: []Arg{
			{Name: "cmd", Type: "string", Required: true, Doc: "the program, as the allow-list names it"},
			{Name: "args", Type: "list", Doc: "its arguments"},
			{Name: "stdin", Type: "string", Doc: "the predecessor whose output is its standard input"},
			{Name: "env", Type: "map", Doc: "variables to add to its environment"},
		},
		CPU: func(ctx context.Context, c *Call) (Result, error) {
			return runExec(ctx, c, allowed, list)
		},
	})
}

func checkExecArgs(a Args) error {
	if err := a.Only("cmd", "args", "stdin", "env"); err != nil {
		return err
	}
	if err := a.Need("cmd"); err != nil {
		return err
	}
	if _, err := a.String("cmd", ""); err != nil {
		return err
	}
	if _, err := execArgv(a); err != nil {
		return err
	}
	if _, err := a.String("stdin", ""); err != nil {
		return err
	}
	_, err := execEnv(a)
	return err
}

// execArgv reads args: a list of scalars, as text.
func execArgv(a Args) ([]string, error) {
	v, ok := a["args"]
	if !ok || v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, argErr("args", "a list of strings, numbers or bools", v)
	}
	out := make([]string, len(list))
	for i, e := range list {
		switch x := e.(type) {
		case string:
			out[i] = x
		case bool:
			out[i] = strconv.FormatBool(x)
		case float64:
			out[i] = strconv.FormatFloat(x, 'g', -1, 64)
		default:
			n, ok := integer(e)
			if !ok {
				return nil, &ArgError{Arg: "args", Msg: fmt.Sprintf("item %d must be a string, number or bool, got %s", i+1, spec.DescribeValue(e))}
			}
			out[i] = strconv.FormatInt(n, 10)
		}
	}
	return out, nil
}

func execEnv(a Args) ([]string, error) {
	v, ok := a["env"]
	if !ok || v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, argErr("env", "a map of NAME: text", v)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(m))
	for _, k := range keys {
		s, ok := m[k].(string)
		if !ok || k == "" || strings.ContainsAny(k, "=\x00") || strings.HasPrefix(k, "HETFLOW_") {
			return nil, &ArgError{Arg: "env", Msg: fmt.Sprintf("%q: want a NAME (no '=', not HETFLOW_*) with a string value", k)}
		}
		out = append(out, k+"="+s)
	}
	return out, nil
}

// limitedBuffer keeps at most max bytes and remembers that more came.
type limitedBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
	kill func() // called once when the limit is passed
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); len(p) > room {
		b.buf.Write(p[:max(room, 0)])
		if !b.over {
			b.over = true
			if b.kill != nil {
				b.kill()
			}
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	buf []byte
	max int
	cut bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
		b.cut = true
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(b.buf), "\ufffd"))
	if b.cut {
		// drop a rune cut in half at the start
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
		s = "..." + s
	}
	return s
}

func runExec(ctx context.Context, c *Call, allowed map[string]bool, list []string) (Result, error) {
	prog, err := c.Args.String("cmd", "")
	if err != nil {
		return Result{}, err
	}
	if !allowed[prog] {
		return Result{}, fmt.Errorf("%w: %q is not in this node's --exec-allow list (%s)", ErrExecDenied, prog, strings.Join(list, ", "))
	}
	argv, err := execArgv(c.Args)
	if err != nil {
		return Result{}, err
	}
	env, err := execEnv(c.Args)
	if err != nil {
		return Result{}, err
	}
	stdinFrom, err := c.Args.String("stdin", "")
	if err != nil {
		return Result{}, err
	}
	dir, err := os.MkdirTemp("", "hetflow-exec-")
	if err != nil {
		return Result{}, fmt.Errorf("%w: exec: %w", ErrFailed, err)
	}
	defer os.RemoveAll(dir)
	for name, out := range c.Inputs {
		if out == nil {
			continue
		}
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
			continue // not a file name; still readable through stdin
		}
		if err := os.WriteFile(filepath.Join(dir, name), out, 0o600); err != nil {
			return Result{}, fmt.Errorf("%w: exec: input %q: %w", ErrFailed, name, err)
		}
	}
	cmd := exec.CommandContext(ctx, prog, argv...)
	cmd.Dir = dir
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"HETFLOW_RUN=" + c.Run,
		"HETFLOW_TASK=" + c.Path,
		"HETFLOW_ACTIVATION=" + strconv.FormatUint(c.Activation, 10),
		"HETFLOW_ATTEMPT=" + strconv.Itoa(c.Attempt),
		"HETFLOW_INPUTS=" + dir,
	}, env...)
	if stdinFrom != "" {
		in, ok := c.Inputs[stdinFrom]
		if !ok {
			return Result{}, &ArgError{Arg: "stdin", Msg: fmt.Sprintf("names %q, which is not a strong predecessor of this task (or has not run)", stdinFrom)}
		}
		cmd.Stdin = bytes.NewReader(in)
	}
	inGroup(cmd)
	stdout := &limitedBuffer{max: ExecMaxOutput}
	stderr := &tailBuffer{max: ExecStderrTail}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = execWaitDelay
	stdout.kill = func() { _ = cmd.Cancel() } // from the copying goroutine, which Start begins after setting cmd.Process
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("%w: exec %s: %w", ErrFailed, prog, err)
	}
	err = cmd.Wait()
	switch {
	case ctx.Err() != nil:
		return Result{}, fmt.Errorf("exec %s: killed: %w", prog, ctx.Err())
	case stdout.over:
		return Result{}, fmt.Errorf("%w: exec %s: stdout over %d bytes, the most a task output may be: killed", ErrFailed, prog, ExecMaxOutput)
	case err != nil:
		msg := fmt.Sprintf("%v: exec %s: %v", ErrFailed, prog, err)
		if t := stderr.String(); t != "" {
			msg += "; stderr: " + t
		}
		return Result{}, &execError{msg: msg, err: err}
	}
	return Result{Output: stdout.buf.Bytes()}, nil
}

// execError is a failed exec: its message holds the exit status and the
// tail of stderr; it matches ErrFailed and the *exec.ExitError.
type execError struct {
	msg string
	err error
}

func (e *execError) Error() string   { return e.msg }
func (e *execError) Unwrap() []error { return []error{ErrFailed, e.err} }
