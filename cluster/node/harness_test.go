package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/transport"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t testing.TB, d time.Duration) context.Context { return testsupport.Context(t, d) }

func connect(t testing.TB, url, name string) *transport.Conn {
	t.Helper()
	c, err := transport.Connect(testCtx(t, 10*time.Second), url, transport.WithName(name))
	if err != nil {
		t.Fatalf("connect %s: %v", name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// cluster is k in-process nodes on one NATS server, and a leader's
// connection.
type cluster struct {
	t      testing.TB
	url    string
	leader *leader
	nodes  []*Node
	ids    []string
	killed map[string]bool // nodes a test killed: their Close errors are expected
	paths  sync.Map        // run id → []string: its vertices' paths (a report names a vertex by index)
}

type nodeSpec struct {
	gpus      int
	cpus      int
	heartbeat time.Duration
	now       func() time.Time // the node's clock (nil: time.Now)
	reg       *funcs.Registry  // nil: funcs.Default()
}

func newCluster(t testing.TB, specs ...nodeSpec) *cluster {
	t.Helper()
	url := testsupport.NATS(t).URL()
	c := &cluster{t: t, url: url, killed: map[string]bool{}}
	lc := connect(t, url, "leader")
	if err := lc.EnsureStreams(testCtx(t, 10*time.Second), transport.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	c.leader = newLeader(t, lc)
	for i, s := range specs {
		id := fmt.Sprintf("n%d", i)
		cpus := s.cpus
		if cpus == 0 {
			cpus = 2
		}
		cfg := Config{ID: id, Conn: connect(t, url, id), CPUs: cpus, GPUs: s.gpus, Heartbeat: s.heartbeat, Registry: s.reg, Now: s.now}
		if i == 0 {
			cfg.Streams = &transport.StreamConfig{} // the streams exist: an update
		}
		n, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := n.Close(); err != nil && !c.killed[id] {
				t.Errorf("close %s: %v", id, err)
			}
		})
		if err := n.Start(testCtx(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
		c.ids = append(c.ids, id)
	}
	return c
}

// leader is the test's stand-in for the coordinator's leader loop: it sends
// the Assignment (re-sent until each node reports), runs the four-counter
// termination check with probes, and releases the run with Cancel.
type leader struct {
	t     testing.TB
	conn  *transport.Conn
	term  chan transport.TermReport
	fail  chan transport.Envelope
	seq   atomic.Uint64
	probe atomic.Uint64 // probes sent
}

func newLeader(t testing.TB, c *transport.Conn) *leader {
	l := &leader{t: t, conn: c, term: make(chan transport.TermReport, 4096), fail: make(chan transport.Envelope, 64)}
	ts, err := c.Subscribe(proto.SubjectTerm, func(m *nats.Msg) {
		var r transport.TermReport
		if r.Decode(m.Data, transport.Limits{}) == nil {
			l.term <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := c.Subscribe(proto.SubjectFail, func(m *nats.Msg) {
		var e transport.Envelope
		if e.Decode(m.Data, transport.Limits{}) == nil {
			l.fail <- e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := testCtx(t, 5*time.Second)
		ts.Close(ctx)
		fs.Close(ctx)
	})
	if err := c.Sync(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	return l
}

// outcome is how a run ended and what its events say.
type outcome struct {
	run      string
	failed   *proto.FailBody
	failNode string
	tasks    map[string]*taskFold
	waves    uint64
}

type taskFold struct {
	state  transport.TaskState
	node   string
	acts   uint64
	execs  map[string]uint64 // per node: latest Executions
	output []byte
	dones  int // done events stored (a loop's may be coalesced)
}

func (f *taskFold) executions() uint64 {
	var s uint64
	for _, e := range f.execs {
		s += e
	}
	return s
}

func (f *taskFold) String() string {
	return fmt.Sprintf("%s acts=%d execs=%d out=%s", f.state, f.acts, f.executions(), hex.EncodeToString(f.output))
}

type runOpts struct {
	noRelease bool                       // leave the run held (the caller releases it)
	before    func(run string)           // after the Assignment is sent the first time
	onReport  func(transport.TermReport) // every report seen
	sendTo    []int                      // nodes to send the Assignment to at first (default all)
	stopAfter time.Duration              // cancel the run this long after start ("user cancel")
	boots     []string                   // Assignment.Boots (nil: the nodes' own, as a coordinator sends; see anyBoot)
	anyBoot   bool                       // Assignment.Boots nil: for any process (the nodes read the record when the run starts)
	noFold    bool                       // leave outcome.tasks nil and keep no paths (benchmarks: reading the record back is the harness's cost)
	digest    digestMode                 // whether the Assignments carry their plan's digest, and the plan
}

// digestMode is how the harness's Assignments name their plans.
type digestMode uint8

const (
	planOnly    digestMode = iota // the plan, no digest
	planDigest                    // the plan and its digest (a leader's full copy)
	digestAlone                   // the digest alone (a leader's copy to a node that acknowledged the plan)
)

// withDigest is m, a's copy with its plan, as mode names the plan.
func withDigest(m *transport.Assignment, mode digestMode) *transport.Assignment {
	if mode == planOnly {
		return m
	}
	d := sha256.Sum256(m.Plan)
	m.PlanDigest = d[:]
	if mode == digestAlone {
		m.Plan = nil
	}
	return m
}

// planned is a's copy for node, with the plan of node's part compiled
// from flow (the canonical JSON of the run's flow), as the leader sends it
// (runproto.Compile; coord's flowCaches.plans).
func planned(t testing.TB, flow []byte, a *transport.Assignment, node string) *transport.Assignment {
	t.Helper()
	key := fmt.Sprintf("%x|%q|%v|%s", sha256.Sum256(flow), a.Nodes, a.Owner, node)
	plans.mu.Lock()
	p, ok := plans.m[key]
	plans.mu.Unlock()
	c := *a
	if ok {
		c.Plan = p
		return &c
	}
	f, err := spec.ParseJSON("run.json", flow)
	if err != nil {
		t.Fatal(err)
	}
	g, err := f.Expand()
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(a.Nodes, node); i >= 0 && len(a.Owner) == len(g.Vertices) {
		ps, err := runproto.Compile(g, runproto.NewLoops(g), runproto.FreeJoins(g), a.Nodes, a.Owner)
		if err != nil {
			t.Fatal(err)
		}
		c.Plan = transport.Encode(ps[i])
	}
	plans.mu.Lock()
	plans.m[key] = c.Plan
	plans.mu.Unlock()
	return &c
}

// plans caches the plans planned compiled, by flow, nodes, owners and node:
// a benchmark that runs one flow many times pays the stand-in leader's
// compile once, as a coordinator does for a registered flow.
var plans = struct {
	mu sync.Mutex
	m  map[string][]byte
}{m: map[string][]byte{}}

// runFlow runs file's flow on the cluster with the given owners and waits
// for termination (or a failure).
func (c *cluster) runFlow(ctx context.Context, file *spec.File, owner []uint32, o runOpts) *outcome {
	t := c.t
	t.Helper()
	flow, err := spec.Marshal(file, spec.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	l := c.leader
	var runID string
	if o.noFold {
		runID = c.runName() // no paths: nothing folds the run's record
	} else {
		runID = c.newRunID(file)
	}
	boots := o.boots
	if boots == nil && !o.anyBoot {
		for _, n := range c.nodes {
			boots = append(boots, n.boot)
		}
	}
	asg := &transport.Assignment{Run: runID, Gen: 1, Nodes: c.ids, Owner: owner, Boots: boots}
	send := func(i int) {
		if err := l.conn.SendControl(c.ids[i], withDigest(planned(t, flow, asg, c.ids[i]), o.digest)); err != nil {
			t.Fatal(err)
		}
	}
	targets := o.sendTo
	if targets == nil {
		for i := range c.ids {
			targets = append(targets, i)
		}
	}
	for _, i := range targets {
		send(i)
	}
	if o.before != nil {
		o.before(runID)
	}
	out := &outcome{run: runID}
	latest := map[string]transport.TermReport{}
	var wave uint64
	waiting := false
	snap := map[string]transport.TermReport{}
	answers := map[string]bool{}
	resend := time.NewTicker(200 * time.Millisecond)
	defer resend.Stop()
	var stop <-chan time.Time
	if o.stopAfter > 0 {
		tm := time.NewTimer(o.stopAfter)
		defer tm.Stop()
		stop = tm.C
	}
	start := time.Now()
loop:
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("run %s did not end: latest reports %v", runID, latest)
		case <-stop:
			break loop
		case e := <-l.fail:
			if e.Run != runID {
				continue
			}
			var fb proto.FailBody
			if err := jsonUnmarshal(e.Body, &fb); err != nil {
				t.Fatalf("fail envelope body: %v", err)
			}
			out.failed, out.failNode = &fb, e.Node
			break loop
		case <-resend.C:
			// the leader re-sends the Assignment to nodes that have not reported
			for i, id := range c.ids {
				if _, ok := latest[id]; !ok && (time.Since(start) > 300*time.Millisecond || contains(targets, i)) {
					send(i)
				}
			}
		case r := <-l.term:
			if r.Run != runID || r.Gen != 1 {
				continue
			}
			if o.onReport != nil {
				o.onReport(r)
			}
			latest[r.Node] = r
			if waiting {
				if r.Wave == wave {
					p := snap[r.Node]
					if !r.Idle || r.Sent != p.Sent || r.Received != p.Received {
						waiting = false
					} else {
						answers[r.Node] = true
					}
				} else if !r.Idle {
					waiting = false
				}
				if waiting && len(answers) == len(c.ids) {
					out.waves = wave
					break loop
				}
			}
			if !waiting && len(latest) == len(c.ids) {
				var s, rc uint64
				all := true
				for _, rep := range latest {
					all = all && rep.Idle
					s += rep.Sent
					rc += rep.Received
				}
				if all && s == rc {
					wave++
					waiting = true
					clear(answers)
					maps(snap, latest)
					l.probe.Add(1)
					env := &transport.Envelope{Kind: proto.KindProbe, Run: runID, Body: proto.ProbeBody(wave)}
					for _, id := range c.ids {
						if err := l.conn.SendControl(id, env); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		}
	}
	if !o.noRelease {
		reason := "finished"
		if out.failed != nil {
			reason = "failed"
		}
		c.release(ctx, runID, reason)
	}
	if !o.noFold {
		out.tasks = c.fold(ctx, runID)
	}
	return out
}

// release sends Cancel until every node has handled one: it holds the run
// no longer and remembers it as released.
func (c *cluster) release(ctx context.Context, runID, reason string) {
	t := c.t
	cancel := &transport.Cancel{Run: runID, Gen: 1, Reason: reason}
	// The runs held now: a node forgets a run (n.runs) before its teardown
	// ends (the build and the SM's arrays handed to the next run of the
	// plan), so released means those ended too; else the next run's
	// Assignment can come before the build is kept (TestRunAgainReusesBuild
	// failed so once in a run beside a CPU hog).
	var holding []*run
	for _, n := range c.nodes {
		n.mu.Lock()
		if r := n.runs[runID]; r != nil {
			holding = append(holding, r)
		}
		n.mu.Unlock()
	}
	for {
		for _, id := range c.ids {
			if err := c.leader.conn.SendControl(id, cancel); err != nil {
				t.Fatal(err)
			}
		}
		held := false
		deadline := time.Now().Add(200 * time.Millisecond)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			held = false
			for _, n := range c.nodes {
				n.mu.Lock()
				_, ok := n.runs[runID]
				_, ended := n.ended[runID]
				n.mu.Unlock()
				held = held || ok || !ended
			}
			if !held {
				for _, r := range holding {
					select {
					case <-r.done:
					case <-ctx.Done():
						t.Fatalf("run %s: its teardown did not end: %v", runID, ctx.Err())
					}
				}
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		if ctx.Err() != nil {
			t.Fatalf("run %s not released: %v", runID, ctx.Err())
		}
	}
}

// newRunID names a new run of file, and keeps its vertices' paths for fold.
func (c *cluster) newRunID(file *spec.File) string {
	runID := c.runName()
	g, err := file.Expand()
	if err != nil {
		c.t.Fatal(err)
	}
	paths := make([]string, len(g.Vertices))
	for i := range g.Vertices {
		paths[i] = g.Vertices[i].Path
	}
	c.paths.Store(runID, paths)
	return runID
}

// runName names a new run.
func (c *cluster) runName() string {
	return fmt.Sprintf("r%013x-%06x", time.Now().UnixMilli(), c.leader.seq.Add(1))
}

// fold reads the run's TaskEvents back from JetStream, as a coordinator
// builds a status: per task the latest event, activations the max Act,
// executions the sum of each node's latest.
func (c *cluster) fold(ctx context.Context, runID string) map[string]*taskFold {
	m := map[string]*taskFold{}
	paths, _ := c.paths.Load(runID)
	err := c.leader.conn.ReplayEvents(ctx, runID, func(e *transport.TaskEvent) error {
		name := e.Name
		if ps, _ := paths.([]string); name == "" && int(e.Task) < len(ps) {
			name = ps[e.Task]
		}
		f := m[name]
		if f == nil {
			f = &taskFold{execs: map[string]uint64{}}
			m[name] = f
		}
		f.state, f.node = e.State, e.Node
		f.acts = max(f.acts, e.Act)
		f.execs[e.Node] = max(f.execs[e.Node], e.Executions)
		f.output = clone(e.Output)
		if e.State == transport.TaskDone {
			f.dones++
		}
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return m
}

func maps(dst, src map[string]transport.TermReport) {
	clear(dst)
	for k, v := range src {
		dst[k] = v
	}
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// summary prints a fold in a stable order, for failure messages.
func summary(m map[string]*taskFold) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "  %s: %v\n", n, m[n])
	}
	return b.String()
}

func specJSON(t testing.TB, f *spec.File) ([]byte, error) {
	t.Helper()
	b, err := spec.Marshal(f, spec.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	return b, nil
}
