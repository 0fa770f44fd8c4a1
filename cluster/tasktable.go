package cluster

import (
	"bytes"
	"encoding/json"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/jsonscan"
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

// tableScan reads one task table (internal/jsonscan walks its bytes).
type tableScan struct {
	jsonscan.Scanner
	// the node ids and states (few distinct ones), each allocated once
	interned map[string]string
}

// scanTasks reads b, a JSON array of task objects, as encoding/json would
// into []proto.TaskStatus; ok is false for anything it leaves to it.
func scanTasks(b []byte) (out []proto.TaskStatus, ok bool) {
	s := &tableScan{Scanner: jsonscan.Scanner{B: b}, interned: map[string]string{}}
	s.Space()
	out, ok = s.table(len(b))
	return out, ok && s.End()
}

// table reads one task table at s.i, of at most room tasks (its make's
// size; a task is an object, and nothing else in a table read by hand
// is one, so bytes.Count of '{' over what is left is room enough).
func (s *tableScan) table(room int) (out []proto.TaskStatus, ok bool) {
	if !s.Eat('[') {
		return nil, false
	}
	// [] is an empty table, not nil, as encoding/json has it
	out = make([]proto.TaskStatus, 0, min(room, bytes.Count(s.B[s.I:], []byte{'{'})))
	s.Space()
	if s.Eat(']') {
		return out, true
	}
	for {
		t, ok := s.task()
		if !ok {
			return nil, false
		}
		out = append(out, t)
		s.Space()
		if s.Eat(']') {
			return out, true
		}
		if !s.Eat(',') {
			return nil, false
		}
		s.Space()
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
	var tasks []proto.TaskStatus
	rest, ok := jsonscan.CutMember(data, "tasks", "null", func(js *jsonscan.Scanner) bool {
		s := &tableScan{Scanner: *js, interned: map[string]string{}}
		t, read := s.table(len(data))
		tasks, js.I = t, s.I
		return read
	})
	if !ok || json.Unmarshal(rest, &st) != nil {
		return st, false
	}
	st.Tasks = tasks
	return st, true
}

// task reads one task; a key written otherwise than in plain ASCII is
// left to encoding/json with the rest.
func (s *tableScan) task() (t proto.TaskStatus, ok bool) {
	ok = s.Object(func(key []byte, k jsonscan.Kind) (ok bool) {
		if k != jsonscan.ASCII {
			return false
		}
		switch string(key) {
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
		}
		return ok // false for another key: encoding/json matches keys without case, among others
	})
	return t, ok
}

// str reads a string: as it is when encoding/json would copy it as is
// (no escape, valid UTF-8), else through encoding/json. intern keeps one
// copy of each distinct value.
func (s *tableScan) str(intern bool) (string, bool) {
	from := s.I
	raw, k, ok := s.String()
	switch {
	case !ok:
		return "", false
	case k == jsonscan.Other:
		var v string
		if json.Unmarshal(s.B[from:s.I], &v) != nil {
			return "", false
		}
		return v, true
	case intern:
		if v, ok := s.interned[string(raw)]; ok {
			return v, true
		}
		v := string(raw)
		s.interned[v] = v
		return v, true
	}
	return string(raw), true
}

// uint reads an unsigned integer that fits a uint64, as JSON writes one.
func (s *tableScan) uint() (uint64, bool) {
	start := s.I
	var v uint64
	for s.I < len(s.B) && '0' <= s.B[s.I] && s.B[s.I] <= '9' {
		d := uint64(s.B[s.I] - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
		s.I++
	}
	switch n := s.I - start; {
	case n == 0, n > 1 && s.B[start] == '0':
		return 0, false
	}
	if s.I < len(s.B) {
		switch s.B[s.I] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return v, true
}
