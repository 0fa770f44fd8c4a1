package jsonscan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSpaceEatEnd(t *testing.T) {
	s := Scanner{B: []byte(" \t\r\n{ }x")}
	s.Space()
	if s.I != 4 || s.Eat('}') || !s.Eat('{') || s.End() {
		t.Fatalf("at %d: want '{' read after the white space, then more than white space", s.I)
	}
	if !s.Eat('}') || s.End() || s.I != 7 || !s.Eat('x') || !s.End() || s.Eat('x') {
		t.Fatalf("at %d: want '}' then 'x' then the end", s.I)
	}
	for _, b := range []string{"", " ", "\n\t \r"} {
		if s := (Scanner{B: []byte(b)}); !s.End() || s.I != len(b) {
			t.Fatalf("%q: not the end", b)
		}
	}
	if s := (Scanner{B: []byte(" \v")}); s.End() || s.I != 1 {
		t.Fatal(`"\v" taken for white space, which JSON's is not`)
	}
}

func TestString(t *testing.T) {
	for _, c := range []struct {
		in   string
		raw  string
		kind Kind
		ok   bool
		at   int // I after a string read
	}{
		{`""`, "", ASCII, true, 2},
		{`"abc" ,`, "abc", ASCII, true, 5},
		{`"a b~\u007f"`, `a b~\u007f`, Other, true, 12},
		{"\"a\x7f\"", "a\x7f", ASCII, true, 4},
		{`"a\"b"x`, `a\"b`, Other, true, 6},
		{`"a\\"b"`, `a\\`, Other, true, 5},
		{`"é日本"`, "é日本", UTF8, true, 10},
		{"\"\U0001F600\"", "\U0001F600", UTF8, true, 6},
		{"\"bad \xff\"", "bad \xff", Other, true, 7},
		{"\"\xe6\x97\"", "\xe6\x97", Other, true, 4},
		{"\"tab\t\"", "tab\t", Other, true, 6},
		{"\"é\x01\"", "é\x01", Other, true, 5},
		{`"[{,:}]"`, "[{,:}]", ASCII, true, 8},
		{`"no end`, "", Other, false, 0},
		{`"ends in \"`, "", Other, false, 0},
		{`"\`, "", Other, false, 0},
		{`abc`, "", Other, false, 0},
		{``, "", Other, false, 0},
	} {
		s := Scanner{B: []byte(c.in)}
		raw, kind, ok := s.String()
		if ok != c.ok || (ok && (string(raw) != c.raw || kind != c.kind || s.I != c.at)) {
			t.Errorf("%q: read %q %v %v, at %d; want %q %v %v, at %d", c.in, raw, kind, ok, s.I, c.raw, c.kind, c.ok, c.at)
		}
	}
}

func TestText(t *testing.T) {
	for _, c := range []struct {
		in  string
		out string
		ok  bool
	}{
		{`""`, "", true},
		{`"plain"`, "plain", true},
		{`"a\/b\\c\"d\b\f\n\r\t"`, "a/b\\c\"d\b\f\n\r\t", true},
		{`"\u00e9\u2028\u0000\u0041\uFFFF"`, "é\u2028\x00A\uffff", true},
		{`"日本 é"`, "日本 é", true},
		{`"\ud83d\ude00"`, "", false}, // a pair: encoding/json joins it
		{`"\ud83d"`, "", false},       // alone: U+FFFD
		{"\"bad \xff\"", "", false},   // U+FFFD
		{`"\u12"`, "", false},
		{`"\u12g4"`, "", false},
		{`"\x"`, "", false},
		{"\"ctl \x01\"", "", false},
		{`"no end`, "", false},
		{`"\`, "", false},
		{`x`, "", false},
	} {
		s := Scanner{B: []byte(c.in)}
		out, ok := s.Text()
		if ok != c.ok || string(out) != c.out || (ok && s.I != len(c.in)) {
			t.Errorf("%q: read %q %v, at %d; want %q %v", c.in, out, ok, s.I, c.out, c.ok)
		}
	}
}

func TestSkip(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
		at int // I after a value skipped
	}{
		{`1`, true, 1},
		{`-1.5e3,`, true, 6},
		{`true]`, true, 4},
		{`null }`, true, 4},
		{`"a]\"}" ,`, true, 7},
		{`[]`, true, 2},
		{`{}`, true, 2},
		{`[ 1 , "]" , { "a" : [ ] } ] x`, true, 27},
		{`{"a":{"b":[1,{"c":"}"}]}}`, true, 25},
		{`[1 2]`, false, 0},
		{`[1,2`, false, 0},
		{`{"a":1`, false, 0},
		{`"no end`, false, 0},
		{`[1}`, false, 0},
		{``, false, 0},
		{`,`, false, 0},
		{`]`, false, 0},
		// unchecked: what encoding/json refuses and Skip passes over
		{`01x,`, true, 3},
		{`{1:2:3}`, true, 7},
		{`{1:2,,}`, false, 0},
		{"\"ctl \x01\"", true, 7},
	} {
		s := Scanner{B: []byte(c.in)}
		ok := s.Skip()
		if ok != c.ok || (ok && s.I != c.at) {
			t.Errorf("%q: skipped %v to %d; want %v to %d", c.in, ok, s.I, c.ok, c.at)
		}
	}
	// MaxDepth: a value inside MaxDepth arrays is skipped, one inside one
	// more is not.
	for _, c := range []struct {
		depth int
		ok    bool
	}{{MaxDepth, true}, {MaxDepth + 1, false}, {3 * MaxDepth, false}} {
		b := []byte(strings.Repeat("[", c.depth) + "1" + strings.Repeat("]", c.depth))
		if s := (Scanner{B: b}); s.Skip() != c.ok {
			t.Errorf("1 inside %d arrays: skipped %v, want %v", c.depth, !c.ok, c.ok)
		}
	}
}

func TestObject(t *testing.T) {
	type member struct {
		Key  string
		Kind Kind
	}
	for _, c := range []struct {
		in      string
		members []member
		ok      bool
	}{
		{`{}`, nil, true},
		{` { } `[1:], nil, true},
		{`{"a":1}`, []member{{"a", ASCII}}, true},
		{"{ \"a\" :\n1 , \"é\":[2], \"\\u0062\" : {\"c\":3} }", []member{{"a", ASCII}, {"é", UTF8}, {`\u0062`, Other}}, true},
		{`{"a":1,}`, []member{{"a", ASCII}}, false},
		{`{"a":1 "b":2}`, []member{{"a", ASCII}}, false},
		{`{"a" 1}`, nil, false},
		{`{a:1}`, nil, false},
		{`{,}`, nil, false},
		{`{"a":1`, []member{{"a", ASCII}}, false},
		{`[]`, nil, false},
		{`{"a":1,"stop":2,"b":3}`, []member{{"a", ASCII}, {"stop", ASCII}}, false},
	} {
		s := Scanner{B: []byte(c.in)}
		var got []member
		ok := s.Object(func(key []byte, k Kind) bool {
			got = append(got, member{string(key), k})
			return string(key) != "stop" && s.Skip()
		})
		if ok != c.ok || !reflect.DeepEqual(got, c.members) {
			t.Errorf("%q: walked %v over %+v; want %v over %+v", c.in, ok, got, c.ok, c.members)
		}
	}
}

func TestCutMember(t *testing.T) {
	for _, c := range []struct {
		in   string
		rest string // "" where CutMember is false
	}{
		{`{"x":"v"}`, `{"x":null}`},
		{` {"a":[1,"x"], "x" : {"y":[]} ,"b":{"x":2}} ` + "\n", ` {"a":[1,"x"], "x" : null ,"b":{"x":2}} ` + "\n"},
		{`{"x":1,"x":2}`, ""},
		{`{"X":1,"x":2}`, ""},
		{`{"x":1,"X":2}`, ""},
		{`{"\u0078":1}`, ""},
		{`{"a":1,"\u0078":1}`, ""},
		{"{\"x\":1,\"\u00e9\":2}", ""},
		{`{"a":1}`, ""},
		{`{}`, ""},
		{`{"x":1,}`, ""},
		{`{"x":1} {}`, ""},
		{`{"x":1} x`, ""},
		{`[{"x":1}]`, ""},
		{`{"x":1`, ""},
		{`{"x":nope}`, ""}, // read refuses it
	} {
		var val string
		rest, ok := CutMember([]byte(c.in), "x", "null", func(s *Scanner) bool {
			from := s.I
			if !s.Skip() || string(s.B[from:s.I]) == "nope" {
				return false
			}
			val = string(s.B[from:s.I])
			return true
		})
		if ok != (c.rest != "") || string(rest) != c.rest {
			t.Errorf("%q: cut %v to %q (value %q); want %q", c.in, ok, rest, val, c.rest)
		}
	}
}

// scanCases seed FuzzScan: JSON good and bad, strings of every kind.
var scanCases = []string{
	`{"x":"v","a":[1,{"b":"]"}],"c":null}`,
	`{"x":{"y":"\u00e9\n"},"X":1}`,
	`{"a":"x","x":[true,false,-0.5e-3]}`,
	`"a\"b\\c\/\b\f\n\r\t\u0041\ud83d\ude00\ud83d"`,
	"\"é日本 \xff \x01\"",
	`"\u12"`,
	`"\udC00 \uDbff"`,
	`[1,2,,]`,
	`{"x":1,}`,
	` [ ] `,
	`{"x":01}`,
	"null", // encoding/json takes it into a string as "leave it be"
	"",
}

// FuzzScan holds String, Text, Skip and CutMember to encoding/json:
// what they read well formed JSON as, and never more than it allows where
// they say they read alike.
func FuzzScan(f *testing.F) {
	for _, c := range scanCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkString(t, b)
		checkText(t, b)
		checkSkip(t, b)
		checkCut(t, b)
	})
}

// TestScanCases runs FuzzScan's checks over its seeds and over values
// encoding/json writes, so a plain test run checks them too.
func TestScanCases(t *testing.T) {
	cases := append([]string(nil), scanCases...)
	for _, v := range []any{
		map[string]any{"x": "a<&>\u2028\x00é", "n": 1.5, "l": []any{nil, true, "]"}},
		"\U0001F600 \t\"\\",
		[]any{map[string]any{}, []any{}, ""},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, string(b))
	}
	for _, c := range cases {
		checkString(t, []byte(c))
		checkText(t, []byte(c))
		checkSkip(t, []byte(c))
		checkCut(t, []byte(c))
	}
}

// checkString: a string encoding/json reads is read to its end; its raw
// bytes are its value where its Kind says so, and ASCII only where it is.
func checkString(t *testing.T, b []byte) {
	t.Helper()
	want, werr := jsonString(b)
	s := Scanner{B: b}
	s.Space()
	raw, k, ok := s.String()
	if werr == nil && (!ok || !s.End()) {
		t.Fatalf("%q: a string to encoding/json, not read to its end (%v, at %d)", b, ok, s.I)
	}
	if !ok {
		return
	}
	if k != Other && werr == nil && string(raw) != want {
		t.Fatalf("%q: kind %v with bytes %q; encoding/json reads %q", b, k, raw, want)
	}
	for _, c := range raw {
		if k == ASCII && (c < 0x20 || c >= utf8.RuneSelf || c == '\\') {
			t.Fatalf("%q: kind ASCII with byte %#x", b, c)
		}
	}
	if k == UTF8 && (!utf8.Valid(raw) || bytes.IndexByte(raw, '\\') >= 0) {
		t.Fatalf("%q: kind UTF8, bytes %q", b, raw)
	}
}

// checkText: Text reads a string as encoding/json does, or not at all;
// and it reads every string without a surrogate escape or invalid UTF-8
// that encoding/json reads.
func checkText(t *testing.T, b []byte) {
	t.Helper()
	s := Scanner{B: b}
	s.Space()
	from := s.I
	out, ok := s.Text()
	if ok {
		want, err := jsonString(b[from:s.I])
		if err != nil || string(out) != want {
			t.Fatalf("%q: read as %q; encoding/json reads %q (%v)", b, out, want, err)
		}
		return
	}
	if want, err := jsonString(b); err == nil && utf8.Valid(b) && !hasSurrogateEscape(b) {
		t.Fatalf("%q: not read; encoding/json reads %q", b, want)
	}
}

// jsonString is what encoding/json reads b as, where b is one JSON
// string; an error where it is anything else. (Unmarshal into a string
// takes null as "leave it be", so it is read into an interface here.)
func jsonString(b []byte) (string, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("a JSON %T, not a string", v)
	}
	return s, nil
}

func hasSurrogateEscape(b []byte) bool {
	for i := 0; i+5 < len(b); i++ {
		if b[i] == '\\' {
			if b[i+1] == 'u' && (b[i+2] == 'd' || b[i+2] == 'D') && bytes.IndexByte([]byte("89abcdefABCDEF"), b[i+3]) >= 0 {
				return true
			}
			i++ // the escaped byte
		}
	}
	return false
}

// checkSkip: valid JSON is skipped to its end, alone and as an item and a
// member's value.
func checkSkip(t *testing.T, b []byte) {
	t.Helper()
	if !json.Valid(b) {
		return
	}
	for _, d := range [][]byte{b, append(append([]byte(`[`), b...), `,0]`...), append(append([]byte(`{"k":`), b...), `}`...)} {
		s := Scanner{B: d}
		s.Space()
		if !s.Skip() || !s.End() {
			t.Fatalf("%q: valid JSON, not skipped to its end (at %d)", d, s.I)
		}
	}
}

// checkCut: where CutMember reads b, encoding/json reads b as one object
// whose "x" is what read was given, and rest as the same object with
// "x" null; and CutMember reads every valid object with one "x", no other
// key equal to it but for case, and keys all of Kind ASCII.
func checkCut(t *testing.T, b []byte) {
	t.Helper()
	var val []byte
	rest, ok := CutMember(b, "x", "null", func(s *Scanner) bool {
		from := s.I
		if !s.Skip() {
			return false
		}
		val = s.B[from:s.I]
		return true
	})
	var m map[string]json.RawMessage
	werr := json.Unmarshal(b, &m)
	if !ok {
		if werr == nil && m != nil && cutAlike(t, b) {
			t.Fatalf("%q: not cut; encoding/json reads %q", b, m)
		}
		return
	}
	if werr != nil {
		if json.Valid(rest) && json.Valid(val) {
			t.Fatalf("%q: cut; encoding/json refuses it (%v) but takes rest %q and value %q", b, werr, rest, val)
		}
		return // encoding/json, reading rest, refuses it too
	}
	var mr map[string]json.RawMessage
	if err := json.Unmarshal(rest, &mr); err != nil {
		t.Fatalf("%q: rest %q refused (%v)", b, rest, err)
	}
	if !bytes.Equal(m["x"], val) || string(mr["x"]) != "null" || len(m) != len(mr) {
		t.Fatalf("%q: cut value %q, rest %q; encoding/json reads %q", b, val, rest, m)
	}
	for k, v := range m {
		if k != "x" && !bytes.Equal(mr[k], v) {
			t.Fatalf("%q: rest %q has %q for %q; encoding/json reads %q", b, rest, mr[k], k, v)
		}
	}
}

// cutAlike says whether b, an object encoding/json reads, is one
// CutMember must read: "x" once, no other key "X", every key ASCII
// without an escape (the keys as written, by Object: on valid JSON it
// must walk the whole object).
func cutAlike(t *testing.T, b []byte) bool {
	t.Helper()
	s := Scanner{B: b}
	s.Space()
	alike, xs := true, 0
	if !s.Object(func(key []byte, k Kind) bool {
		alike = alike && k == ASCII && (string(key) == "x" || !bytes.EqualFold(key, []byte("x")))
		if string(key) == "x" {
			xs++
		}
		return s.Skip()
	}) || !s.End() {
		t.Fatalf("%q: an object to encoding/json, not walked", b)
	}
	return alike && xs == 1
}
