package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// The parser first turns YAML or JSON into this small tree (with line numbers),
// then decodes the tree into a File. One decoder serves both formats, so both
// are equally strict and report the same messages.

type nodeKind int

const (
	nNull nodeKind = iota
	nScalar
	nMap
	nSeq
)

type node struct {
	kind  nodeKind
	line  int
	val   any     // scalars: string, bool, int64, uint64, float64
	quote bool    // YAML: the scalar was written quoted (or is a JSON string)
	keys  []*node // maps: keys (scalars) and values, in order
	vals  []*node
	items []*node // sequences
}

// Limits that keep hostile input from exhausting the parser.
const (
	// MaxFileSize is the largest flow file Parse accepts.
	MaxFileSize = 32 << 20
	maxDepth    = 64
	maxAliased  = 1 << 18 // nodes produced by expanding aliases
)

func (n *node) describe() string {
	switch n.kind {
	case nNull:
		return "null"
	case nMap:
		return "a map"
	case nSeq:
		return "a list"
	}
	switch v := n.val.(type) {
	case string:
		return strconv.Quote(v)
	case bool:
		return strconv.FormatBool(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprint(n.val)
}

// --- YAML ---

type yamlConv struct {
	aliased int                 // nodes produced under aliases so far
	active  map[*yaml.Node]bool // aliases being expanded (cycle guard)
}

func treeFromYAML(data []byte) (root *node, err error) {
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, fmt.Errorf("yaml: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &node{kind: nNull, line: 1}, nil
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &lineError{line: extra.Line, msg: "more than one YAML document (one file holds one document)"}
	} else if !errors.Is(err, io.EOF) {
		return nil, err
	}
	c := &yamlConv{active: map[*yaml.Node]bool{}}
	return c.conv(&doc, 0)
}

type lineError struct {
	line int
	msg  string
}

func (e *lineError) Error() string { return e.msg }

func (c *yamlConv) conv(y *yaml.Node, depth int) (*node, error) {
	if len(c.active) > 0 {
		c.aliased++
		if c.aliased > maxAliased {
			return nil, &lineError{line: y.Line, msg: fmt.Sprintf("aliases expand to over %d nodes", maxAliased)}
		}
	}
	if depth > maxDepth {
		return nil, &lineError{line: y.Line, msg: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
	}
	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return &node{kind: nNull, line: y.Line}, nil
		}
		return c.conv(y.Content[0], depth)
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, &lineError{line: y.Line, msg: "alias to an unknown anchor"}
		}
		if c.active[y.Alias] {
			return nil, &lineError{line: y.Line, msg: "alias refers to a node containing itself"}
		}
		c.active[y.Alias] = true
		n, err := c.conv(y.Alias, depth+1)
		delete(c.active, y.Alias)
		return n, err
	case yaml.ScalarNode:
		return c.scalar(y)
	case yaml.SequenceNode:
		n := &node{kind: nSeq, line: y.Line}
		for _, it := range y.Content {
			v, err := c.conv(it, depth+1)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
		return n, nil
	case yaml.MappingNode:
		n := &node{kind: nMap, line: y.Line}
		if len(y.Content)%2 != 0 {
			return nil, &lineError{line: y.Line, msg: "malformed mapping"}
		}
		var merged []*node // from `<<:` merge keys; explicit keys win
		var mergedVals []*node
		for i := 0; i < len(y.Content); i += 2 {
			k, v := y.Content[i], y.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
				m, err := c.conv(v, depth+1)
				if err != nil {
					return nil, err
				}
				srcs := []*node{m}
				if m.kind == nSeq {
					srcs = m.items
				}
				for _, s := range srcs {
					if s.kind != nMap {
						return nil, &lineError{line: v.Line, msg: "merge key (<<) needs a map or a list of maps"}
					}
					merged = append(merged, s.keys...)
					mergedVals = append(mergedVals, s.vals...)
				}
				continue
			}
			kn, err := c.conv(k, depth+1)
			if err != nil {
				return nil, err
			}
			vn, err := c.conv(v, depth+1)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, kn)
			n.vals = append(n.vals, vn)
		}
		for i, k := range merged {
			if k.kind == nScalar && n.lookup(k.text()) != nil {
				continue
			}
			if k.kind == nScalar && slicesIndex(merged[:i], k.text()) >= 0 {
				continue // first merge source wins
			}
			n.keys = append(n.keys, k)
			n.vals = append(n.vals, mergedVals[i])
		}
		return n, nil
	}
	return nil, &lineError{line: y.Line, msg: "unsupported YAML node"}
}

func slicesIndex(ns []*node, key string) int {
	for i, n := range ns {
		if n.kind == nScalar && n.text() == key {
			return i
		}
	}
	return -1
}

func (c *yamlConv) scalar(y *yaml.Node) (*node, error) {
	n := &node{kind: nScalar, line: y.Line, quote: y.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0}
	switch tag := y.ShortTag(); tag {
	case "!!null":
		n.kind = nNull
		return n, nil
	case "!!str", "!!timestamp", "!!binary":
		n.val = y.Value
		if tag != "!!str" {
			n.quote = true
		}
		return n, nil
	case "!!bool", "!!int", "!!float":
		var v any
		if err := y.Decode(&v); err != nil {
			return nil, &lineError{line: y.Line, msg: err.Error()}
		}
		switch x := v.(type) {
		case bool:
			n.val = x
		case int:
			n.val = int64(x)
		case int64:
			n.val = x
		case uint64:
			n.val = x
		case float64:
			if math.IsInf(x, 0) || math.IsNaN(x) {
				return nil, &lineError{line: y.Line, msg: fmt.Sprintf("%s: infinite or NaN numbers are not supported", y.Value)}
			}
			n.val = x
		default:
			return nil, &lineError{line: y.Line, msg: fmt.Sprintf("unsupported value %q", y.Value)}
		}
		return n, nil
	default:
		return nil, &lineError{line: y.Line, msg: fmt.Sprintf("unsupported tag %s", tag)}
	}
}

// --- JSON ---

type jsonConv struct {
	dec   *json.Decoder
	lines []int // offsets of '\n'
}

func treeFromJSON(data []byte) (*node, error) {
	if n, ok := scanJSON(data); ok {
		return n, nil
	}
	return decodeJSONTree(data)
}

// decodeJSONTree is treeFromJSON through json.Decoder's tokens: the
// reference scanJSON is tested against, and the path that words the errors.
func decodeJSONTree(data []byte) (*node, error) {
	c := &jsonConv{dec: json.NewDecoder(bytes.NewReader(data))}
	c.dec.UseNumber()
	for i, b := range data {
		if b == '\n' {
			c.lines = append(c.lines, i)
		}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return &node{kind: nNull, line: 1}, nil
	}
	n, err := c.value(0)
	if err != nil {
		return nil, err
	}
	if _, err := c.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &lineError{line: c.lineAt(c.dec.InputOffset()), msg: "data after the top-level value"}
	}
	return n, nil
}

// lineAt returns the line of the byte just before offset (the end of the last token).
func (c *jsonConv) lineAt(off int64) int {
	if off > 0 {
		off--
	}
	return sort.SearchInts(c.lines, int(off)) + 1
}

func (c *jsonConv) syntax(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &lineError{line: c.lineAt(se.Offset), msg: se.Error()}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &lineError{line: len(c.lines) + 1, msg: "unexpected end of JSON input"}
	}
	return err
}

func (c *jsonConv) value(depth int) (*node, error) {
	tok, err := c.dec.Token()
	if err != nil {
		return nil, c.syntax(err)
	}
	return c.from(tok, depth)
}

func (c *jsonConv) from(tok json.Token, depth int) (*node, error) {
	line := c.lineAt(c.dec.InputOffset())
	if depth > maxDepth {
		return nil, &lineError{line: line, msg: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: nNull, line: line}, nil
	case bool:
		return &node{kind: nScalar, line: line, val: t}, nil
	case string:
		return &node{kind: nScalar, line: line, val: t, quote: true}, nil
	case json.Number:
		v, err := numberValue(string(t))
		if err != nil {
			return nil, &lineError{line: line, msg: err.Error()}
		}
		return &node{kind: nScalar, line: line, val: v}, nil
	case json.Delim:
		switch t {
		case '{':
			n := &node{kind: nMap, line: line}
			for c.dec.More() {
				kt, err := c.dec.Token()
				if err != nil {
					return nil, c.syntax(err)
				}
				ks, ok := kt.(string)
				if !ok {
					return nil, &lineError{line: c.lineAt(c.dec.InputOffset()), msg: "object key is not a string"}
				}
				k := &node{kind: nScalar, line: c.lineAt(c.dec.InputOffset()), val: ks, quote: true}
				v, err := c.value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k)
				n.vals = append(n.vals, v)
			}
			if _, err := c.dec.Token(); err != nil {
				return nil, c.syntax(err)
			}
			return n, nil
		case '[':
			n := &node{kind: nSeq, line: line}
			for c.dec.More() {
				v, err := c.value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, v)
			}
			if _, err := c.dec.Token(); err != nil {
				return nil, c.syntax(err)
			}
			return n, nil
		}
	}
	return nil, &lineError{line: line, msg: fmt.Sprintf("unexpected %v", tok)}
}

// numberValue turns a JSON number into int64, uint64 or float64, the same
// types the YAML side produces.
func numberValue(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return u, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, fmt.Errorf("number %s out of range", s)
	}
	return f, nil
}

// --- helpers on the tree ---

// text returns a scalar's value as a string (for keys).
func (n *node) text() string {
	if s, ok := n.val.(string); ok {
		return s
	}
	return n.describe()
}

func (n *node) lookup(key string) *node {
	for i, k := range n.keys {
		if k.kind == nScalar && k.text() == key {
			return n.vals[i]
		}
	}
	return nil
}

// looksJSON reports whether data should be read as JSON when the file name
// does not tell.
func looksJSON(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n\ufeff")
	return len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(data) && utf8.Valid(data)
}
