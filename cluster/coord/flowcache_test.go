package coord

import (
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/spec"
)

// A flow submitted again (same name, text and parameters) is not parsed
// again, and all its runs share one expanded graph for their status; a
// different name or parameter value is a different entry, and a file that
// does not parse or bind is never cached.
func TestFlowCaches(t *testing.T) {
	s, _ := fuzzServer(t)
	flow := []byte("name: f\nparams:\n  n: {type: int, default: 2}\ntasks:\n  - {name: a, kind: subflow, func: fanout, args: {n: \"${n}\", us: 1}}\n")
	sub := func(path string, params map[string]any) Run {
		t.Helper()
		id, err := s.SubmitParams("", path, flow, params)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := s.run(id)
		if !ok {
			t.Fatalf("run %s not in the FSM", id)
		}
		return r
	}
	r1 := sub("f.yaml", nil)
	r2 := sub("f.yaml", nil)
	if n, _, hits := s.flows.bound.Stats(); n != 1 || hits != 1 {
		t.Fatalf("two submits of one file: %d entries, %d hits; want 1, 1", n, hits)
	}
	if string(r1.Flow) != string(r2.Flow) {
		t.Fatal("two submits of one file gave different canonical flows")
	}
	sub("g.yaml", nil)
	r4 := sub("f.yaml", map[string]any{"n": 3})
	if n, _, hits := s.flows.bound.Stats(); n != 3 || hits != 1 {
		t.Fatalf("another name, other parameters: %d entries, %d hits; want 3, 1", n, hits)
	}
	if !strings.Contains(string(r4.Flow), `3`) || string(r4.Flow) == string(r1.Flow) {
		t.Fatalf("n=3 run's flow: %s", r4.Flow)
	}
	g1, err := s.flows.graph(r1)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := s.flows.graph(r2)
	if err != nil || g2 != g1 {
		t.Fatalf("two runs of one flow: graphs %p, %p (%v); want one shared", g1, g2, err)
	}
	if g4, _ := s.flows.graph(r4); g4 == g1 {
		t.Fatal("a run with other parameters shares the graph of n=2")
	}
	for range 2 {
		if _, err := s.SubmitParams("", "f.yaml", flow, map[string]any{"n": "many"}); err == nil || !strings.Contains(err.Error(), "many") {
			t.Fatalf("an ill-typed parameter: %v", err)
		}
	}
	if n, _, _ := s.flows.bound.Stats(); n != 3 {
		t.Fatalf("a refused binding was cached: %d entries", n)
	}
	// A file the caller parsed (the dev command) is not parsed again by
	// its submit.
	other := []byte("name: other\ntasks:\n  - {name: a, func: noop}\n")
	pf, err := spec.Parse("dir/other.yaml", other)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Prepared("other.yaml", other, nil, pf); err != nil {
		t.Fatal(err)
	}
	_, _, before := s.flows.bound.Stats()
	if _, err := s.SubmitParams("", "other.yaml", other, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, hits := s.flows.bound.Stats(); hits != before+1 {
		t.Fatalf("a submit of a prepared file: %d hits, want %d", hits, before+1)
	}
}
