package cluster

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/hetflow/hetflow/cluster/proto"
)

// taskTable is a run status's task table as Client.Status reads it. A
// 100K-task table is 7.7 MB of JSON, and encoding/json took a third of a
// second of a coordinator dev run's CPU to read it (reflection and an
// allocation a field); the table the coordinator writes, an array of flat
// objects of strings and unsigned integers, is read here by hand, into
// exactly what encoding/json gives. Anything else (another key, a null, a
// number with a fraction, bad JSON) is left to encoding/json, whole.
type taskTable []proto.TaskStatus

// UnmarshalJSON implements json.Unmarshaler.
func (t *taskTable) UnmarshalJSON(b []byte) error {
	if out, ok := scanTasks(b); ok {
		*t = out
		return nil
	}
	return json.Unmarshal(b, (*[]proto.TaskStatus)(t))
}

// tableScan reads one task table.
type tableScan struct {
	b []byte
	i int
	// the keys, node ids and states (few distinct ones), each allocated once
	interned map[string]string
}

// scanTasks reads b, a JSON array of task objects, as encoding/json would
// into []proto.TaskStatus; ok is false for anything it leaves to it.
func scanTasks(b []byte) (out []proto.TaskStatus, ok bool) {
	s := &tableScan{b: b, interned: map[string]string{}}
	s.space()
	out, ok = s.table(len(b))
	return out, ok && s.end()
}

// table reads one task table at s.i, of at most room tasks (its make's
// size; a task is an object, and nothing else in a table read by hand
// is one, so bytes.Count of '{' over what is left is room enough).
func (s *tableScan) table(room int) (out []proto.TaskStatus, ok bool) {
	if !s.eat('[') {
		return nil, false
	}
	// [] is an empty table, not nil, as encoding/json has it
	out = make([]proto.TaskStatus, 0, min(room, bytes.Count(s.b[s.i:], []byte{'{'})))
	s.space()
	if s.eat(']') {
		return out, true
	}
	for {
		t, ok := s.task()
		if !ok {
			return nil, false
		}
		out = append(out, t)
		s.space()
		if s.eat(']') {
			return out, true
		}
		if !s.eat(',') {
			return nil, false
		}
		s.space()
	}
}

// readStatus reads a run's full status (GET /v1/runs/{id}) into exactly
// what encoding/json gives. A 100K-task status is 7.7 MB of JSON, nearly
// all of it the task table: json.Unmarshal scanned it twice before it
// reached taskTable's UnmarshalJSON (checkValid over the whole, then the
// skip that finds the table's end), which cost as much as reading it. The
// object's members are walked here; the table is read by hand (scanTasks'
// reader, which checks its own bytes), and everything else, the table
// replaced by null, by encoding/json, which checks the rest. A status of
// any other shape (no table, two, a key encoding/json would take for
// "tasks" without being it, bad JSON) is read by encoding/json whole.
func readStatus(data []byte) (proto.RunStatus, error) {
	if st, ok := splitStatus(data); ok {
		return st, nil
	}
	var st struct {
		proto.RunStatus
		Tasks taskTable `json:"tasks,omitempty"` // read by hand (taskTable)
	}
	err := json.Unmarshal(data, &st)
	st.RunStatus.Tasks = st.Tasks
	return st.RunStatus, err
}

// splitStatus is readStatus's own reading; ok is false for what it
// leaves to encoding/json.
func splitStatus(data []byte) (st proto.RunStatus, ok bool) {
	s := &tableScan{b: data, interned: map[string]string{}}
	s.space()
	if !s.eat('{') {
		return st, false
	}
	var tasks []proto.TaskStatus
	from, to := -1, -1 // the table's bytes
	s.space()
	for !s.eat('}') {
		key, ok := s.str(false)
		if !ok {
			return st, false
		}
		s.space()
		if !s.eat(':') {
			return st, false
		}
		s.space()
		switch {
		case key == "tasks":
			if from >= 0 { // encoding/json takes the last; leave it that
				return st, false
			}
			from = s.i
			if tasks, ok = s.table(len(data)); !ok {
				return st, false
			}
			to = s.i
		case !asciiKey(key) || strings.EqualFold(key, "tasks"):
			return st, false // encoding/json may match it to the table's field
		default:
			if !s.skip(0) {
				return st, false
			}
		}
		s.space()
		if s.eat(',') {
			s.space()
			if s.i < len(s.b) && s.b[s.i] == '}' {
				return st, false // a trailing comma: bad JSON, left to encoding/json's error
			}
		} else if s.i >= len(s.b) || s.b[s.i] != '}' {
			return st, false
		}
	}
	if from < 0 || !s.end() {
		return st, false
	}
	rest := make([]byte, 0, len(data)-(to-from)+len("null"))
	rest = append(append(append(rest, data[:from]...), "null"...), data[to:]...)
	if json.Unmarshal(rest, &st) != nil {
		return st, false
	}
	st.Tasks = tasks
	return st, true
}

func asciiKey(k string) bool {
	for i := 0; i < len(k); i++ {
		if k[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// maxSkipDepth bounds skip's nesting, as encoding/json bounds its own.
const maxSkipDepth = 10000

// skip passes over one JSON value other than the task table, finding its
// end without checking it: encoding/json checks it with the rest. Strings
// are read as str reads them, so a bracket or quote inside one is not
// taken for structure.
func (s *tableScan) skip(depth int) bool {
	if depth > maxSkipDepth || s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		_, ok := s.str(false)
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

func (s *tableScan) task() (t proto.TaskStatus, ok bool) {
	if !s.eat('{') {
		return t, false
	}
	s.space()
	if s.eat('}') {
		return t, true
	}
	for {
		key, ok := s.str(true)
		if !ok {
			return t, false
		}
		s.space()
		if !s.eat(':') {
			return t, false
		}
		s.space()
		switch key {
		case "name":
			t.Name, ok = s.str(false)
		case "node":
			t.Node, ok = s.str(true)
		case "state":
			t.State, ok = s.str(true)
		case "output":
			t.Output, ok = s.str(false)
		case "activations":
			t.Activations, ok = s.uint()
		case "executions":
			t.Executions, ok = s.uint()
		default: // encoding/json matches keys without case, among others
			return t, false
		}
		if !ok {
			return t, false
		}
		s.space()
		if s.eat('}') {
			return t, true
		}
		if !s.eat(',') {
			return t, false
		}
		s.space()
	}
}

func (s *tableScan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *tableScan) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether nothing but white space is left.
func (s *tableScan) end() bool {
	s.space()
	return s.i == len(s.b)
}

// str reads a string: as it is when it holds no escape and is valid
// UTF-8 (encoding/json copies such a string as is), else through
// encoding/json. intern keeps one copy of each distinct value.
func (s *tableScan) str(intern bool) (string, bool) {
	if !s.eat('"') {
		return "", false
	}
	start, plain := s.i, true
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			if !plain {
				var v string
				if err := json.Unmarshal(s.b[start-1:s.i], &v); err != nil {
					return "", false
				}
				return v, true
			}
			if intern {
				if v, ok := s.interned[string(raw)]; ok {
					return v, true
				}
				v := string(raw)
				s.interned[v] = v
				return v, true
			}
			return string(raw), true
		case c == '\\':
			plain = false
			s.i++ // the escaped byte is not the string's end
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n == 1 {
				plain = false // encoding/json puts U+FFFD in its place
			}
			s.i += n - 1
		}
	}
	return "", false
}

// uint reads an unsigned integer that fits a uint64, as JSON writes one.
func (s *tableScan) uint() (uint64, bool) {
	start := s.i
	var v uint64
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		d := uint64(s.b[s.i] - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
		s.i++
	}
	switch n := s.i - start; {
	case n == 0, n > 1 && s.b[start] == '0':
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return v, true
}
