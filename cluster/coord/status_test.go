package coord

import (
	"encoding/json"
	"testing"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/transport"
)

func TestFoldStatus(t *testing.T) {
	g := expand(t, `
flows:
  - name: main
    tasks:
      - {name: init, func: noop}
      - {name: body, func: noop, succeed: [init]}
      - {name: cond, kind: condition, func: loop, args: {n: 2}, succeed: [body], precede: [body, m]}
      - {name: m, kind: module, flow: inner}
      - {name: fan, kind: subflow, func: fanout, args: {n: 2}, succeed: [init]}
      - {name: never, func: hash, succeed: [fan]}
  - name: inner
    tasks:
      - {name: sink, func: hash}
`)
	ev := func(task uint32, name, node string, st transport.TaskState, act, execs uint64, out string) *transport.TaskEvent {
		return &transport.TaskEvent{Run: "r", Task: task, Name: name, Node: node, State: st, Act: act, Executions: execs, Output: []byte(out)}
	}
	idx := func(p string) uint32 { v, _ := g.Lookup(p); return uint32(v) }
	f := NewFold()
	for _, e := range []*transport.TaskEvent{
		ev(idx("init"), "", "n1", transport.TaskDone, 1, 1, ""),
		ev(idx("body"), "", "n1", transport.TaskDone, 1, 1, ""),
		ev(idx("body"), "", "n2", transport.TaskRunning, 2, 1, ""), // moved to n2 under a new gen
		ev(idx("body"), "", "n2", transport.TaskDone, 3, 2, ""),
		ev(idx("body"), "", "n1", transport.TaskDone, 2, 2, ""), // n1's late report of activation 2
		ev(idx("cond"), "", "n2", transport.TaskDone, 3, 3, ""),
		ev(idx("m/sink"), "", "n2", transport.TaskDone, 1, 1, "\x01\x02"),
		ev(idx("m"), "", "n2", transport.TaskDone, 1, 1, ""),
		ev(idx("fan"), "fan/1", "n1", transport.TaskDone, 1, 1, ""),
		ev(idx("fan"), "fan/0", "n1", transport.TaskFailed, 1, 1, ""),
		ev(99, "", "n1", transport.TaskDone, 1, 1, ""), // no such vertex: ignored
	} {
		f.Add(g, e)
	}
	run := Run{ID: "r", FlowName: "main", State: proto.RunFailed, Error: "task fan/0: boom"}
	got, _ := json.Marshal(f.Status(run, g))
	want := `{"id":"r","flow":"main","state":"failed","error":"task fan/0: boom","tasks":[` +
		`{"name":"init","node":"n1","state":"done","activations":1,"executions":1},` +
		`{"name":"body","node":"n2","state":"done","activations":3,"executions":4},` +
		`{"name":"cond","node":"n2","state":"done","activations":3,"executions":3},` +
		`{"name":"m","node":"n2","state":"done","activations":1,"executions":1},` +
		`{"name":"fan","state":"skipped","activations":0,"executions":0},` +
		`{"name":"fan/1","node":"n1","state":"done","activations":1,"executions":1},` +
		`{"name":"fan/0","node":"n1","state":"failed","activations":1,"executions":1},` +
		`{"name":"never","state":"skipped","activations":0,"executions":0},` +
		`{"name":"m/sink","node":"n2","state":"done","activations":1,"executions":1,"output":"0102"}]}` // Expand puts inlined tasks last
	if string(got) != want {
		t.Fatalf("status\n got %s\nwant %s", got, want)
	}
	for state, none := range map[string]string{proto.RunRunning: proto.TaskPending, proto.RunCancelled: proto.TaskCancelled, proto.RunSucceeded: proto.TaskSkipped} {
		st := NewFold().Status(Run{State: state}, g)
		if st.Tasks[0].State != none {
			t.Errorf("run %s: a task with no event is %s, want %s", state, st.Tasks[0].State, none)
		}
	}
}

// A node that lost a task to a new owner (frozen past detection) and reports
// the same activation afterwards does not take the task back in the status.
func TestFoldPrefersTheNewerGeneration(t *testing.T) {
	g := expand(t, "name: f\ntasks:\n  - {name: a, func: hash}\n")
	f := NewFold()
	for _, e := range []*transport.TaskEvent{
		{Run: "r", Gen: 2, Task: 0, Node: "n2", State: transport.TaskDone, Act: 1, Executions: 1, Output: []byte{2}},
		{Run: "r", Gen: 1, Task: 0, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1, Output: []byte{1}},
	} {
		f.Add(g, e)
	}
	st := f.Status(Run{ID: "r", State: proto.RunSucceeded}, g)
	if tk := st.Tasks[0]; tk.Node != "n2" || tk.Output != "02" || tk.Executions != 2 || tk.Activations != 1 {
		t.Fatalf("task %+v: want n2's report, with both executions", tk)
	}
}
