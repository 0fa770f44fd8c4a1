package cluster_test

import (
	"context"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/cluster"
	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/flowgen"
	"github.com/hetflow/hetflow/internal/htdg"
	"github.com/hetflow/hetflow/localexec"
	"github.com/hetflow/hetflow/transport"
)

// BenchmarkSubmitToFirstTask measures, on an in-process dev cluster of
// three nodes, the time from the client's Submit call to the start of the
// run's first task (the event's Start stamp: one process, one clock), for a
// two-task flow; and submit to the run's end as the client sees it. It
// reports the median of b.N runs as submit-to-first-task-µs and
// submit-to-end-ms.
func BenchmarkSubmitToFirstTask(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 3, SimGPUs: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	c := d.Client()
	c.Poll = 5 * time.Millisecond
	nc, err := transport.Connect(ctx, d.NATSURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	flow := []byte("name: two\ntasks:\n  - {name: a, func: noop}\n  - {name: b, func: hash, succeed: [a]}\n")
	var first, end []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		id, err := c.Submit(ctx, "two.yaml", flow)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Wait(ctx, id, nil); err != nil {
			b.Fatal(err)
		}
		end = append(end, time.Since(t0))
		var start time.Time
		if err := nc.ReplayEvents(ctx, id, func(e *transport.TaskEvent) error {
			if start.IsZero() || e.Start.Before(start) {
				start = e.Start
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		first = append(first, start.Sub(t0))
	}
	b.StopTimer()
	med := func(xs []time.Duration) time.Duration { slices.Sort(xs); return xs[len(xs)/2] }
	b.ReportMetric(float64(med(first).Microseconds()), "submit-to-first-task-µs")
	b.ReportMetric(float64(med(end).Microseconds())/1000, "submit-to-end-ms")
}

// BenchmarkAssignmentCopies counts, on an in-process dev cluster of three
// nodes, the Assignment copies that reach the nodes' control subjects for
// one run of a 100,000-task layered flow (100 layers of 1,000; each node
// takes seconds to build its part), as a NATS subscriber of hf.ctl.* sees
// them: assignments/node is copies per node of the run, MB/node their
// bytes. The leader sends a node its Assignment once, and again only while
// the node has neither acknowledged (on receipt, before it builds) nor
// reported it; before acks it re-sent every 500 ms until the node
// reported. HETFLOW_BENCH_LAYERS and HETFLOW_BENCH_WIDTH change the flow.
func BenchmarkAssignmentCopies(b *testing.B) {
	layers, width := 100, 1000
	for env, v := range map[string]*int{"HETFLOW_BENCH_LAYERS": &layers, "HETFLOW_BENCH_WIDTH": &width} {
		if s := os.Getenv(env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				b.Fatalf("%s=%q", env, s)
			}
			*v = n
		}
	}
	flow := flowgen.Layered(layers, width, 1, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 3, SimGPUs: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	nc, err := transport.Connect(ctx, d.NATSURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	copies, bytes := map[string]int{}, 0 // "run node" → Assignment copies
	sub, err := nc.Subscribe("hf.ctl.*", func(m *nats.Msg) {
		var a transport.Assignment
		if typ, err := transport.PeekType(m.Data); err != nil || typ != transport.TypeAssignment || a.Decode(m.Data, transport.Limits{}) != nil {
			return
		}
		mu.Lock()
		copies[a.Run+" "+strings.TrimPrefix(m.Subject, "hf.ctl.")]++
		bytes += len(m.Data)
		mu.Unlock()
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close(ctx)
	if err := nc.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	c := d.Client()
	b.ResetTimer()
	for range b.N {
		id, err := c.Submit(ctx, "layered.json", flow)
		if err != nil {
			b.Fatal(err)
		}
		st, err := c.Wait(ctx, id, nil)
		if err != nil {
			b.Fatal(err)
		}
		if st.State != proto.RunSucceeded {
			b.Fatalf("run %s: %s %s", id, st.State, st.Error)
		}
	}
	b.StopTimer()
	if err := nc.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for k, n := range copies {
		b.Logf("%s: %d copies", k, n)
		total += n
	}
	if len(copies) == 0 {
		b.Fatal("no Assignment seen")
	}
	b.ReportMetric(float64(total)/float64(len(copies)), "assignments/node")
	b.ReportMetric(float64(bytes)/float64(len(copies))/1e6, "MB/node")
}

// BenchmarkRunAgainVsLocal100K measures the issue's run-again target ("the
// same flow run again (registered): at most 2× one localexec run of its
// graph plus one hop") on an in-process dev cluster of three nodes (2
// workers each, as coordinator dev): the 100 × 1,000 layered no-op DAG
// (internal/flowgen.Layered, JSON) is registered and run once to warm
// every cache; then each op is one run of it by flow id, from
// Client.RunFlow to the client seeing its verdict (a long poll of the
// run's summary: the verdict, not its 100K-row table). Beside it, in the
// same process: one run of the same graph (expanded from the same file) as
// one localexec taskflow of empty tasks on 2 workers (the node the cost
// model places the whole DAG on has 2), built once and run again; and one
// hop, a NATS request/reply round trip through the cluster's server.
//
// Metrics: run-again-ms and run-again-cpu-ms (the whole process: client,
// coordinator, NATS server and nodes), localexec-ms and localexec-cpu-ms,
// hop-us (medians of wall, means of CPU), and x-target: run-again wall
// over (localexec wall + hop); the target is x-target <= 2.
func BenchmarkRunAgainVsLocal100K(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	text := flowgen.Layered(100, 1000, 1, true)

	// localexec: the same graph, built once.
	f, err := spec.ParseJSON("layered.json", text)
	if err != nil {
		b.Fatal(err)
	}
	g, err := f.Expand()
	if err != nil {
		b.Fatal(err)
	}
	tf := localexec.NewTaskflow("layered")
	tasks := make([]localexec.Task, len(g.Vertices))
	for v := range g.Vertices {
		tasks[v] = tf.Emplace(func() {})
	}
	for v := range g.Vertices {
		for _, e := range g.Vertices[v].Succ {
			tasks[v].Precede(tasks[e.To])
		}
	}
	ex := localexec.NewExecutor(localexec.WithWorkers(2))
	defer ex.Close()
	local := func() (wall, cpu time.Duration) {
		cpu0, t0 := htdg.CPUTime(), time.Now()
		if err := ex.Run(tf).Wait(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0), htdg.CPUTime() - cpu0
	}
	local() // warm

	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 3, SimGPUs: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	c := d.Client()
	c.Poll = time.Millisecond
	ref, err := c.RegisterFlow(ctx, "layered.json", text)
	if err != nil {
		b.Fatal(err)
	}
	runAgain := func() (wall, cpu time.Duration) {
		cpu0, t0 := htdg.CPUTime(), time.Now()
		id, err := c.RunFlow(ctx, ref.ID)
		if err != nil {
			b.Fatal(err)
		}
		p := verdict(ctx, b, c, id)
		wall, cpu = time.Since(t0), htdg.CPUTime()-cpu0
		if p.State != proto.RunSucceeded || p.Counts.Done != len(g.Vertices) {
			b.Fatalf("run %s: %s, %d of %d tasks done", id, p.State, p.Counts.Done, len(g.Vertices))
		}
		return wall, cpu
	}
	runAgain() // the first run: placed, planned, built on the node

	// One hop: a request and its reply through the cluster's NATS server.
	nc, err := transport.Connect(ctx, d.NATSURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.Subscribe("bench.hop", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close(ctx)
	var hops []time.Duration
	for range 200 {
		t0 := time.Now()
		if _, err := nc.Request(ctx, "bench.hop", []byte("x")); err != nil {
			b.Fatal(err)
		}
		hops = append(hops, time.Since(t0))
	}

	var again, againCPU, loc, locCPU []time.Duration
	// What a run again allocates (the process's: coordinator, nodes, NATS
	// server and client, and what the run before still did meanwhile),
	// read around it, outside its wall and CPU, and the GC's CPU over the
	// loop but its idle marking (localexec's runs too: the same in any tree).
	var allocB, allocN uint64
	var ms0, ms1 runtime.MemStats
	gcCPU := func() float64 { // the GC's CPU but its idle mark workers' (what an idle P soaks up, not taken from the run)
		s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/gc/mark/idle:cpu-seconds"}}
		metrics.Read(s)
		return s[0].Value.Float64() - s[1].Value.Float64()
	}
	b.ResetTimer()
	gc0 := gcCPU()
	for range b.N {
		runtime.ReadMemStats(&ms0)
		w, c := runAgain()
		runtime.ReadMemStats(&ms1)
		allocB, allocN = allocB+ms1.TotalAlloc-ms0.TotalAlloc, allocN+ms1.Mallocs-ms0.Mallocs
		again, againCPU = append(again, w), append(againCPU, c)
		w, c = local()
		loc, locCPU = append(loc, w), append(locCPU, c)
	}
	b.StopTimer()
	// Counted at each cycle's end: a few cycles in 40 iterations (a cycle
	// marks the whole heap, some hundreds of MB), so this is lumpy; the
	// allocation per run again is what a change moves.
	b.ReportMetric((gcCPU()-gc0)*1e3/float64(b.N), "gc-cpu-ms/iter")
	b.ReportMetric(float64(allocB)/1e6/float64(b.N), "run-again-alloc-MB")
	b.ReportMetric(float64(allocN)/float64(b.N), "run-again-allocs")
	med := func(xs []time.Duration) time.Duration { xs = slices.Clone(xs); slices.Sort(xs); return xs[len(xs)/2] }
	mean := func(xs []time.Duration) time.Duration {
		var s time.Duration
		for _, x := range xs {
			s += x
		}
		return s / time.Duration(len(xs))
	}
	hop := med(hops)
	b.ReportMetric(float64(med(again).Microseconds())/1e3, "run-again-ms")
	b.ReportMetric(float64(mean(againCPU).Microseconds())/1e3, "run-again-cpu-ms")
	b.ReportMetric(float64(med(loc).Microseconds())/1e3, "localexec-ms")
	b.ReportMetric(float64(mean(locCPU).Microseconds())/1e3, "localexec-cpu-ms")
	b.ReportMetric(float64(hop.Nanoseconds())/1e3, "hop-us")
	b.ReportMetric(float64(med(again))/float64(med(loc)+hop), "x-target")
	b.ReportMetric(0, "ns/op") // the op is two runs of different things: see the metrics
}

// verdict follows run id by long polls of its summary until it is
// finished, and returns that summary.
func verdict(ctx context.Context, b *testing.B, c *cluster.Client, id string) proto.RunProgress {
	version := ""
	for {
		p, err := c.Progress(ctx, id, version, cluster.FollowWait)
		if err != nil {
			b.Fatal(err)
		}
		if proto.Finished(p.State) {
			return p
		}
		version = p.Version
	}
}
