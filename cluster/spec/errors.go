package spec

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ErrInvalid is matched (errors.Is) by every error Parse and Validate return.
// The finer sentinels below tell which rule a problem broke; each *Error
// matches ErrInvalid and exactly one of them.
var ErrInvalid = errors.New("spec: invalid flow")

// Sentinels for the rules of a flow file (docs/design.md, "The contract", and the field checks).
var (
	ErrSyntax        = errors.New("spec: syntax error")
	ErrUnknownField  = errors.New("spec: unknown field")
	ErrBadValue      = errors.New("spec: bad value")
	ErrMissing       = errors.New("spec: missing value")
	ErrDuplicate     = errors.New("spec: duplicate name")
	ErrUnknownFunc   = errors.New("spec: unknown function")
	ErrUnknownKind   = errors.New("spec: unknown kind")
	ErrUnknownFlow   = errors.New("spec: unknown flow")
	ErrUnknownTask   = errors.New("spec: unknown task")
	ErrUnknownNode   = errors.New("spec: unknown node")
	ErrConditionEdge = errors.New("spec: condition successor outside its precede list")
	ErrCycle         = errors.New("spec: cycle with no condition task")
	ErrModuleCycle   = errors.New("spec: flows compose each other in a cycle")
	ErrNoGPU         = errors.New("spec: GPU not available")
	ErrNoSource      = errors.New("spec: no task without predecessors")
	ErrTooLarge      = errors.New("spec: too large")
)

// Error is one problem of a flow file. Error() reads like
//
//	flows.yaml:12: flow "demo" task "cond" field "precede": unknown task "bdy"
type Error struct {
	File  string // the file's path, when known
	Flow  string // the flow's name, when known
	Task  string // the task's name, when it has one
	Index int    // the task's 1-based position in its flow when it has no name (else 0)
	Field string // the field (or unknown key) at fault, when there is one
	Line  int    // 1-based line, when known (0 for flows built in Go)
	Msg   string
	Kind  error // one of the sentinels above
}

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	var parts []string
	if e.Flow != "" {
		parts = append(parts, "flow "+strconv.Quote(e.Flow))
	}
	if e.Task != "" {
		parts = append(parts, "task "+strconv.Quote(e.Task))
	} else if e.Index > 0 {
		parts = append(parts, fmt.Sprintf("task #%d", e.Index))
	}
	if e.Field != "" {
		parts = append(parts, "field "+strconv.Quote(e.Field))
	}
	if len(parts) > 0 {
		b.WriteString(strings.Join(parts, " ") + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is matches ErrInvalid and the error's own kind.
func (e *Error) Is(target error) bool {
	return target == ErrInvalid || (e.Kind != nil && target == e.Kind)
}

// Unwrap returns the kind sentinel.
func (e *Error) Unwrap() error { return e.Kind }

// Errors is every problem found, sorted by line. It is what Parse and Validate
// return when anything is wrong; errors.Is and errors.As look through it.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Is matches ErrInvalid for a non-empty list.
func (es Errors) Is(target error) bool { return target == ErrInvalid && len(es) > 0 }

// collector gathers problems while parsing or validating.
type collector struct {
	file string
	errs Errors
	max  int
}

const maxErrors = 200

func (c *collector) add(e *Error) {
	if c.max == 0 {
		c.max = maxErrors
	}
	if len(c.errs) > c.max {
		return
	}
	if len(c.errs) == c.max {
		c.errs = append(c.errs, &Error{File: c.file, Line: 0, Msg: "too many errors", Kind: ErrTooLarge})
		return
	}
	e.File = c.file
	c.errs = append(c.errs, e)
}

// result returns the sorted list, or nil when nothing was wrong.
func (c *collector) result() error {
	if len(c.errs) == 0 {
		return nil
	}
	out := append(Errors(nil), c.errs...)
	sort.SliceStable(out, func(i, j int) bool {
		li, lj := out[i].Line, out[j].Line
		if li == 0 || lj == 0 {
			return li != 0 && lj == 0
		}
		return li < lj
	})
	return out
}
