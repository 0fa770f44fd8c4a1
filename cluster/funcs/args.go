package funcs

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hetflow/hetflow/cluster/spec"
)

// Args are a task's arguments as the flow file gives them. The getters check
// the type and range of one argument and fail with an *ArgError naming it:
//
//	args: "us" must be a non-negative integer, got "abc"
//
// Getters take the value to use when the argument is absent (or null).
type Args map[string]any

// ArgError is a bad argument. Error() reads
// `task "body": args: "us" must be a non-negative integer, got "abc"`
// (without the task part when Task is empty). It matches ErrBadArg.
type ArgError struct {
	Task string
	Arg  string
	Msg  string // e.g. `must be a non-negative integer, got "abc"`
}

func (e *ArgError) Error() string {
	s := "args: " + e.detail()
	if e.Task != "" {
		s = "task " + strconv.Quote(e.Task) + ": " + s
	}
	return s
}

func (e *ArgError) detail() string {
	if e.Arg == "" {
		return e.Msg
	}
	return strconv.Quote(e.Arg) + " " + e.Msg
}

// bareArgError is an ArgError without the "args: " prefix, for spec
// validation, whose messages already name the field.
type bareArgError struct{ *ArgError }

func (e *bareArgError) Error() string { return e.detail() }
func (e *bareArgError) Unwrap() error { return e.ArgError }

// Unwrap returns ErrBadArg.
func (e *ArgError) Unwrap() error { return ErrBadArg }

// ArgName returns the argument at fault (spec validation uses it to point at
// the argument's line).
func (e *ArgError) ArgName() string { return e.Arg }

func argErr(name, want string, v any) *ArgError {
	return &ArgError{Arg: name, Msg: "must be " + want + ", got " + spec.DescribeValue(v)}
}

// Has reports whether the argument is given (and not null).
func (a Args) Has(name string) bool { v, ok := a[name]; return ok && v != nil }

// Only fails on any argument not in names: a typo in a flow file is caught
// before anything runs.
func (a Args) Only(names ...string) error {
	if len(a) == 0 {
		return nil // no range over a nil map: a no-op task's call is this and little else
	}
	var bad []string
	for k := range a {
		if !contains(names, k) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	takes := "no arguments"
	if len(names) > 0 {
		takes = strings.Join(names, ", ")
	}
	return &ArgError{Arg: bad[0], Msg: "is not an argument of this function (it takes: " + takes + ")"}
}

// Need fails on the first of names that is absent.
func (a Args) Need(names ...string) error {
	for _, n := range names {
		if !a.Has(n) {
			return &ArgError{Arg: n, Msg: "is required"}
		}
	}
	return nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// integer converts any Go integer, or an integral float, to int64.
func integer(v any) (int64, bool) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if u := rv.Uint(); u <= math.MaxInt64 {
			return int64(u), true
		}
	case reflect.Float32, reflect.Float64:
		f := rv.Float()
		if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			return int64(f), true
		}
	}
	return 0, false
}

// Int returns an integer argument.
func (a Args) Int(name string, def int64) (int64, error) {
	if !a.Has(name) {
		return def, nil
	}
	i, ok := integer(a[name])
	if !ok {
		return 0, argErr(name, "an integer", a[name])
	}
	return i, nil
}

// IntRange returns an integer argument in [lo, hi].
func (a Args) IntRange(name string, def, lo, hi int64) (int64, error) {
	if !a.Has(name) {
		return def, nil
	}
	i, ok := integer(a[name])
	want := fmt.Sprintf("an integer from %d to %d", lo, hi)
	if lo == 0 && hi >= math.MaxInt32 {
		want = "a non-negative integer"
	}
	switch {
	case !ok || i < lo:
		return 0, argErr(name, want, a[name])
	case i > hi:
		return 0, argErr(name, fmt.Sprintf("at most %d", hi), a[name])
	}
	return i, nil
}

// NonNeg returns a non-negative integer argument.
func (a Args) NonNeg(name string, def int64) (int64, error) {
	return a.IntRange(name, def, 0, math.MaxInt64)
}

// Float returns a finite number argument (integers are accepted).
func (a Args) Float(name string, def float64) (float64, error) {
	if !a.Has(name) {
		return def, nil
	}
	v := a[name]
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := rv.Float(); !math.IsInf(f, 0) && !math.IsNaN(f) {
			return f, nil
		}
	default:
		if i, ok := integer(v); ok {
			return float64(i), nil
		}
		if rv.Kind() >= reflect.Uint && rv.Kind() <= reflect.Uintptr {
			return float64(rv.Uint()), nil
		}
	}
	return 0, argErr(name, "a number", v)
}

// Prob returns a probability argument in [0, 1].
func (a Args) Prob(name string, def float64) (float64, error) {
	f, err := a.Float(name, def)
	if err != nil {
		return 0, argErr(name, "a probability from 0 to 1", a[name])
	}
	if f < 0 || f > 1 {
		return 0, argErr(name, "a probability from 0 to 1", a[name])
	}
	return f, nil
}

// String returns a string argument.
func (a Args) String(name, def string) (string, error) {
	if !a.Has(name) {
		return def, nil
	}
	s, ok := a[name].(string)
	if !ok {
		return "", argErr(name, "a string", a[name])
	}
	return s, nil
}

// Bool returns a boolean argument.
func (a Args) Bool(name string, def bool) (bool, error) {
	if !a.Has(name) {
		return def, nil
	}
	b, ok := a[name].(bool)
	if !ok {
		return false, argErr(name, "true or false", a[name])
	}
	return b, nil
}

// Duration returns a duration argument written like "30s" (a string).
func (a Args) Duration(name string, def time.Duration) (time.Duration, error) {
	if !a.Has(name) {
		return def, nil
	}
	s, ok := a[name].(string)
	if ok {
		if d, err := time.ParseDuration(s); err == nil && d >= 0 {
			return d, nil
		}
	}
	return 0, argErr(name, "a duration like 30s", a[name])
}

// Ints returns a list-of-integers argument.
func (a Args) Ints(name string) ([]int64, error) {
	if !a.Has(name) {
		return nil, nil
	}
	rv := reflect.ValueOf(a[name])
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, argErr(name, "a list of integers", a[name])
	}
	out := make([]int64, rv.Len())
	for i := range out {
		x, ok := integer(rv.Index(i).Interface())
		if !ok {
			return nil, &ArgError{Arg: name, Msg: fmt.Sprintf("must be a list of integers, got %s at position %d", spec.DescribeValue(rv.Index(i).Interface()), i)}
		}
		out[i] = x
	}
	return out, nil
}
