package transport

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func sampleMessages() []Message {
	big := bytes.Repeat([]byte{0xab}, 70000) // bin32
	return []Message{
		&Signal{Run: "r1", Gen: 3, Src: 7, Dst: 9, Act: 1, Kind: SignalEdge, Output: []byte("out")},
		&Signal{Run: "r1", Gen: math.MaxUint64, Src: math.MaxUint32, Dst: 0, Act: math.MaxUint64, Kind: SignalChoice},
		&Signal{Run: strings.Repeat("x", MaxIDLen), Gen: 0, Src: 1, Dst: 2, Act: 300, Kind: SignalEdge, Output: []byte{}},
		&Signal{Run: "r", Gen: 1 << 40, Src: 70000, Dst: 200, Act: 65536, Kind: SignalEdge, Output: big},
		&Batch{From: "n1", Seq: 1},
		&Batch{From: "n1", Seq: 99, Signals: []Signal{
			{Run: "r1", Gen: 1, Src: 1, Dst: 2, Act: 1, Kind: SignalEdge, Output: []byte{1, 2, 3}},
			{Run: "r1", Gen: 1, Src: 1, Dst: 3, Act: 1, Kind: SignalChoice},
			{Run: "r1", Gen: 2, Act: 1, Kind: SignalSwitched},
			{Run: "r1", Gen: 2, Src: 4, Dst: 5, Act: 2, Kind: SignalEdge, Output: bytes.Repeat([]byte{9}, 300), DstAct: 3, Ctx: []uint64{2, 1 << 40}},
		}},
		&TaskEvent{Run: "r1", Gen: 2, Task: 5, Name: "body/child", Node: "n2", State: TaskDone, Act: 10, Executions: 11,
			Output: []byte("sum"), Error: "", Start: time.Unix(100, 5), End: time.Unix(-5, 0)},
		&TaskEvent{Run: "r1", Node: "n2", State: TaskFailed, Error: strings.Repeat("e", 40000)},
		&EventBatch{},
		&EventBatch{Events: []TaskEvent{{Run: "r1", Gen: 1, Task: 2, Node: "n1", State: TaskRunning, Act: 1},
			{Run: "r1", Gen: 1, Task: 2, Name: "p/c", Node: "n1", State: TaskDone, Act: 1, Executions: 2, Output: []byte("x"),
				Start: time.Unix(1, 2), End: time.Unix(3, 4)}}},
		&Assignment{Run: "r1", Gen: 4, Nodes: []string{"n1", "n2"}, Owner: []uint32{0, 1, 1, 0}, Plan: Encode(samplePlan()), Boots: []string{"b0c1", ""}},
		&Assignment{Run: "r1", Gen: 4},
		&Assignment{Run: "r1", Gen: 1, Nodes: []string{"n1"}, Owner: []uint32{0, 0}, Plan: Encode(samplePlan()), PlanDigest: bytes.Repeat([]byte{7}, PlanDigestLen)},
		&Assignment{Run: "r1", Gen: 1, Nodes: []string{"n1"}, Owner: []uint32{0, 0}, PlanDigest: bytes.Repeat([]byte{9}, PlanDigestLen)},
		&Cancel{Run: "r1", Gen: 2, Reason: "user asked"},
		&TermReport{Run: "r1", Gen: 2, Node: "n3", Wave: 17, Sent: 1 << 33, Received: 12, Idle: true},
		&TermReport{Run: "r1", Gen: 3, Node: "n3", Wave: 1, Sent: 5, Received: 7, ReceivedFrom: map[string]uint64{"n1": 3, "n3": 4, "dead": 1 << 40}},
		&Envelope{Kind: "hello", Node: "n1", Body: []byte{0}},
		&Envelope{Kind: "drain", Run: "r9"},
		&Ack{Run: "r1", Gen: 4, Node: "n2", Boot: "3fa9c1d2e4b5"},
		&Ack{Run: "r1", Gen: 4, Node: "n2", Boot: "3fa9c1d2e4b5", NeedPlan: true},
		&Ack{Run: strings.Repeat("r", MaxIDLen), Gen: math.MaxUint64, Node: "n"},
		samplePlan(),
		&Plan{Tasks: 3},
		&TaskReport{Run: "r1", Gen: 2, Node: "n2"},
		&TaskReport{Run: "r1", Gen: 2, Node: "n2", Tasks: []TaskDelta{
			{Task: 5, State: TaskDone, Act: 10, Executions: 11, Output: []byte("sum"), Start: time.Unix(100, 5).UnixNano(), End: time.Unix(100, 9).UnixNano()},
			{Task: 5, Name: "body/child", State: TaskRunning, Act: 1, Output: []byte{}, Start: time.Unix(99, 0).UnixNano(), End: time.Unix(101, 0).UnixNano()},
			{Task: math.MaxUint32, State: TaskFailed, Error: "boom", Start: math.MinInt64, End: math.MaxInt64},
			{Task: 0, State: TaskCancelled},
		}},
	}
}

// samplePlan is a node's part of a run of 6 tasks: a module task (1) with
// its members (2, 3), a loop (3 -> 4 -> 3, the condition 4 picking 3
// again), a remote predecessor (0) and a remote successor (5).
func samplePlan() *Plan {
	dev := int32(1)
	return &Plan{Tasks: 6, Vertices: []PlanVertex{
		{Index: 0, Path: "src", Name: "src", Kind: KindStatic, Device: -1, Parent: -1, Loop: -1, Slot: -1},
		{Index: 1, Path: "m", Name: "m", Local: true, Kind: KindModule, Device: -1, Parent: -1, Members: []uint32{2, 3, 4},
			Pred: []PlanEdge{{Peer: 0, Index: -1}}, Succ: []PlanEdge{{Peer: 5, Index: -1}}, Loop: -1, Slot: -1},
		{Index: 2, Path: "m/gpu", Name: "gpu", Local: true, Kind: KindStatic, Func: "saxpy", Domain: DomainGPU, Device: dev, Parent: 1,
			Args: map[string]any{"n": int64(-3), "u": uint64(1 << 63), "x": 1.5, "s": "str", "b": true, "nil": nil,
				"list": []any{int64(1), "two", []any{}}, "map": map[string]any{"k": false}},
			Retries: 2, Timeout: 3 * time.Second, Succ: []PlanEdge{{Peer: 3, Index: -1}}, Loop: -1, Slot: -1},
		{Index: 3, Path: "m/body", Name: "body", Local: true, Kind: KindStatic, Func: "noop", Parent: 1, Device: -1,
			Pred: []PlanEdge{{Peer: 2, Index: -1}, {Peer: 4, Index: 0}}, Succ: []PlanEdge{{Peer: 4, Index: -1}}, Loop: 2, Slot: 0, Free: true},
		{Index: 4, Path: "m/again", Name: "again", Local: true, Kind: KindCondition, Func: "loop", Parent: 1, Device: -1,
			Pred: []PlanEdge{{Peer: 3, Index: -1}}, Succ: []PlanEdge{{Peer: 3, Index: 0}}, Loop: 2, Slot: -1},
		{Index: 5, Path: "sink", Name: "sink", Kind: KindStatic, Device: -1, Parent: -1, Loop: -1, Slot: -1},
	}, Loops: []PlanLoop{{ID: 2, Heads: []uint32{3}}}}
}

func TestPlanRejects(t *testing.T) {
	enc := func(mut func(*Plan)) []byte {
		p := samplePlan()
		mut(p)
		return Encode(p)
	}
	cases := []rejectCase{
		{name: "tasks over the limit", data: enc(func(p *Plan) {}), lim: Limits{MaxTasks: 5}, oversize: true, want: "tasks"},
		{name: "more vertices than tasks", data: enc(func(p *Plan) { p.Tasks = 5; p.Vertices = p.Vertices[:5] }), want: "succ: vertex 5"},
		{name: "index past the run", data: enc(func(p *Plan) { p.Vertices[5].Index = 6 }), want: "index 6 of a run of 6"},
		{name: "vertices out of order", data: enc(func(p *Plan) { p.Vertices[1].Index = 0 }), want: "ascending"},
		{name: "edge past the run", data: enc(func(p *Plan) { p.Vertices[3].Pred[0].Peer = 99 }), want: "pred: vertex 99"},
		{name: "member past the run", data: enc(func(p *Plan) { p.Vertices[1].Members[0] = 6 }), want: "members: vertex 6"},
		{name: "parent past the run", data: enc(func(p *Plan) { p.Vertices[2].Parent = 6 }), want: "parent: 6 out of range"},
		{name: "unknown kind", data: enc(func(p *Plan) { p.Vertices[2].Kind = 9 }), want: "unknown task kind 9"},
		{name: "unknown domain", data: enc(func(p *Plan) { p.Vertices[2].Domain = 7 }), want: "unknown domain 7"},
		{name: "negative timeout", data: enc(func(p *Plan) { p.Vertices[2].Timeout = -1 }), want: "timeout: negative"},
		{name: "loop not in the plan", data: enc(func(p *Plan) { p.Vertices[4].Loop = 3 }), want: "loop 3 is not among"},
		{name: "slot past the context", data: enc(func(p *Plan) { p.Vertices[4].Slot = 1 }), want: "slot 1 of a loop context of 1"},
		{name: "slot outside a loop", data: enc(func(p *Plan) { p.Vertices[2].Slot = 0 }), want: "outside a loop"},
		{name: "loops out of order", data: enc(func(p *Plan) { p.Loops = append(p.Loops, PlanLoop{ID: 2}) }), want: "ascending"},
		{name: "head past the run", data: enc(func(p *Plan) { p.Loops[0].Heads[0] = 6 }), want: "heads: vertex 6"},
		{name: "context over the limit", data: enc(func(p *Plan) { p.Loops[0].Heads = make([]uint32, MaxSignalCtx+1) }), oversize: true, want: "heads"},
		{name: "path over the limit", data: enc(func(p *Plan) { p.Vertices[0].Path = strings.Repeat("p", 100) }), lim: Limits{MaxText: 99}, oversize: true, want: "path"},
		{name: "args nested too deep", data: enc(func(p *Plan) {
			var v any = int64(1)
			for range MaxArgsDepth + 1 {
				v = []any{v}
			}
			p.Vertices[2].Args = map[string]any{"deep": v}
		}), want: "nested deeper"},
		{name: "args not a map", data: bytes.Replace(enc(func(p *Plan) { p.Vertices[3].Args = map[string]any{} }), []byte{0xa4, 'n', 'o', 'o', 'p', 0x80}, []byte{0xa4, 'n', 'o', 'o', 'p', 0x90}, 1), want: "args: want a map"},
		{name: "args with a fixint", data: bytes.Replace(enc(func(p *Plan) { p.Vertices[3].Args = map[string]any{"k": true} }), []byte{0xa1, 'k', 0xc3}, []byte{0xa1, 'k', 0x05}, 1), want: "format byte 0x05"},
		{name: "name past the path", data: bytes.Replace(enc(func(p *Plan) {}), []byte{0xa3, 's', 'r', 'c', 0}, []byte{0xa3, 's', 'r', 'c', 4}, 1), want: "name_at 4"},
	}
	checkRejects(t, cases, func(b []byte, l Limits) error { _, err := DecodePlan(b, l); return err })
	if err := samplePlan().Validate(); err != nil {
		t.Errorf("the sample plan: %v", err)
	}
	bad := samplePlan()
	bad.Vertices[2].Name = "other"
	if err := bad.Validate(); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "not the end of its path") {
		t.Errorf("a name that is not its path's end: %v", err)
	}
}

// A plan's encoding does not depend on the order of a map's keys: the
// node caches compiled plans by their bytes' hash.
func TestPlanEncodingIsStable(t *testing.T) {
	first := Encode(samplePlan())
	for range 20 {
		if !bytes.Equal(Encode(samplePlan()), first) {
			t.Fatal("two encodings of one plan differ")
		}
	}
}

func decodeInto(t *testing.T, m Message, data []byte) Message {
	t.Helper()
	out := reflect.New(reflect.TypeOf(m).Elem()).Interface().(interface {
		Message
		Decode([]byte, Limits) error
	})
	if err := out.Decode(data, Limits{}); err != nil {
		t.Fatalf("%T: decode: %v", m, err)
	}
	return out
}

// normalize makes times comparable with reflect.DeepEqual (locations differ).
func normalize(m Message) Message {
	if e, ok := m.(*TaskEvent); ok {
		c := *e
		if !c.Start.IsZero() {
			c.Start = time.Unix(0, c.Start.UnixNano())
		}
		if !c.End.IsZero() {
			c.End = time.Unix(0, c.End.UnixNano())
		}
		return &c
	}
	return m
}

func TestRoundTrip(t *testing.T) {
	for _, m := range sampleMessages() {
		data := Encode(m)
		got := decodeInto(t, m, data)
		if !reflect.DeepEqual(normalize(got), normalize(m)) {
			t.Errorf("%T round trip:\n got %+v\nwant %+v", m, got, m)
		}
		// The generic decoder agrees.
		any, err := Decode(data, Limits{})
		if err != nil {
			t.Fatalf("%T: Decode: %v", m, err)
		}
		if any.Type() != m.Type() || !reflect.DeepEqual(normalize(any), normalize(m)) {
			t.Errorf("%T: Decode gave %T %+v", m, any, any)
		}
		if typ, err := PeekType(data); err != nil || typ != m.Type() {
			t.Errorf("%T: PeekType = %v, %v", m, typ, err)
		}
	}
}

func TestNilAndEmptyOutputsStayDistinct(t *testing.T) {
	for _, out := range [][]byte{nil, {}} {
		s := Signal{Run: "r", Act: 1, Kind: SignalEdge, Output: out}
		got, err := DecodeSignal(Encode(&s), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if (got.Output == nil) != (out == nil) {
			t.Errorf("output %#v came back as %#v", out, got.Output)
		}
	}
}

// The encoding is standard msgpack: a generic decoder reads the same fields.
func TestWireIsStandardMsgpack(t *testing.T) {
	s := &Signal{Run: "r1", Gen: 3, Src: 7, Dst: 9, Act: 1000, Kind: SignalChoice, Output: []byte("o"), DstAct: 4, Ctx: []uint64{3, 300}}
	var v []any
	if err := msgpack.Unmarshal(Encode(s), &v); err != nil {
		t.Fatal(err)
	}
	want := []any{int8(1), int8(Version), "r1", int8(3), int8(7), int8(9), uint16(1000), int8(2), []byte("o"), int8(4), []any{int8(3), uint16(300)}}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("generic msgpack sees %#v, want %#v", v, want)
	}
}

// Every strict prefix of every valid message is rejected as malformed, and so is
// any valid message with a byte appended.
func TestTruncatedAndTrailing(t *testing.T) {
	for _, m := range sampleMessages() {
		data := Encode(m)
		step := 1
		if len(data) > 2000 {
			step = 97
		}
		for n := 0; n < len(data); n += step {
			if _, err := Decode(data[:n], Limits{}); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%T truncated to %d of %d bytes: err %v", m, n, len(data), err)
			}
		}
		if _, err := Decode(append(append([]byte{}, data...), 0), Limits{}); !errors.Is(err, ErrMalformed) ||
			!strings.Contains(err.Error(), "trailing") {
			t.Fatalf("%T with a trailing byte: %v", m, err)
		}
	}
}

// rejectCase is bytes a decoder must refuse as malformed (and oversized,
// or not), with an error that mentions want.
type rejectCase struct {
	name     string
	data     []byte
	lim      Limits
	oversize bool
	want     string
}

func checkRejects(t *testing.T, cases []rejectCase, decode func([]byte, Limits) error) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := decode(tc.data, tc.lim)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
			if errors.Is(err, ErrOversized) != tc.oversize {
				t.Errorf("ErrOversized = %v, want %v (%v)", !tc.oversize, tc.oversize, err)
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	sig := func(mut func(*Signal)) []byte {
		s := Signal{Run: "r1", Gen: 1, Src: 1, Dst: 2, Act: 1, Kind: SignalEdge, Output: []byte("x")}
		mut(&s)
		return Encode(&s)
	}
	raw := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tr := Encode(&TermReport{Run: "r", Node: "n"}) // ends with the idle bool and an empty map
	cases := []rejectCase{
		{name: "empty", data: nil, want: "truncated"},
		{name: "not an array", data: []byte{0xa1, 'x'}, want: "want an array"},
		{name: "unknown type", data: []byte{0x92, 42, 1}, want: "unknown message type 42"},
		{name: "unknown version", data: raw([]byte{0x9b, 1, 3}, sig(func(*Signal) {})[3:]), want: "unsupported version 3"},
		{name: "wrong field count", data: []byte{0x93, 1, Version, 0xa1, 'r'}, want: "want 11 fields, found 3"},
		{name: "older version, other field count", data: []byte{0x93, 1, Version - 1, 0xa1, 'r'}, want: "unsupported version"},
		{name: "no room for a header", data: []byte{0x91, 1}, want: "want 11 fields, found 1"},
		{name: "act zero", data: sig(func(s *Signal) { s.Act = 0 }), want: "activation 0"},
		{name: "bad kind", data: sig(func(s *Signal) { s.Kind = 9 }), want: "unknown signal kind 9"},
		{name: "kind after switched", data: sig(func(s *Signal) { s.Kind = SignalSwitched + 1 }), want: "unknown signal kind 4"},
		{name: "run with dot", data: sig(func(s *Signal) { s.Run = "a.b" }), want: "not a valid id"},
		{name: "empty run", data: sig(func(s *Signal) { s.Run = "" }), want: "not a valid id"},
		{name: "run too long", data: sig(func(s *Signal) { s.Run = strings.Repeat("r", MaxIDLen+1) }), oversize: true},
		{name: "output over limit", data: sig(func(s *Signal) { s.Output = make([]byte, 11) }), lim: Limits{MaxOutput: 10}, oversize: true},
		{name: "message over limit", data: sig(func(s *Signal) { s.Output = make([]byte, 100) }), lim: Limits{MaxMessage: 50}, oversize: true},
		{name: "batch over limit", data: Encode(&Batch{From: "n", Signals: make([]Signal, 3)}), lim: Limits{MaxBatch: 2}, oversize: true},
		{name: "batch claims huge length", data: []byte{0x96, 2, Version, 0xa1, 'n', 1, 0xa1, 'r', 0xdd, 0x7f, 0xff, 0xff, 0xff}, lim: Limits{MaxBatch: math.MaxInt32}, want: "claims"},
		{name: "bin claims huge length", data: raw(sig(func(s *Signal) { s.Output = nil })[:len(sig(func(s *Signal) { s.Output = nil }))-3], []byte{0xc6, 0x7f, 0, 0, 0}), lim: Limits{MaxOutput: math.MaxInt32, MaxMessage: math.MaxInt32}, want: "truncated"},
		{name: "ctx over limit", data: sig(func(s *Signal) { s.Ctx = make([]uint64, MaxSignalCtx+1) }), oversize: true},
		{name: "ctx not an array", data: raw(sig(func(*Signal) {})[:len(sig(func(*Signal) {}))-1], []byte{0xa1, 'x'}), want: "ctx: want an array"},
		{name: "negative gen", data: raw([]byte{0x9b, 1, Version, 0xa1, 'r', 0xff}, make([]byte, 8)), want: "negative"},
		{name: "src over 32 bits", data: raw([]byte{0x9b, 1, Version, 0xa1, 'r', 0, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0}), want: "32 bits"},
		{name: "string where int", data: raw([]byte{0x9b, 1, Version, 0xa1, 'r', 0xa1, 'g'}, make([]byte, 8)), want: "want an unsigned integer"},
		{name: "owner out of range", data: Encode(&Assignment{Run: "r", Nodes: []string{"n"}, Owner: []uint32{0, 1}}), want: "only 1 nodes"},
		{name: "boots not one per node", data: Encode(&Assignment{Run: "r", Nodes: []string{"n", "m"}, Owner: []uint32{0, 1}, Boots: []string{"b1"}}), want: "1 entries for 2 nodes"},
		{name: "boots over the nodes", data: Encode(&Assignment{Run: "r", Nodes: []string{"n"}, Owner: []uint32{0}, Boots: []string{"b1", "b2"}}), oversize: true, want: "boots"},
		{name: "short plan digest", data: Encode(&Assignment{Run: "r", Nodes: []string{"n"}, Owner: []uint32{0}, PlanDigest: []byte{1, 2, 3}}), want: "plan_digest: 3 bytes"},
		{name: "long plan digest", data: Encode(&Assignment{Run: "r", Nodes: []string{"n"}, Owner: []uint32{0}, PlanDigest: make([]byte, 33)}), oversize: true, want: "plan_digest"},
		{name: "bad boot", data: Encode(&Assignment{Run: "r", Nodes: []string{"n"}, Owner: []uint32{0}, Boots: []string{"a.b"}}), want: "not a valid id"},
		{name: "bad state", data: raw(Encode(&TaskEvent{Run: "r", Node: "n"})[:10], []byte{9}, Encode(&TaskEvent{Run: "r", Node: "n"})[11:]), want: "unknown task state"},
		{name: "ack without node", data: Encode(&Ack{Run: "r", Gen: 1}), want: "not a valid id"},
		{name: "ack with a bad boot", data: Encode(&Ack{Run: "r", Gen: 1, Node: "n", Boot: "a b"}), want: "not a valid id"},
		{name: "envelope without kind", data: Encode(&Envelope{}), want: "kind: empty"},
		{name: "bool expected", data: raw(tr[:len(tr)-2], []byte{1, 0x80}), want: "want a bool"},
		{name: "received_from not a map", data: raw(tr[:len(tr)-1], []byte{0x90}), want: "want a map"},
		{name: "received_from sender twice", data: raw(tr[:len(tr)-1], []byte{0x82, 0xa1, 'a', 1, 0xa1, 'a', 2}), want: "given twice"},
		{name: "received_from bad sender", data: raw(tr[:len(tr)-1], []byte{0x81, 0xa3, 'a', '.', 'b', 1}), want: "not a valid id"},
		{name: "received_from claims huge length", data: raw(tr[:len(tr)-1], []byte{0xdf, 0, 0xff, 0xff, 0xff}), want: "claims"},
	}
	checkRejects(t, cases, func(b []byte, l Limits) error { _, err := Decode(b, l); return err })
}

// Non-minimal but legal encodings are accepted (the Batcher writes some).
func TestNonMinimalEncodings(t *testing.T) {
	// [1, Version, "r", gen=int8 5, src=uint32 1, dst=uint16 2, act=int64 3, kind, nil, dst_act=uint16 4, array16 [int8 7]]
	data := []byte{0xdc, 0, 11, 0xcc, 1, Version, 0xd9, 1, 'r', 0xd0, 5, 0xce, 0, 0, 0, 1, 0xcd, 0, 2,
		0xd3, 0, 0, 0, 0, 0, 0, 0, 3, 1, 0xc0, 0xcd, 0, 4, 0xdc, 0, 1, 0xd0, 7}
	s, err := DecodeSignal(data, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := Signal{Run: "r", Gen: 5, Src: 1, Dst: 2, Act: 3, Kind: SignalEdge, DstAct: 4, Ctx: []uint64{7}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("got %+v want %+v", s, want)
	}
}

func TestAssignmentHelpers(t *testing.T) {
	a := Assignment{Run: "r", Nodes: []string{"a", "b"}, Owner: []uint32{1, 0, 1}}
	if got := a.TasksOf("b"); !reflect.DeepEqual(got, []uint32{0, 2}) {
		t.Errorf("TasksOf(b) = %v", got)
	}
	if got := a.TasksOf("zz"); got != nil {
		t.Errorf("TasksOf(zz) = %v", got)
	}
	if a.NodeOf(1) != "a" || a.NodeOf(3) != "" {
		t.Errorf("NodeOf wrong: %q %q", a.NodeOf(1), a.NodeOf(3))
	}
}

func TestDecodeIntoReusedBatch(t *testing.T) {
	var b Batch
	big := Encode(&Batch{From: "n", Signals: []Signal{{Run: "a", Act: 1, Kind: 1}, {Run: "a", Act: 2, Kind: 1}}})
	small := Encode(&Batch{From: "m", Seq: 2, Signals: []Signal{{Run: "b", Act: 5, Kind: 2}}})
	if err := b.Decode(big, Limits{}); err != nil || len(b.Signals) != 2 {
		t.Fatal(err, b)
	}
	if err := b.Decode(small, Limits{}); err != nil || len(b.Signals) != 1 || b.Signals[0].Run != "b" || b.From != "m" {
		t.Fatalf("%v %+v", err, b)
	}
}

// PeekBatch reads what Decode reads of a batch's start, and refuses what is
// not a batch with a Signal, cut anywhere.
func TestPeekBatch(t *testing.T) {
	bt := Batch{From: "node-1", Seq: 1 << 40}
	for i := range 3 {
		s := benchSignal(i)
		s.Gen = uint64(7 + i)
		bt.Signals = append(bt.Signals, s)
	}
	data := Encode(&bt)
	from, seq, gen, n, ok := PeekBatch(data, Limits{})
	if !ok || from != bt.From || seq != bt.Seq || gen != 7 || n != 3 {
		t.Fatalf("PeekBatch = %q %d %d %d %v, want %q %d 7 3 true", from, seq, gen, n, ok, bt.From, bt.Seq)
	}
	if _, _, _, _, ok := PeekBatch(Encode(&Batch{From: "n", Seq: 1}), Limits{}); ok {
		t.Fatal("an empty batch peeked")
	}
	sig := benchSignal(1)
	if _, _, _, _, ok := PeekBatch(Encode(&sig), Limits{}); ok {
		t.Fatal("a Signal peeked as a batch")
	}
	// Cut anywhere: a prefix too short to hold the first Signal's gen does
	// not peek, a longer one peeks the same; neither panics.
	first := -1
	for cut := range len(data) {
		f, s, g, k, ok := PeekBatch(data[:cut], Limits{})
		if !ok {
			if first >= 0 {
				t.Fatalf("cut %d does not peek, cut %d did", cut, first)
			}
			continue
		}
		if first < 0 {
			first = cut
		}
		if f != from || s != seq || g != gen || k != n {
			t.Fatalf("cut %d peeks %q %d %d %d", cut, f, s, g, k)
		}
	}
	if first < 0 || first > len(data)/2 {
		t.Fatalf("the first prefix that peeks is %d bytes of %d: PeekBatch reads more than the batch's start", first, len(data))
	}
}

// A batch names its run once (Version 9): however many Signals it holds,
// the run's bytes appear once in its encoding, and every decoded Signal
// has it. A batch of Signals without a valid run, and one of no Signals
// that names a run, are refused.
func TestBatchNamesItsRunOnce(t *testing.T) {
	const run = "r0123456789abcdef-xyz"
	var bt Batch
	bt.From, bt.Seq = "n1", 5
	for i := range 50 {
		bt.Signals = append(bt.Signals, Signal{Run: run, Gen: 1, Src: uint32(i), Dst: 7, Act: 1, Kind: SignalEdge})
	}
	data := Encode(&bt)
	if n := bytes.Count(data, []byte(run)); n != 1 {
		t.Fatalf("the run appears %d times in a batch of 50 Signals, want 1", n)
	}
	got, err := DecodeBatch(data, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range got.Signals {
		if got.Signals[i].Run != run || got.Signals[i].Src != uint32(i) {
			t.Fatalf("signal %d: %+v", i, got.Signals[i])
		}
	}
	// the run's place: after from (n1) and seq (a fixint)
	at := bytes.Index(data, []byte(run)) - 1
	bad := func(name string, replace []byte, lim Limits) {
		t.Helper()
		d := append(append(append([]byte(nil), data[:at]...), replace...), data[at+1+len(run):]...)
		if _, err := DecodeBatch(d, lim); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	bad("no run", []byte{0xa0}, Limits{})
	bad("a run that is no id", []byte{0xa3, 'a', '.', 'b'}, Limits{})
	bad("a run that is no string", []byte{0x01}, Limits{})
	for _, n := range []int{0, 31, 32, 255, 256, 65535, 65536} {
		if s := strings.Repeat("x", n); strLen(s) != len(appendStr(nil, s)) {
			t.Errorf("strLen of %d bytes: %d, want %d", n, strLen(s), len(appendStr(nil, s)))
		}
	}
	empty := Encode(&Batch{From: "n1", Seq: 5})
	named := bytes.Replace(empty, []byte{0xa0}, []byte{0xa1, 'r'}, 1)
	if _, err := DecodeBatch(empty, Limits{}); err != nil {
		t.Errorf("an empty batch: %v", err)
	}
	if _, err := DecodeBatch(named, Limits{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("an empty batch that names a run: %v, want ErrMalformed", err)
	}
	if from, seq, gen, n, ok := PeekBatch(data, Limits{}); !ok || from != "n1" || seq != 5 || gen != 1 || n != 50 {
		t.Errorf("PeekBatch: %s %d %d %d %v", from, seq, gen, n, ok)
	}
}

// A fan entry (Version 6) decodes to one Signal per destination and is
// smaller than the Signals one by one; one of fewer than two destinations,
// one outside a batch, and one that would make a batch larger than
// MaxBatch are refused.
func TestFanEntries(t *testing.T) {
	s := benchSignal(3)
	batch := func(dsts ...[]uint32) []byte {
		b := appendHeader(nil, TypeBatch, batchFields)
		b = appendStr(b, "n1")
		b = appendUint(b, 9)
		b = appendStr(b, s.Run)
		b = appendArrayHeader(b, len(dsts))
		for _, d := range dsts {
			b = appendArrayHeader(b, entryFields)
			b = s.appendFan(b, d)
		}
		return b
	}
	var flat Batch
	flat.From, flat.Seq = "n1", 9
	for d := range uint32(100) {
		c := s
		c.Dst = d
		flat.Signals = append(flat.Signals, c)
	}
	dsts := make([]uint32, 100)
	for i := range dsts {
		dsts[i] = uint32(i)
	}
	fan := batch(dsts)
	got, err := DecodeBatch(fan, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(flat) {
		t.Fatalf("the fan decodes to\n%+v\nwant\n%+v", got, flat)
	}
	if len(fan)*5 > len(Encode(&flat)) {
		t.Fatalf("a fan of 100 takes %d bytes, the Signals one by one %d", len(fan), len(Encode(&flat)))
	}
	for _, c := range []struct {
		name string
		data []byte
		lim  Limits
	}{
		{"a fan of one", bytes.Replace(batch([]uint32{1, 2}), []byte{0x92, 1, 2}, []byte{0x91, 1}, 1), Limits{}},
		{"a fan of none", bytes.Replace(batch([]uint32{1, 2}), []byte{0x92, 1, 2}, []byte{0x90}, 1), Limits{}},
		{"over MaxBatch", batch([]uint32{1, 2, 3}, []uint32{4, 5, 6}), Limits{MaxBatch: 5}},
		{"outside a batch", s.appendFan(appendStr(appendHeader(nil, TypeSignal, signalFields), s.Run), []uint32{1, 2}), Limits{}},
	} {
		var err error
		if c.name == "outside a batch" {
			_, err = DecodeSignal(c.data, c.lim)
		} else {
			_, err = DecodeBatch(c.data, c.lim)
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", c.name, err)
		}
	}
	if _, err := DecodeBatch(batch([]uint32{1, 2, 3}, []uint32{4, 5}), Limits{MaxBatch: 5}); err != nil {
		t.Errorf("fans of 5 Signals in all, MaxBatch 5: %v", err)
	}
}

// TestStoredEventsOfVersion5: the task events an earlier build stored (the
// event stream keeps them for days) are still read after the bumps to
// version 6, whose change touched only a Batch's entries, and to 7, which
// added a TaskReport's range entries (a report of versions 5 and 6 holds
// single deltas alone), to 8 and to 9 (an Assignment's and a Batch's
// changes); a message between live processes of an earlier version is
// still refused (a version 8 batch among them).
func TestStoredEventsOfVersion5(t *testing.T) {
	for _, v := range []byte{5, 6, 7, 8} {
		testStoredEventsOf(t, v)
	}
}

func testStoredEventsOf(t *testing.T, v byte) {
	asV5 := func(b []byte) []byte {
		b = append([]byte(nil), b...)
		if b[2] != Version { // [fixarray, type, version, ...]
			t.Fatalf("version byte %d, want %d", b[2], Version)
		}
		b[2] = v
		return b
	}
	ev := TaskEvent{Run: "r1", Gen: 2, Task: 7, Name: "a", Node: "n1", State: TaskDone, Act: 3, Executions: 3}
	count := func(data []byte) int {
		n := 0
		if err := EachEvent(data, Limits{}, func(e *TaskEvent) error {
			if e.Run != "r1" || e.Task != 7 || e.Act != 3 {
				t.Errorf("event %+v", *e)
			}
			n++
			return nil
		}); err != nil {
			t.Fatalf("a stored version 5 message: %v", err)
		}
		return n
	}
	if n := count(asV5(ev.AppendWire(nil))); n != 1 {
		t.Errorf("TaskEvent: %d events, want 1", n)
	}
	if n := count(asV5((&EventBatch{Events: []TaskEvent{ev, ev}}).AppendWire(nil))); n != 2 {
		t.Errorf("EventBatch: %d events, want 2", n)
	}
	rep := TaskReport{Run: "r1", Gen: 2, Node: "n1", Tasks: []TaskDelta{{Task: 7, State: TaskDone, Act: 3, Executions: 3}}}
	if n := count(asV5(rep.AppendWire(nil))); n != 1 {
		t.Errorf("TaskReport: %d events, want 1", n)
	}
	var s Signal
	err := s.Decode(asV5((&Signal{Run: "r1", Gen: 1, Src: 1, Dst: 2, Act: 1}).AppendWire(nil)), Limits{})
	if !errors.Is(err, ErrMalformed) {
		t.Errorf("a version %d Signal: %v, want ErrMalformed", v, err)
	}
	var bt Batch
	err = bt.Decode(asV5((&Batch{From: "n1", Seq: 1, Signals: []Signal{{Run: "r1", Gen: 1, Src: 1, Dst: 2, Act: 1}}}).AppendWire(nil)), Limits{})
	if !errors.Is(err, ErrMalformed) {
		t.Errorf("a version %d Batch: %v, want ErrMalformed", v, err)
	}
}

// A Batch whose Signals name two runs cannot be said on the wire, which
// names a batch's run once: it is written so that every receiver refuses it,
// never with the second run's Signals relabelled as the first's.
func TestBatchOfTwoRunsRefused(t *testing.T) {
	bt := Batch{From: "n1", Seq: 1, Signals: []Signal{
		{Run: "ra", Gen: 1, Src: 1, Dst: 2, Act: 1, Kind: SignalEdge},
		{Run: "rb", Gen: 1, Src: 3, Dst: 4, Act: 1, Kind: SignalEdge},
	}}
	got, err := DecodeBatch(Encode(&bt), Limits{})
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("a batch of runs ra and rb decoded as %+v, %v; want ErrMalformed", got, err)
	}
}

// An Assignment's encoding fits the room Encode makes for it (sizeHint):
// the buffer of a 100K-task owner table is made once, not grown, whatever
// the bytes of a node's index (1, 2 or 3); it decodes back, the owners
// read a byte at a time or the general way (appendOwners, decodeOwners).
func TestAssignmentSizeHint(t *testing.T) {
	for _, nodes := range []int{1, 3, 200, 300} {
		a := &Assignment{Run: "r0123456789abcdefghij", Gen: 2, Owner: make([]uint32, 100_000), Plan: make([]byte, 1000), PlanDigest: make([]byte, PlanDigestLen)}
		for i := range nodes {
			a.Nodes = append(a.Nodes, fmt.Sprintf("node-%d", i))
			a.Boots = append(a.Boots, fmt.Sprintf("boot-%d", i))
		}
		for v := range a.Owner {
			a.Owner[v] = uint32(v % nodes)
		}
		b := Encode(a)
		if len(b) > a.sizeHint() || cap(b) != a.sizeHint() {
			t.Errorf("%d nodes: %d bytes in a buffer of %d, hint %d", nodes, len(b), cap(b), a.sizeHint())
		}
		if a.sizeHint() > 3*len(b) { // an index takes the bytes of the last node's: over past 128 nodes
			t.Errorf("%d nodes: hint %d for %d bytes", nodes, a.sizeHint(), len(b))
		}
		var back Assignment
		if err := back.Decode(b, Limits{}); err != nil || !slices.Equal(back.Owner, a.Owner) {
			t.Fatalf("%d nodes: %v", nodes, err)
		}
		// an owner that names no node, in a stretch of one-byte owners and
		// past one (decodeOwners' fast and general ways): refused, by task
		for _, v := range []int{7, 99_999} {
			bad := *a
			bad.Owner = slices.Clone(a.Owner)
			bad.Owner[v] = uint32(nodes)
			want := fmt.Sprintf("owner of task %d: node index %d", v, nodes)
			if err := back.Decode(Encode(&bad), Limits{}); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%d nodes, task %d owned by node %d: %v, want %q", nodes, v, nodes, err, want)
			}
		}
	}
}

// An Assignment decoded like an owner table is that table when its owners
// are equal to it, and else a table of its own holding its owners, the
// table it was like left as it was: whatever the first difference (first,
// middle, last owner; a one-byte owner or a longer one), and for a table
// of another length. An owner that names no node is refused either way.
func TestAssignmentDecodeLike(t *testing.T) {
	for _, nodes := range []int{3, 300} {
		names := make([]string, nodes)
		for i := range names {
			names[i] = fmt.Sprintf("n%d", i)
		}
		owner := make([]uint32, 2000)
		for i := range owner {
			owner[i] = uint32(i*7) % uint32(nodes)
		}
		data := func(o []uint32) []byte { return Encode(&Assignment{Run: "r", Gen: 1, Nodes: names, Owner: o}) }
		like := slices.Clone(owner)
		var a Assignment
		if err := a.decodeLike(data(owner), DefaultLimits, like); err != nil || &a.Owner[0] != &like[0] {
			t.Fatalf("%d nodes: equal owners: %v, not the table they are like", nodes, err)
		}
		for _, at := range []int{0, 1, 999, 1998, 1999} {
			o := slices.Clone(owner)
			o[at] = (o[at] + uint32(nodes) - 1) % uint32(nodes)
			if err := a.decodeLike(data(o), DefaultLimits, like); err != nil || !slices.Equal(a.Owner, o) || &a.Owner[0] == &like[0] || !slices.Equal(like, owner) {
				t.Fatalf("%d nodes, owner %d other: %v, owners right %v, like kept %v", nodes, at, err, slices.Equal(a.Owner, o), slices.Equal(like, owner))
			}
		}
		if err := a.decodeLike(data(owner[:1999]), DefaultLimits, like); err != nil || !slices.Equal(a.Owner, owner[:1999]) {
			t.Fatalf("%d nodes: a shorter table: %v", nodes, err)
		}
		bad := data(owner)
		if nodes == 3 { // the owner of task 5 (a one-byte 2) names node 3 of 3
			i := bytes.Index(bad, []byte{0, 1, 2, 0, 1, 2}) + 5
			bad[i] = 3
		} else {
			continue
		}
		if err := a.decodeLike(bad, DefaultLimits, like); err == nil {
			t.Fatalf("an owner naming no node decoded like a table: %v", a.Owner[:8])
		}
	}
}
