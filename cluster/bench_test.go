package cluster_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/flowgen"
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
