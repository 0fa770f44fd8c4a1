package cluster

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/proto"
)

// tableCases are task tables in the coordinator's shape and around it:
// escapes, UTF-8 good and bad, keys encoding/json matches without case,
// nulls, numbers it refuses, duplicate keys, bad JSON.
var tableCases = []string{
	`[]`,
	` [ ] `,
	`[{"name":"a","node":"n1","state":"done","activations":1,"executions":1}]`,
	`[{"name":"a","state":"pending","activations":0,"executions":0},{"name":"m/b","node":"n2","state":"failed","activations":18446744073709551615,"executions":7,"output":"3620776f7264730a"}]`,
	"[\n  {\n    \"name\": \"x\",\n    \"state\": \"done\",\n    \"activations\": 2,\n    \"executions\": 2\n  }\n]\n",
	`[{}]`,
	`[{"name":"é\u00e9\n\"q\"\\","state":"done"}]`,
	"[{\"name\":\"bad \xff utf8\",\"state\":\"done\"}]",
	"[{\"name\":\"line\u2028sep 日本\",\"state\":\"done\"}]",
	`[{"Name":"a","STATE":"done"}]`,
	`[{"name":null,"state":"done"}]`,
	`[{"name":"a","activations":1.5}]`,
	`[{"name":"a","activations":1e3}]`,
	`[{"name":"a","activations":-1}]`,
	`[{"name":"a","activations":18446744073709551616}]`,
	`[{"name":"a","activations":01}]`,
	`[{"name":"a","name":"b"}]`,
	`[{"name":"a","extra":{"x":[1]}}]`,
	`[{"name":"a",}]`,
	`[{"name":"a"},]`,
	`[{"name":"a"}] x`,
	`[{"name":"a\x01"}]`,
	`[{"name":"a`,
	`null`,
	`{"name":"a"}`,
}

// scanTasks reads every table as encoding/json does, or leaves it to it:
// the same tasks, and an error exactly where encoding/json gives one.
func TestTaskTableAsEncodingJSON(t *testing.T) {
	fast := 0
	for _, c := range tableCases {
		checkTable(t, []byte(c))
		if _, ok := scanTasks([]byte(c)); ok {
			fast++
		}
	}
	if fast < 8 {
		t.Fatalf("only %d of the tables were read by hand", fast)
	}
	// A status as the coordinator writes it, read through Status's struct.
	st := proto.RunStatus{ID: "r1", Flow: "f", State: proto.RunSucceeded, Params: map[string]any{"n": 3.0},
		Tasks: []proto.TaskStatus{{Name: "a", Node: "n1", State: "done", Activations: 1, Executions: 1}, {Name: "b", State: "skipped"}}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		proto.RunStatus
		Tasks taskTable `json:"tasks,omitempty"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	got.RunStatus.Tasks = got.Tasks
	if !reflect.DeepEqual(got.RunStatus, st) {
		t.Fatalf("read back %+v, want %+v", got.RunStatus, st)
	}
	if !strings.Contains(string(b), `"tasks"`) {
		t.Fatal("no table in the status JSON")
	}
}

func checkTable(t *testing.T, b []byte) {
	t.Helper()
	var want []proto.TaskStatus
	werr := json.Unmarshal(b, &want)
	var got taskTable
	gerr := json.Unmarshal(b, &got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: error %v, encoding/json's %v", b, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual([]proto.TaskStatus(got), want) {
		t.Fatalf("%q: read %#v, encoding/json reads %#v", b, got, want)
	}
	// Read by hand only what encoding/json reads, and alike.
	if fast, ok := scanTasks(b); ok && (werr != nil || !reflect.DeepEqual(fast, want)) {
		t.Fatalf("%q: read by hand as %#v; encoding/json reads %#v (%v)", b, fast, want, werr)
	}
}

func FuzzTaskTable(f *testing.F) {
	for _, c := range tableCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkTable(t, b) })
}

// BenchmarkStatusTable100K: a 100K-task status as the client reads it
// (json-B/op: its size), by hand and by encoding/json.
func BenchmarkStatusTable100K(b *testing.B) {
	st := proto.RunStatus{ID: "r1", Flow: "layered", State: proto.RunSucceeded}
	for i := range 100_000 {
		st.Tasks = append(st.Tasks, proto.TaskStatus{Name: "L" + strconv.Itoa(i/1000) + "_" + strconv.Itoa(i%1000), Node: "n1", State: "done", Activations: 1, Executions: 1})
	}
	data, err := json.Marshal(st)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("by-hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got struct {
				proto.RunStatus
				Tasks taskTable `json:"tasks,omitempty"`
			}
			if err := json.Unmarshal(data, &got); err != nil || len(got.Tasks) != 100_000 {
				b.Fatal(err)
			}
		}
	})
	b.Run("status", func(b *testing.B) { // what Client.Status does: readStatus
		b.ReportAllocs()
		for b.Loop() {
			if got, err := readStatus(data); err != nil || len(got.Tasks) != 100_000 {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got proto.RunStatus
			if err := json.Unmarshal(data, &got); err != nil || len(got.Tasks) != 100_000 {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(len(data)), "json-B/op")
}

// statusCases are full statuses in the coordinator's shape and around it:
// the table first, last or alone, strings with brackets and escapes,
// nested params, keys encoding/json takes for "tasks", two tables, bad
// JSON in and around the table.
var statusCases = []string{
	`{"id":"r1","flow":"f","state":"succeeded","tasks":[{"name":"a","node":"n1","state":"done","activations":1,"executions":1}]}`,
	`{"tasks":[],"id":"r1"}`,
	`{"tasks":[{"name":"a","state":"done"}]}`,
	` { "id" : "r\"}]1" , "params" : {"n":3,"s":"x]}{","l":[1,[2,{"a":null}],true,false,-1.5e3]} , "tasks" : [ {"name":"a"} ] } `,
	`{"id":"r1","error":"a \u00e9 \\ \"q\"","tasks":[{"name":"é\u00e9"}],"state":"failed"}`,
	`{"id":"r1","Tasks":[{"name":"a"}]}`,
	`{"id":"r1","TASKS":[{"name":"a"}],"tasks":[{"name":"b"}]}`,
	`{"id":"r1","ta\u0073ks":[{"name":"a"}]}`,
	"{\"id\":\"r1\",\"ta\u017fks\":[{\"name\":\"a\"}]}",
	`{"id":"r1","tasks":[{"name":"a"}],"tasks":[{"name":"b"}]}`,
	`{"id":"r1","tasks":null}`,
	`{"id":"r1","tasks":[{"name":"a","extra":1}]}`,
	`{"id":"r1","tasks":[{"name":"a"}],}`,
	`{"id":"r1",,"tasks":[]}`,
	`{"id":"r1" "tasks":[]}`,
	`{"id":"r1","tasks":[]`,
	`{"id":"r1","tasks":[]} x`,
	`{"id":"r1","tasks":[{"name":"a"}]}{}`,
	`{"id":1,"tasks":[]}`,
	`{"id":"r1","params":{"n":01},"tasks":[]}`,
	`{"id":"r1","params":{"n":[1,2},"tasks":[]}`,
	`{"id":"r1","params":{"n":tru},"tasks":[]}`,
	`{"id":"r1","state":"x\u","tasks":[]}`,
	`{"id":"r1"}`,
	`{}`,
	`[]`,
	`null`,
	``,
}

// readStatus reads every status as encoding/json reads it through
// Status's struct, or leaves it to it: the same status, and an error
// exactly where encoding/json gives one.
func TestReadStatusAsEncodingJSON(t *testing.T) {
	split := 0
	for _, c := range statusCases {
		checkStatus(t, []byte(c))
		if _, ok := splitStatus([]byte(c)); ok {
			split++
		}
	}
	if split < 5 {
		t.Fatalf("only %d of the statuses were split", split)
	}
	// The coordinator's own shape (json.Marshal of a RunStatus) is split.
	st := proto.RunStatus{ID: "r1", Flow: "f", State: proto.RunFailed, Error: "x}]\"", Params: map[string]any{"n": 3.0, "m": map[string]any{"a": []any{"b"}}},
		Tasks: []proto.TaskStatus{{Name: "a", Node: "n1", State: "done", Activations: 1, Executions: 1}, {Name: "b", State: "skipped", Output: "00"}}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	checkStatus(t, b)
	got, ok := splitStatus(b)
	if !ok || !reflect.DeepEqual(got, st) {
		t.Fatalf("the coordinator's status: split %v, read %+v, want %+v", ok, got, st)
	}
}

func checkStatus(t *testing.T, b []byte) {
	t.Helper()
	var want struct {
		proto.RunStatus
		Tasks taskTable `json:"tasks,omitempty"`
	}
	werr := json.Unmarshal(b, &want)
	want.RunStatus.Tasks = want.Tasks
	got, gerr := readStatus(b)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: error %v, encoding/json's %v", b, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(got, want.RunStatus) {
		t.Fatalf("%q: read %#v, encoding/json reads %#v", b, got, want.RunStatus)
	}
	if fast, ok := splitStatus(b); ok && (werr != nil || !reflect.DeepEqual(fast, want.RunStatus)) {
		t.Fatalf("%q: split as %#v; encoding/json reads %#v (%v)", b, fast, want.RunStatus, werr)
	}
}

func FuzzReadStatus(f *testing.F) {
	for _, c := range statusCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkStatus(t, b) })
}
