package coord

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/flowgen"

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

// subflowGraph is a flow with loops, modules and a subflow (whose children
// are named rows that are no vertex).
func subflowGraph(t testing.TB) *spec.Graph {
	f, err := spec.Parse("flow.yaml", []byte(`
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
`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := f.Expand()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// encodingJSON is the status as the API wrote it before AppendJSON.
func encodingJSON(t testing.TB, st proto.RunStatus) []byte {
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(st); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// AppendJSON writes what encoding/json writes of Status, byte for byte, in
// every run state and with names, errors and params that need escaping.
func TestAppendJSONIsEncodingJSON(t *testing.T) {
	g := subflowGraph(t)
	rng := rand.New(rand.NewPCG(1, 2))
	odd := []string{"fan/0", "fan/<b>&\"x\"", "fan/\u2028é\x01", "fan/\xff\xfe", "elsewhere", "m/sink"}
	for round := range 200 {
		f := NewFold()
		for range rng.IntN(40) {
			e := &transport.TaskEvent{Run: "r", Task: uint32(rng.IntN(len(g.Vertices) + 1)), Node: []string{"n1", "n<2>"}[rng.IntN(2)],
				State: transport.TaskState(rng.IntN(6)), Act: uint64(rng.IntN(4)), Gen: uint64(rng.IntN(3)), Executions: uint64(rng.IntN(5))}
			if rng.IntN(3) == 0 {
				e.Name = odd[rng.IntN(len(odd))]
			}
			if rng.IntN(2) == 0 {
				e.Output = []byte{byte(rng.IntN(256)), 7}
			}
			f.Add(g, e)
		}
		r := Run{ID: "r1", FlowName: "main", State: []string{proto.RunPending, proto.RunRunning, proto.RunSucceeded, proto.RunFailed, proto.RunCancelled}[round%5]}
		if round%3 == 0 {
			r.Error = "task <fan/0>: \"boom\" & \u2028 \xff"
			r.Params = map[string]any{"who": "<ann>", "n": 3.0, "ok": true}
		}
		want := encodingJSON(t, f.Status(r, g))
		if got := append(f.AppendJSON(nil, r, g), '\n'); !bytes.Equal(got, want) {
			t.Fatalf("round %d:\n got %s\nwant %s", round, got, want)
		}
	}
	empty := Run{ID: "r2", FlowName: "x", State: proto.RunRunning}
	if got, want := append(NewFold().AppendJSON(nil, empty, nil), '\n'), encodingJSON(t, NewFold().Status(empty, nil)); !bytes.Equal(got, want) {
		t.Fatalf("no tasks:\n got %s\nwant %s", got, want)
	}
}

// A client holding the status of some version and applying the delta since
// it has the status of the delta's version; the tallies are the status's.
func TestFoldDeltaReproducesStatus(t *testing.T) {
	g := subflowGraph(t)
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 7))
		f := NewFold()
		r := Run{ID: "r", FlowName: "main", State: proto.RunRunning}
		type held struct {
			st  proto.RunStatus
			ver uint64
		}
		var clients []held
		for step := range 300 {
			switch k := rng.IntN(20); {
			case k == 0 && step > 150:
				r.State = []string{proto.RunSucceeded, proto.RunFailed, proto.RunCancelled}[rng.IntN(3)]
				f.Touch()
			case k < 3:
				clients = append(clients, held{f.Status(r, g), f.Version()})
			default:
				e := &transport.TaskEvent{Run: "r", Task: uint32(rng.IntN(len(g.Vertices))), Node: []string{"n1", "n2"}[rng.IntN(2)],
					State: transport.TaskState(rng.IntN(6)), Act: uint64(rng.IntN(5)), Gen: uint64(rng.IntN(3)), Executions: uint64(rng.IntN(5))}
				if rng.IntN(10) == 0 {
					e.Name = fmt.Sprintf("fan/%d", rng.IntN(4))
				}
				if rng.IntN(3) == 0 {
					e.Output = []byte{byte(rng.IntN(4))}
				}
				f.Add(g, e)
			}
			want := f.Status(r, g)
			for i := range clients {
				c := &clients[i]
				d := f.Delta(r, g, c.ver)
				if !d.Full && len(d.Tasks) > len(want.Tasks) {
					t.Fatalf("seed %d step %d: a delta of %d rows for a table of %d", seed, step, len(d.Tasks), len(want.Tasks))
				}
				c.st.Apply(d)
				c.ver = f.Version()
				if got, w := encodingJSON(t, c.st), encodingJSON(t, want); !bytes.Equal(got, w) {
					t.Fatalf("seed %d step %d: applied delta (full %v, %d rows)\n got %s\nwant %s", seed, step, d.Full, len(d.Tasks), got, w)
				}
			}
			if got, w := f.Progress(r, g), want.Progress(); !reflect.DeepEqual(got, w) {
				t.Fatalf("seed %d step %d: progress\n got %+v\nwant %+v", seed, step, got, w)
			}
		}
		if len(f.journal) > 2*f.ntasks+64 {
			t.Fatalf("seed %d: journal of %d entries for %d tasks", seed, len(f.journal), f.ntasks)
		}
	}
}

// Nothing changed: an empty delta and the same version; an event that
// changes nothing shown (the same report again) keeps the version.
func TestFoldDeltaOfNothing(t *testing.T) {
	g := subflowGraph(t)
	f := NewFold()
	e := &transport.TaskEvent{Run: "r", Task: 0, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1}
	f.Add(g, e)
	v := f.Version()
	f.Add(g, e)
	r := Run{ID: "r", FlowName: "main", State: proto.RunRunning}
	if d := f.Delta(r, g, v); f.Version() != v || d.Full || len(d.Tasks) != 0 {
		t.Fatalf("the same event again: version %d → %d, delta %+v", v, f.Version(), d)
	}
	f.Add(g, &transport.TaskEvent{Run: "r", Task: 1, Node: "n1", State: transport.TaskRunning, Act: 1})
	if d := f.Delta(r, g, v); d.Full || len(d.Tasks) != 1 || d.Tasks[0].Name != "body" || d.Tasks[0].State != proto.TaskRunning {
		t.Fatalf("one task started: %+v", d)
	}
	if d := f.Delta(r, g, v+100); !d.Full {
		t.Fatalf("a version to come: %+v, want the whole table", d)
	}
}

// A node's report folded whole (addReport, as the leader reads it: by
// runs, DecodeRuns, or decoded delta by delta) folds
// to what its deltas, handed on one by one as TaskEvents and let in by
// EventFromOwner, fold to: rows, tallies, journal (deltas) and record
// check; reports of several nodes, generations, owners and of the nodes a
// run lost, with subflow children, outputs, and tasks that moved.
func TestReportFoldsAsItsEvents(t *testing.T) {
	g := subflowGraph(t)
	nodes := []string{"n1", "n2", "n3"}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 11))
		r := Run{ID: "r", FlowName: "main", State: proto.RunRunning, Gen: 2, Lost: []string{"n3"}}
		for range len(g.Vertices) - rng.IntN(2) { // at times the last vertex is no one's
			r.Assignment = append(r.Assignment, nodes[rng.IntN(2)])
		}
		events, whole, byRuns := NewFold(), NewFold(), NewFold()
		vers := []uint64{0}
		for range 40 {
			tr := transport.TaskReport{Run: "r", Gen: uint64(rng.IntN(4)), Node: nodes[rng.IntN(3)]}
			for range 1 + rng.IntN(8) {
				d := transport.TaskDelta{Task: uint32(rng.IntN(len(g.Vertices) + 1)), State: transport.TaskState(rng.IntN(6)),
					Act: uint64(rng.IntN(4)), Executions: uint64(rng.IntN(4))}
				if n := len(tr.Tasks); n > 0 && rng.IntN(2) == 0 { // the next task alike: a range
					d = tr.Tasks[n-1]
					d.Task++
				}
				if rng.IntN(8) == 0 {
					d.Name = fmt.Sprintf("fan/%d", rng.IntN(3))
				}
				if rng.IntN(3) == 0 {
					d.Output = []byte{byte(rng.IntN(3))}
				}
				tr.Tasks = append(tr.Tasks, d)
			}
			data := transport.Encode(&tr)
			if err := transport.EachEvent(data, transport.Limits{}, func(e *transport.TaskEvent) error {
				if EventFromOwner(r, e) {
					events.Add(g, e)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			var dec transport.TaskReport
			if err := dec.Decode(data, transport.Limits{}); err != nil {
				t.Fatal(err)
			}
			whole.addReport(g, &dec, nil, &r)
			var runs []uint32
			if err := dec.DecodeRuns(data, transport.Limits{}, &runs); err != nil {
				t.Fatal(err)
			}
			byRuns.addReport(g, &dec, runs, &r)
			if events.Version() != whole.Version() || events.Version() != byRuns.Version() {
				t.Fatalf("seed %d: version %d folded whole, %d by runs, %d as events", seed, whole.Version(), byRuns.Version(), events.Version())
			}
			vers = append(vers, whole.Version())
		}
		for _, state := range []string{proto.RunRunning, proto.RunFailed} {
			r.State = state
			if want, got := events.AppendJSON(nil, r, g), whole.AppendJSON(nil, r, g); !bytes.Equal(want, got) {
				t.Fatalf("seed %d: folded whole\n%s\nas events\n%s", seed, got, want)
			}
			if want, got := events.AppendJSON(nil, r, g), byRuns.AppendJSON(nil, r, g); !bytes.Equal(want, got) {
				t.Fatalf("seed %d: folded by runs\n%s\nas events\n%s", seed, got, want)
			}
			if want, got := events.Progress(r, g), whole.Progress(r, g); !reflect.DeepEqual(want, got) {
				t.Fatalf("seed %d: folded whole %+v, as events %+v", seed, got, want)
			}
			for _, v := range vers {
				want := events.Delta(r, g, v)
				if got := whole.Delta(r, g, v); !reflect.DeepEqual(want, got) {
					t.Fatalf("seed %d: delta since %d folded whole %+v, as events %+v", seed, v, got, want)
				}
				if got := byRuns.Delta(r, g, v); !reflect.DeepEqual(want, got) {
					t.Fatalf("seed %d: delta since %d folded by runs %+v, as events %+v", seed, v, got, want)
				}
			}
		}
		wo, wf := CheckSuccess(g, events)
		for _, fo := range []*Fold{whole, byRuns} {
			if o, f := CheckSuccess(g, fo); !reflect.DeepEqual(wo, o) || !reflect.DeepEqual(wf, f) {
				t.Fatalf("seed %d: the record check folded whole says %v %v, as events %v %v", seed, o, f, wo, wf)
			}
		}
	}
}

// A status read waiting for a change of a run (a client following it to
// its verdict) returns when the run's verdict is applied, not at its next
// look at the record (statusWaitTick, made an hour here).
func TestVerdictWakesAWaitingRead(t *testing.T) {
	defer func(d time.Duration) { statusWaitTick = d }(statusWaitTick)
	statusWaitTick = time.Hour
	s, _ := fuzzServer(t)
	sf, _, err := s.Register("l.yaml", flowgen.Layered(2, 3, 1, false))
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.RunFlow("", sf.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := s.statusVersion(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	waitCtx, stopWait := context.WithCancel(context.Background())
	defer stopWait()
	var got proto.RunProgress // the answer made from the read that saw the change
	answered := false
	go func() {
		var err error
		answered, err = s.awaitChange(waitCtx, id, v, time.Hour, func(c *statusCache, r Run) { // neither its wait nor its tick ends it
			got = c.fold.progress(r, c.nv)
			got.Version = c.version()
		})
		woke <- err
	}()
	defer func() { stopWait(); <-woke }()
	if err := s.apply(&Command{Op: OpRunFinish, Finish: &Finish{ID: id, State: proto.RunCancelled, Error: "by the test", At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		woke <- err // for the deferred join
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("a waiting status read did not see the run's verdict applied")
	}
	v2, err := s.statusVersion(ctx, id)
	if err != nil || v2 == v {
		t.Fatalf("status version after the verdict: %q (was %q), %v", v2, v, err)
	}
	// The answer is the read's that ended the wait: the verdict, at the
	// version after it.
	if !answered || got.State != proto.RunCancelled || got.Version != v2 {
		t.Fatalf("the wait's answer: answered %v, state %q, version %q; want the verdict (%s) at %q", answered, got.State, got.Version, proto.RunCancelled, v2)
	}
}
