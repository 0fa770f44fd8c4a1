package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetflow/hetflow/internal/flowgen"
	"github.com/hetflow/hetflow/internal/htdg"
	"github.com/hetflow/hetflow/localexec"
	"github.com/hetflow/hetflow/transport"
)

// pingPong is a do-while whose body and condition can sit on two nodes:
// with them split, every iteration crosses twice (body→cond edge, cond→body
// pick).
func pingPong(n int) string {
	return fmt.Sprintf(`
name: pingpong
tasks:
  - {name: init, func: noop}
  - {name: body, func: noop, succeed: [init]}
  - {name: cond, kind: condition, func: loop, args: {n: %d}, succeed: [body], precede: [body, done]}
  - {name: done, func: noop}
`, n)
}

// BenchmarkCrossNodeHop measures cross-node activation latency: a task
// done on one node → its successor starting on the other, through NATS on
// loopback. ns/op is the wall time of one hop (a run of b.N iterations has
// 2·b.N hops); p50-us and p99-us are the distribution of the hops from the
// executors' observers (end of the producer's task → start of the
// consumer's, one clock since both nodes share the process). "local" runs the same
// loop on one node, for the ratio.
func BenchmarkCrossNodeHop(b *testing.B) {
	for _, split := range []bool{false, true} {
		name := "local"
		if split {
			name = "split"
		}
		b.Run(name, func(b *testing.B) {
			c := newCluster(b, nodeSpec{}, nodeSpec{})
			ctx := testCtx(b, 10*time.Minute)
			file, g := parseFlow(b, pingPong(b.N-1))
			own := make([]uint32, len(g.Vertices))
			if split {
				own[byName(g, "cond")] = 1
			}
			obs := &hopObserver{}
			for _, n := range c.nodes {
				n.Executor().AddObserver(obs)
			}
			b.ResetTimer()
			out := c.runFlow(ctx, file, own, runOpts{noRelease: true})
			b.StopTimer()
			for _, n := range c.nodes {
				n.Executor().RemoveObserver(obs)
			}
			if out.failed != nil {
				b.Fatalf("failed: %+v", out.failed)
			}
			if f := out.tasks["body"]; f.acts != uint64(b.N) {
				b.Fatalf("body ran %d times, want %d", f.acts, b.N)
			}
			hops := b.N * 2 // body→cond and cond→body per iteration, local or not
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(hops), "ns/hop")
			lat := obs.hops()
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-us")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-us")
			}
			c.release(ctx, out.run, "finished")
		})
	}
}

// BenchmarkCrossNodeEdges measures cross-node edge throughput between one
// pair of nodes: a source on n0 with `width` successors on n1, each with an
// edge back to a sink on n0 (2·width cross-node edges a run). The figure
// includes the run's start, its TaskEvents (published to JetStream) and the
// termination check.
func BenchmarkCrossNodeEdges(b *testing.B) {
	const width = 2000
	c := newCluster(b, nodeSpec{}, nodeSpec{})
	ctx := testCtx(b, 10*time.Minute)
	file, g := parseFlow(b, string(flowgen.FanInOut(width)))
	own := make([]uint32, len(g.Vertices))
	for i := range width {
		own[byName(g, fmt.Sprintf("w%d", i))] = 1
	}
	var exec, hop1, span, hop2, cpu time.Duration
	b.ResetTimer()
	for range b.N {
		cpu0 := htdg.CPUTime()
		out := c.runFlow(ctx, file, own, runOpts{})
		if out.failed != nil {
			b.Fatalf("failed: %+v", out.failed)
		}
		b.StopTimer()
		cpu += htdg.CPUTime() - cpu0
		var first, last, srcEnd, wFirst, wLast, sinkStart time.Time
		err := c.leader.conn.ReplayEvents(ctx, out.run, func(e *transport.TaskEvent) error {
			name := e.Name
			if name == "" && int(e.Task) < len(g.Vertices) {
				name = g.Vertices[e.Task].Path
			}
			if first.IsZero() || e.Start.Before(first) {
				first = e.Start
			}
			if e.End.After(last) {
				last = e.End
			}
			switch {
			case name == "src":
				srcEnd = e.End
			case name == "sink":
				sinkStart = e.Start
			default:
				if wFirst.IsZero() || e.Start.Before(wFirst) {
					wFirst = e.Start
				}
				if e.End.After(wLast) {
					wLast = e.End
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		exec += last.Sub(first)
		hop1 += wFirst.Sub(srcEnd)
		span += wLast.Sub(wFirst)
		hop2 += sinkStart.Sub(wLast)
		b.StartTimer()
	}
	// CPU time of the whole process (both nodes, the NATS server, the
	// stand-in leader) per edge, over whole runs: less sensitive than wall
	// time to what else the machine runs, and it counts work, not waiting.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(2*width*b.N), "cpu-ns/edge")
	b.ReportMetric(float64(2*width*b.N)/b.Elapsed().Seconds(), "edges/s")
	// from the source's start to the sink's end: without parsing the flow
	// and building the graph on each node, and without termination
	b.ReportMetric(float64(2*width*b.N)/exec.Seconds(), "exec-edges/s")
	// the exec window in three phases, per run: src's end → the first wN's
	// start (the first Signal's trip, and n1 still building the run), the wN
	// tasks' span, the last wN's end → sink's start
	b.ReportMetric(float64(hop1.Microseconds())/float64(b.N), "first-us")
	b.ReportMetric(float64(span.Microseconds())/float64(b.N), "span-us")
	b.ReportMetric(float64(hop2.Microseconds())/float64(b.N), "last-us")
}

// hopObserver records the start and end times of body and cond on every
// worker of both nodes; hops pairs the k-th end of one with the next start
// of the other (the loop alternates them strictly).
type hopObserver struct {
	mu     sync.Mutex
	events []hopEvent
}

type hopEvent struct {
	at    time.Time
	start bool
}

func (o *hopObserver) record(t localexec.TaskInfo, start bool) {
	if t.Name != "body" && t.Name != "cond" {
		return
	}
	now := time.Now()
	o.mu.Lock()
	o.events = append(o.events, hopEvent{now, start})
	o.mu.Unlock()
}

func (o *hopObserver) TaskStart(_ localexec.WorkerInfo, t localexec.TaskInfo) { o.record(t, true) }
func (o *hopObserver) TaskEnd(_ localexec.WorkerInfo, t localexec.TaskInfo)   { o.record(t, false) }

func (o *hopObserver) hops() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	evs := slices.Clone(o.events)
	slices.SortFunc(evs, func(a, b hopEvent) int { return a.at.Compare(b.at) })
	var lat []time.Duration
	var end time.Time
	for _, e := range evs {
		if !e.start {
			end = e.at
		} else if !end.IsZero() {
			lat = append(lat, e.at.Sub(end))
			end = time.Time{}
		}
	}
	slices.Sort(lat)
	return lat
}

// denseFlow is a flow "dense": k noop tasks a0…a(k-1), and k noop tasks
// b0…b(k-1), each after every aN (k² edges).
func denseFlow(k int) string {
	var b strings.Builder
	b.WriteString("name: dense\ntasks:\n")
	for i := range k {
		fmt.Fprintf(&b, "  - {name: a%d, func: noop}\n", i)
	}
	var preds strings.Builder
	for i := range k {
		if i > 0 {
			preds.WriteString(", ")
		}
		fmt.Fprintf(&preds, "a%d", i)
	}
	for i := range k {
		fmt.Fprintf(&b, "  - {name: b%d, func: noop, succeed: [%s]}\n", i, preds.String())
	}
	return b.String()
}

// BenchmarkCrossNodeEdgeCost measures the CPU a cross-node edge costs
// beyond a local one: each iteration runs the same flow twice, all on n0
// (local) and split over n0 and n1 (split), and xcpu-ns/edge is the
// process's CPU time (both nodes, the NATS server, the stand-in leader:
// sender, NATS and receiver) of the split runs less that of the local runs,
// per cross-node edge. The two flows: "fan", src → 2000 tasks on n1 → sink
// (4000 cross-node edges, each of its own source activation on the way
// back), and "dense", 100 tasks on n0 each before all 100 tasks on n1
// (10,000 cross-node edges, 100 from each source activation).
func BenchmarkCrossNodeEdgeCost(b *testing.B) {
	const width, k = 2000, 100
	flows := []struct {
		name   string
		text   string
		remote func(name string) bool // the tasks on n1 when split
		edges  int                    // cross-node edges when split
	}{
		{"fan", string(flowgen.FanInOut(width)), func(s string) bool { return strings.HasPrefix(s, "w") }, 2 * width},
		{"dense", denseFlow(k), func(s string) bool { return strings.HasPrefix(s, "b") }, k * k},
	}
	for _, f := range flows {
		b.Run(f.name, func(b *testing.B) {
			c := newCluster(b, nodeSpec{}, nodeSpec{})
			ctx := testCtx(b, 10*time.Minute)
			file, g := parseFlow(b, f.text)
			local := make([]uint32, len(g.Vertices))
			split := make([]uint32, len(g.Vertices))
			for v := range g.Vertices {
				if f.remote(g.Vertices[v].Path) {
					split[v] = 1
				}
			}
			var cpuLocal, cpuSplit, exec time.Duration
			b.ResetTimer()
			for range b.N {
				for _, own := range [][]uint32{local, split} {
					cpu0 := htdg.CPUTime()
					out := c.runFlow(ctx, file, own, runOpts{})
					d := htdg.CPUTime() - cpu0
					if out.failed != nil {
						b.Fatalf("failed: %+v", out.failed)
					}
					if &own[0] == &local[0] {
						cpuLocal += d
						continue
					}
					cpuSplit += d
					b.StopTimer()
					exec += execWindow(ctx, b, c, out.run)
					b.StartTimer()
				}
			}
			edges := float64(f.edges * b.N)
			// the split runs' first task start → last task end (without the
			// run's start and its termination)
			b.ReportMetric(edges/exec.Seconds(), "exec-edges/s")
			b.ReportMetric(float64(cpuSplit.Nanoseconds())/edges, "cpu-ns/edge")
			b.ReportMetric(float64(cpuLocal.Nanoseconds())/edges, "local-cpu-ns/edge")
			b.ReportMetric(float64((cpuSplit-cpuLocal).Nanoseconds())/edges, "xcpu-ns/edge")
		})
	}
}

// execWindow is run's first task start → last task end, from its events.
func execWindow(ctx context.Context, b *testing.B, c *cluster, run string) time.Duration {
	var first, last time.Time
	err := c.leader.conn.ReplayEvents(ctx, run, func(e *transport.TaskEvent) error {
		if first.IsZero() || e.Start.Before(first) {
			first = e.Start
		}
		if e.End.After(last) {
			last = e.End
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return last.Sub(first)
}

// BenchmarkNodeNoopRunAgain measures a node's cost per task of a static
// graph it has run before: a layered DAG of 20×1,000 noop tasks
// (flowgen.Layered) on one node, run b.N times with the same plan (the
// node's graph cache holds it after the first). Metrics, per task of a
// run: cpu-ns/task (the whole process: node, NATS server, JetStream
// storing the task reports, the harness's stand-in leader, which marshals
// the flow once a run) and wall-ns/task.
func BenchmarkNodeNoopRunAgain(b *testing.B) {
	const layers, width = 20, 1000
	c := newCluster(b, nodeSpec{})
	ctx := testCtx(b, 10*time.Minute)
	file, g := parseFlow(b, string(flowgen.Layered(layers, width, 1, false)))
	own := make([]uint32, len(g.Vertices))
	one := func() {
		out := c.runFlow(ctx, file, own, runOpts{noFold: true})
		if out.failed != nil {
			b.Fatalf("failed: %+v", out.failed)
		}
	}
	one() // the first run: compiled and built
	b.ResetTimer()
	cpu0 := htdg.CPUTime()
	for range b.N {
		one()
	}
	cpu := htdg.CPUTime() - cpu0
	b.StopTimer()
	tasks := float64(b.N * len(g.Vertices))
	b.ReportMetric(float64(cpu.Nanoseconds())/tasks, "cpu-ns/task")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/tasks, "wall-ns/task")
}
