package coord

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/flowgen"
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
	// Each bound file is kept by its submit (name, text, parameters) and by
	// the flow's id and the values it took (what Server.runFlow reads).
	// (Hits are not counted here: the leader loop reads the runs' flows
	// too, when it will.)
	r1 := sub("f.yaml", nil)
	b1, _ := s.flows.bind("f.yaml", flow, nil)
	r2 := sub("f.yaml", nil)
	if n, _, _ := s.flows.bound.Stats(); n != 2 {
		t.Fatalf("two submits of one file: %d entries; want 2", n)
	}
	if b, _ := s.flows.bind("f.yaml", flow, nil); b != b1 {
		t.Fatal("the second submit parsed the file again")
	}
	if r1.FlowID == "" || r1.FlowID != r2.FlowID {
		t.Fatalf("two submits of one file name flows %q and %q; want one", r1.FlowID, r2.FlowID)
	}
	sub("g.yaml", nil)
	r4 := sub("f.yaml", map[string]any{"n": 3})
	if n, _, _ := s.flows.bound.Stats(); n != 5 {
		t.Fatalf("another name, other parameters: %d entries; want 5", n)
	}
	if r4.FlowID != r1.FlowID {
		t.Fatal("a run with other parameters names another flow: the registry holds the flow unbound")
	}
	f1, err := s.runFlow(r1)
	if err != nil {
		t.Fatal(err)
	}
	f4, err := s.runFlow(r4)
	if err != nil || !strings.Contains(string(f4), `"n":3`) || string(f4) == string(f1) {
		t.Fatalf("n=3 run's flow: %s (%v)", f4, err)
	}
	if n, _, _ := s.flows.bound.Stats(); n != 5 {
		t.Fatalf("reading the runs' flows bound them again: %d entries, want 5", n)
	}
	sf, _ := s.storedFlow(r4.FlowID)
	if b4, _ := s.flows.stored(sf, map[string]any{"n": 3}); b4 == nil || string(b4.canon) != string(f4) {
		t.Fatal("the n=3 run's flow is not the one its submit bound")
	}
	g1, err := s.flows.graph(r1, s.runFlow)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := s.flows.graph(r2, s.runFlow)
	if err != nil || g2 != g1 {
		t.Fatalf("two runs of one flow: graphs %p, %p (%v); want one shared", g1, g2, err)
	}
	if g4, _ := s.flows.graph(r4, s.runFlow); g4 == g1 {
		t.Fatal("a run with other parameters shares the graph of n=2")
	}
	for range 2 {
		if _, err := s.SubmitParams("", "f.yaml", flow, map[string]any{"n": "many"}); err == nil || !strings.Contains(err.Error(), "many") {
			t.Fatalf("an ill-typed parameter: %v", err)
		}
	}
	if n, _, _ := s.flows.bound.Stats(); n != 5 {
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

// An int parameter past float64's 2^53 keeps its value end to end in the
// coordinator: through the HTTP body, raft (the run's Params) and the flow
// the nodes run (Server.runFlow, and bound again as a cache miss does); its
// status says it; and a retried submit of the same id and values is the
// run it made, not "run id taken by another flow".
func TestBigIntParamExact(t *testing.T) {
	s, token := fuzzServer(t)
	flow := "name: p\nparams:\n  seed: {type: int}\ntasks:\n  - {name: c, kind: condition, func: coin, args: {p: 0.5, seed: \"${seed}\"}}\n"
	const big = int64(9007199254740993) // 2^53 + 1: no float64
	seedOf := func(r Run) any {         // in the flow the nodes get, and in one bound again (the cache's miss)
		t.Helper()
		text, err := s.runFlow(r)
		if err != nil {
			t.Fatal(err)
		}
		sf, _ := s.storedFlow(r.FlowID)
		again, err := bindStored(sf, r.Params)
		if err != nil {
			t.Fatal(err)
		}
		if string(again.canon) != string(text) {
			t.Fatalf("the run's flow bound again:\n%s\nwant\n%s", again.canon, text)
		}
		f, err := spec.ParseJSON("run.json", text)
		if err != nil {
			t.Fatal(err)
		}
		return f.Root().Task("c").Args["seed"]
	}

	// Through the API, as a client's JSON body.
	id := proto.NewRunID(time.Now())
	body := json.RawMessage(`{"id": "` + id + `", "path": "p.yaml", "flow": ` + strconv.Quote(flow) + `, "params": {"seed": 9007199254740993}}`)
	for try := range 2 { // the second: a client's retry, after the first was committed
		var resp struct {
			proto.SubmitResponse
			Error string `json:"error"`
		}
		if code, _ := api(t, s.HTTPAddr(), http.MethodPost, "/v1/runs", token, body, &resp); code != http.StatusCreated || resp.ID != id {
			t.Fatalf("submit %d: %d %+v", try, code, resp)
		}
	}
	r, ok := s.run(id)
	if !ok {
		t.Fatal("no run")
	}
	if got := seedOf(r); got != big {
		t.Fatalf("the run's flow has seed %#v, want int64 %d", got, big)
	}
	var st json.RawMessage
	if code, _ := api(t, s.HTTPAddr(), http.MethodGet, "/v1/runs/"+id, token, nil, &st); code != http.StatusOK || !strings.Contains(string(st), `"params":{"seed":9007199254740993}`) {
		t.Fatalf("status: %d %s", code, st)
	}

	// Through SubmitParams, with a Go int64; and its retry.
	id2 := proto.NewRunID(time.Now())
	for try := range 2 {
		if got, err := s.SubmitParams(id2, "p.yaml", []byte(flow), map[string]any{"seed": big}); err != nil || got != id2 {
			t.Fatalf("submit %d: %q, %v", try, got, err)
		}
	}
	r2, _ := s.run(id2)
	if got := seedOf(r2); got != big {
		t.Fatalf("the run's flow has seed %#v, want int64 %d", got, big)
	}
	// Another value under that id is still another run's.
	if _, err := s.SubmitParams(id2, "p.yaml", []byte(flow), map[string]any{"seed": big - 1}); err == nil || !strings.Contains(err.Error(), "taken by another flow") {
		t.Fatalf("the id with another seed: %v", err)
	}
}

// placedKey changes with anything a run's validation and placement read
// from the live cluster: a node more or less, its capacity, the catalog it
// offers; and an unread catalog, or no node, is not cached at all.
func TestPlacedKey(t *testing.T) {
	flow := [32]byte{1}
	alive := []Node{{ID: "n1", CPUs: 2}, {ID: "n2", CPUs: 2, GPUs: 1}}
	cats := []proto.NodeFuncs{{Node: "n1", Hash: "h1"}, {Node: "n2", Hash: "h2"}}
	base, ok := placedKey(flow, alive, cats)
	if !ok {
		t.Fatal("two nodes with catalogs: not cacheable")
	}
	if again, _ := placedKey(flow, slices.Clone(alive), slices.Clone(cats)); again != base {
		t.Fatal("the same cluster gives another key")
	}
	mod := func(f func(a []Node, c []proto.NodeFuncs) ([]Node, []proto.NodeFuncs)) ([32]byte, bool) {
		a, c := f(slices.Clone(alive), slices.Clone(cats))
		return placedKey(flow, a, c)
	}
	for name, f := range map[string]func(a []Node, c []proto.NodeFuncs) ([]Node, []proto.NodeFuncs){
		"a node less": func(a []Node, c []proto.NodeFuncs) ([]Node, []proto.NodeFuncs) { return a[:1], c[:1] },
		"a node more": func(a []Node, c []proto.NodeFuncs) ([]Node, []proto.NodeFuncs) {
			return append(a, Node{ID: "n3", CPUs: 1}), append(c, proto.NodeFuncs{Node: "n3", Hash: "h1"})
		},
		"another catalog": func(a []Node, c []proto.NodeFuncs) ([]Node, []proto.NodeFuncs) { c[1].Hash = "h3"; return a, c },
		"builtin catalog": func(a []Node, c []proto.NodeFuncs) ([]Node, []proto.NodeFuncs) {
			c[1].Hash, c[1].Builtin = "", true
			return a, c
		},
		"more CPUs": func(a []Node, c []proto.NodeFuncs) ([]Node, []proto.NodeFuncs) { a[0].CPUs = 3; return a, c },
		"no GPU":    func(a []Node, c []proto.NodeFuncs) ([]Node, []proto.NodeFuncs) { a[1].GPUs = 0; return a, c },
		"another node's id": func(a []Node, c []proto.NodeFuncs) ([]Node, []proto.NodeFuncs) {
			a[1].ID, c[1].Node = "n9", "n9"
			return a, c
		},
	} {
		if k, ok := mod(f); !ok || k == base {
			t.Errorf("%s: key %x (cacheable %v), the same as before", name, k[:4], ok)
		}
	}
	if k, _ := placedKey([32]byte{2}, alive, cats); k == base {
		t.Error("another flow: the same key")
	}
	if _, ok := mod(func(a []Node, c []proto.NodeFuncs) ([]Node, []proto.NodeFuncs) { c[0].Error = "no answer"; return a, c }); ok {
		t.Error("an unread catalog is cacheable")
	}
	if _, ok := placedKey(flow, nil, nil); ok {
		t.Error("no node alive is cacheable")
	}
}

// A flow run again on the same live nodes is neither validated, expanded
// nor placed again, and its nodes' plans are not compiled again: it takes
// the run before's graph, placement and plans. A node joining changes the
// cluster: the next run is placed afresh.
func TestRunAgainTakesThePlacement(t *testing.T) {
	s, _ := fuzzServer(t)
	sf, _, err := s.Register("l.yaml", flowgen.Layered(4, 50, 1, false))
	if err != nil {
		t.Fatal(err)
	}
	var runs []Run
	for range 3 {
		id, err := s.RunFlow("", sf.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := s.run(id)
		runs = append(runs, r)
	}
	if n := s.placements.Load(); n != 1 {
		t.Fatalf("3 runs of one flow on one cluster placed %d times, want 1", n)
	}
	p1, err := s.plans(runs[1])
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.plans(runs[2])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(runs[1].Assignment, runs[0].Assignment) || len(p1["n1"].Plan) == 0 || &p1["n1"].Plan[0] != &p2["n1"].Plan[0] || p1["n1"].Digest != sha256.Sum256(p2["n1"].Plan) {
		t.Fatal("a run again did not take the placement and plans of the run before")
	}
	// Another node alive: placed again (and the plans of another
	// assignment are compiled for it).
	if err := s.apply(&Command{Op: OpNodeUpsert, Node: &Node{ID: "n2", State: proto.NodeAlive, CPUs: 2, Updated: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	id, err := s.RunFlow("", sf.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.placements.Load(); n != 2 {
		t.Fatalf("a run after a node joined placed %d times in all, want 2", n)
	}
	r, _ := s.run(id)
	r.Nodes, r.Assignment = []string{"n1", "n2"}, slices.Clone(r.Assignment)
	r.Assignment[0] = "n2"
	p3, err := s.plans(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(p3) != 2 || len(p3["n2"].Plan) == 0 {
		t.Fatalf("plans of another assignment: %d nodes", len(p3))
	}
}
