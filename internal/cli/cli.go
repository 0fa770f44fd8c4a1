// Package cli is what the project's commands (cmd/coordinator, cmd/bench,
// and a node binary of cluster/nodesdk) share: the exit codes of the
// contract (docs/design.md, "The contract"), the error that carries one out
// of a command and the mapping of a client's errors to them, the flow-file
// commands (validate, dump), the all-in-one dev command, and the way a
// run's status is printed for people. cmd/coordinator builds its commands
// from it with the built-in functions, cluster/nodesdk with a user's
// registry, so that a user's node binary validates and runs flows in dev
// exactly as the stock coordinator does.
package cli

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/spf13/cobra"
)

// Exit codes (docs/design.md, The contract).
const (
	ExitOK           = 0
	ExitRunFailed    = 1
	ExitInvalid      = 2
	ExitUnreachable  = 3
	ExitUnauthorized = 4
	ExitNotFound     = 5
	// ExitInterrupted: submit --wait detached on Ctrl-C (128 + SIGINT, as
	// shells report it); the run goes on in the cluster.
	ExitInterrupted = 130
)

// ExitError carries an exit code out of a command.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// WithCode wraps err with an exit code; nil stays nil.
func WithCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: code, Err: err}
}

// CodeOf gives a client's error (proto's sentinels) its exit code; anything
// else is a failed run. An unauthorised error is followed by hint, the way
// to give the cluster's API token, on a line of its own.
func CodeOf(err error, hint string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, proto.ErrInvalid):
		return WithCode(ExitInvalid, err)
	case errors.Is(err, proto.ErrUnauthorized):
		return WithCode(ExitUnauthorized, fmt.Errorf("%w\n  %s", err, hint))
	case errors.Is(err, proto.ErrNotFound):
		return WithCode(ExitNotFound, err)
	case errors.Is(err, proto.ErrUnreachable), errors.Is(err, proto.ErrNoLeader), errors.Is(err, context.DeadlineExceeded):
		return WithCode(ExitUnreachable, err)
	}
	return WithCode(ExitRunFailed, err)
}

// ErrSilent marks an exit code whose reason was already printed.
var ErrSilent = errors.New("")

// Execute runs a cobra root command with args and returns its exit code,
// printing the error (prefixed with the program's name) to stderr.
// cobra's own errors (an unknown command or flag, a bad argument count) are
// invalid input.
func Execute(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != ErrSilent {
			fmt.Fprintln(stderr, root.Name()+":", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintln(stderr, root.Name()+":", err)
	return ExitInvalid
}

// SignalContext is cancelled on SIGINT or SIGTERM.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// ReadSecret reads and derives a cluster secret file ("" gives none).
func ReadSecret(path string) (proto.Secret, error) {
	raw, err := proto.ReadSecretFile(path)
	if err != nil {
		return proto.Secret{}, err
	}
	return proto.DeriveSecret(raw)
}

// ParamFlag is the repeatable --param name=value of submit, dev, validate
// and dump.
type ParamFlag []string

// Add registers the flag on cmd.
func (p *ParamFlag) Add(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar((*[]string)(p), "param", nil, "fill the flow's parameter name (its params:) with value: name=value, repeatable")
}

// Values parses the flags into a parameter map; a flag without '=' or a
// name given twice is invalid input.
func (p ParamFlag) Values() (map[string]any, error) {
	if len(p) == 0 {
		return nil, nil
	}
	out := make(map[string]any, len(p))
	for _, kv := range p {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, WithCode(ExitInvalid, fmt.Errorf("--param %q: want name=value", kv))
		}
		if _, dup := out[k]; dup {
			return nil, WithCode(ExitInvalid, fmt.Errorf("--param %s given twice", k))
		}
		out[k] = v
	}
	return out, nil
}

// PrintStatus writes a run's status for people: the run, the values of its
// parameters, and a line per task with its output (Output).
func PrintStatus(w io.Writer, st proto.RunStatus) {
	fmt.Fprintf(w, "run %s  flow %s  %s", st.ID, st.Flow, st.State)
	if st.Error != "" {
		fmt.Fprintf(w, "  error: %s", st.Error)
	}
	fmt.Fprintln(w)
	if len(st.Params) > 0 {
		names := make([]string, 0, len(st.Params))
		for k := range st.Params {
			names = append(names, k)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, k := range names {
			parts[i] = fmt.Sprintf("%s=%v", k, st.Params[k])
		}
		fmt.Fprintf(w, "  params %s\n", strings.Join(parts, " "))
	}
	// One row is what "  %-24s %-9s node %-6s activations %-5d executions
	// %-5d%s\n" prints, appended by hand and written in blocks: a
	// 100K-task table took 100K writes and Fprintfs.
	bw := bufio.NewWriterSize(w, 64<<10)
	var row []byte
	for _, t := range st.Tasks {
		row = append(row[:0], "  "...)
		row = appendPadded(row, t.Name, 24)
		row = append(row, ' ')
		row = appendPadded(row, t.State, 9)
		row = append(row, " node "...)
		row = appendPadded(row, t.Node, 6)
		row = append(row, " activations "...)
		row = appendUintPadded(row, t.Activations, 5)
		row = append(row, " executions "...)
		row = appendUintPadded(row, t.Executions, 5)
		if t.Output != "" {
			row = append(row, "  output "...)
			row = append(row, ShowOutput(t.Output)...)
		}
		row = append(row, '\n')
		_, _ = bw.Write(row)
	}
	_ = bw.Flush()
}

// appendPadded appends s, then spaces up to width runes (fmt's %-Ns).
// appendUintPadded is appendPadded of n in decimal (ASCII: a byte a rune).
func appendUintPadded(b []byte, n uint64, width int) []byte {
	start := len(b)
	b = strconv.AppendUint(b, n, 10)
	for len(b)-start < width {
		b = append(b, ' ')
	}
	return b
}

func appendPadded(b []byte, s string, width int) []byte {
	b = append(b, s...)
	for n := utf8.RuneCountInString(s); n < width; n++ {
		b = append(b, ' ')
	}
	return b
}

// ShowOutput renders a task's output, given as status JSON has it
// (lowercase hex), for people: printable UTF-8 text as a quoted Go string
// ("6 words\n"), anything else as hex; past showMax bytes it is cut, with
// the length and where to get the whole (coordinator output RUN TASK).
func ShowOutput(hexOut string) string {
	b, err := hex.DecodeString(hexOut)
	if err != nil {
		return hexOut
	}
	if text(b) {
		if len(b) <= showMax {
			return strconv.Quote(string(b))
		}
		cut := showMax
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(string(b[:cut])), len(b))
	}
	if len(b) <= 32 { // a hash's whole digest
		return hexOut
	}
	return fmt.Sprintf("%s… (%d bytes)", hexOut[:64], len(b))
}

// showMax is the most bytes of a text output status shows.
const showMax = 80

// text reports whether b is UTF-8 text: printable runes, newlines, tabs.
func text(b []byte) bool {
	if len(b) == 0 || !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r != '\n' && r != '\t' && r != '\r' && !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// PrintFuncs lists what each node offers for people: per node, a line per
// function (name, kind, domains, arguments, doc).
func PrintFuncs(w io.Writer, ns []proto.NodeFuncs) {
	for _, n := range ns {
		what := n.Hash
		switch {
		case n.Error != "":
			what = "catalog unavailable: " + n.Error
		case n.Builtin:
			what = "no catalog advertised: the coordinator's built-ins"
		}
		fmt.Fprintf(w, "node %s (%s)\n", n.Node, what)
		for _, f := range n.Funcs {
			var args []string
			for _, a := range f.Args {
				s := a.Name + ":" + a.Type
				if a.Required {
					s += "!"
				}
				args = append(args, s)
			}
			fmt.Fprintf(w, "  %-14s %-14s %-8s %-24s %s\n", f.Name, f.Kind, strings.Join(f.Domains, ","), strings.Join(args, " "), f.Doc)
		}
	}
}

// PrintJSON writes v as one line of JSON.
func PrintJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
