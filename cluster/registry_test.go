package cluster_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster"
	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

const paramFlow = "name: pf\nparams:\n  ms: {type: int, default: 1}\n  who: {type: string}\ntasks:\n  - {name: a, func: sleep, args: {ms: \"${ms}\"}}\n  - {name: b, func: hash, succeed: [a]}\n"

// The same flow as JSON: the same canonical flow, so the same id.
const paramFlowJSON = `{"name": "pf", "params": {"ms": {"type": "int", "default": 1}, "who": {"type": "string"}},
 "tasks": [{"name": "a", "func": "sleep", "args": {"ms": "${ms}"}}, {"name": "b", "func": "hash", "succeed": ["a"]}]}`

// TestClientRegistry: a flow registered through any coordinator is one id
// everywhere (YAML or JSON, registered again); runs of it by id take their
// parameters, a retried run is one run, a bad id or parameter is invalid
// input, and after the leader goes the new one runs it from its own copy
// of the registry.
func TestClientRegistry(t *testing.T) {
	servers, c, ctx := clusterWithNode(t)

	ref, err := c.RegisterFlow(ctx, "pf.yaml", []byte(paramFlow))
	must(t, err)
	if !coord.ValidFlowID(ref.ID) || ref.Flow != "pf" {
		t.Fatalf("register: %+v", ref)
	}
	for _, u := range urls(servers) { // each coordinator: followers forward to the leader
		one := cluster.NewClient([]string{u}, "tok")
		again, err := one.RegisterFlow(ctx, "pf.json", []byte(paramFlowJSON))
		if err != nil || again != ref {
			t.Fatalf("%s: the same flow as JSON registered as %+v (%v), want %+v", u, again, err, ref)
		}
	}
	for _, u := range urls(servers) {
		one := cluster.NewClient([]string{u}, "tok")
		testsupport.Eventually(t, 10*time.Second, u+" to list the flow", func() bool {
			fl, err := one.Flows(ctx)
			return err == nil && len(fl) == 1 && fl[0].ID == ref.ID && fl[0].Registered && fl[0].Params && fl[0].Tasks == 2 && fl[0].Path == "pf.yaml"
		})
	}

	// Runs with parameters: the status says the values each took.
	for _, who := range []string{"ann", "bo"} {
		id, err := c.RunFlow(ctx, ref.ID, cluster.Params{"who": who, "ms": 2})
		must(t, err)
		st, err := c.Wait(ctx, id, nil)
		must(t, err)
		if st.State != proto.RunSucceeded || st.Flow != "pf" || st.Params["who"] != who || st.Params["ms"] != 2.0 {
			t.Fatalf("run of the registered flow with who=%s: %+v", who, st)
		}
	}
	// A retried run (the answer lost) carries the id the client proposed:
	// every server answers with the one run.
	retry := proto.RunFlowRequest{ID: proto.NewRunID(time.Now()), Params: map[string]any{"who": "cy"}}
	for _, u := range append(urls(servers), urls(servers)...) {
		var got proto.SubmitResponse
		if code := postJSON(t, u+"/v1/flows/"+ref.ID+"/runs", "tok", retry, &got); code != http.StatusCreated || got.ID != retry.ID {
			t.Fatalf("%s: retried run answered %d %+v, want 201 and id %s", u, code, got, retry.ID)
		}
	}
	if runs, err := c.Runs(ctx); err != nil || len(runs) != 3 {
		t.Fatalf("two runs and six attempts of one: %d runs (%v), want 3", len(runs), err)
	}
	if fl, err := c.Flows(ctx); err != nil || len(fl) != 1 || fl[0].Runs != 3 {
		t.Fatalf("flows after three runs: %+v %v", fl, err)
	}
	other := retry
	other.Params = map[string]any{"who": "di"}
	var er proto.ErrorResponse
	if code := postJSON(t, urls(servers)[0]+"/v1/flows/"+ref.ID+"/runs", "tok", other, &er); code != http.StatusBadRequest || !strings.Contains(er.Error, "taken") {
		t.Fatalf("the same run id with other parameters: %d %+v", code, er)
	}

	// Invalid input: an unknown flow id, one of another shape, a missing
	// or ill-typed parameter; no token.
	var inv *cluster.InvalidError
	unknown := strings.Repeat("0", 64)
	for _, bad := range []struct {
		id     string
		params cluster.Params
		want   string
	}{
		{unknown, nil, "flow " + unknown + ": coord: no such flow"},
		{"pf", nil, `flow id "pf" is not a flow id`},
		{ref.ID, nil, `parameter "who" (string) has no default`},
		{ref.ID, cluster.Params{"who": "x", "ms": "soon"}, `parameter "ms": must be an int, got "soon"`},
		{ref.ID, cluster.Params{"who": "x", "nope": 1}, `parameter "nope" given, but the flow does not declare it`},
	} {
		_, err := c.RunFlow(ctx, bad.id, bad.params)
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("run %.12s with %v: %v; want invalid input naming %q", bad.id, bad.params, err, bad.want)
		}
		if lineRef.MatchString(err.Error()) {
			t.Errorf("run %.12s with %v: %v names a line of the canonical JSON", bad.id, bad.params, err)
		}
	}
	if _, err := c.RegisterFlow(ctx, "inv.yaml", []byte("name: inv\ntasks:\n  - {name: a, func: hash, succeed: [nope]}\n")); !errors.As(err, &inv) || !strings.Contains(err.Error(), "inv.yaml:3:") {
		t.Errorf("register of an invalid flow: %v", err)
	}
	wrong := cluster.NewClient(urls(servers), "wrong")
	if _, err := wrong.RegisterFlow(ctx, "pf.yaml", []byte(paramFlow)); !errors.Is(err, cluster.ErrUnauthorized) {
		t.Errorf("register with a wrong token: %v", err)
	}
	if _, err := wrong.RunFlow(ctx, ref.ID, cluster.Params{"who": "x"}); !errors.Is(err, cluster.ErrUnauthorized) {
		t.Errorf("run with a wrong token: %v", err)
	}
	if _, err := wrong.Flows(ctx); !errors.Is(err, cluster.ErrUnauthorized) {
		t.Errorf("flows with a wrong token: %v", err)
	}

	// The leader goes: the new one runs the flow from its own registry.
	li, err := c.Leader(ctx)
	must(t, err)
	var rest []*coord.Server
	for _, s := range servers {
		if s.ID() == li.ID {
			must(t, s.Close())
		} else {
			rest = append(rest, s)
		}
	}
	follow := cluster.NewClient(urls(rest), "tok")
	id, err := follow.RunFlow(ctx, ref.ID, cluster.Params{"who": "ed"})
	must(t, err)
	if st, err := follow.Wait(ctx, id, nil); err != nil || st.State != proto.RunSucceeded || st.Params["who"] != "ed" {
		t.Fatalf("a run after failover: %+v %v", st, err)
	}
}

// lineRef is a file:line reference.
var lineRef = regexp.MustCompile(`\.yaml:[0-9]`)

// postJSON posts v to url as JSON and decodes the answer into out.
func postJSON(t *testing.T, url, token string, v, out any) int {
	t.Helper()
	body, _ := json.Marshal(v)
	hr, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	must(t, err)
	hr.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(hr)
	must(t, err)
	defer resp.Body.Close()
	must(t, json.NewDecoder(resp.Body).Decode(out))
	return resp.StatusCode
}
