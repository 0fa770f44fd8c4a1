package coord

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/transport"
)

func ctxFor(t *testing.T, d time.Duration) context.Context { return testsupport.Context(t, d) }

// startCoord starts one coordinator on loopback random ports.
// leadingCoord starts c1, the one bootstrapping coordinator on url (mod, if
// not nil, adjusts its Config), and waits until it leads.
func leadingCoord(t *testing.T, url string, mod func(*Config)) *Server {
	t.Helper()
	c := startCoord(t, "c1", t.TempDir(), url, true, nil, mod)
	must(t, c.WaitLeader(ctxFor(t, 20*time.Second)))
	testsupport.Eventually(t, 10*time.Second, "leader", c.Leader)
	return c
}

func startCoord(t *testing.T, id, dir, natsURL string, bootstrap bool, join []string, mod func(*Config)) *Server {
	t.Helper()
	cfg := Config{ID: id, DataDir: dir, RaftAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0",
		Join: join, Bootstrap: bootstrap, NATSURL: natsURL, Streams: &transport.StreamConfig{}}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// fakeNode stands in for a node agent (cluster/node) in the coordinator's
// tests: it joins the ring, answers an Assignment by publishing a done event
// for each of its tasks and an idle TermReport, answers probes, and records
// Cancels. busy makes it never idle; failTask makes it report that task failed;
// lose makes it report that task's run as idle without any event for it (an
// activation lost by a protocol bug). It answers liveness pings as a node does
// unless silent is set (a frozen process) or stopPings closed the
// subscription (a dead one, as NATS sees it).
type fakeNode struct {
	t        *testing.T
	id       string
	nc       *transport.Conn
	ml       *member.List
	sub      *transport.Subscription
	ping     *transport.Subscription
	silent   atomic.Bool
	boot     atomic.Value // the boot id it answers pings with ("boot1", its gossip metadata's)
	busy     bool
	idle     atomic.Bool // set: a busy node is idle from then on (its run can end)
	failTask string
	lose     string

	mu      sync.Mutex
	runs    map[string]uint64 // run → gen it runs
	cancels map[string]string // run → reason
	assigns int
}

func startFakeNode(t *testing.T, id, natsURL string, seeds []string, cpus, gpus int, setup func(*fakeNode)) *fakeNode {
	t.Helper()
	nc, err := transport.Connect(ctxFor(t, 10*time.Second), natsURL, transport.WithName(id))
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeNode{t: t, id: id, nc: nc, runs: map[string]uint64{}, cancels: map[string]string{}}
	n.boot.Store("boot1")
	if setup != nil {
		setup(n)
	}
	n.sub, err = nc.SubscribeControl(id, n.handle)
	if err != nil {
		t.Fatal(err)
	}
	n.ping, err = nc.Subscribe(proto.PingSubject(id), func(m *nats.Msg) {
		if !n.silent.Load() {
			_ = m.Respond([]byte(n.boot.Load().(string))) // its boot id, as cluster/node answers
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	must(t, nc.Sync(ctxFor(t, 5*time.Second)))
	n.ml, err = member.New(member.Config{ID: id, BindAddr: "127.0.0.1:0", Join: seeds,
		Meta: proto.Meta{Role: proto.RoleNode, ID: id, CPUs: cpus, GPUs: gpus, Boot: "boot1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.ml.Start(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

// stopPings closes the ping subscription: NATS then answers pings with "no
// responders", as for a process that is gone.
func (n *fakeNode) stopPings() { _ = n.ping.Close(context.Background()) }

func (n *fakeNode) stop() {
	_ = n.ml.Shutdown()
	_ = n.sub.Close(context.Background())
	_ = n.ping.Close(context.Background())
	_ = n.nc.Close()
}

func (n *fakeNode) term(run string, gen, wave uint64) {
	r := transport.TermReport{Run: run, Gen: gen, Node: n.id, Wave: wave, Idle: !n.busy || n.idle.Load()}
	if err := n.nc.Publish(proto.TermSubject(n.id), transport.Encode(&r)); err != nil {
		n.t.Errorf("%s: term report: %v", n.id, err)
	}
}

func (n *fakeNode) handle(m transport.Message) {
	switch m := m.(type) {
	case *transport.Assignment:
		n.mu.Lock()
		if n.runs[m.Run] == m.Gen {
			n.mu.Unlock()
			n.term(m.Run, m.Gen, 0) // the ack a node's heartbeat gives
			return
		}
		n.runs[m.Run] = m.Gen
		n.assigns++
		n.mu.Unlock()
		p, err := transport.DecodePlan(m.Plan, transport.Limits{})
		if err != nil {
			n.t.Errorf("%s: plan: %v", n.id, err)
			return
		}
		pt, err := runproto.OpenPlan(p, nil)
		if err != nil {
			n.t.Errorf("%s: plan: %v", n.id, err)
			return
		}
		g := pt.G
		for _, task := range m.TasksOf(n.id) {
			if !pt.Holds(int(task)) {
				n.t.Errorf("%s: the plan of run %s gen %d does not hold task %d, assigned here", n.id, m.Run, m.Gen, task)
			}
		}
		var evs []transport.TaskEvent
		for _, task := range m.TasksOf(n.id) {
			v := g.Vertices[task]
			if v.Name() == n.lose {
				continue
			}
			if v.Name() == n.failTask {
				body, _ := json.Marshal(proto.FailBody{Task: v.Path, Error: "boom"})
				e := transport.Envelope{Kind: proto.KindFail, Run: m.Run, Node: n.id, Body: body}
				_ = n.nc.Publish(proto.FailSubject(n.id), transport.Encode(&e))
				continue
			}
			ev := transport.TaskEvent{Run: m.Run, Gen: m.Gen, Task: task, Node: n.id, State: transport.TaskDone, Act: 1, Executions: 1}
			if len(v.Succ) == 0 {
				ev.Output = []byte{0xab, byte(task)}
			}
			evs = append(evs, ev)
		}
		if len(evs) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := n.nc.PublishEvents(ctx, evs...); err != nil {
				n.t.Errorf("%s: events: %v", n.id, err)
			}
			cancel()
		}
		n.term(m.Run, m.Gen, 0)
	case *transport.Envelope:
		if m.Kind == proto.KindProbe && len(m.Body) == 8 {
			n.mu.Lock()
			gen := n.runs[m.Run]
			n.mu.Unlock()
			n.term(m.Run, gen, binary.LittleEndian.Uint64(m.Body))
		}
	case *transport.Cancel:
		n.mu.Lock()
		n.cancels[m.Run] = m.Reason
		n.mu.Unlock()
	}
}

func (n *fakeNode) cancelled(run string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cancels[run]
}

// api calls a coordinator's HTTP API and decodes the answer into out.
func api(t *testing.T, addr, method, path, token string, body any, out any) (int, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, "http://"+addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode, resp.Header
}

func leaderOf(servers []*Server) *Server {
	for _, s := range servers {
		if s != nil && s.Leader() {
			return s
		}
	}
	return nil
}

func voters(s *Server) int {
	ps, err := s.Peers()
	if err != nil {
		return 0
	}
	return len(ps)
}

func nodeState(s *Server, id string) string {
	for _, n := range s.nodesCopy() {
		if n.ID == id {
			return n.State
		}
	}
	return ""
}

func (s *Server) nodesCopy() (ns []Node) {
	s.fsm.read(func(f *FSM) { ns = f.Nodes() })
	return ns
}

func runState(s *Server, id string) string {
	r, ok := s.run(id)
	if !ok {
		return ""
	}
	return r.State
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
