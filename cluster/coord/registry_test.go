package coord

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/flowgen"
)

// logBytes sums the raft log's command entries by op: how many, and their
// bytes.
func logBytes(t testing.TB, s *Server) (count, size map[string]int) {
	t.Helper()
	count, size = map[string]int{}, map[string]int{}
	lo, err := s.store.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	hi, err := s.store.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	for i := lo; i <= hi && i > 0; i++ {
		var l raft.Log
		if err := s.store.GetLog(i, &l); err != nil {
			t.Fatalf("log entry %d: %v", i, err)
		}
		if l.Type != raft.LogCommand {
			continue
		}
		c, err := DecodeCommand(l.Data)
		if err != nil {
			t.Fatalf("log entry %d: %v", i, err)
		}
		count[c.Op]++
		size[c.Op] += len(l.Data)
	}
	return count, size
}

// A flow submitted twice, and run again by its id, is stored once: one
// flow_put in the raft log, and run entries that hold the flow's id, not
// its text.
func TestAFlowIsStoredOnce(t *testing.T) {
	s, _ := fuzzServer(t)
	text := flowgen.Layered(4, 50, 1, false) // 200 tasks
	var ids []string
	for range 2 {
		id, err := s.SubmitParams("", "l.yaml", text, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	r, _ := s.run(ids[0])
	sf, _ := s.storedFlow(r.FlowID)
	b1, _ := s.flows.bind("l.yaml", text, nil)
	if b2, _ := s.flows.stored(sf, nil); b1 == nil || b2 != b1 {
		t.Fatal("a run by id after a submit of the flow binds it again")
	}
	id, err := s.RunFlow("", r.FlowID, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, id)
	var created bool
	var flows []StoredFlow
	s.fsm.read(func(f *FSM) { flows = f.Flows() })
	if len(flows) != 1 || flows[0].ID != r.FlowID || flows[0].Registered || flows[0].Tasks != 200 || flows[0].Bytes != len(text) {
		t.Fatalf("the registry after two submits and a run: %+v", flows)
	}
	for _, id := range ids {
		if r2, _ := s.run(id); r2.FlowID != r.FlowID || r2.Flow != nil {
			t.Fatalf("run %s names flow %q (inline %d bytes); want %s", id, r2.FlowID, len(r2.Flow), r.FlowID)
		}
	}
	count, size := logBytes(t, s)
	canon := len(flows[0].Text)
	if count[OpFlowPut] != 1 || count[OpRunSubmit] != 3 {
		t.Fatalf("raft log: %v entries; want 1 flow_put and 3 run_submit", count)
	}
	if size[OpFlowPut] < canon || size[OpRunSubmit] >= canon {
		t.Fatalf("raft log bytes: %v for a %d-byte canonical flow; want the flow in the put alone", size, canon)
	}
	t.Logf("raft log bytes by op: %v (canonical flow %d bytes)", size, canon)

	// Registered afterwards: one more small entry, no text again.
	sf, created, err = s.Register("l.json", flowgen.Layered(4, 50, 1, true))
	if err != nil || !created || sf.ID != r.FlowID {
		t.Fatalf("register of the same flow as JSON: %+v %v %v", sf, created, err)
	}
	if _, created, _ := s.Register("l.yaml", text); created {
		t.Fatal("registering a registered flow committed again")
	}
	count, size2 := logBytes(t, s)
	if count[OpFlowPut] != 2 || size2[OpFlowPut]-size[OpFlowPut] >= canon {
		t.Fatalf("register of a stored flow: %v entries, %v bytes; want one more put, without the text", count, size2)
	}
}

// The limits of a run by id are the cluster's now, as for a submit: a
// flow registered under larger ones is refused, naming the flag.
func TestRunFlowLimits(t *testing.T) {
	s, _ := fuzzServer(t)
	sf, _, err := s.Register("w.yaml", flowgen.WideModules(5, 9)) // 50 tasks
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.MaxTasks = 49
	if p := refusal(t, errOf(s.RunFlow("", sf.ID, nil))); p != `w.yaml: flow "top" expands to 50 tasks, over this cluster's limit of 49 a run (coordinator --max-tasks)` {
		t.Fatalf("task count: %s", p)
	}
	s.cfg.MaxTasks, s.cfg.MaxFlowBytes = 50, sf.Bytes-1
	if p := refusal(t, errOf(s.RunFlow("", sf.ID, nil))); !strings.Contains(p, fmt.Sprintf("flow file is %d bytes, over this cluster's limit of %d (coordinator --max-flow-bytes)", sf.Bytes, sf.Bytes-1)) {
		t.Fatalf("file size: %s", p)
	}
	s.cfg.MaxFlowBytes = sf.Bytes
	if _, err := s.RunFlow("", sf.ID, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Register("big.yaml", flowgen.Flat(s.cfg.MaxTasks+1)); err == nil || !strings.Contains(err.Error(), "--max") {
		t.Fatalf("register over the limits: %v", err)
	}
}

// A snapshot written before the registry (runs carrying their flow
// inline) restores: each flow moves into the registry once, and every run
// reads its flow as before.
func TestRestoreASnapshotOfBeforeTheRegistry(t *testing.T) {
	flowA := []byte(`{"name": "a", "tasks": [{"name": "x", "func": "noop"}]}`)
	flowB := []byte(`{"name": "b", "tasks": [{"name": "y", "func": "noop"}, {"name": "z", "func": "noop"}]}`)
	run := func(id string, flow []byte, n int) map[string]any {
		return map[string]any{"id": id, "flow": flow, "flow_name": "x", "state": proto.RunSucceeded, "params": map[string]any{"n": n},
			"submitted": "2026-01-01T00:00:00Z", "finished": "2026-01-01T00:01:00Z", "gen": 1, "assignment": []string{"n1"}, "nodes": []string{"n1"}}
	}
	old, _ := json.Marshal(map[string]any{
		"nodes":  map[string]any{},
		"runs":   map[string]any{"r1": run("r1", flowA, 1), "r2": run("r2", flowA, 2), "r3": run("r3", flowB, 3)},
		"config": map[string]any{"retention": 3600000000000},
	})
	f := NewFSM()
	if err := f.Restore(old); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Flows()); n != 2 {
		t.Fatalf("%d flows in the registry, want 2", n)
	}
	for id, want := range map[string][]byte{"r1": flowA, "r2": flowA, "r3": flowB} {
		r, ok := f.Run(id)
		if !ok || r.Flow != nil || r.FlowID != FlowID(want) {
			t.Fatalf("run %s: %+v", id, r)
		}
		if got, err := f.RunFlow(r); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("run %s's flow: %s %v", id, got, err)
		}
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(snap, []byte(base64.StdEncoding.EncodeToString(flowA))); n != 1 {
		t.Fatalf("the new snapshot holds flow a %d times, want once", n)
	}
	g := NewFSM()
	if err := g.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if again, _ := g.Snapshot(); !bytes.Equal(again, snap) {
		t.Fatal("the new snapshot changed across a restore")
	}
	// The retention prunes them all, and their flows with them.
	if err := f.Apply(&Command{Op: OpPrune, Before: mustTime(t, "2026-01-02T00:00:00Z")}); err != nil {
		t.Fatal(err)
	}
	if len(f.Runs()) != 0 || len(f.Flows()) != 0 {
		t.Fatalf("after the prune: %d runs, %d flows", len(f.Runs()), len(f.Flows()))
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// BenchmarkRunAgain100K: a 100,000-task layered DAG (100 × 1,000,
// internal/flowgen.Layered, JSON) submitted once, then run again by a
// submit of the same file and by its flow id, on a real leading
// coordinator (raft on disk; no NATS, so nothing runs): the leader's time
// and its process's CPU (rusage: the leader loop's tracking of each run
// included) a run, the raft log's bytes a run, and before-raft-B/op, the
// run_submit entry the same run was before the registry (its flow
// inline). docs/benchmarks/cluster-speed.md, "A flow registry".
func BenchmarkRunAgain100K(b *testing.B) {
	s, _ := fuzzServer(b)
	text := flowgen.Layered(100, 1000, 1, true)
	first, err := s.SubmitParams("", "l.json", text, nil)
	if err != nil {
		b.Fatal(err)
	}
	r, _ := s.run(first)
	old := r
	if old.Flow, err = s.runFlow(r); err != nil {
		b.Fatal(err)
	}
	old.FlowID = ""
	oldEntry, err := json.Marshal(&Command{Op: OpRunSubmit, Run: &old})
	if err != nil {
		b.Fatal(err)
	}
	_, size := logBytes(b, s)
	b.Logf("first submit: raft bytes by op %v; the run_submit of before the registry: %d bytes", size, len(oldEntry))
	for _, c := range []struct {
		name  string
		start func() (string, error)
	}{
		{"submit-again", func() (string, error) { return s.SubmitParams("", "l.json", text, nil) }},
		{"run-by-id", func() (string, error) { return s.RunFlow("", r.FlowID, nil) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			_, before := logBytes(b, s)
			cpu0 := cpuTime()
			n := 0
			for b.Loop() {
				if _, err := c.start(); err != nil {
					b.Fatal(err)
				}
				n++
			}
			cpu := cpuTime() - cpu0
			_, after := logBytes(b, s)
			total := 0
			for op, v := range after {
				total += v - before[op]
			}
			b.ReportMetric(float64(total)/float64(n), "raft-B/op")
			b.ReportMetric(float64(len(oldEntry)), "before-raft-B/op")
			b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(n), "cpu-ms/op")
		})
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// GET /v1/flows lists every flow the registry holds: a registered one, a
// submitted one with its runs, and a submitted one whose run was never
// committed (a submit puts the flow first; the leader may go before the
// run), with 0 runs until a prune drops it.
func TestFlowsListsWhatTheRegistryHolds(t *testing.T) {
	s, token := fuzzServer(t)
	one := []byte("name: one\ntasks:\n  - {name: a, func: noop}\n")
	other := []byte("name: other\ntasks:\n  - {name: a, func: noop}\n")
	kept := []byte("name: kept\ntasks:\n  - {name: a, func: noop}\n")
	if _, err := s.SubmitParams("", "one.yaml", one, nil); err != nil {
		t.Fatal(err)
	}
	bf, err := s.flows.bind("other.yaml", other, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.putFlow(bf.stored, false, time.Now()); err != nil { // the put of a submit, no run after it
		t.Fatal(err)
	}
	if _, _, err := s.Register("kept.yaml", kept); err != nil {
		t.Fatal(err)
	}
	var list []proto.FlowInfo
	if code, _ := api(t, s.HTTPAddr(), http.MethodGet, "/v1/flows", token, nil, &list); code != http.StatusOK {
		t.Fatalf("GET /v1/flows: %d", code)
	}
	got := map[string]string{}
	for _, fl := range list {
		got[fl.Flow] = fmt.Sprintf("registered=%v runs=%d", fl.Registered, fl.Runs)
	}
	want := map[string]string{"one": "registered=false runs=1", "other": "registered=false runs=0", "kept": "registered=true runs=0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("GET /v1/flows: %v, want %v", got, want)
	}
}

// A flow a build before spec.Canonical stored indented, under the id of
// that text, still runs by that id; and a submit of the same file under a
// run id that an attempt on that build committed is that attempt (done),
// not "a run id taken by another flow".
func TestFlowStoredIndentedRunsAndRetries(t *testing.T) {
	s, _ := fuzzServer(t)
	file := flowgen.Layered(3, 20, 1, false)
	sf, _, err := s.Register("l.yaml", file)
	if err != nil {
		t.Fatal(err)
	}
	var old bytes.Buffer
	if err := json.Indent(&old, sf.Text, "", "  "); err != nil {
		t.Fatal(err)
	}
	oldSF := sf
	oldSF.ID, oldSF.Text = FlowID(old.Bytes()), old.Bytes()
	if oldSF.ID == sf.ID {
		t.Fatal("the indented text has the compact one's id")
	}
	if err := s.apply(&Command{Op: OpFlowPut, Flow: &oldSF}); err != nil {
		t.Fatal(err)
	}
	rid := proto.NewRunID(time.Now())
	if got, err := s.RunFlow(rid, oldSF.ID, nil); err != nil || got != rid {
		t.Fatalf("run of the indented flow: %q, %v", got, err)
	}
	if r, _ := s.run(rid); r.FlowID != oldSF.ID {
		t.Fatalf("the run names flow %s, want the indented one's %s", r.FlowID, oldSF.ID)
	}
	if got, err := s.SubmitParams(rid, "l.yaml", file, nil); err != nil || got != rid {
		t.Fatalf("the same file submitted again under the run's id: %q, %v", got, err)
	}
	other := flowgen.Layered(3, 20, 2, false)
	if _, err := s.SubmitParams(rid, "l.yaml", other, nil); err == nil || !strings.Contains(err.Error(), "taken by another flow") {
		t.Fatalf("another file under the run's id: %v", err)
	}
}
