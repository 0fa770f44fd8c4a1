package spec

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Format is the syntax of a flow file.
type Format int

// The formats Parse reads and Marshal writes.
const (
	FormatAuto Format = iota // by extension, else by content
	FormatYAML
	FormatJSON
)

func (f Format) String() string {
	switch f {
	case FormatYAML:
		return "yaml"
	case FormatJSON:
		return "json"
	}
	return "auto"
}

// FormatOf tells the format by a file name's extension: .json is JSON,
// .yaml/.yml is YAML, anything else FormatAuto.
func FormatOf(path string) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		return FormatJSON
	case ".yaml", ".yml":
		return FormatYAML
	}
	return FormatAuto
}

// Parse reads a flow file. path names it in error messages and picks the
// format by extension (.json, .yaml, .yml); otherwise the content decides
// (valid JSON is JSON, anything else YAML). Parse checks the shape of the file
// strictly: unknown fields, wrong types, bad durations are errors, all of them
// collected into an Errors. It does not check references between tasks, flows
// and functions: call Validate (or use Load) for that.
func Parse(path string, data []byte) (*File, error) {
	return ParseFormat(path, data, FormatOf(path))
}

// ParseFormat is Parse with the format given.
func ParseFormat(path string, data []byte, format Format) (*File, error) {
	c := &collector{file: path}
	if len(data) > MaxFileSize {
		c.add(&Error{Msg: fmt.Sprintf("file is %d bytes, over the limit of %d", len(data), MaxFileSize), Kind: ErrTooLarge})
		return nil, c.result()
	}
	if format == FormatAuto {
		format = FormatYAML
		if looksJSON(data) {
			format = FormatJSON
		}
	}
	var root *node
	var err error
	if format == FormatJSON {
		root, err = treeFromJSON(data)
	} else {
		root, err = treeFromYAML(data)
	}
	if err != nil {
		c.add(syntaxError(err, format, data))
		return nil, c.result()
	}
	f := decodeFile(root, c)
	f.Path = path
	if err := c.result(); err != nil {
		return nil, err
	}
	return f, nil
}

// ParseYAML parses YAML whatever the name says.
func ParseYAML(path string, data []byte) (*File, error) { return ParseFormat(path, data, FormatYAML) }

// ParseJSON parses JSON whatever the name says.
func ParseJSON(path string, data []byte) (*File, error) { return ParseFormat(path, data, FormatJSON) }

// ReadFile reads and parses the file at path.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	return Parse(path, data)
}

// Load reads, parses and validates the file at path.
func Load(path string, opts Options) (*File, error) {
	f, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := f.Validate(opts); err != nil {
		return nil, err
	}
	return f, nil
}

func syntaxError(err error, format Format, data []byte) *Error {
	e := &Error{Kind: ErrSyntax}
	msg := err.Error()
	if le, ok := err.(*lineError); ok {
		e.Line, msg = le.line, le.msg
	} else if format == FormatYAML {
		// yaml.v3: "yaml: line 3: did not find expected key"
		msg = strings.TrimPrefix(msg, "yaml: ")
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if i := strings.Index(rest, ":"); i > 0 {
				if l, err := strconv.Atoi(rest[:i]); err == nil {
					e.Line, msg = l, strings.TrimSpace(rest[i+1:])
					if at, why := misindented(data, l); at > 0 {
						e.Line, msg = at, why+" ("+msg+")"
					}
				}
			}
		}
	}
	name := "YAML"
	if format == FormatJSON {
		name = "JSON"
	}
	e.Msg = "not valid " + name + ": " + msg
	return e
}

// misindented finds the line that breaks a block sequence opened after
// line from: the YAML parser names the line where the sequence began ("did
// not find expected '-' indicator"), not the line at fault. It returns the
// first later line indented between the items' dash and their content, or
// at the dash's column without a dash, and says why; 0 when there is none.
func misindented(data []byte, from int) (int, string) {
	lines := strings.Split(string(data), "\n")
	dash, content := -1, -1
	for i := from; i < len(lines); i++ { // lines[from] is line from+1
		l := strings.TrimRight(lines[i], " \t\r")
		t := strings.TrimLeft(l, " ")
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		ind := len(l) - len(t)
		if dash < 0 {
			if !strings.HasPrefix(t, "- ") && t != "-" {
				return 0, ""
			}
			dash, content = ind, ind+2
			continue
		}
		switch {
		case ind < dash:
			return 0, "" // the block ended where the parser says
		case ind == dash && !strings.HasPrefix(t, "- ") && t != "-":
			return i + 1, fmt.Sprintf("indented like the list's dashes (%d spaces) without a dash: indent it %d spaces to belong to the item above, or start a new item with '- '", dash, content)
		case ind > dash && ind < content:
			return i + 1, fmt.Sprintf("indented %d spaces, between the list's dash (%d) and the item's keys (%d)", ind, dash, content)
		}
	}
	return 0, ""
}

// --- decoding the tree ---

var (
	fileFields  = []string{"flows", "name", "timeout", "params", "tasks"}
	flowFields  = []string{"name", "timeout", "params", "tasks"}
	paramFields = []string{"type", "default"}
	taskFields  = []string{"name", "kind", "func", "args", "succeed", "precede", "flow", "domain", "device", "node", "retries", "timeout"}
)

type decoder struct {
	c    *collector
	flow string // for error context
	task string
	idx  int
}

func (d *decoder) errf(field string, line int, kind error, format string, a ...any) {
	d.c.add(&Error{Flow: d.flow, Task: d.task, Index: d.idx, Field: field, Line: line, Msg: fmt.Sprintf(format, a...), Kind: kind})
}

// fields walks a map node, reporting unknown and duplicate keys, and returns
// the value of each known key.
func (d *decoder) fields(n *node, allowed []string) map[string]*node {
	out := map[string]*node{}
	for i, k := range n.keys {
		if k.kind != nScalar {
			d.errf("", k.line, ErrBadValue, "a key must be a plain name, got %s", k.describe())
			continue
		}
		name := k.text()
		if !contains(allowed, name) {
			d.errf(name, k.line, ErrUnknownField, "unknown field (known: %s)", strings.Join(allowed, ", "))
			continue
		}
		if _, dup := out[name]; dup {
			d.errf(name, k.line, ErrDuplicate, "field given twice")
			continue
		}
		out[name] = n.vals[i]
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func decodeFile(root *node, c *collector) *File {
	d := &decoder{c: c}
	f := &File{}
	switch root.kind {
	case nNull:
		d.errf("", root.line, ErrMissing, "empty file: want a flow (name, tasks) or a list of flows under flows")
		return f
	case nMap:
	default:
		d.errf("", root.line, ErrBadValue, "a flow file must be a map (name, tasks) or hold a list under flows, got %s", root.describe())
		return f
	}
	if root.lookup("flows") != nil {
		fl := d.fields(root, fileFields)
		list := fl["flows"]
		for _, k := range flowFields {
			if v, ok := fl[k]; ok {
				d.errf(k, v.line, ErrUnknownField, "a file holds one flow (name, tasks) or a list under flows, not both")
			}
		}
		switch list.kind {
		case nSeq:
			for _, it := range list.items {
				f.Flows = append(f.Flows, d.decodeFlow(it))
			}
		case nNull:
		default:
			d.errf("flows", list.line, ErrBadValue, "must be a list of flows, got %s", list.describe())
		}
		if len(f.Flows) == 0 {
			d.errf("flows", list.line, ErrMissing, "no flows in the list")
		}
		return f
	}
	f.Flows = []Flow{d.decodeFlow(root)}
	return f
}

func (d *decoder) decodeFlow(n *node) Flow {
	d.flow, d.task, d.idx = "", "", 0
	fl := Flow{pos: &position{line: n.line, fields: map[string]int{}}}
	if n.kind != nMap {
		d.errf("", n.line, ErrBadValue, "a flow must be a map (name, timeout, tasks), got %s", n.describe())
		return fl
	}
	if v := n.lookup("name"); v != nil {
		if s, ok := v.val.(string); ok {
			d.flow = s // so that every message carries it
		}
	}
	fs := d.fields(n, flowFields)
	if v, ok := fs["name"]; ok {
		fl.pos.fields["name"] = v.line
		fl.Name, _ = d.str("name", v)
		d.flow = fl.Name
	}
	if v, ok := fs["timeout"]; ok {
		fl.pos.fields["timeout"] = v.line
		fl.Timeout = d.duration("timeout", v)
	}
	if v, ok := fs["params"]; ok {
		fl.pos.fields["params"] = v.line
		fl.Params = d.params(v)
	}
	if v, ok := fs["tasks"]; ok {
		fl.pos.fields["tasks"] = v.line
		switch v.kind {
		case nSeq:
			for i, it := range v.items {
				fl.Tasks = append(fl.Tasks, d.taskNode(it, i+1))
				d.task, d.idx = "", 0
			}
		case nNull:
		default:
			d.errf("tasks", v.line, ErrBadValue, "must be a list of tasks, got %s", v.describe())
		}
	}
	return fl
}

func (d *decoder) taskNode(n *node, index int) Task {
	t := Task{pos: &position{line: n.line, fields: map[string]int{}}} // items and keys when there are some
	d.task, d.idx = "", index
	if n.kind != nMap {
		d.errf("", n.line, ErrBadValue, "a task must be a map (name, func, ...), got %s", n.describe())
		return t
	}
	if v := n.lookup("name"); v != nil {
		if s, ok := v.val.(string); ok && s != "" {
			d.task, d.idx = s, 0 // so that every message carries it
		}
	}
	fs := d.fields(n, taskFields)
	for _, k := range taskFields {
		if v, ok := fs[k]; ok && v.kind != nNull {
			t.pos.fields[k] = v.line
		}
	}
	if v, ok := fs["name"]; ok {
		t.Name, _ = d.str("name", v)
	}
	if v, ok := fs["kind"]; ok {
		s, _ := d.str("kind", v)
		t.Kind = Kind(s)
	}
	if v, ok := fs["func"]; ok {
		t.Func, _ = d.str("func", v)
	}
	if v, ok := fs["args"]; ok {
		t.Args = d.args(v, t.pos)
	}
	if v, ok := fs["succeed"]; ok {
		var lines []int
		t.Succeed, lines = d.names("succeed", v)
		t.pos.setItems("succeed", lines)
	}
	if v, ok := fs["precede"]; ok {
		var lines []int
		t.Precede, lines = d.names("precede", v)
		t.pos.setItems("precede", lines)
	}
	if v, ok := fs["flow"]; ok {
		t.Flow, _ = d.str("flow", v)
	}
	if v, ok := fs["domain"]; ok {
		s, _ := d.str("domain", v)
		t.Domain = Domain(s)
	}
	if v, ok := fs["device"]; ok && v.kind != nNull {
		if i, ok := d.int("device", v); ok {
			t.Device = &i
		}
	}
	if v, ok := fs["node"]; ok {
		t.Node, _ = d.str("node", v)
	}
	if v, ok := fs["retries"]; ok && v.kind != nNull {
		t.Retries, _ = d.int("retries", v)
	}
	if v, ok := fs["timeout"]; ok {
		t.Timeout = d.duration("timeout", v)
	}
	return t
}

func (d *decoder) str(field string, v *node) (string, bool) {
	switch v.kind {
	case nNull:
		return "", false
	case nScalar:
		if s, ok := v.val.(string); ok {
			return s, true
		}
		if v.quote {
			return v.text(), true
		}
		d.errf(field, v.line, ErrBadValue, "must be a string, got %s (quote it to use it as a name)", v.describe())
	default:
		d.errf(field, v.line, ErrBadValue, "must be a string, got %s", v.describe())
	}
	return "", false
}

func (d *decoder) int(field string, v *node) (int, bool) {
	if v.kind == nScalar {
		switch x := v.val.(type) {
		case int64:
			if x >= math.MinInt32 && x <= math.MaxInt32 {
				return int(x), true
			}
		case float64:
			if x == math.Trunc(x) && math.Abs(x) <= math.MaxInt32 {
				return int(x), true
			}
		}
	}
	d.errf(field, v.line, ErrBadValue, "must be an integer, got %s", v.describe())
	return 0, false
}

func (d *decoder) duration(field string, v *node) time.Duration {
	if v.kind == nNull {
		return 0
	}
	s, ok := v.val.(string)
	if v.kind != nScalar || !ok {
		d.errf(field, v.line, ErrBadValue, "must be a duration like 30s or 10m, got %s", v.describe())
		return 0
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		d.errf(field, v.line, ErrBadValue, "must be a duration like 30s or 10m, got %q", s)
		return 0
	}
	if dur <= 0 {
		d.errf(field, v.line, ErrBadValue, "must be positive, got %q", s)
		return 0
	}
	return dur
}

func (d *decoder) names(field string, v *node) ([]string, []int) {
	switch v.kind {
	case nNull:
		return nil, nil
	case nSeq:
	default:
		d.errf(field, v.line, ErrBadValue, "must be a list of task names, got %s", v.describe())
		return nil, nil
	}
	var out []string
	var lines []int
	for _, it := range v.items {
		if it.kind == nScalar {
			if s, ok := d.str(field, it); ok {
				out = append(out, s)
				lines = append(lines, it.line)
			}
			continue
		}
		d.errf(field, it.line, ErrBadValue, "must be a list of task names, got %s in it", it.describe())
	}
	return out, lines
}

func (d *decoder) args(v *node, pos *position) map[string]any {
	switch v.kind {
	case nNull:
		return nil
	case nMap:
	default:
		d.errf("args", v.line, ErrBadValue, "must be a map of arguments, got %s", v.describe())
		return nil
	}
	m, ok := d.value("args", v).(map[string]any)
	if !ok || len(m) == 0 {
		return nil
	}
	if pos.keys == nil {
		pos.keys = make(map[string]int, len(v.keys))
	}
	for i, k := range v.keys {
		if k.kind == nScalar {
			pos.keys[k.text()] = v.vals[i].line
		}
	}
	return m
}

// value converts an argument tree to plain Go values.
func (d *decoder) value(field string, v *node) any {
	switch v.kind {
	case nNull:
		return nil
	case nScalar:
		return v.val
	case nSeq:
		out := make([]any, 0, len(v.items))
		for _, it := range v.items {
			out = append(out, d.value(field, it))
		}
		return out
	}
	out := make(map[string]any, len(v.keys))
	for i, k := range v.keys {
		if k.kind != nScalar {
			d.errf(field, k.line, ErrBadValue, "argument keys must be strings, got %s", k.describe())
			continue
		}
		key := k.text()
		if _, dup := out[key]; dup {
			d.errf(field, k.line, ErrDuplicate, "argument %q given twice", key)
			continue
		}
		out[key] = d.value(field, v.vals[i])
	}
	return out
}

// params decodes a flow's params: name → {type, default}.
func (d *decoder) params(v *node) []Param {
	switch v.kind {
	case nNull:
		return nil
	case nMap:
	default:
		d.errf("params", v.line, ErrBadValue, "must be a map of parameters (name: {type: string|int|float|bool, default: V}), got %s", v.describe())
		return nil
	}
	var out []Param
	seen := map[string]bool{}
	for i, k := range v.keys {
		if k.kind != nScalar {
			d.errf("params", k.line, ErrBadValue, "a parameter name must be a plain name, got %s", k.describe())
			continue
		}
		name := k.text()
		if seen[name] {
			d.errf("params", k.line, ErrDuplicate, "parameter %q given twice", name)
			continue
		}
		seen[name] = true
		p := Param{Name: name, pos: &position{line: k.line}}
		val := v.vals[i]
		if val.kind != nMap {
			d.errf("params", val.line, ErrBadValue, "parameter %q must be a map {type: string|int|float|bool, default: V}, got %s", name, val.describe())
			continue
		}
		for j, pk := range val.keys {
			field := pk.text()
			if pk.kind != nScalar || !contains(paramFields, field) {
				d.errf("params", pk.line, ErrUnknownField, "parameter %q: unknown field %s (known: type, default)", name, pk.describe())
				continue
			}
			pv := val.vals[j]
			switch field {
			case "type":
				s, ok := pv.val.(string)
				if pv.kind != nScalar || !ok {
					d.errf("params", pv.line, ErrBadValue, "parameter %q: type must be string, int, float or bool, got %s", name, pv.describe())
					continue
				}
				p.Type = ParamType(s)
			case "default":
				if pv.kind != nScalar {
					d.errf("params", pv.line, ErrBadValue, "parameter %q: default must be a string, number or bool, got %s", name, pv.describe())
					continue
				}
				p.Default = pv.val
			}
		}
		out = append(out, p)
	}
	return out
}
