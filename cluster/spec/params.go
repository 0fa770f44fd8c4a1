package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// ErrParam is the kind of every problem with a flow's parameters: a
// declaration (unknown type, a default that does not fit it), a reference to
// an undeclared one, and at Bind a value missing, ill-typed or not declared.
var ErrParam = errors.New("spec: bad parameter")

// ParamType is the type of a flow parameter.
type ParamType string

// The parameter types of a flow file.
const (
	ParamString ParamType = "string"
	ParamInt    ParamType = "int"
	ParamFloat  ParamType = "float"
	ParamBool   ParamType = "bool"
)

// Param is one parameter a flow declares under params: (name → {type,
// default}). Only the first flow of a file, the one that runs, declares
// parameters; `${name}` in any argument of any flow of the file refers to
// them.
type Param struct {
	Name string
	Type ParamType
	// Default is the value when a submission gives none: string, int64,
	// float64 or bool after Parse. nil means the parameter must be given.
	Default any

	pos *position
}

// Param returns the declared parameter of that name, or nil.
func (fl *Flow) Param(name string) *Param {
	for i := range fl.Params {
		if fl.Params[i].Name == name {
			return &fl.Params[i]
		}
	}
	return nil
}

// paramName reports whether s can name a parameter: a letter or '_', then
// letters, digits and '_'.
func paramName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && r >= '0' && r <= '9':
		default:
			return false
		}
	}
	return true
}

// ParamValue converts v to a value of type t: a string is parsed (the form
// `submit --param name=value` gives), a number or bool must fit t (an int
// takes a float only when it is whole; a float takes an int). The result is
// string, int64, float64 or bool.
//
// A json.Number (what a decoder with UseNumber gives: a value that went
// through JSON, as a run's parameters do through raft) is the number it
// spells, read exactly: an int stays the int64 it was (9007199254740993
// does not round through float64), a float is parsed as float64; it is
// no string nor bool.
func ParamValue(t ParamType, v any) (any, error) {
	if num, ok := v.(json.Number); ok {
		return paramNumber(t, num)
	}
	n, err := normalize(v, 0)
	if err != nil {
		return nil, err
	}
	if s, ok := n.(string); ok && t != ParamString {
		switch t {
		case ParamInt:
			i, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("must be an int, got %q", s)
			}
			return i, nil
		case ParamFloat:
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, fmt.Errorf("must be a finite float, got %q", s)
			}
			return f, nil
		case ParamBool:
			b, err := strconv.ParseBool(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("must be a bool (true or false), got %q", s)
			}
			return b, nil
		}
	}
	switch t {
	case ParamString:
		if s, ok := n.(string); ok {
			return s, nil
		}
	case ParamInt:
		switch x := n.(type) {
		case int64:
			return x, nil
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
				return int64(x), nil
			}
		}
	case ParamFloat:
		switch x := n.(type) {
		case int64:
			return float64(x), nil
		case uint64:
			return float64(x), nil
		case float64:
			return x, nil
		}
	case ParamBool:
		if b, ok := n.(bool); ok {
			return b, nil
		}
	default:
		return nil, fmt.Errorf("unknown type %q (want string, int, float or bool)", string(t))
	}
	return nil, fmt.Errorf("must be a%s %s, got %s", article(t), t, DescribeValue(n))
}

// paramNumber is ParamValue of a json.Number.
func paramNumber(t ParamType, num json.Number) (any, error) {
	s := string(num)
	switch t {
	case ParamInt:
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		// A whole number written as a float ("3.0", "1e3"), as a float64 one is taken.
		if f, err := strconv.ParseFloat(s, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			return int64(f), nil
		}
	case ParamFloat:
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) {
			return f, nil
		}
		return nil, fmt.Errorf("must be a finite float, got %s", s)
	case ParamString, ParamBool:
	default:
		return nil, fmt.Errorf("unknown type %q (want string, int, float or bool)", string(t))
	}
	return nil, fmt.Errorf("must be a%s %s, got %s", article(t), t, s)
}

func article(t ParamType) string {
	if t == ParamInt {
		return "n"
	}
	return ""
}

// DescribeValue names a value of a flow file for an error message: "null",
// a quoted string, "a list", "a map", or its text. cluster/funcs words its
// argument errors with it too.
func DescribeValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(x)
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map:
		return "a map"
	}
	return paramText(v)
}

// paramText is a parameter's value as it goes into a longer string.
func paramText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	return fmt.Sprint(v)
}

// substitute replaces the parameter references of s. An s that is exactly
// "${name}" becomes the typed value; "${name}" inside a longer string
// becomes the value's text, and "$${" is a literal "${". A reference to a
// name lookup does not know, or a "${" without its "}", is an error.
func substitute(s string, lookup func(string) (any, bool)) (any, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	if name, ok := strings.CutPrefix(s, "${"); ok && strings.HasSuffix(name, "}") && paramName(name[:len(name)-1]) {
		name = name[:len(name)-1]
		v, ok := lookup(name)
		if !ok {
			return nil, fmt.Errorf("${%s}: no such parameter", name)
		}
		return v, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' { // "$${": a literal "${"
			b.WriteString(s[:i])
			b.WriteString("{")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("%q: \"${\" without its \"}\" (write $${ for a literal ${)", s[i:])
		}
		name := s[i+2 : i+end]
		if !paramName(name) {
			return nil, fmt.Errorf("${%s}: not a parameter name (letters, digits and _; write $${ for a literal ${)", name)
		}
		v, ok := lookup(name)
		if !ok {
			return nil, fmt.Errorf("${%s}: no such parameter", name)
		}
		b.WriteString(paramText(v))
		s = s[i+end+1:]
	}
}

// substituteValue walks an argument value, substituting every string in it.
func substituteValue(v any, lookup func(string) (any, bool)) (any, error) {
	switch x := v.(type) {
	case string:
		return substitute(x, lookup)
	case []any:
		out := make([]any, len(x))
		for i := range x {
			e, err := substituteValue(x[i], lookup)
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			s, err := substituteValue(e, lookup)
			if err != nil {
				return nil, err
			}
			out[k] = s
		}
		return out, nil
	}
	return v, nil
}

// Params returns the parameters of the file: those its first flow declares.
func (f *File) Params() []Param {
	if r := f.Root(); r != nil {
		return r.Params
	}
	return nil
}

// Bind fills the file's parameters and returns a copy with every
// reference in the arguments substituted and no parameters left, ready to
// validate and run, with the value of each parameter (given or default).
// values maps a parameter's name to its value: a string is parsed by the
// parameter's type (what `submit --param name=value` gives), a number or
// bool must fit it. A value for an undeclared parameter, a parameter with
// neither value nor default, an ill-typed value and a reference to an
// undeclared parameter are errors (ErrParam) naming it. A file that declares
// no parameters binds to itself, its "${" strings untouched.
func (f *File) Bind(values map[string]any) (*File, map[string]any, error) {
	c := &collector{file: f.Path}
	params := f.Params()
	flowName := ""
	if r := f.Root(); r != nil {
		flowName = r.Name
	}
	declared := map[string]*Param{}
	for i := range params {
		declared[params[i].Name] = &params[i]
	}
	perr := func(p *Param, msg string) {
		line := 0
		if p != nil {
			line = p.line()
		} else if r := f.Root(); r != nil {
			line = r.pos.field("params")
		}
		c.add(&Error{Flow: flowName, Field: "params", Line: line, Msg: msg, Kind: ErrParam})
	}
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if declared[k] == nil {
			if len(params) == 0 {
				perr(nil, fmt.Sprintf("parameter %q given, but the flow declares no parameters", k))
			} else {
				perr(nil, fmt.Sprintf("parameter %q given, but the flow does not declare it (declared: %s)", k, paramList(params)))
			}
		}
	}
	if len(params) == 0 {
		if err := c.result(); err != nil {
			return nil, nil, err
		}
		return f, nil, nil
	}
	bound := make(map[string]any, len(params))
	for i := range params {
		p := &params[i]
		v, given := values[p.Name]
		if !given {
			if p.Default == nil {
				perr(p, fmt.Sprintf("parameter %q (%s) has no default: give it a value (--param %s=VALUE)", p.Name, p.Type, p.Name))
				continue
			}
			v = p.Default
		}
		tv, err := ParamValue(p.Type, v)
		if err != nil {
			perr(p, fmt.Sprintf("parameter %q: %v", p.Name, err))
			continue
		}
		bound[p.Name] = tv
	}
	if err := c.result(); err != nil {
		return nil, nil, err
	}
	lookup := func(name string) (any, bool) { v, ok := bound[name]; return v, ok }
	out := &File{Path: f.Path, Flows: make([]Flow, len(f.Flows))}
	for i := range f.Flows {
		fl := f.Flows[i]
		fl.Params = nil
		fl.Tasks = append([]Task(nil), fl.Tasks...)
		for j := range fl.Tasks {
			t := &fl.Tasks[j]
			if len(t.Args) == 0 {
				continue
			}
			args := make(map[string]any, len(t.Args))
			for _, k := range sortedKeys(t.Args) {
				v, err := substituteValue(t.Args[k], lookup)
				if err != nil {
					line := t.pos.field("args")
					if t.pos != nil && t.pos.keys[k] > 0 {
						line = t.pos.keys[k]
					}
					c.add(&Error{Flow: fl.Name, Task: t.Name, Index: taskIndex(t, j), Field: "args", Line: line, Msg: fmt.Sprintf("argument %q: %v", k, err), Kind: ErrParam})
					continue
				}
				args[k] = v
			}
			t.Args = args
		}
		out.Flows[i] = fl
	}
	if err := c.result(); err != nil {
		return nil, nil, err
	}
	return out, bound, nil
}

func paramList(ps []Param) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Name
	}
	return strings.Join(s, ", ")
}

// checkParams validates the declarations of the file's parameters and the
// references to them: only the first flow declares parameters; each has a
// name usable in ${name}, a known type and a default of that type; and,
// when there are parameters, every ${name} in any flow's arguments names
// one. (Without declarations, "${" strings are plain text.)
func checkParams(c *collector, f *File) {
	for i := range f.Flows {
		fl := &f.Flows[i]
		if i > 0 && len(fl.Params) > 0 {
			c.add(&Error{Flow: fl.Name, Field: "params", Line: fl.pos.field("params"), Msg: "only the first flow of a file (the one that runs) declares params; ${name} in any flow refers to them", Kind: ErrParam})
		}
	}
	params := f.Params()
	if len(params) == 0 {
		return
	}
	root := f.Root()
	declared := map[string]bool{}
	for _, p := range params {
		perr := func(msg string) {
			c.add(&Error{Flow: root.Name, Field: "params", Line: p.line(), Msg: msg, Kind: ErrParam})
		}
		if !paramName(p.Name) {
			perr(fmt.Sprintf("parameter name %q: want a letter or _, then letters, digits and _", p.Name))
		}
		declared[p.Name] = true
		switch p.Type {
		case ParamString, ParamInt, ParamFloat, ParamBool:
			if p.Default != nil {
				if _, err := ParamValue(p.Type, p.Default); err != nil {
					perr(fmt.Sprintf("parameter %q: default %v", p.Name, err))
				}
			}
		case "":
			perr(fmt.Sprintf("parameter %q: missing type (string, int, float or bool)", p.Name))
		default:
			perr(fmt.Sprintf("parameter %q: unknown type %q (want string, int, float or bool)", p.Name, string(p.Type)))
		}
	}
	lookup := func(name string) (any, bool) { return "", declared[name] }
	for i := range f.Flows {
		fl := &f.Flows[i]
		for j := range fl.Tasks {
			t := &fl.Tasks[j]
			for _, k := range sortedKeys(t.Args) {
				if _, err := substituteValue(t.Args[k], lookup); err != nil {
					line := t.pos.field("args")
					if t.pos != nil && t.pos.keys[k] > 0 {
						line = t.pos.keys[k]
					}
					c.add(&Error{Flow: fl.Name, Task: t.Name, Index: taskIndex(t, j), Field: "args", Line: line, Msg: fmt.Sprintf("argument %q: %v", k, err), Kind: ErrParam})
				}
			}
		}
	}
}

// hasRefs reports whether an argument value holds a "${" string: in a file
// with parameters, a task's arguments are checked by its function only once
// bound.
func hasRefs(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.Contains(x, "${")
	case []any:
		for _, e := range x {
			if hasRefs(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if hasRefs(e) {
				return true
			}
		}
	}
	return false
}

// line is where the parameter was declared (0 for one built in Go).
func (p *Param) line() int {
	if p.pos == nil {
		return 0
	}
	return p.pos.line
}
