package cluster_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/hetflow/hetflow/cluster"
	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func timeout(t *testing.T, d time.Duration) context.Context { return testsupport.Context(t, d) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fakeNode stands in for the node agent in this test of the client: it joins
// the ring, answers an Assignment with a done event per task (a failure for
// a task named "x") and an idle TermReport, and answers probes.
func fakeNode(t *testing.T, id, natsURL, seed string) {
	nc, err := transport.Connect(timeout(t, 10*time.Second), natsURL)
	must(t, err)
	gens := map[string]uint64{} // only the control goroutine touches it
	term := func(run string, gen, wave uint64) {
		r := transport.TermReport{Run: run, Gen: gen, Node: id, Wave: wave, Idle: true}
		_ = nc.Publish(proto.TermSubject(id), transport.Encode(&r))
	}
	sub, err := nc.SubscribeControl(id, func(m transport.Message) {
		switch m := m.(type) {
		case *transport.Assignment:
			if gens[m.Run] == m.Gen {
				return
			}
			gens[m.Run] = m.Gen
			p, err := transport.DecodePlan(m.Plan, transport.Limits{})
			must(t, err)
			pt, err := runproto.OpenPlan(p, nil)
			must(t, err)
			g := pt.G
			var evs []transport.TaskEvent
			for _, task := range m.TasksOf(id) {
				if g.Vertices[task].Name() == "x" {
					body, _ := json.Marshal(proto.FailBody{Task: "x", Error: "boom"})
					_ = nc.Publish(proto.FailSubject(id), transport.Encode(&transport.Envelope{Kind: proto.KindFail, Run: m.Run, Node: id, Body: body}))
					continue
				}
				evs = append(evs, transport.TaskEvent{Run: m.Run, Gen: m.Gen, Task: task, Node: id, State: transport.TaskDone, Act: 1, Executions: 1, Output: []byte{7}})
			}
			if len(evs) > 0 {
				_ = nc.PublishEvents(context.Background(), evs...)
			}
			term(m.Run, m.Gen, 0)
		case *transport.Envelope:
			if m.Kind == proto.KindProbe && len(m.Body) == 8 {
				term(m.Run, gens[m.Run], binary.LittleEndian.Uint64(m.Body))
			}
		}
	})
	must(t, err)
	boot := "boot-" + id
	// it answers pings as itself, with its boot id, as cluster/node does:
	// the leader places work only on a node that did
	ping, err := nc.Subscribe(proto.PingSubject(id), func(m *nats.Msg) { _ = m.Respond([]byte(boot)) })
	must(t, err)
	ml, err := member.New(member.Config{ID: id, BindAddr: "127.0.0.1:0", Join: []string{seed}, Meta: proto.Meta{Role: proto.RoleNode, ID: id, CPUs: 2, Boot: boot}})
	must(t, err)
	must(t, ml.Start(timeout(t, 10*time.Second)))
	t.Cleanup(func() {
		_ = ml.Shutdown()
		_ = sub.Close(context.Background())
		_ = ping.Close(context.Background())
		_ = nc.Close()
	})
}

func startCluster(t *testing.T, token string) ([]*coord.Server, string) {
	natsURL := testsupport.NATS(t).URL()
	var servers []*coord.Server
	var seed []string
	for i, id := range []string{"c1", "c2", "c3"} {
		s, err := coord.New(coord.Config{ID: id, DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
			GossipAddr: "127.0.0.1:0", Join: seed, Bootstrap: i == 0, NATSURL: natsURL,
			Streams: &transport.StreamConfig{}, Secret: proto.Secret{APIToken: token}})
		must(t, err)
		must(t, s.Start(timeout(t, 20*time.Second)))
		t.Cleanup(func() { _ = s.Close() })
		servers = append(servers, s)
		seed = []string{servers[0].GossipAddr()}
	}
	must(t, servers[0].WaitLeader(timeout(t, 20*time.Second)))
	return servers, natsURL
}

// postSubmit posts a raw SubmitRequest and checks the status code.
func postSubmit(t *testing.T, url, token string, req proto.SubmitRequest, want int) (out struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}) {
	t.Helper()
	body, _ := json.Marshal(req)
	hr, err := http.NewRequest(http.MethodPost, url+"/v1/runs", bytes.NewReader(body))
	must(t, err)
	hr.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(hr)
	must(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("POST %s/v1/runs: %d, want %d", url, resp.StatusCode, want)
	}
	must(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

func urls(servers []*coord.Server) []string {
	var out []string
	for _, s := range servers {
		out = append(out, "http://"+s.HTTPAddr())
	}
	return out
}

const okFlow = "name: ok\ntasks:\n  - {name: a, func: hash}\n  - {name: b, func: hash, succeed: [a]}\n"

// clusterWithNode starts three coordinators with token "tok" and a fake
// node n1, and returns once a client of them sees all four.
func clusterWithNode(t *testing.T) ([]*coord.Server, *cluster.Client, context.Context) {
	servers, natsURL := startCluster(t, "tok")
	fakeNode(t, "n1", natsURL, servers[0].GossipAddr())
	ctx := timeout(t, 60*time.Second)
	c := cluster.NewClient(urls(servers), "tok")
	testsupport.Eventually(t, 20*time.Second, "three peers and a node", func() bool {
		ps, err1 := c.Peers(ctx)
		ns, err2 := c.Nodes(ctx)
		return err1 == nil && err2 == nil && len(ps) == 3 && len(ns) == 1 && ns[0].State == proto.NodeAlive
	})
	return servers, c, ctx
}

func TestClient(t *testing.T) {
	servers, c, ctx := clusterWithNode(t)

	id, err := c.Submit(ctx, "ok.yaml", []byte(okFlow))
	must(t, err)
	var seen []string
	st, err := c.Wait(ctx, id, func(s proto.RunStatus) { seen = append(seen, s.State) })
	must(t, err)
	if st.State != proto.RunSucceeded || len(st.Tasks) != 2 || st.Tasks[1].Output != "07" || len(seen) == 0 || seen[len(seen)-1] != proto.RunSucceeded {
		t.Fatalf("final %+v, progress %v", st, seen)
	}
	// Follow: tallies while it runs, the table once; a delta since nothing
	// is the whole table, and since its own version nothing.
	var tallies []proto.RunProgress
	fst, err := c.Follow(ctx, id, func(p proto.RunProgress) { tallies = append(tallies, p) })
	must(t, err)
	if last := tallies[len(tallies)-1]; !jsonSame(t, fst, st) || last.State != proto.RunSucceeded || last.Counts.Done != 2 || last.Finished != 2 || last.Version == "" {
		t.Fatalf("follow: final %+v, tallies %+v", fst, tallies)
	}
	d, err := c.Delta(ctx, id, "", 0)
	must(t, err)
	var applied proto.RunStatus
	applied.Apply(d)
	if !d.Full || !jsonSame(t, applied, st) {
		t.Fatalf("delta since nothing %+v, want the whole of %+v", d, st)
	}
	if d2, err := c.Delta(ctx, id, d.Version, 0); err != nil || d2.Full || len(d2.Tasks) != 0 || d2.Version != d.Version {
		t.Fatalf("delta since its own version: %+v %v", d2, err)
	}
	runs, err := c.Runs(ctx)
	if err != nil || len(runs) != 1 || runs[0].ID != id || runs[0].Finished == nil {
		t.Fatalf("runs %+v %v", runs, err)
	}
	li, err := c.Leader(ctx)
	must(t, err)

	// A retried submit (the answer was lost, or the leader changed) carries
	// the id the client proposed: every server answers with the one run.
	retry := proto.SubmitRequest{Path: "ok.yaml", Flow: okFlow, ID: proto.NewRunID(time.Now())}
	for _, u := range append(urls(servers), urls(servers)...) {
		if got := postSubmit(t, u, "tok", retry, http.StatusCreated); got.ID != retry.ID {
			t.Fatalf("%s: retried submit answered %+v, want id %s", u, got, retry.ID)
		}
	}
	if runs, err := c.Runs(ctx); err != nil || len(runs) != 2 {
		t.Fatalf("six attempts of one submit made %d runs (%v), want 1 more", len(runs)-1, err)
	}
	if _, err := c.Wait(ctx, retry.ID, nil); err != nil {
		t.Fatal(err)
	}
	taken := retry
	taken.Flow = strings.Replace(okFlow, "name: ok", "name: other", 1)
	if got := postSubmit(t, urls(servers)[0], "tok", taken, http.StatusBadRequest); !strings.Contains(got.Error, "taken by another flow") {
		t.Fatalf("same id, other flow: %+v", got)
	}
	bogus := retry
	bogus.ID = "r-not-an-id"
	if got := postSubmit(t, urls(servers)[1], "tok", bogus, http.StatusBadRequest); !strings.Contains(got.Error, "is not a run id") {
		t.Fatalf("bad id: %+v", got)
	}

	// A failing run: Wait reports ErrRunFailed with the task's error.
	bad, err := c.Submit(ctx, "bad.yaml", []byte("name: bad\ntasks:\n  - {name: a, func: noop}\n  - {name: x, func: fail, succeed: [a]}\n"))
	must(t, err)
	st, err = c.Wait(ctx, bad, nil)
	if !errors.Is(err, cluster.ErrRunFailed) || !strings.Contains(err.Error(), "task x: boom") || st.State != proto.RunFailed {
		t.Fatalf("failed run: %+v %v", st, err)
	}
	if st, err := c.Cancel(ctx, bad); err != nil || st.State != proto.RunFailed {
		t.Fatalf("cancel of an ended run changes nothing: %+v %v", st, err)
	}

	// Errors.
	_, err = c.Submit(ctx, "inv.yaml", []byte("name: inv\ntasks:\n  - {name: a, func: nosuch}\n"))
	var inv *cluster.InvalidError
	if !errors.As(err, &inv) || !errors.Is(err, cluster.ErrInvalid) || len(inv.Problems) != 1 || !strings.HasPrefix(inv.Problems[0], "inv.yaml:3:") {
		t.Fatalf("invalid flow: %v", err)
	}
	if _, err := c.Status(ctx, "rnosuchrun"); !errors.Is(err, cluster.ErrNotFound) ||
		strings.Count(err.Error(), cluster.ErrNotFound.Error()) != 1 || !strings.Contains(err.Error(), "rnosuchrun") {
		t.Fatalf("unknown run: %v (want it matched, named and said once)", err)
	}
	if err := c.RemovePeer(ctx, "nobody"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("unknown peer: %v", err)
	}
	if _, err := cluster.NewClient(urls(servers), "wrong").Runs(ctx); !errors.Is(err, cluster.ErrUnauthorized) {
		t.Fatalf("wrong token: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	dead := ln.Addr().String()
	ln.Close()
	nobody := cluster.NewClient([]string{dead}, "tok")
	nobody.Retry = 300 * time.Millisecond
	if _, err := nobody.Runs(ctx); !errors.Is(err, cluster.ErrUnreachable) {
		t.Fatalf("nothing listening: %v", err)
	}

	// The leader goes away: the client, listing it first, finds the new one.
	var rest []*coord.Server
	var leaderURL string
	for _, s := range servers {
		if s.ID() == li.ID {
			leaderURL = "http://" + s.HTTPAddr()
			must(t, s.Close())
		} else {
			rest = append(rest, s)
		}
	}
	follow := cluster.NewClient(append([]string{leaderURL}, urls(rest)...), "tok")
	id2, err := follow.Submit(ctx, "ok.yaml", []byte(okFlow))
	must(t, err)
	if _, err := follow.Wait(ctx, id2, nil); err != nil {
		t.Fatal(err)
	}
	li2, err := follow.Leader(ctx)
	if err != nil || li2.ID == li.ID {
		t.Fatalf("new leader %+v %v", li2, err)
	}
	if st, err := follow.Status(ctx, id); err != nil || st.State != proto.RunSucceeded {
		t.Fatalf("the first run after failover: %+v %v", st, err)
	}
}

// TestClientSkipsAFrozenServer: the first server takes connections (the
// kernel's backlog does) but never answers, like a stopped process. Every
// call moves on to the healthy one after Attempt instead of waiting out the
// whole call, and a submit reaches it too.
func TestClientSkipsAFrozenServer(t *testing.T) {
	frozen, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer frozen.Close()
	var submits int
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/runs", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`[]`)) })
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(proto.RunStatus{ID: r.PathValue("id"), State: proto.RunSucceeded})
	})
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		var req proto.SubmitRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		submits++
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(proto.SubmitResponse{ID: req.ID})
	})
	healthy := &http.Server{Handler: mux}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go func() { _ = healthy.Serve(hl) }()
	defer healthy.Close()

	const attempt = 300 * time.Millisecond
	for _, call := range []string{"runs", "status", "submit"} {
		c := cluster.NewClient([]string{frozen.Addr().String(), hl.Addr().String()}, "")
		c.Attempt = attempt
		ctx := timeout(t, 20*time.Second)
		start := time.Now()
		switch call {
		case "runs":
			_, err = c.Runs(ctx)
		case "status":
			_, err = c.Status(ctx, "r1")
		case "submit":
			_, err = c.Submit(ctx, "ok.yaml", []byte(okFlow))
		}
		took := time.Since(start)
		c.HTTP.CloseIdleConnections()
		if err != nil {
			t.Fatalf("%s: %v", call, err)
		}
		if took > testsupport.Scale(10*attempt) {
			t.Fatalf("%s took %v: the frozen server held it", call, took)
		}
	}
	if submits != 1 {
		t.Fatalf("submits reaching the healthy server: %d, want 1", submits)
	}

	// Both frozen: the call gives up when its context ends, as unreachable.
	c := cluster.NewClient([]string{frozen.Addr().String()}, "")
	c.Attempt = attempt
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.Runs(ctx); !errors.Is(err, cluster.ErrUnreachable) {
		t.Fatalf("only a frozen server: %v, want ErrUnreachable", err)
	}
	c.HTTP.CloseIdleConnections()
}

// Slow is not dead: a leader that reads a large submit and takes several
// attempt periods to answer (validating and planning 100,000 tasks under
// load) is waited for, not abandoned and uploaded to again until the retry
// window closes (a 100,000-task submit to a loaded dev cluster failed with
// exit 3 that way).
func TestClientWaitsForABusyServerReadingABigSubmit(t *testing.T) {
	var submits atomic.Int32
	const attempt = 200 * time.Millisecond
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		var req proto.SubmitRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		submits.Add(1)
		time.Sleep(5 * attempt) // the work of a busy leader, after the whole body was read
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(proto.SubmitResponse{ID: req.ID})
	})
	srv := &http.Server{Handler: mux}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	big := okFlow + strings.Repeat("# padding to make the upload megabytes, like a large flow\n", 80_000)
	c := cluster.NewClient([]string{ln.Addr().String()}, "")
	c.Attempt = attempt
	c.Retry = 3 * attempt // without the fix every attempt times out inside this window
	id, err := c.Submit(timeout(t, 20*time.Second), "big.yaml", []byte(big))
	if err != nil || id == "" {
		t.Fatalf("submit of a %d-byte flow to a busy server: %q %v", len(big), id, err)
	}
	if n := submits.Load(); n != 1 {
		t.Errorf("the flow was uploaded %d times, want once", n)
	}
}

func jsonSame(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	must(t, err)
	y, err := json.Marshal(b)
	must(t, err)
	return string(x) == string(y)
}
