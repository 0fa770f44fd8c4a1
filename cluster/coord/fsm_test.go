package coord

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
)

// TestFSMScenarios runs testdata/fsm_*.txt. Each line is one of
//
//	apply {json command}          apply it; the result is kept for expect ok/error
//	expect ok                     the last apply succeeded
//	expect error TEXT             the last apply was refused with TEXT in its message
//	expect run ID FIELD VALUE     a field of run ID (its JSON name) prints as VALUE
//	expect no run ID              run ID is not there
//	expect node ID FIELD VALUE    likewise for a node
//	expect flow ID FIELD VALUE    likewise for a flow of the registry
//	expect no flow ID             flow ID is not in the registry
//	expect runs N / nodes N / flows N   how many there are
//	roundtrip                     snapshot, restore into a fresh FSM, compare
//
// Blank lines and lines starting with # are skipped.
func TestFSMScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/fsm_*.txt")
	if len(files) == 0 {
		t.Fatal("no scenarios")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runScenario(t, file) })
	}
}

func runScenario(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFSM()
	var last error
	applied := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		at := fmt.Sprintf("%s:%d", file, n)
		verb, rest, _ := strings.Cut(line, " ")
		switch verb {
		case "apply":
			last, applied = f.ApplyJSON([]byte(rest)), true
		case "roundtrip":
			snap, err := f.Snapshot()
			if err != nil {
				t.Fatalf("%s: snapshot: %v", at, err)
			}
			g := NewFSM()
			if err := g.Restore(snap); err != nil {
				t.Fatalf("%s: restore: %v", at, err)
			}
			again, _ := g.Snapshot()
			if !bytes.Equal(snap, again) {
				t.Fatalf("%s: snapshot changed across restore:\n%s\n%s", at, snap, again)
			}
			f = g
		case "expect":
			expect(t, at, f, rest, last, applied)
		default:
			t.Fatalf("%s: unknown verb %q", at, verb)
		}
	}
}

func expect(t *testing.T, at string, f *FSM, rest string, last error, applied bool) {
	t.Helper()
	w := strings.Fields(rest)
	if len(w) == 0 {
		t.Fatalf("%s: empty expect", at)
	}
	switch {
	case w[0] == "ok":
		if !applied || last != nil {
			t.Fatalf("%s: want ok, got %v", at, last)
		}
	case w[0] == "error":
		want := strings.TrimSpace(strings.TrimPrefix(rest, "error"))
		if last == nil || !strings.Contains(last.Error(), want) {
			t.Fatalf("%s: want error containing %q, got %v", at, want, last)
		}
	case w[0] == "no" && len(w) == 3 && w[1] == "run":
		if _, ok := f.Run(w[2]); ok {
			t.Fatalf("%s: run %s should not exist", at, w[2])
		}
	case w[0] == "no" && len(w) == 3 && w[1] == "flow":
		if _, ok := f.Flow(w[2]); ok {
			t.Fatalf("%s: flow %s should not exist", at, w[2])
		}
	case (w[0] == "runs" || w[0] == "nodes" || w[0] == "flows") && len(w) == 2:
		n := len(f.Runs())
		switch w[0] {
		case "nodes":
			n = len(f.Nodes())
		case "flows":
			n = len(f.Flows())
		}
		if strconv.Itoa(n) != w[1] {
			t.Fatalf("%s: %s: got %d, want %s", at, w[0], n, w[1])
		}
	case (w[0] == "run" || w[0] == "node" || w[0] == "flow") && len(w) >= 3:
		var obj any
		var ok bool
		switch w[0] {
		case "run":
			obj, ok = f.Run(w[1])
		case "flow":
			obj, ok = f.Flow(w[1])
		default:
			for _, n := range f.Nodes() {
				if n.ID == w[1] {
					obj, ok = n, true
				}
			}
		}
		if !ok {
			t.Fatalf("%s: no %s %s", at, w[0], w[1])
		}
		b, _ := json.Marshal(obj)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		want := strings.Join(w[3:], " ")
		got := ""
		if v, ok := m[w[2]]; ok {
			if s, isStr := v.(string); isStr {
				got = s
			} else {
				vb, _ := json.Marshal(v)
				got = string(vb)
			}
		}
		if got != want {
			t.Fatalf("%s: %s %s %s = %q, want %q", at, w[0], w[1], w[2], got, want)
		}
	default:
		t.Fatalf("%s: bad expect %q", at, rest)
	}
}

// A run's parameters come back from raft (a command applied, a snapshot
// restored) as they went in: an int past float64's 2^53 keeps its value,
// and so does the flow the run executes (FSM.RunFlow binds them again).
func TestFSMKeepsExactParams(t *testing.T) {
	const big = int64(9007199254740993) // 2^53 + 1: no float64
	pf, err := spec.Parse("p.yaml", []byte("name: p\nparams:\n  n: {type: int}\n  r: {type: float, default: 0.1}\ntasks:\n  - {name: a, func: noop, args: {seed: \"${n}\", rate: \"${r}\"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := spec.Canonical(pf)
	if err != nil {
		t.Fatal(err)
	}
	sf := StoredFlow{ID: FlowID(src), Name: "p", Path: "p.yaml", Text: src, HasParams: true, Stored: time.Unix(0, 0).UTC()}
	params := map[string]any{"n": big, "r": 0.1}
	run := Run{ID: "r1", FlowID: sf.ID, FlowName: "p", Params: params, State: proto.RunRunning, Gen: 1,
		Assignment: []string{"n1"}, Submitted: time.Unix(1, 0).UTC()}
	f := NewFSM()
	for _, c := range []*Command{{Op: OpFlowPut, Flow: &sf}, {Op: OpRunSubmit, Run: &run}} {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.ApplyJSON(b); err != nil {
			t.Fatal(err)
		}
	}
	check := func(f *FSM, when string) {
		t.Helper()
		r, ok := f.Run("r1")
		if !ok {
			t.Fatalf("%s: no run", when)
		}
		if got, _ := json.Marshal(r.Params); string(got) != `{"n":9007199254740993,"r":0.1}` {
			t.Errorf("%s: params %s, want n 9007199254740993 and r 0.1", when, got)
		}
		text, err := f.RunFlow(r)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		bf, err := spec.ParseJSON("run.json", text)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		args := bf.Root().Task("a").Args
		if args["seed"] != big || args["rate"] != 0.1 {
			t.Errorf("%s: the run's flow has seed %#v and rate %#v, want int64 %d and 0.1", when, args["seed"], args["rate"], big)
		}
	}
	check(f, "applied")
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	if err := g.Restore(snap); err != nil {
		t.Fatal(err)
	}
	check(g, "restored")
	if err := g.ApplyJSON([]byte(`{"op":"config"} {}`)); err == nil {
		t.Error("a command with data after it was applied")
	}
}

// A flow_put entry is framed, its text apart (EncodeCommand); one written
// as JSON, as before the framing, applies as it did; and an entry whose
// frame is damaged, or whose text is not its id's, changes nothing.
func TestFlowPutEntries(t *testing.T) {
	text := []byte("{\n  \"name\": \"a\",\n  \"tasks\": []\n}\n")
	sf := StoredFlow{ID: FlowID(text), Name: "a", Path: "a.json", Text: text, Tasks: 1, Bytes: 9, Stored: time.Unix(5, 0).UTC()}
	put := &Command{Op: OpFlowPut, Flow: &sf}
	framed, err := EncodeCommand(put)
	if err != nil {
		t.Fatal(err)
	}
	old, err := json.Marshal(put) // the JSON entry of earlier versions
	if err != nil {
		t.Fatal(err)
	}
	if framed[0] != framedFlowPut || bytes.Contains(framed, []byte(`"text":"`)) || !bytes.HasSuffix(framed, text) {
		t.Fatalf("framed entry %q: want the frame byte, no text in the JSON, the text at the end", framed)
	}
	for name, entry := range map[string][]byte{"framed": framed, "json": old} {
		f := NewFSM()
		if err := f.ApplyEntry(entry); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, ok := f.Flow(sf.ID)
		if !ok || !bytes.Equal(got.Text, text) || got.Name != "a" || got.Path != "a.json" || got.Tasks != 1 || got.Bytes != 9 || !got.Stored.Equal(sf.Stored) {
			t.Fatalf("%s: stored %+v, want %+v", name, got, sf)
		}
	}
	// Other commands stay JSON.
	if b, _ := EncodeCommand(&Command{Op: OpConfig, Config: &Settings{Retention: time.Hour}}); b[0] != '{' {
		t.Fatalf("a config entry is %q, want JSON", b)
	}
	other := bytes.Clone(text)
	other[len(other)-2] = ' '
	wrongText := bytes.Clone(framed)
	copy(wrongText[len(wrongText)-len(other):], other)
	bad := map[string][]byte{
		"wrong text":  wrongText,
		"no text":     framed[:len(framed)-len(text)],
		"long length": append([]byte{framedFlowPut, 0xff, 0x7f}, framed[3:]...),
		"no length":   {framedFlowPut},
		"not a put":   append(append([]byte{framedFlowPut, 15}, `{"op":"config"}`...), 'x'),
	}
	for name, entry := range bad {
		f := NewFSM()
		if err := f.ApplyEntry(entry); err == nil || !errors.Is(err, ErrCommand) {
			t.Errorf("%s: applied (%v), want an ErrCommand", name, err)
		}
		if len(f.Flows()) != 0 {
			t.Errorf("%s: the registry holds %d flows", name, len(f.Flows()))
		}
	}
}

// A run_submit entry is framed, its assignment packed (EncodeCommand):
// it decodes to the command its JSON decodes to, and applies; a damaged
// packing is refused.
func TestRunSubmitEntries(t *testing.T) {
	text := []byte("{\n  \"name\": \"a\"\n}\n")
	sf := StoredFlow{ID: FlowID(text), Name: "a", Path: "a.json", Text: text}
	assign := make([]string, 1000)
	for v := range assign {
		assign[v] = []string{"n1", "n2", "node-three"}[v*7%3]
	}
	run := &Run{ID: "r1", FlowID: sf.ID, FlowName: "a", Params: map[string]any{"n": json.Number("9007199254740993")}, State: proto.RunRunning,
		Submitted: time.Unix(1, 0).UTC(), Gen: 1, Assignment: assign, Boots: map[string]string{"n1": "b1"}}
	sub := &Command{Op: OpRunSubmit, Run: run}
	framed, err := EncodeCommand(sub)
	if err != nil {
		t.Fatal(err)
	}
	old, err := json.Marshal(sub)
	if err != nil {
		t.Fatal(err)
	}
	if framed[0] != framedRunSubmit || len(framed) > len(old)/3 {
		t.Fatalf("framed run_submit of %d bytes (JSON %d): want the frame byte and a packed assignment", len(framed), len(old))
	}
	got, err := DecodeCommand(framed)
	if err != nil {
		t.Fatal(err)
	}
	want, err := DecodeCommand(old)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("framed entry decodes to %+v, its JSON to %+v", got.Run, want.Run)
	}
	for name, entry := range map[string][]byte{"framed": framed, "json": old} {
		f := NewFSM()
		put, _ := EncodeCommand(&Command{Op: OpFlowPut, Flow: &sf})
		if err := f.ApplyEntry(put); err != nil {
			t.Fatal(err)
		}
		if err := f.ApplyEntry(entry); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r, ok := f.Run("r1"); !ok || !slices.Equal(r.Assignment, assign) || !slices.Equal(r.Nodes, []string{"n1", "n2", "node-three"}) {
			t.Fatalf("%s: run %+v", name, r)
		}
	}
	head := framed[:len(framed)-len(packAssignment(assign))]
	bad := map[string][]byte{
		"cut short":      framed[:len(framed)-1],
		"a byte after":   append(slices.Clone(framed), 0),
		"no such node":   append(slices.Clone(head), 1, 2, 'n', '1', 1, 1),
		"too many ids":   append(slices.Clone(head), 0xff, 0xff, 0x03),
		"too many tasks": append(slices.Clone(head), 1, 2, 'n', '1', 0xff, 0x7f, 0),
		"a long id":      append(slices.Clone(head), 1, 9, 'n', '1', 1, 0),
		"no assignment":  head,
		"not a run":      append(append([]byte{framedRunSubmit, 15}, `{"op":"config"}`...), 1, 2, 'n', '1', 1, 0),
	}
	for name, entry := range bad {
		if _, err := DecodeCommand(entry); !errors.Is(err, ErrCommand) {
			t.Errorf("%s: decoded (%v), want an ErrCommand", name, err)
		}
	}
}

// fuzzMaxTasks bounds the task count of the ranged assignments the fuzz
// targets decode: one names up to spec.MaxVertices, 16 MB of strings made
// an input, which slows the fuzzer to a crawl and finds nothing more.
const fuzzMaxTasks = 1 << 12

// rangesTasks reads the task count a ranged assignment's bulk declares
// (packRanges); ok is false where the bulk ends before it.
func rangesTasks(b []byte) (n uint64, ok bool) {
	nids, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, false
	}
	b = b[k:]
	for range min(nids, uint64(len(b))) {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b[k:])) {
			return 0, false
		}
		b = b[k+int(l):]
	}
	n, k = binary.Uvarint(b)
	return n, k > 0
}

// FuzzDecodeCommand: any entry decodes or is refused as an ErrCommand,
// never a panic; a run_submit's decoded assignment, in either frame, packs
// back to the bytes it came from, or to an assignment that unpacks the
// same.
func FuzzDecodeCommand(f *testing.F) {
	f.Add(append(append([]byte{framedRunSubmit, 28}, `{"op":"run_submit","run":{}}`...), 1, 2, 'n', '1', 1, 0))
	f.Add([]byte(`{"op":"config","config":{"retention":1}}`))
	f.Add(append([]byte{framedFlowPut, 2}, "{}x"...))
	for _, a := range [][]string{{"n1", "n1", "n2"}, {"n2", "n1", "n1", "n1", "n2"}} {
		e, err := encodeCommand(&Command{Op: OpRunSubmit, Run: &Run{ID: "r1", FlowID: "f", Gen: 1, Assignment: a}}, true)
		if err != nil {
			f.Fatal(err)
		}
		if e[0] != framedRunSubmitRanges {
			f.Fatalf("a ranged seed framed %#x", e[0])
		}
		f.Add(e)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var frame byte
		if len(b) > 0 {
			frame = b[0]
		}
		var bulk []byte
		if frame == framedRunSubmit || frame == framedRunSubmitRanges {
			if n, k := binary.Uvarint(b[1:]); k > 0 && n <= uint64(len(b)-1-k) {
				bulk = b[1+k+int(n):]
			}
		}
		if frame == framedRunSubmitRanges && bulk != nil {
			if n, ok := rangesTasks(bulk); ok && n > fuzzMaxTasks {
				return
			}
		}
		c, err := DecodeCommand(b)
		if err != nil {
			if !errors.Is(err, ErrCommand) {
				t.Fatalf("error %v is not an ErrCommand", err)
			}
			return
		}
		switch {
		case frame == framedRunSubmit:
			if !bytes.Equal(packAssignment(c.Run.Assignment), bulk) {
				// the same assignment may pack shorter (ids listed once, in order)
				back, err := unpackAssignment(packAssignment(c.Run.Assignment))
				if err != nil || !slices.Equal(back, c.Run.Assignment) {
					t.Fatalf("assignment %v does not round trip: %v", c.Run.Assignment, err)
				}
			}
		case frame == framedRunSubmitRanges:
			if !bytes.Equal(packRanges(c.Run.Assignment), bulk) {
				// ids unused or listed twice, runs of one node split: the
				// same assignment packs otherwise
				back, err := unpackRanges(packRanges(c.Run.Assignment))
				if err != nil || !slices.Equal(back, c.Run.Assignment) {
					t.Fatalf("assignment %v does not round trip in ranges: %v", c.Run.Assignment, err)
				}
			}
		}
	})
}

// A run_submit of the assignment decoded last (a run of a flow again on
// the same placement) decodes to the same array, which the FSM's runs
// share; any other decodes to its own, and each reads as it was written.
func TestDecodeSharesARepeatedAssignment(t *testing.T) {
	decode := func(id string, assign []string) []string {
		t.Helper()
		b, err := EncodeCommand(&Command{Op: OpRunSubmit, Run: &Run{ID: id, FlowID: "f", State: proto.RunRunning, Gen: 1, Assignment: assign}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := DecodeCommand(b)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.Run.Assignment, assign) || c.Run.ID != id {
			t.Fatalf("run %s decoded as %s, assignment %v, want %v", id, c.Run.ID, c.Run.Assignment, assign)
		}
		return c.Run.Assignment
	}
	one := []string{"n1", "n1", "n2", "n1"}
	other := []string{"n1", "n2", "n2", "n1"}
	a := decode("r1", one)
	if b := decode("r2", slices.Clone(one)); &a[0] != &b[0] {
		t.Fatal("the same assignment again decoded to a new array")
	}
	if c := decode("r3", other); &a[0] == &c[0] {
		t.Fatal("another assignment decoded to the array of the one before")
	}
	if d := decode("r4", one); &a[0] == &d[0] {
		t.Fatal("an assignment decoded to an array of two decodes ago") // one is kept
	}
	if !slices.Equal(a, one) {
		t.Fatalf("the first assignment now reads %v, want %v", a, one)
	}
}

// A run_submit in ranges (framedRunSubmitRanges, written only where every
// coordinator reads it) decodes to the command the byte-a-task form and
// the JSON decode to: an entry of the earlier forms still reads as it did,
// and a ranged one is a few bytes whatever the run's size. A damaged one
// is refused.
func TestRunSubmitRangesEntries(t *testing.T) {
	assign := make([]string, 100_000)
	for v := range assign {
		assign[v] = []string{"n1", "n2", "node-three"}[v*3/len(assign)]
	}
	assign[500] = "n2" // a run of one inside another
	run := &Run{ID: "r1", FlowID: "f", FlowName: "a", State: proto.RunRunning, Submitted: time.Unix(1, 0).UTC(), Gen: 1, Assignment: assign}
	sub := &Command{Op: OpRunSubmit, Run: run}
	ranged, err := encodeCommand(sub, true)
	if err != nil {
		t.Fatal(err)
	}
	if ranged[0] != framedRunSubmitRanges || len(ranged) > 300 { // the JSON head is most of it
		t.Fatalf("ranged run_submit of %d bytes, frame %#x: want a few bytes", len(ranged), ranged[0])
	}
	plain, err := EncodeCommand(sub)
	if err != nil {
		t.Fatal(err)
	}
	if plain[0] != framedRunSubmit {
		t.Fatalf("EncodeCommand wrote frame %#x: the form every build reads is framedRunSubmit", plain[0])
	}
	js, err := json.Marshal(sub)
	if err != nil {
		t.Fatal(err)
	}
	want, err := DecodeCommand(js)
	if err != nil {
		t.Fatal(err)
	}
	for name, entry := range map[string][]byte{"ranged": ranged, "byte a task": plain} {
		got, err := DecodeCommand(entry)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s entry decodes to another command than its JSON", name)
		}
	}
	// the same bytes in the two forms are two assignments to the intern
	one := []string{"n1", "n2"}
	for _, frame := range []byte{framedRunSubmit, framedRunSubmitRanges, framedRunSubmit} {
		b, _ := encodeCommand(&Command{Op: OpRunSubmit, Run: &Run{ID: "r", FlowID: "f", Gen: 1, Assignment: one}}, frame == framedRunSubmitRanges)
		if c, err := DecodeCommand(b); err != nil || !slices.Equal(c.Run.Assignment, one) {
			t.Fatalf("frame %#x: %v %v", frame, c, err)
		}
	}
	small, _ := encodeCommand(&Command{Op: OpRunSubmit, Run: &Run{ID: "r1", FlowID: "f", Gen: 1, Assignment: []string{"n1", "n1", "n2"}}}, true)
	head := small[:len(small)-len(packRanges([]string{"n1", "n1", "n2"}))]
	ids := []byte{2, 2, 'n', '1', 2, 'n', '2'}
	bulk := func(b ...byte) []byte { return append(append(slices.Clone(head), ids...), b...) }
	if c, err := DecodeCommand(bulk(3, 2, 0, 2, 1, 1)); err != nil || !slices.Equal(c.Run.Assignment, []string{"n1", "n1", "n2"}) {
		t.Fatalf("a hand-made ranged entry: %v %v", c, err)
	}
	bad := map[string][]byte{
		"cut short":        small[:len(small)-1],
		"a byte after":     append(slices.Clone(small), 0),
		"runs short":       bulk(3, 1, 0, 2),
		"runs long":        bulk(3, 2, 0, 2, 1, 2),
		"a run of none":    bulk(3, 3, 0, 2, 1, 0, 1, 1),
		"no such node":     bulk(3, 2, 0, 2, 2, 1),
		"too many runs":    bulk(3, 0x7f, 0, 3),
		"too many tasks":   bulk(0xff, 0xff, 0xff, 0x7f, 1, 0, 1),
		"too many ids":     append(slices.Clone(head), 0xff, 0xff, 0x03),
		"no assignment":    head,
		"no runs, 3 tasks": bulk(3, 0),
	}
	for name, entry := range bad {
		if _, err := DecodeCommand(entry); !errors.Is(err, ErrCommand) {
			t.Errorf("%s: decoded (%v), want an ErrCommand", name, err)
		}
	}
}

// FuzzUnpackRanges: any bulk unpacks or is refused, never a panic; what
// unpacks packs back to the same assignment.
func FuzzUnpackRanges(f *testing.F) {
	f.Add(packRanges([]string{"n1", "n1", "n2"}))
	f.Add([]byte{1, 2, 'n', '1', 0xff, 0xff, 0x03, 1, 0, 0xff, 0xff, 0x03}) // past fuzzMaxTasks: skipped
	f.Add([]byte{1, 2, 'n', '1', 0x80, 0x20, 1, 0, 0x80, 0x20})             // fuzzMaxTasks tasks in one run
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, ok := rangesTasks(b); ok && n > fuzzMaxTasks {
			return
		}
		a, err := unpackRanges(b)
		if err != nil {
			return
		}
		back, err := unpackRanges(packRanges(a))
		if err != nil || !slices.Equal(back, a) {
			t.Fatalf("assignment %v does not round trip: %v", a, err)
		}
	})
}

// A run again on the same placement packs its assignment's array into
// its run_submit entry and names its plans by it without a pass over its
// tasks (rangesOf), and the entry decodes to that very array, whose nodes
// the FSM lists once (sharedNodesOf). What is kept is the array's: another
// array, however equal, and any other assignment are packed and listed
// from their own tasks, and every answer is the one computed afresh.
func TestRangesAndNodesKeptForTheArray(t *testing.T) {
	assign := make([]string, 10_000)
	for v := range assign {
		assign[v] = []string{"n2", "n1", "n3"}[v*3/len(assign)]
	}
	p := rangesOf(assign)
	if !bytes.Equal(p, packRanges(assign)) {
		t.Fatal("rangesOf is not packRanges")
	}
	if q := rangesOf(assign); &q[0] != &p[0] {
		t.Fatal("the same array packed again")
	}
	b, err := encodeCommand(&Command{Op: OpRunSubmit, Run: &Run{ID: "r1", FlowID: "f", Gen: 1, Assignment: assign}}, true)
	if err != nil {
		t.Fatal(err)
	}
	c, err := DecodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	if !sameArray(c.Run.Assignment, assign) {
		t.Fatal("the entry of the array packed last did not decode to it")
	}
	want := []string{"n1", "n2", "n3"}
	for range 2 {
		nodes, err := sharedNodesOf(assign)
		if err != nil || !slices.Equal(nodes, want) {
			t.Fatalf("nodes %v %v, want %v", nodes, err, want)
		}
		nodes[0] = "scribbled" // the caller's own: the next answer is not this
	}
	// an equal array elsewhere, then another assignment: their own answers
	other := slices.Clone(assign)
	if q := rangesOf(other); !bytes.Equal(q, p) || &q[0] == &p[0] {
		t.Fatal("an equal array's packing: not equal, or the other array's bytes")
	}
	moved := slices.Clone(assign)
	moved[0] = "n4"
	if q := rangesOf(moved); !bytes.Equal(q, packRanges(moved)) {
		t.Fatal("another assignment packed as the one kept")
	}
	if nodes, err := sharedNodesOf(moved); err != nil || !slices.Equal(nodes, []string{"n1", "n2", "n3", "n4"}) {
		t.Fatalf("another assignment's nodes %v %v", nodes, err)
	}
	if nodes, err := sharedNodesOf(assign); err != nil || !slices.Equal(nodes, want) {
		t.Fatalf("the first array's nodes now %v %v", nodes, err)
	}
	if _, err := sharedNodesOf([]string{"n1", ""}); err == nil {
		t.Fatal("a task of no node listed")
	}
	// a prefix of the kept array starts where it does but is not it: its
	// own ranges and nodes (sameArray's length)
	if got := rangesOf(assign); !bytes.Equal(got, p) {
		t.Fatal("the first array's ranges changed")
	}
	half := assign[:len(assign)/2]
	if got := rangesOf(half); !bytes.Equal(got, packRanges(half)) || bytes.Equal(got, p) {
		t.Fatal("a prefix of the kept array packed as the array")
	}
	rangesOf(assign) // the array kept again, with its nodes
	if _, err := sharedNodesOf(assign); err != nil {
		t.Fatal(err)
	}
	k := len(assign) / 4 // all on n2
	wantK, err := nodesOf(assign[:k])
	if err != nil {
		t.Fatal(err)
	}
	if got, err := sharedNodesOf(assign[:k]); err != nil || !slices.Equal(got, wantK) || slices.Equal(got, want) {
		t.Fatalf("a prefix of the kept array listed %v %v, want %v", got, err, wantK)
	}
	if got := rangesOf(assign); cap(got) != len(got) {
		t.Fatal("rangesOf hands out room to append over the kept bytes")
	}
	// plans are named by the assignment's contents, not its array
	r1 := Run{Nodes: want, Assignment: assign}
	r2 := Run{Nodes: want, Assignment: slices.Clone(assign)}
	r3 := Run{Nodes: []string{"n1", "n2", "n3", "n4"}, Assignment: moved}
	if plansKey([32]byte{1}, r1) != plansKey([32]byte{1}, r2) || plansKey([32]byte{1}, r1) == plansKey([32]byte{1}, r3) {
		t.Fatal("plansKey depends on the array, or not on the assignment")
	}
}

// An entry in the plain form (a leader whose configuration holds a server
// that reads no ranges: Server.entryRanges, Config.oldLog) decodes to the
// kept array run after run, though its plans are named by ranges
// (plansKey, rangesOf): the ranges are added beside the plain bytes, not
// in their place.
func TestPlainEntriesShareOneArrayWithTheirPlansKey(t *testing.T) {
	assign := make([]string, 10_000)
	for v := range assign {
		assign[v] = []string{"n1", "n2", "n3"}[v*3/len(assign)]
	}
	var first []string
	var key [32]byte
	for i := range 3 {
		b, err := encodeCommand(&Command{Op: OpRunSubmit, Run: &Run{ID: fmt.Sprint("r", i), FlowID: "f", Gen: 1, Assignment: slices.Clone(assign)}}, false)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != framedRunSubmit {
			t.Fatalf("frame %#x, want the plain form", b[0])
		}
		c, err := DecodeCommand(b)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.Run.Assignment, assign) {
			t.Fatal("the entry decoded to another assignment")
		}
		k := plansKey([32]byte{1}, Run{Nodes: []string{"n1", "n2", "n3"}, Assignment: c.Run.Assignment})
		if i == 0 {
			first, key = c.Run.Assignment, k
			continue
		}
		if k != key {
			t.Fatalf("run %d: another plans key", i)
		}
		if !sameArray(c.Run.Assignment, first) {
			t.Fatalf("run %d: the entry unpacked to an array of its own", i)
		}
	}
	if got := rangesOf(first); !bytes.Equal(got, packRanges(assign)) {
		t.Fatal("the kept array's ranges are not packRanges's")
	}
}

// Runs of one array submitted one after another and at once (the FSMs of
// a process's coordinators, its leader's encodes) each list their nodes
// as their own: an FSM run's Nodes is not another's.
func TestRunsOfOneAssignmentOwnTheirNodes(t *testing.T) {
	assign := []string{"n2", "n2", "n1"}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			f := NewFSM()
			for i := range 20 {
				id := fmt.Sprintf("r%d-%d", g, i)
				if err := f.Apply(&Command{Op: OpFlowPut, Flow: &StoredFlow{ID: FlowID([]byte("x")), Text: []byte("x")}}); err != nil {
					t.Error(err)
					return
				}
				b, err := encodeCommand(&Command{Op: OpRunSubmit, Run: &Run{ID: id, FlowID: FlowID([]byte("x")), State: proto.RunRunning, Gen: 1, Assignment: assign}}, true)
				if err != nil {
					t.Error(err)
					return
				}
				if err := f.ApplyEntry(b); err != nil {
					t.Error(err)
					return
				}
				r, _ := f.Run(id)
				if !slices.Equal(r.Nodes, []string{"n1", "n2"}) {
					t.Errorf("run %s: nodes %v", id, r.Nodes)
				}
				r.Nodes[0] = "scribbled"
			}
		})
	}
	wg.Wait()
}

// BenchmarkPlacementAgain is what a run again on the same placement
// derives from its 100K-task assignment on the way to its Assignment:
// its ranges twice (the run_submit entry, the plans' key) and its nodes
// twice (the submit's boot ids, the FSM's apply). "passes" derives them
// from the tasks each time, as before lastAssignment kept them; "kept"
// as now.
func BenchmarkPlacementAgain(b *testing.B) {
	assign := make([]string, 100_000)
	for v := range assign {
		assign[v] = []string{"n2", "n1", "n3"}[v*3/len(assign)]
	}
	b.Run("passes", func(b *testing.B) {
		for range b.N {
			_, _ = packRanges(assign), packRanges(assign)
			_, _ = nodesOf(assign)
			_, _ = nodesOf(assign)
		}
	})
	b.Run("kept", func(b *testing.B) {
		for range b.N {
			_, _ = rangesOf(assign), rangesOf(assign)
			_, _ = sharedNodesOf(assign)
			_, _ = sharedNodesOf(assign)
		}
	})
}
