package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hetflow/hetflow/cluster"
	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/htdg"
	"github.com/hetflow/hetflow/localexec"
)

// ErrRun is matched by a benchmark run that did not succeed.
var ErrRun = errors.New("bench: run failed")

// ErrHung is matched by a run that did not finish within hangAfter of its
// submission: the bench cancels it, starts a fresh in-process cluster and
// tries again, up to maxHangRetries times, counting the hangs (RunResult.
// HungAttempts, Box.Hung). Runs of the level-balanced placement, with
// thousands of cross-node edges, hung on this machine with tasks pending
// and nothing running (a lost cross-node signal; see cluster-bench.md).
var ErrHung = errors.New("bench: run hung")

const maxHangRetries = 3

// hangAfter is how long a run of tasks tasks may take: a minute and a
// millisecond a task, 10-50× what they take here.
func hangAfter(tasks int) time.Duration {
	return time.Minute + time.Duration(tasks)*time.Millisecond
}

// retryHung calls fn until it ends otherwise than ErrHung, restarting the
// cluster after each hang, at most maxHangRetries times; it returns how
// many attempts hung.
func (t *target) retryHung(ctx context.Context, what string, fn func() error) (int, error) {
	for hung := 0; ; hung++ {
		err := fn()
		if !errors.Is(err, ErrHung) || hung == maxHangRetries {
			return hung, err
		}
		t.hangs++
		if t.logf != nil {
			t.logf("bench: %v; a fresh cluster for %s (hang %d)", err, what, t.hangs)
		}
		if err := t.restart(ctx); err != nil {
			return hung + 1, err
		}
	}
}

// target is a cluster to submit to: an in-process dev cluster the bench
// started (dev != nil: per-node counters and the process's memory and CPU
// time are read), or a running cluster reached over its API.
type target struct {
	label   string // "3 nodes × 1 GPU × 2 workers"
	nodes   int
	gpus    int // per node (a running cluster's: the most any node has)
	workers int // CPU workers per node (a running cluster's: the most any node has)
	// in all: nodes × gpus and nodes × workers on a dev cluster, the sums
	// over the alive nodes of a running one
	totalGPUs, totalWorkers int
	client                  *cluster.Client
	dev                     *devcluster.Cluster
	// a running cluster: its alive nodes, whose /metrics are scraped
	remote   []remoteNode
	scraper  *scraper
	warnings []string      // what the bench cannot measure on this cluster
	hangs    int           // runs that hung (ErrHung), all told
	hangFor  time.Duration // replaces hangAfter when > 0 (tests)
	logf     func(format string, args ...any)
}

func configLabel(nodes, gpus, workers int) string {
	return fmt.Sprintf("%d node%s × %d GPU%s × %d workers", nodes, plural(nodes), gpus, plural(gpus), workers)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// devMaxFlowBytes is the dev clusters' flow size limit: an HTDG of 100K
// tasks is a ~20 MB file, over the coordinator's default 8 MiB (a running
// cluster needs coordinator serve --max-flow-bytes for it).
const devMaxFlowBytes = 30 << 20

// startDev starts an in-process cluster of nodes nodes, each with workers
// CPU workers and gpus sim GPUs.
func startDev(ctx context.Context, nodes, gpus, workers int) (*target, error) {
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	// Spread: the experiments measure a graph spread over the nodes; the
	// cost model would keep their tiny tasks on one node.
	d, err := devcluster.Start(sctx, devcluster.Config{Nodes: nodes, CPUs: workers, GPUsEach: gpus,
		MaxFlowBytes: devMaxFlowBytes, Placement: coord.Placement{Spread: true}})
	if err != nil {
		return nil, fmt.Errorf("bench: starting a dev cluster of %d nodes: %w", nodes, err)
	}
	c := d.Client()
	c.Retry = time.Minute
	return &target{label: configLabel(nodes, gpus, workers), nodes: nodes, gpus: gpus, workers: workers,
		totalGPUs: nodes * gpus, totalWorkers: nodes * workers, client: c, dev: d}, nil
}

// remoteTarget is the running cluster at urls: its alive nodes say how big
// it is (GPUs and workers from the first node).
func remoteTarget(ctx context.Context, urls []string, token string) (*target, error) {
	c := cluster.NewClient(urls, token)
	c.Retry = time.Minute
	ns, err := c.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: reading the cluster's nodes: %w", err)
	}
	t := &target{client: c, remote: remoteNodes(ns), scraper: &scraper{client: &http.Client{Transport: &http.Transport{}}, token: token}}
	for _, n := range ns {
		if n.State != proto.NodeAlive {
			continue
		}
		t.gpus, t.workers = max(t.gpus, n.GPUs), max(t.workers, n.CPUs)
		t.totalGPUs += n.GPUs
		t.totalWorkers += n.CPUs
		t.nodes++
	}
	if t.nodes == 0 {
		return nil, fmt.Errorf("bench: the cluster at %v has no alive node", urls)
	}
	t.label = fmt.Sprintf("%d node%s, %d workers, %d GPU%s in all (remote)", t.nodes, plural(t.nodes), t.totalWorkers, t.totalGPUs, plural(t.totalGPUs))
	for _, n := range t.remote {
		if n.url == "" {
			t.warnings = append(t.warnings, fmt.Sprintf("node %s: %s", n.id, noHTTPNote))
		}
	}
	return t, nil
}

// restart replaces an in-process cluster by a fresh one of the same shape
// (a running cluster is left alone). The box plots' long series of runs
// restart every boxRestart runs: the nodes keep about 12 KB a GPU task
// after a run ends (the saxpy GPU jobs' host buffers, cluster/node), so
// 100 runs of 20K tasks in one process ran this 23 GiB machine out of
// memory.
func (t *target) restart(ctx context.Context) error {
	if t.dev == nil {
		return nil
	}
	if err := t.dev.Close(); err != nil {
		return fmt.Errorf("bench: closing %s: %w", t.label, err)
	}
	t.dev = nil
	nt, err := startDev(ctx, t.nodes, t.gpus, t.workers)
	if err != nil {
		return err
	}
	t.dev, t.client = nt.dev, nt.client
	return nil
}

// boxRestart is how many box-plot runs share one in-process cluster.
const boxRestart = 20

func (t *target) close() error {
	if t.scraper != nil {
		t.scraper.client.CloseIdleConnections()
	}
	if t.dev == nil {
		return nil
	}
	return t.dev.Close()
}

// NodeCounters are one node's counters over one run (differences of
// node.Stats and of its executor's localexec.Stats): read directly from
// in-process nodes, from each node's /metrics on a running cluster (node
// --http), which also gives the node's peak memory during the run.
type NodeCounters struct {
	Node            string                  `json:"node"`
	Assignments     uint64                  `json:"assignments"`
	TasksExecuted   uint64                  `json:"tasks_executed"`
	SignalsSent     uint64                  `json:"signals_sent"`
	SignalsReceived uint64                  `json:"signals_received"`
	SignalsDup      uint64                  `json:"signals_duplicate"`
	EventsPublished uint64                  `json:"events_published"`
	Domains         []localexec.DomainStats `json:"scheduler"`
	// A running cluster's nodes only: the largest resident set size and Go
	// heap in use that the samples during the run saw (every 100 ms).
	PeakRSSBytes  uint64 `json:"peak_rss_bytes,omitempty"`
	PeakHeapBytes uint64 `json:"peak_heap_bytes,omitempty"`
	// Note says why a node has no figures (no --http, a failed scrape).
	Note string `json:"note,omitempty"`
}

// RunResult is one submitted flow's run.
type RunResult struct {
	ID    string `json:"id"`
	Flow  string `json:"flow"`
	State string `json:"state"`
	// RuntimeS is the coordinator's finished − submitted time: parsing,
	// partitioning, assignment, execution and the status fold.
	RuntimeS    float64 `json:"runtime_s"`
	WallS       float64 `json:"wall_s"` // the client's submit → seen finished
	Tasks       int     `json:"tasks"`  // declared tasks
	TasksPerS   float64 `json:"tasks_per_s"`
	Activations uint64  `json:"activations"`
	Executions  uint64  `json:"executions"`
	// Reexecutions is Σ over tasks of executions − activations.
	Reexecutions   uint64 `json:"reexecutions"`
	Edges          int    `json:"edges"`
	CrossNodeEdges int    `json:"cross_node_edges"`
	// TasksPerNode counts the tasks each node ran.
	TasksPerNode map[string]int `json:"tasks_per_node"`
	// In-process clusters only: the bench process's peak heap and CPU time
	// during the run (the coordinator, NATS and every node share it: there
	// is no per-node memory figure for in-process nodes). Each node's
	// counters: in-process nodes, and a running cluster's nodes through
	// their /metrics, with each one's peak memory.
	PeakHeapBytes uint64         `json:"peak_heap_bytes,omitempty"`
	PeakSysBytes  uint64         `json:"peak_sys_bytes,omitempty"`
	CPUS          float64        `json:"process_cpu_s,omitempty"`
	Nodes         []NodeCounters `json:"node_counters,omitempty"`
	// HungAttempts counts the attempts of this run that hung (ErrHung) and
	// were cancelled before this one.
	HungAttempts int `json:"hung_attempts,omitempty"`
	// LoadAvg1 is the machine's 1-minute load average as the run ended
	// (/proc/loadavg; 0 where there is none): other programs' share.
	LoadAvg1 float64 `json:"loadavg1,omitempty"`
}

// snapshot is the counters of every in-process node.
type snapshot []NodeCounters

func (t *target) snapshot(ctx context.Context) snapshot {
	if t.dev == nil {
		if len(t.remote) > 0 {
			return t.remoteSnapshot(ctx)
		}
		return nil
	}
	var s snapshot
	for _, n := range t.dev.Nodes() {
		st := n.Stats()
		s = append(s, NodeCounters{Node: n.ID(), Assignments: st.Assignments, TasksExecuted: st.TasksExecuted,
			SignalsSent: st.SignalsSent, SignalsReceived: st.SignalsReceived, SignalsDup: st.SignalsDuplicate,
			EventsPublished: st.EventsPublished, Domains: n.Executor().Stats().Domains})
	}
	return s
}

func (s snapshot) since(before snapshot) []NodeCounters {
	out := make([]NodeCounters, len(s))
	for i, a := range s {
		b := before[i]
		if a.Note != "" || b.Note != "" {
			out[i] = NodeCounters{Node: a.Node, Note: cmp.Or(a.Note, b.Note)}
			continue
		}
		d := NodeCounters{Node: a.Node, Assignments: a.Assignments - b.Assignments, TasksExecuted: a.TasksExecuted - b.TasksExecuted,
			SignalsSent: a.SignalsSent - b.SignalsSent, SignalsReceived: a.SignalsReceived - b.SignalsReceived,
			SignalsDup: a.SignalsDup - b.SignalsDup, EventsPublished: a.EventsPublished - b.EventsPublished}
		for j, x := range a.Domains {
			y := localexec.DomainStats{}
			if j < len(b.Domains) {
				y = b.Domains[j]
			}
			d.Domains = append(d.Domains, localexec.DomainStats{Domain: x.Domain, Workers: x.Workers,
				Executed: x.Executed - y.Executed, StealAttempts: x.StealAttempts - y.StealAttempts,
				FailedSteals: x.FailedSteals - y.FailedSteals, Parks: x.Parks - y.Parks, Wakeups: x.Wakeups - y.Wakeups})
		}
		out[i] = d
	}
	return out
}

// submitted is a run in flight.
type submitted struct {
	w     *workload
	id    string
	start time.Time
}

func (t *target) submit(ctx context.Context, w *workload) (submitted, error) {
	s := submitted{w: w, start: time.Now()}
	id, err := t.client.Submit(ctx, w.name+".json", w.text)
	if err != nil {
		return s, fmt.Errorf("bench: submitting %s to %s: %w", w.name, t.label, err)
	}
	s.id = id
	return s, nil
}

// wait polls the run list (cheap, unlike a big run's status) until every
// run of subs has finished, then reads each one's status.
func (t *target) wait(ctx context.Context, subs []submitted) ([]RunResult, error) {
	out, err := t.await(ctx, subs)
	if err != nil {
		return nil, err
	}
	for i, s := range subs {
		st, err := t.client.Status(ctx, s.id)
		if err != nil {
			return nil, fmt.Errorf("bench: status of %s: %w", s.id, err)
		}
		r := &out[i]
		fill(r, s.w, st)
		if st.State != proto.RunSucceeded {
			return out, fmt.Errorf("%w: %s on %s: run %s %s: %s", ErrRun, s.w.name, t.label, s.id, st.State, st.Error)
		}
	}
	return out, nil
}

// runtime submits w and returns the coordinator's runtime of the run, from
// the run list alone: what a box plot's repeated runs need. It reads no
// status (a 20K-task run's status is megabytes), counters or memory, and
// samples nothing while the run goes on; the status is read only to say why
// a run did not succeed.
func (t *target) runtime(ctx context.Context, w *workload) (rt float64, hung int, err error) {
	hung, err = t.retryHung(ctx, w.name, func() error {
		var err error
		rt, err = t.runtimeOnce(ctx, w)
		return err
	})
	return rt, hung, err
}

func (t *target) runtimeOnce(ctx context.Context, w *workload) (float64, error) {
	s, err := t.submit(ctx, w)
	if err != nil {
		return 0, err
	}
	out, err := t.await(ctx, []submitted{s})
	if err != nil {
		return 0, err
	}
	if out[0].State != proto.RunSucceeded {
		msg := ""
		if st, err := t.client.Status(ctx, s.id); err == nil {
			msg = st.Error
		}
		return 0, fmt.Errorf("%w: %s on %s: run %s %s: %s", ErrRun, w.name, t.label, s.id, out[0].State, msg)
	}
	return out[0].RuntimeS, nil
}

// await polls the run list until every run of subs has finished; each
// result has the run's id, state, runtime and wall time.
func (t *target) await(ctx context.Context, subs []submitted) ([]RunResult, error) {
	left := map[string]int{}
	for i, s := range subs {
		left[s.id] = i
	}
	out := make([]RunResult, len(subs))
	poll := 2 * time.Millisecond
	for len(left) > 0 {
		for id, i := range left {
			d := hangAfter(subs[i].w.tasks)
			if t.hangFor > 0 {
				d = t.hangFor
			}
			if time.Since(subs[i].start) > d {
				for id := range left {
					_, _ = t.client.Cancel(ctx, id)
				}
				return nil, fmt.Errorf("%w: %s on %s: run %s not finished after %v", ErrHung, subs[i].w.name, t.label, id, d)
			}
		}
		runs, err := t.client.Runs(ctx)
		if err != nil {
			return nil, fmt.Errorf("bench: listing runs: %w", err)
		}
		now := time.Now()
		for _, r := range runs {
			i, ok := left[r.ID]
			if !ok || !proto.Finished(r.State) {
				continue
			}
			delete(left, r.ID)
			out[i].ID, out[i].State = r.ID, r.State
			out[i].WallS = now.Sub(subs[i].start).Seconds()
			if r.Finished != nil {
				out[i].RuntimeS = r.Finished.Sub(r.Submitted).Seconds()
			}
			if out[i].RuntimeS <= 0 {
				out[i].RuntimeS = out[i].WallS
			}
		}
		if len(left) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bench: waiting for %d runs on %s: %w", len(left), t.label, ctx.Err())
		case <-time.After(poll):
		}
		poll = min(2*poll, 50*time.Millisecond)
	}
	return out, nil
}

// fill completes r from the run's final status.
func fill(r *RunResult, w *workload, st proto.RunStatus) {
	r.ID, r.Flow, r.State, r.Tasks = st.ID, st.Flow, st.State, w.tasks
	if r.RuntimeS <= 0 {
		r.RuntimeS = r.WallS
	}
	r.TasksPerS = float64(w.tasks) / r.RuntimeS
	r.LoadAvg1 = loadAvg1()
	where := make(map[string]string, len(st.Tasks))
	r.TasksPerNode = map[string]int{}
	for _, ts := range st.Tasks {
		r.Activations += ts.Activations
		r.Executions += ts.Executions
		if ts.Executions > ts.Activations {
			r.Reexecutions += ts.Executions - ts.Activations
		}
		where[ts.Name] = ts.Node
		if ts.Node != "" {
			r.TasksPerNode[ts.Node]++
		}
	}
	r.Edges = len(w.edges)
	for _, e := range w.edges {
		a, b := where[e[0]], where[e[1]]
		if a != "" && b != "" && a != b {
			r.CrossNodeEdges++
		}
	}
}

// run submits w, waits for it and adds the in-process figures.
func (t *target) run(ctx context.Context, w *workload) (RunResult, error) {
	rs, err := t.runMany(ctx, []*workload{w})
	if len(rs) == 0 {
		return RunResult{}, err
	}
	return rs[0], err
}

// runMany submits every workload at once and waits for all; the process
// figures (memory, CPU time, node counters) cover them together and are
// given to each.
func (t *target) runMany(ctx context.Context, ws []*workload) (rs []RunResult, err error) {
	hung, err := t.retryHung(ctx, ws[0].name, func() error {
		var err error
		rs, err = t.runManyOnce(ctx, ws)
		return err
	})
	for i := range rs {
		rs[i].HungAttempts = hung
	}
	return rs, err
}

func (t *target) runManyOnce(ctx context.Context, ws []*workload) ([]RunResult, error) {
	before := t.snapshot(ctx)
	var mem *htdg.MemSampler
	var rmem *memSampler
	var cpu0 time.Duration
	if t.dev != nil {
		mem = htdg.StartMem(5 * time.Millisecond)
		cpu0 = htdg.CPUTime()
	} else if len(t.remote) > 0 {
		rmem = t.remoteMem(ctx, 100*time.Millisecond)
	}
	subs := make([]submitted, 0, len(ws))
	var err error
	for _, w := range ws {
		var s submitted
		if s, err = t.submit(ctx, w); err != nil {
			break
		}
		subs = append(subs, s)
	}
	var rs []RunResult
	if err == nil {
		rs, err = t.wait(ctx, subs)
	}
	if rmem != nil {
		peaks := rmem.Stop()
		nodes := t.snapshot(ctx).since(before)
		for i := range nodes {
			p := peaks[nodes[i].Node]
			nodes[i].PeakRSSBytes, nodes[i].PeakHeapBytes = p[0], p[1]
		}
		for i := range rs {
			rs[i].Nodes = nodes
		}
	}
	if mem != nil {
		peak := mem.Stop()
		cpu := (htdg.CPUTime() - cpu0).Seconds()
		nodes := t.snapshot(ctx).since(before)
		for i := range rs {
			rs[i].PeakHeapBytes, rs[i].PeakSysBytes, rs[i].CPUS, rs[i].Nodes = peak.HeapInuse, peak.Sys, cpu, nodes
		}
	}
	return rs, err
}

func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func sizeLabel(n int) string {
	if n%1000 == 0 {
		return strconv.Itoa(n/1000) + "K"
	}
	return strconv.Itoa(n)
}
