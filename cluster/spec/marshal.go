package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Marshal writes the file in the given format (FormatAuto: by f.Path's
// extension, YAML when it does not tell). A file of one flow is written as
// that flow; several as a list under flows. Parse gives the file back (a
// round trip keeps every field; line numbers are those of the new text).
func Marshal(f *File, format Format) ([]byte, error) {
	if format == FormatAuto {
		format = FormatOf(f.Path)
	}
	if format == FormatJSON {
		return f.JSON()
	}
	return f.YAML()
}

// YAML writes the file as YAML.
func (f *File) YAML() ([]byte, error) {
	var root *yaml.Node
	if len(f.Flows) == 1 {
		root = flowYAML(&f.Flows[0])
	} else {
		list := &yaml.Node{Kind: yaml.SequenceNode}
		for i := range f.Flows {
			list.Content = append(list.Content, flowYAML(&f.Flows[i]))
		}
		root = mapNode("flows", list)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	return buf.Bytes(), nil
}

// YAML writes one flow as a YAML flow file.
func (fl *Flow) YAML() ([]byte, error) { return (&File{Flows: []Flow{*fl}}).YAML() }

// JSON writes one flow as a JSON flow file.
func (fl *Flow) JSON() ([]byte, error) { return (&File{Flows: []Flow{*fl}}).JSON() }

func mapNode(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i < len(kv); i += 2 {
		n.Content = append(n.Content, strNode(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return n
}

func strNode(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if strings.Contains(s, "\n") || s != strings.TrimSpace(s) || !printable(s) {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0xfeff || r == 0x2028 || r == 0x2029 || r == '\ufffd' {
			return false
		}
	}
	return true
}

func flowYAML(fl *Flow) *yaml.Node {
	n := mapNode("name", strNode(fl.Name))
	if fl.Timeout != 0 {
		n.Content = append(n.Content, strNode("timeout"), strNode(FormatDuration(fl.Timeout)))
	}
	if len(fl.Params) > 0 {
		ps := &yaml.Node{Kind: yaml.MappingNode}
		for _, p := range fl.Params {
			pn := mapNode("type", strNode(string(p.Type)))
			if p.Default != nil {
				pn.Content = append(pn.Content, strNode("default"), valueYAML(p.Default))
			}
			pn.Style = yaml.FlowStyle
			ps.Content = append(ps.Content, strNode(p.Name), pn)
		}
		n.Content = append(n.Content, strNode("params"), ps)
	}
	tasks := &yaml.Node{Kind: yaml.SequenceNode}
	for i := range fl.Tasks {
		tasks.Content = append(tasks.Content, taskYAML(&fl.Tasks[i]))
	}
	n.Content = append(n.Content, strNode("tasks"), tasks)
	return n
}

func taskYAML(t *Task) *yaml.Node {
	n := mapNode("name", strNode(t.Name))
	add := func(k string, v *yaml.Node) { n.Content = append(n.Content, strNode(k), v) }
	if t.Kind != "" {
		add("kind", strNode(string(t.Kind)))
	}
	if t.Func != "" {
		add("func", strNode(t.Func))
	}
	if len(t.Args) > 0 {
		a := valueYAML(t.Args)
		flat := true
		for _, c := range a.Content {
			if c.Kind != yaml.ScalarNode || c.Style == yaml.DoubleQuotedStyle {
				flat = false
			}
		}
		if flat && len(t.Args) <= 4 {
			a.Style = yaml.FlowStyle
		}
		add("args", a)
	}
	names := func(k string, l []string) {
		if len(l) == 0 {
			return
		}
		s := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		flow := true
		for _, x := range l {
			c := strNode(x)
			if c.Style == yaml.DoubleQuotedStyle {
				flow = false
			}
			s.Content = append(s.Content, c)
		}
		if !flow {
			s.Style = 0
		}
		add(k, s)
	}
	names("succeed", t.Succeed)
	names("precede", t.Precede)
	if t.Flow != "" {
		add("flow", strNode(t.Flow))
	}
	if t.Domain != "" {
		add("domain", strNode(string(t.Domain)))
	}
	if t.Device != nil {
		add("device", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(*t.Device)})
	}
	if t.Node != "" {
		add("node", strNode(t.Node))
	}
	if t.Retries != 0 {
		add("retries", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(t.Retries)})
	}
	if t.Timeout != 0 {
		add("timeout", strNode(FormatDuration(t.Timeout)))
	}
	return n
}

func valueYAML(v any) *yaml.Node {
	switch x := v.(type) {
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(x)}
	case string:
		return strNode(x)
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for _, e := range x {
			n.Content = append(n.Content, valueYAML(e))
		}
		return n
	case map[string]any:
		n := &yaml.Node{Kind: yaml.MappingNode}
		for _, k := range sortedKeys(x) {
			n.Content = append(n.Content, strNode(k), valueYAML(x[k]))
		}
		return n
	}
	if s, tag, ok := number(v); ok {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: s}
	}
	if nv, err := normalize(v, 0); err == nil {
		return valueYAML(nv)
	}
	return strNode(fmt.Sprint(v))
}

// number formats a numeric argument so that it parses back to the same type.
func number(v any) (string, string, bool) {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10), "!!int", true
	case uint64:
		return strconv.FormatUint(x, 10), "!!int", true
	case int:
		return strconv.Itoa(x), "!!int", true
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return "", "", false
		}
		s := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eE") {
			s += ".0"
		}
		return s, "!!float", true
	}
	return "", "", false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// FormatDuration writes a duration the way a person would: 10m, 1h30m, 500ms.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// --- JSON ---

// JSON writes the file as indented JSON: the layout json.Indent gives
// with two spaces, written directly rather than compact and then
// indented, and without an encoder a string.
func (f *File) JSON() ([]byte, error) {
	return f.writeJSON(&jsonWriter{b: make([]byte, 0, 160*f.taskCount()+256)}) // about what a task of a DAG takes
}

// Canonical writes the file as the flow registry keeps it: the JSON of
// File.JSON without its layout (no white space between tokens; the
// layout json.Compact gives). The registry names a flow by the SHA-256 of
// these bytes, so they are fixed: the same members in the same order, the
// same escapes. A 100K-task DAG's is about half its indented JSON (6.4 MB
// against 12.3 MB for the 100 × 1,000 layered no-op DAG), which every
// coordinator writes into its raft log and snapshots.
func Canonical(f *File) ([]byte, error) {
	return f.writeJSON(&jsonWriter{b: make([]byte, 0, 72*f.taskCount()+256), compact: true})
}

func (f *File) writeJSON(w *jsonWriter) ([]byte, error) {
	if len(f.Flows) == 1 {
		if err := w.flow(&f.Flows[0]); err != nil {
			return nil, err
		}
	} else {
		w.open('{')
		w.key("flows")
		w.open('[')
		for i := range f.Flows {
			w.elem()
			if err := w.flow(&f.Flows[i]); err != nil {
				return nil, err
			}
		}
		w.close(']')
		w.close('}')
	}
	if !w.compact {
		w.b = append(w.b, '\n')
	}
	return w.b, nil
}

func (f *File) taskCount() int {
	n := 0
	for i := range f.Flows {
		n += len(f.Flows[i].Tasks)
	}
	return n
}

// jsonWriter appends indented JSON: each element of a non-empty object or
// array on a line of its own, indented two spaces a level; an empty one
// as {} or []; ": " after a key. compact: no white space at all.
type jsonWriter struct {
	b       []byte
	depth   int
	empty   bool // the innermost object or array open has no element yet
	compact bool
}

func (w *jsonWriter) open(c byte) {
	w.b = append(w.b, c)
	w.depth++
	w.empty = true
}

func (w *jsonWriter) close(c byte) {
	w.depth--
	if !w.empty {
		w.newline()
	}
	w.b = append(w.b, c)
	w.empty = false // it is an element of the one around it
}

// elem starts an element of the innermost object or array.
func (w *jsonWriter) elem() {
	if !w.empty {
		w.b = append(w.b, ',')
	}
	w.empty = false
	w.newline()
}

func (w *jsonWriter) newline() {
	if w.compact {
		return
	}
	w.b = append(w.b, '\n')
	for range w.depth {
		w.b = append(w.b, ' ', ' ')
	}
}

func (w *jsonWriter) key(k string) {
	w.elem()
	w.str(k)
	if w.compact {
		w.b = append(w.b, ':')
		return
	}
	w.b = append(w.b, ':', ' ')
}

// str appends s as a JSON string, as encoding/json writes it without HTML
// escaping.
func (w *jsonWriter) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a string always encodes
			w.b = append(w.b, bytes.TrimSuffix(b.Bytes(), []byte{'\n'})...)
			return
		}
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

func (w *jsonWriter) flow(fl *Flow) error {
	w.open('{')
	w.key("name")
	w.str(fl.Name)
	if fl.Timeout != 0 {
		w.key("timeout")
		w.str(FormatDuration(fl.Timeout))
	}
	if len(fl.Params) > 0 {
		w.key("params")
		w.open('{')
		for _, p := range fl.Params {
			w.key(p.Name)
			w.open('{')
			w.key("type")
			w.str(string(p.Type))
			if p.Default != nil {
				w.key("default")
				if err := w.value(p.Default, 0); err != nil {
					return err
				}
			}
			w.close('}')
		}
		w.close('}')
	}
	w.key("tasks")
	w.open('[')
	for i := range fl.Tasks {
		w.elem()
		if err := w.task(&fl.Tasks[i]); err != nil {
			return err
		}
	}
	w.close(']')
	w.close('}')
	return nil
}

func (w *jsonWriter) task(t *Task) error {
	w.open('{')
	str := func(k, v string) {
		if v != "" {
			w.key(k)
			w.str(v)
		}
	}
	w.key("name")
	w.str(t.Name)
	str("kind", string(t.Kind))
	str("func", t.Func)
	if len(t.Args) > 0 {
		w.key("args")
		if err := w.value(t.Args, 0); err != nil {
			return fmt.Errorf("spec: task %q args: %w", t.Name, err)
		}
	}
	list := func(k string, l []string) {
		if len(l) == 0 {
			return
		}
		w.key(k)
		w.open('[')
		for _, s := range l {
			w.elem()
			w.str(s)
		}
		w.close(']')
	}
	list("succeed", t.Succeed)
	list("precede", t.Precede)
	str("flow", t.Flow)
	str("domain", string(t.Domain))
	if t.Device != nil {
		w.key("device")
		w.b = strconv.AppendInt(w.b, int64(*t.Device), 10)
	}
	str("node", t.Node)
	if t.Retries != 0 {
		w.key("retries")
		w.b = strconv.AppendInt(w.b, int64(t.Retries), 10)
	}
	if t.Timeout != 0 {
		str("timeout", FormatDuration(t.Timeout))
	}
	w.close('}')
	return nil
}

func (w *jsonWriter) value(v any, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	switch x := v.(type) {
	case nil:
		w.b = append(w.b, "null"...)
	case bool:
		w.b = strconv.AppendBool(w.b, x)
	case string:
		w.str(x)
	case []any:
		w.open('[')
		for _, e := range x {
			w.elem()
			if err := w.value(e, depth+1); err != nil {
				return err
			}
		}
		w.close(']')
	case map[string]any:
		w.open('{')
		for _, k := range sortedKeys(x) {
			w.key(k)
			if err := w.value(x[k], depth+1); err != nil {
				return err
			}
		}
		w.close('}')
	default:
		if s, _, ok := number(v); ok {
			w.b = append(w.b, s...)
			return nil
		}
		nv, err := normalize(v, depth)
		if err != nil {
			return err
		}
		return w.value(nv, depth+1)
	}
	return nil
}

// MarshalJSON writes the file as a JSON flow file (so a File can travel inside
// API messages).
func (f *File) MarshalJSON() ([]byte, error) { return f.JSON() }

// UnmarshalJSON parses a JSON flow file strictly (as ParseJSON; no Validate).
func (f *File) UnmarshalJSON(data []byte) error {
	g, err := ParseJSON(f.Path, data)
	if err != nil {
		return err
	}
	path := f.Path
	*f = *g
	f.Path = path
	return nil
}

// MarshalJSON writes the flow as a JSON flow file.
func (fl Flow) MarshalJSON() ([]byte, error) { return fl.JSON() }

// UnmarshalJSON parses one flow strictly (a flows list is refused).
func (fl *Flow) UnmarshalJSON(data []byte) error {
	f, err := ParseJSON("", data)
	if err != nil {
		return err
	}
	if len(f.Flows) != 1 {
		return Errors{{Msg: fmt.Sprintf("want one flow, got %d", len(f.Flows)), Kind: ErrBadValue}}
	}
	*fl = f.Flows[0]
	return nil
}
