package spec

import (
	"encoding/json"
)

// scanJSON is the fast path of treeFromJSON: a single pass over data that
// builds the same tree, with the same lines, as the token-by-token
// json.Decoder path does, for well-formed input. It gives up (ok false) at
// anything unusual — a syntax error, nesting past maxDepth, a number outside
// JSON's grammar, data after the value — and leaves the message to the
// Decoder path, so errors read the same whichever path ran. Strings with an
// escape or a byte outside ASCII are unquoted by encoding/json itself.
//
// Every node that receives a run's flow parses its canonical JSON, and the
// Decoder's Token API allocates for every token: on a 2000-task flow that
// was most of a node's time to start a run.
func scanJSON(data []byte) (n *node, ok bool) {
	s := &jsonScan{data: data, line: 1}
	n, ok = s.value(0)
	if !ok {
		return nil, false
	}
	s.space()
	return n, s.at == len(data)
}

type jsonScan struct {
	data []byte
	at   int
	line int // line of data[at]
	slab []node
}

// node returns a new node, from a slab allocated a chunk at a time: a flow
// file is thousands of small nodes, all alive as long as the tree.
func (s *jsonScan) node(n node) *node {
	if len(s.slab) == cap(s.slab) {
		s.slab = make([]node, 0, 256)
	}
	s.slab = append(s.slab, n)
	return &s.slab[len(s.slab)-1]
}

func (s *jsonScan) space() {
	for s.at < len(s.data) {
		switch s.data[s.at] {
		case '\n':
			s.line++
		case ' ', '\t', '\r':
		default:
			return
		}
		s.at++
	}
}

func (s *jsonScan) value(depth int) (*node, bool) {
	s.space()
	if s.at >= len(s.data) || depth > maxDepth {
		return nil, false
	}
	line := s.line
	switch c := s.data[s.at]; {
	case c == '{':
		n := s.open(nMap, line)
		if s.closes('}') {
			return n, true
		}
		for {
			s.space()
			if s.at >= len(s.data) || s.data[s.at] != '"' {
				return nil, false
			}
			kline := s.line
			k, ok := s.str()
			if !ok {
				return nil, false
			}
			s.space()
			if s.at >= len(s.data) || s.data[s.at] != ':' {
				return nil, false
			}
			s.at++
			v, ok := s.value(depth + 1)
			if !ok {
				return nil, false
			}
			n.keys = append(n.keys, s.node(node{kind: nScalar, line: kline, val: k, quote: true}))
			n.vals = append(n.vals, v)
			if more, ok := s.next('}'); !more {
				return n, ok
			}
		}
	case c == '[':
		n := s.open(nSeq, line)
		if s.closes(']') {
			return n, true
		}
		for {
			v, ok := s.value(depth + 1)
			if !ok {
				return nil, false
			}
			n.items = append(n.items, v)
			if more, ok := s.next(']'); !more {
				return n, ok
			}
		}
	case c == '"':
		v, ok := s.str()
		if !ok {
			return nil, false
		}
		return s.node(node{kind: nScalar, line: line, val: v, quote: true}), true
	case c == '-' || c >= '0' && c <= '9':
		num, ok := s.number()
		if !ok {
			return nil, false
		}
		v, err := numberValue(num)
		if err != nil {
			return nil, false
		}
		return s.node(node{kind: nScalar, line: line, val: v}), true
	case s.word("true"):
		return s.node(node{kind: nScalar, line: line, val: true}), true
	case s.word("false"):
		return s.node(node{kind: nScalar, line: line, val: false}), true
	case s.word("null"):
		return s.node(node{kind: nNull, line: line}), true
	}
	return nil, false
}

// open starts a map or list at its opening delimiter.
func (s *jsonScan) open(kind nodeKind, line int) *node {
	s.at++
	return s.node(node{kind: kind, line: line})
}

// closes reads closing, after blanks, when it comes next: an empty map or
// list.
func (s *jsonScan) closes(closing byte) bool {
	s.space()
	if s.at < len(s.data) && s.data[s.at] == closing {
		s.at++
		return true
	}
	return false
}

// next reads the separator after a member or item: more after a ',' (another
// follows); !more, ok after the closing delimiter; !ok at anything else.
func (s *jsonScan) next(closing byte) (more, ok bool) {
	s.space()
	if s.at < len(s.data) {
		switch s.data[s.at] {
		case ',':
			s.at++
			return true, true
		case closing:
			s.at++
			return false, true
		}
	}
	return false, false
}

func (s *jsonScan) word(w string) bool {
	if len(s.data)-s.at >= len(w) && string(s.data[s.at:s.at+len(w)]) == w {
		s.at += len(w)
		return true
	}
	return false
}

// str reads a string at s.at (its opening quote).
func (s *jsonScan) str() (string, bool) {
	start := s.at
	plain := true
	i := start + 1
	for ; i < len(s.data); i++ {
		c := s.data[i]
		if c == '"' {
			break
		}
		if c == '\\' {
			plain = false
			i++ // the escaped byte cannot end the string
			continue
		}
		if c < 0x20 || c >= 0x80 {
			plain = false
		}
	}
	if i >= len(s.data) {
		return "", false
	}
	s.at = i + 1
	if plain {
		return string(s.data[start+1 : i]), true
	}
	var v string
	if err := json.Unmarshal(s.data[start:i+1], &v); err != nil {
		return "", false
	}
	return v, true
}

// number reads a number in JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScan) number() (string, bool) {
	d := s.data
	i := s.at
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return "", false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return "", false
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return "", false
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	num := string(d[s.at:i])
	s.at = i
	return num, true
}
