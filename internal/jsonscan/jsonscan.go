package jsonscan

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner reads JSON text from B, at I.
type Scanner struct {
	B []byte // the text
	I int    // where the next read starts
}

// Space passes over white space.
func (s *Scanner) Space() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Eat reads c if it comes next.
func (s *Scanner) Eat(c byte) bool {
	if s.I < len(s.B) && s.B[s.I] == c {
		s.I++
		return true
	}
	return false
}

// End passes over white space and reports whether that was all there was.
func (s *Scanner) End() bool {
	s.Space()
	return s.I == len(s.B)
}

// Object reads the object at I, calling member for each key in order once
// the key, the colon and the white space after it are read. member reads
// the value at I (with Skip or a reader of its own) and reports whether
// it could. Object is false where no object starts at I, where its
// punctuation is wrong (a trailing comma included), at its first key that
// is no string, and where member is false; I is then somewhere inside it.
func (s *Scanner) Object(member func(key []byte, k Kind) bool) bool {
	if !s.Eat('{') {
		return false
	}
	s.Space()
	if s.Eat('}') {
		return true
	}
	for {
		key, k, ok := s.String()
		if !ok {
			return false
		}
		s.Space()
		if !s.Eat(':') {
			return false
		}
		s.Space()
		if !member(key, k) {
			return false
		}
		s.Space()
		if s.Eat('}') {
			return true
		}
		if !s.Eat(',') {
			return false
		}
		s.Space()
	}
}

// Kind says how a string is written between its quotes.
type Kind uint8

const (
	// ASCII: ASCII only, no control byte below 0x20 and no escape; the
	// bytes are the value, whoever reads it.
	ASCII Kind = iota
	// UTF8: some bytes outside ASCII, all of it valid UTF-8, no control
	// byte and no escape; the bytes are the value as encoding/json reads
	// it.
	UTF8
	// Other: an escape, a control byte or invalid UTF-8; only unquoting
	// says what the value is, or that there is none.
	Other
)

// plain marks the bytes that stand for themselves in a string: ASCII from
// 0x20 up, but the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// String reads the string at I and returns its bytes between the quotes,
// as written (a slice of B), and their Kind. It finds the string's end
// only: it is false where no string starts at I or none ends, not for a
// string of Kind Other that encoding/json would refuse.
func (s *Scanner) String() (raw []byte, k Kind, ok bool) {
	if !s.Eat('"') {
		return nil, Other, false
	}
	start := s.I
	for s.I < len(s.B) {
		for s.I < len(s.B) && plain[s.B[s.I]] {
			s.I++
		}
		if s.I == len(s.B) {
			break
		}
		switch c := s.B[s.I]; {
		case c == '"':
			s.I++
			return s.B[start : s.I-1], k, true
		case c == '\\':
			k = Other
			s.I += 2 // the escaped byte is not the string's end
		case c < 0x20:
			k = Other
			s.I++
		case k == Other: // no need to tell valid UTF-8 from invalid
			s.I++
		default: // c >= utf8.RuneSelf
			r, n := utf8.DecodeRune(s.B[s.I:])
			if r == utf8.RuneError && n == 1 {
				k = Other // encoding/json puts U+FFFD in its place
			} else {
				k = UTF8
			}
			s.I += n
		}
	}
	return nil, Other, false
}

// Text reads the string at I into new bytes, the value encoding/json
// unquotes from it. It is false for a string it does not read alike: a
// surrogate escape (encoding/json pairs them or puts U+FFFD), invalid
// UTF-8 (U+FFFD), a control byte or a bad escape (encoding/json's error),
// no end.
func (s *Scanner) Text() (out []byte, ok bool) {
	if !s.Eat('"') {
		return nil, false
	}
	out = make([]byte, 0, len(s.B)-s.I) // no longer than what is left
	for s.I < len(s.B) {
		j := s.I
		for j < len(s.B) && plain[s.B[j]] {
			j++
		}
		out = append(out, s.B[s.I:j]...)
		s.I = j
		if j == len(s.B) {
			break
		}
		switch c := s.B[j]; {
		case c == '"':
			s.I++
			return out, true
		case c == '\\':
			if j+1 >= len(s.B) {
				return nil, false
			}
			switch e := s.B[j+1]; e {
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
				r, ok := hex4(s.B[j+2:])
				if !ok || utf16.IsSurrogate(r) {
					return nil, false
				}
				out = utf8.AppendRune(out, r)
				s.I += 4
			default:
				return nil, false
			}
			s.I += 2
		case c < 0x20:
			return nil, false
		default: // c >= utf8.RuneSelf
			r, n := utf8.DecodeRune(s.B[j:])
			if r == utf8.RuneError && n == 1 {
				return nil, false
			}
			out = append(out, s.B[j:j+n]...)
			s.I += n
		}
	}
	return nil, false
}

// hex4 reads the four hex digits of a \u escape.
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

// MaxDepth bounds Skip's nesting, as encoding/json bounds its own: a value
// inside more arrays and objects than this is not skipped.
const MaxDepth = 10000

// Skip passes over the value at I, finding its end without checking it.
// Strings are passed over as String reads them, so a bracket or a quote in
// one is not taken for structure. It is false where no value starts at I,
// where an array or object has no end, or is nested past MaxDepth.
func (s *Scanner) Skip() bool { return s.skip(0) }

func (s *Scanner) skip(depth int) bool {
	if depth > MaxDepth || s.I >= len(s.B) {
		return false
	}
	switch s.B[s.I] {
	case '"':
		_, _, ok := s.String()
		return ok
	case '{', '[':
		end := byte('}')
		if s.B[s.I] == '[' {
			end = ']'
		}
		s.I++
		for {
			s.Space()
			if s.Eat(end) {
				return true
			}
			if !s.skip(depth + 1) {
				return false
			}
			s.Space()
			if s.Eat(':') || s.Eat(',') {
				continue
			}
			if s.I >= len(s.B) || s.B[s.I] != end {
				return false
			}
		}
	}
	start := s.I
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ',', '}', ']', ':', ' ', '\t', '\n', '\r', '"', '{', '[':
			return s.I > start
		}
		s.I++
	}
	return s.I > start
}

// CutMember reads the one object in data, white space around it allowed,
// for its member called name (ASCII): read reads that member's value at
// s.I and leaves s.I after it; the other members are skipped, unchecked.
// rest is data with the value's bytes replaced by stand, for encoding/json
// to read and check. ok is false where encoding/json might read the
// object otherwise: no object, wrong punctuation, no member name or two (it
// takes the last), a key not of Kind ASCII or one equal to name but for
// case (it may take either for name's field), read false, anything but
// white space after the object.
func CutMember(data []byte, name, stand string, read func(s *Scanner) bool) (rest []byte, ok bool) {
	s := Scanner{B: data}
	from, to := -1, -1 // the value's bytes
	s.Space()
	ok = s.Object(func(key []byte, k Kind) bool {
		switch {
		case k == ASCII && string(key) == name:
			if from >= 0 {
				return false
			}
			from = s.I
			if !read(&s) {
				return false
			}
			to = s.I
			return true
		case k != ASCII || bytes.EqualFold(key, []byte(name)):
			return false
		}
		return s.Skip()
	})
	if !ok || from < 0 || !s.End() {
		return nil, false
	}
	rest = make([]byte, 0, len(data)-(to-from)+len(stand))
	return append(append(append(rest, data[:from]...), stand...), data[to:]...), true
}
