package cluster_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/devcluster"
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
