package coord

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/hetflow/hetflow/cluster/proto"
)

// submitCases are submit bodies in the client's shape and around it:
// escapes of every kind in the flow, a flow first, last or alone, params
// with strings that hold brackets and quotes, keys encoding/json folds to
// "flow", two flows, a null one, bad JSON in and around the string.
var submitCases = []string{
	`{"path":"a.yaml","flow":"name: a\ntasks:\n  - {name: x, func: noop}\n"}`,
	`{"path":"a.json","flow":"{\"name\":\"a\",\"tasks\":[{\"name\":\"x\",\"func\":\"noop\",\"args\":{\"s\":\"\u003c\u0026\u003e\"}}]}","id":"r0000000000000-abcdef","params":{"n":9007199254740993,"s":"x}]\"","l":[1,{"a":null},true]}}`,
	`{"flow":"","path":"p"}`,
	` { "flow" : "a\/b\\c\"d\b\f\n\r\t\u00e9\u2028\u0000" } `,
	`{"flow":"日本 é"}`,
	"{\"flow\":\"bad \xff utf8\"}",
	`{"flow":"\ud83d\ude00 pair"}`,
	`{"flow":"\ud83d lone"}`,
	`{"flow":"\u12"}`,
	`{"flow":"\x"}`,
	"{\"flow\":\"ctl \x01\"}",
	`{"flow":"no end}`,
	`{"Flow":"a"}`,
	`{"FLOW":"a","flow":"b"}`,
	`{"fl\u006fw":"a"}`,
	"{\"\u017flow\":\"a\"}",
	`{"flow":"a","flow":"b"}`,
	`{"flow":null}`,
	`{"flow":1}`,
	`{"flow":"a",}`,
	`{"flow":"a"`,
	`{"flow":"a"} x`,
	`{"flow":"a"}{}`,
	`{"flow":"a"} `,
	`{"flow":"a","params":{"n":01}}`,
	`{"flow":"a","params":{"n":[1,2}}`,
	`{"flow":"a","id":5}`,
	`{"flow":"a",,"path":"p"}`,
	`{"path":"p"}`,
	`{}`,
	`[]`,
	`null`,
	``,
}

// splitSubmit reads every body as handleSubmit's encoding/json path does,
// or leaves it to that path: the same request and flow, and never a body
// that path refuses.
func TestSplitSubmitAsEncodingJSON(t *testing.T) {
	split := 0
	for _, c := range submitCases {
		checkSubmit(t, []byte(c))
		if _, _, ok := splitSubmit([]byte(c)); ok {
			split++
		}
	}
	if split < 6 {
		t.Fatalf("only %d of the bodies were split", split)
	}
	// The client's own body (json.Marshal's bytes) is split.
	req := proto.SubmitRequest{Path: "a.json", Flow: "{\"name\": \"a<&>\",\n\t\"tasks\": [] }\u2028é", ID: "r1", Params: map[string]any{"n": json.Number("3")}}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	checkSubmit(t, b)
	got, flow, ok := splitSubmit(b)
	got.Flow = string(flow)
	if !ok || !reflect.DeepEqual(got, req) {
		t.Fatalf("the client's body: split %v, read %+v, want %+v", ok, got, req)
	}
}

func checkSubmit(t *testing.T, b []byte) {
	t.Helper()
	var want proto.SubmitRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	werr := dec.Decode(&want)
	valid := werr == nil && !dec.More()
	got, flow, ok := splitSubmit(b)
	if !ok {
		return
	}
	if !valid {
		t.Fatalf("%q: split; encoding/json refuses it (%v)", b, werr)
	}
	if got.Flow != "" {
		t.Fatalf("%q: split with a Flow field %q", b, got.Flow)
	}
	got.Flow = string(flow)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: split as %#v; encoding/json reads %#v", b, got, want)
	}
}

func FuzzSplitSubmit(f *testing.F) {
	for _, c := range submitCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkSubmit(t, b) })
}

// BenchmarkSubmitBody100K reads the 100K-task layered DAG's submit body
// (JSON, its quotes escaped) as handleSubmit does, and as encoding/json did.
func BenchmarkSubmitBody100K(b *testing.B) {
	var flow bytes.Buffer
	flow.WriteString(`{"name":"layered","tasks":[`)
	for l := range 100 {
		for i := range 1000 {
			if l+i > 0 {
				flow.WriteByte(',')
			}
			flow.WriteString(`{"name":"L` + itoa(l) + "_" + itoa(i) + `","func":"noop"`)
			if l > 0 {
				flow.WriteString(`,"succeed":["L` + itoa(l-1) + "_" + itoa(i) + `","L` + itoa(l-1) + "_" + itoa((i+7)%1000) + `"]`)
			}
			flow.WriteByte('}')
		}
	}
	flow.WriteString("]}")
	body, err := json.Marshal(proto.SubmitRequest{Path: "layered.json", Flow: flow.String()})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("split", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, f, ok := splitSubmit(body); !ok || len(f) != flow.Len() {
				b.Fatal("not split")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req proto.SubmitRequest
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.UseNumber()
			if err := dec.Decode(&req); err != nil {
				b.Fatal(err)
			}
			if f := []byte(req.Flow); len(f) != flow.Len() {
				b.Fatal("short")
			}
		}
	})
	b.ReportMetric(float64(len(body)), "body-B/op")
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}
