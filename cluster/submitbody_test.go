package cluster

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/flowgen"
)

// TestSubmitBodyIsMarshal: a submit's body is the bytes json.Marshal makes
// of its request, whatever the flow's text holds (escapes, HTML, bytes
// that are not UTF-8, U+2028), the id and the parameters.
func TestSubmitBodyIsMarshal(t *testing.T) {
	texts := []string{"", "a", "flows:\n  - name: x\n\ttasks: []\r\n", `{"a": "b\\c"}`, "<&>", "\x00\x01\x1f\x7f \b\f",
		"é ü 日本 🙂", "\u2028\u2029", "\xff", "a\xc3", "\xe2\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok\xc3\xa9\xc3"}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab\"\\<>&\n\t\x01\x7f\xc3\xa9\xe2\x80\xa8\xa9\xff\xf0\x9f\x99\x82")
	for range 2000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		texts = append(texts, string(b))
	}
	reqs := []proto.SubmitRequest{{Path: "f.yaml"}, {Path: "a<b>\"c\".json", ID: "r1"},
		{Path: "p.yaml", ID: "r2", Params: map[string]any{"n": json.Number("3"), "who": "<ann>", "b": true}},
		{Path: "", Params: map[string]any{"x": 1.5}}}
	for _, req := range reqs {
		for _, text := range texts {
			got, err := submitBody(req, []byte(text))
			if err != nil {
				t.Fatal(err)
			}
			r := req
			r.Flow = text
			want, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("flow %q, request %+v:\n got %s\nwant %s", text, req, got, want)
			}
		}
	}
}

// BenchmarkSubmitBody100K is a submit's request body for the 100 × 1,000
// layered DAG's JSON file: as json.Marshal made it (the text copied into
// the request's string first) and as submitBody makes it.
func BenchmarkSubmitBody100K(b *testing.B) {
	text := flowgen.Layered(100, 1000, 1, true)
	req := proto.SubmitRequest{Path: "layered.json", ID: proto.NewRunID(time.Now())}
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := req
			r.Flow = string(text)
			if _, err := json.Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("body", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := submitBody(req, text); err != nil {
				b.Fatal(err)
			}
		}
	})
}
