package coord

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/hetflow/hetflow/cluster/proto"
)

// A submit's body is nearly all its flow file's text, one JSON string: 7 MB
// for the 100K-task layered DAG in JSON (its quotes escaped). encoding/json
// copied it into its Decoder's buffer, scanned it, unquoted it into a
// string, and handleSubmit copied that into the bytes Submit takes: some
// 30 MB allocated and four passes over it. splitSubmit reads the flow's
// string by hand, straight into those bytes, and leaves the rest of the
// body, the string replaced by "", to encoding/json as before (UseNumber,
// one value). Anything it does not read exactly as encoding/json reads it
// (an escape it leaves, a key encoding/json would fold to "flow", two of
// them, bad JSON) goes to readBody whole: the same answer and the same
// errors as before (TestSplitSubmitAsEncodingJSON, FuzzSplitSubmit).

// splitSubmit reads body, a submit's JSON; ok is false for what it leaves
// to encoding/json.
func splitSubmit(body []byte) (req proto.SubmitRequest, flow []byte, ok bool) {
	s := &bodyScan{b: body}
	s.space()
	if !s.eat('{') {
		return req, nil, false
	}
	from, to := -1, -1 // the flow string's bytes, quotes and all
	s.space()
	for !s.eat('}') {
		key, plain, ok := s.key()
		if !ok {
			return req, nil, false
		}
		s.space()
		if !s.eat(':') {
			return req, nil, false
		}
		s.space()
		switch {
		case plain && key == "flow":
			if from >= 0 { // encoding/json takes the last; leave it that
				return req, nil, false
			}
			from = s.i
			if flow, ok = s.text(); !ok {
				return req, nil, false
			}
			to = s.i
		case !plain || strings.EqualFold(key, "flow"):
			return req, nil, false // encoding/json may take it for the flow's field
		default:
			if !s.skip(0) {
				return req, nil, false
			}
		}
		s.space()
		if s.eat(',') {
			s.space()
			if s.i < len(s.b) && s.b[s.i] == '}' {
				return req, nil, false // a trailing comma: bad JSON, encoding/json's to report
			}
		} else if s.i >= len(s.b) || s.b[s.i] != '}' {
			return req, nil, false
		}
	}
	if from < 0 {
		return req, nil, false
	}
	s.space()
	if s.i != len(s.b) {
		return req, nil, false // a second value, or bad JSON after the first
	}
	rest := make([]byte, 0, len(body)-(to-from)+2)
	rest = append(append(append(rest, body[:from]...), `""`...), body[to:]...)
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.UseNumber() // as readBody
	if dec.Decode(&req) != nil || dec.More() {
		return req, nil, false
	}
	return req, flow, true
}

// bodyScan walks a JSON object's members without checking what it skips.
type bodyScan struct {
	b []byte
	i int
}

func (s *bodyScan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *bodyScan) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// key reads a member's name; plain: printable ASCII without escapes, the
// name as written (any other is one splitSubmit leaves to encoding/json).
func (s *bodyScan) key() (key string, plain, ok bool) {
	if !s.eat('"') {
		return "", false, false
	}
	start := s.i
	plain = true
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return string(s.b[start : s.i-1]), plain, true
		case c == '\\':
			plain = false
			s.i++ // the escaped byte is not the name's end
		case c < 0x20 || c >= utf8.RuneSelf:
			plain = false
		}
	}
	return "", false, false
}

// textPlain marks the bytes of a JSON string text copies as they are.
var textPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// text reads a JSON string at s.i into new bytes, as encoding/json
// unquotes it; ok is false for one it does not read here: a surrogate
// escape (encoding/json pairs them or puts U+FFFD), invalid UTF-8
// (U+FFFD), a control byte or a bad escape (an error), no end.
func (s *bodyScan) text() (out []byte, ok bool) {
	if !s.eat('"') {
		return nil, false
	}
	out = make([]byte, 0, len(s.b)-s.i) // no longer than what is left of the body
	for s.i < len(s.b) {
		j := s.i
		for j < len(s.b) && textPlain[s.b[j]] {
			j++
		}
		out = append(out, s.b[s.i:j]...)
		s.i = j
		if j == len(s.b) {
			break
		}
		switch c := s.b[j]; {
		case c == '"':
			s.i++
			return out, true
		case c == '\\':
			if j+1 >= len(s.b) {
				return nil, false
			}
			switch e := s.b[j+1]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(s.b[j+2:])
				if !ok || utf16.IsSurrogate(r) {
					return nil, false
				}
				out = utf8.AppendRune(out, r)
				s.i += 4
			default:
				return nil, false
			}
			s.i += 2
		case c < 0x20:
			return nil, false
		default: // c >= utf8.RuneSelf
			r, n := utf8.DecodeRune(s.b[j:])
			if r == utf8.RuneError && n == 1 {
				return nil, false
			}
			out = append(out, s.b[j:j+n]...)
			s.i += n
		}
	}
	return nil, false
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// maxSkipDepth bounds skip's nesting, as encoding/json bounds its own.
const maxSkipDepth = 10000

// skip passes over one JSON value, finding its end without checking it:
// encoding/json checks it with the rest. Strings are passed over escapes
// and all, so a bracket or a quote in one is not taken for structure.
func (s *bodyScan) skip(depth int) bool {
	if depth > maxSkipDepth || s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		_, _, ok := s.key()
		return ok
	case '{', '[':
		end := byte('}')
		if s.b[s.i] == '[' {
			end = ']'
		}
		s.i++
		for {
			s.space()
			if s.eat(end) {
				return true
			}
			if !s.skip(depth + 1) {
				return false
			}
			s.space()
			if s.eat(':') || s.eat(',') {
				continue
			}
			if s.i >= len(s.b) || s.b[s.i] != end {
				return false
			}
		}
	}
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ':', ' ', '\t', '\n', '\r', '"', '{', '[':
			return s.i > start
		}
		s.i++
	}
	return s.i > start
}
