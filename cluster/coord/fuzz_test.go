package coord

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	pathpkg "path"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// fuzzServer is a real single coordinator (raft on disk, gossip, no NATS:
// runs are committed but not executed) with a secret and one node in the
// ring, so that a valid flow is placed and committed.
func fuzzServer(f testing.TB, mod ...func(*Config)) (*Server, string) {
	sec, err := proto.DeriveSecret([]byte("the fuzzed coordinator's secret"))
	if err != nil {
		f.Fatal(err)
	}
	cfg := Config{ID: "c1", DataDir: f.TempDir(), RaftAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		GossipAddr: "127.0.0.1:0", Bootstrap: true, Secret: proto.Secret{APIToken: sec.APIToken}}
	for _, m := range mod {
		m(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	if err := s.WaitLeader(ctx); err != nil {
		f.Fatal(err)
	}
	ml, err := member.New(member.Config{ID: "n1", BindAddr: "127.0.0.1:0", Join: []string{s.GossipAddr()},
		Meta: proto.Meta{Role: proto.RoleNode, ID: "n1", CPUs: 2, GPUs: 1}})
	if err != nil {
		f.Fatal(err)
	}
	if err := ml.Start(ctx); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = ml.Shutdown() })
	testsupport.Eventually(f, 20*time.Second, "the coordinator to lead with n1 alive", func() bool {
		return nodeState(s, "n1") == proto.NodeAlive && s.Leader()
	})
	return s, sec.APIToken
}

// FuzzAPI drives the real HTTP handler of a leading coordinator with fuzzed
// request bodies and path ids: POST /v1/runs (raw bodies, and fuzzed flow
// text in a well-formed body), cancel, status, peer removal, and the
// registry's POST /v1/flows and POST /v1/flows/{id}/runs. Every
// answer is one the protocol names for the route, with a JSON error body
// when it is not a success; nothing is a 500 or a panic, and a 201 run is
// in the FSM.
func FuzzAPI(f *testing.F) {
	s, tok := fuzzServer(f)
	h := s.httpSrv.Handler
	body := func(path, flow string) []byte {
		b, _ := json.Marshal(proto.SubmitRequest{Path: path, Flow: flow})
		return b
	}
	f.Add(uint8(0), "", body("wide.yaml", wideFlow))
	f.Add(uint8(0), "", []byte(`{"path": "x.json", "flow": "{\"name\": \"j\", \"tasks\": [{\"name\": \"a\", \"func\": \"noop\"}]}"}`))
	f.Add(uint8(0), "", []byte(`{"flow": 7}`))
	f.Add(uint8(0), "", []byte("{"))
	f.Add(uint8(1), "wide.yaml", []byte(wideFlow))
	f.Add(uint8(1), "x.json", []byte(`{"name": "j", "timeout": "1s", "tasks": [{"name": "a", "func": "loop", "kind": "condition", "precede": ["a"]}]}`))
	f.Add(uint8(1), "m.yaml", []byte("flows:\n  - name: a\n    tasks:\n      - {name: m, kind: module, flow: b}\n  - name: b\n    tasks:\n      - {name: x, func: spin, args: {us: 1}, domain: gpu}\n"))
	f.Add(uint8(2), "r0000000000000-000000", []byte(nil))
	f.Add(uint8(2), "../../v1/peers", []byte(nil))
	f.Add(uint8(3), "rnope", []byte(nil))
	f.Add(uint8(4), "c9", []byte(nil))
	f.Add(uint8(5), "wide.yaml", []byte(wideFlow))
	f.Add(uint8(5), "p.yaml", []byte("name: p\nparams:\n  n: {type: int}\ntasks:\n  - {name: a, func: spin, args: {us: \"${n}\"}}\n"))
	f.Add(uint8(6), FlowID([]byte("{}")), []byte(`{"params": {"n": 1}}`))
	f.Add(uint8(6), "nope", []byte(`{"id": "r0000000000000-000000"}`))
	f.Fuzz(func(t *testing.T, op uint8, id string, data []byte) {
		var method, path string
		var in []byte
		ok := map[int]bool{}
		switch op % 7 {
		case 0:
			method, path, in = "POST", "/v1/runs", data
			ok[201], ok[400] = true, true
		case 1:
			method, path, in = "POST", "/v1/runs", body(id, string(data))
			ok[201], ok[400] = true, true
		case 2:
			method, path = "POST", "/v1/runs/"+url.PathEscape(id)+"/cancel"
			ok[200], ok[404] = true, true
		case 3:
			method, path = "GET", "/v1/runs/"+url.PathEscape(id)
			ok[200], ok[404] = true, true
		case 4:
			if id == s.ID() {
				return // removing the only voter is allowed, and ends the test's cluster
			}
			method, path = "DELETE", "/v1/peers/"+url.PathEscape(id)
			ok[404] = true
		case 5:
			b, _ := json.Marshal(proto.RegisterRequest{Path: id, Flow: string(data)})
			method, path, in = "POST", "/v1/flows", b
			ok[200], ok[201], ok[400] = true, true, true
		case 6:
			method, path, in = "POST", "/v1/flows/"+url.PathEscape(id)+"/runs", data
			ok[201], ok[400] = true, true
		}
		if id == "" && op%7 >= 2 && op%7 != 5 {
			ok[404], ok[405] = true, true // the mux: no such route
		}
		if pathpkg.Clean(path) != path {
			ok[http.StatusMovedPermanently], ok[http.StatusTemporaryRedirect] = true, true // the mux redirects to the clean path
		}
		serve := func(token string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(method, "http://c1"+path, bytes.NewReader(in))
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec
		}
		if rec := serve(""); rec.Code != http.StatusUnauthorized {
			t.Fatalf("%s %s without the token: %d %s", method, path, rec.Code, rec.Body)
		}
		rec := serve(tok)
		if !ok[rec.Code] {
			t.Fatalf("%s %s %.200q: %d %s", method, path, in, rec.Code, rec.Body)
		}
		if rec.Code/100 == 3 {
			return
		}
		if rec.Code == http.StatusNotFound || rec.Code == http.StatusMethodNotAllowed {
			if !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
				return // the mux's own answer for a path no route matches
			}
		}
		if rec.Code/100 != 2 {
			var er proto.ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil || er.Error == "" {
				t.Fatalf("%s %s: %d with body %s (%v)", method, path, rec.Code, rec.Body, err)
			}
			return
		}
		if rec.Code/100 == 2 && op%7 == 5 {
			var ref proto.FlowRef
			if err := json.Unmarshal(rec.Body.Bytes(), &ref); err != nil {
				t.Fatal(err)
			}
			if _, ok := s.storedFlow(ref.ID); !ok {
				t.Fatalf("%d for flow %q that the registry lacks", rec.Code, ref.ID)
			}
			return
		}
		if rec.Code == http.StatusCreated {
			var sub proto.SubmitResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &sub); err != nil {
				t.Fatal(err)
			}
			if _, ok := s.run(sub.ID); !ok {
				t.Fatalf("201 for run %q that the FSM lacks", sub.ID)
			}
		}
	})
}
