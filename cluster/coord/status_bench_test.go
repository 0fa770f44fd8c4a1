package coord

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// layered100K is the cluster speed benchmarks' flow (100 layers × 1,000
// no-op tasks) and a fold of it run to its end on one node.
func layered100K(b *testing.B) (*spec.Graph, *Fold) {
	b.Helper()
	g := layeredGraph(b, 100, 1000)
	fo := NewFold()
	for i := range g.Vertices {
		fo.Add(g, &transport.TaskEvent{Run: "r", Gen: 1, Task: uint32(i), Node: "n1", State: transport.TaskRunning, Act: 1})
		fo.Add(g, &transport.TaskEvent{Run: "r", Gen: 1, Task: uint32(i), Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1})
	}
	return g, fo
}

// aggOf is the key and aggregate of the task named name in g (nil: no
// event yet).
func aggOf(f *Fold, g *spec.Graph, name string) (taskKey, *taskAgg) {
	if v, ok := g.Lookup(name); ok {
		return taskKey(v), f.vertAgg(v)
	}
	if k, ok := f.byName[name]; ok {
		return taskKey(-1 - k), &f.named[k]
	}
	return 0, nil
}

// statusBefore is Fold.Status as it was before the status API kept
// versions (a map of the rows emitted, the executions summed per row): the
// baseline of BenchmarkStatus100K.
func statusBefore(f *Fold, r Run, g *spec.Graph) proto.RunStatus {
	st := proto.RunStatus{ID: r.ID, Flow: r.FlowName, State: r.State, Error: r.Error, Params: r.Params}
	none := noneState(r.State)
	done := map[string]bool{}
	emit := func(name string, sink bool) {
		done[name] = true
		key, a := aggOf(f, g, name)
		if a == nil {
			st.Tasks = append(st.Tasks, proto.TaskStatus{Name: name, State: none})
			return
		}
		ts := proto.TaskStatus{Name: name, Node: f.nodeOf(a), State: a.state.String(), Activations: a.act}
		if a.state == transport.TaskRunning && (r.State == proto.RunCancelled || r.State == proto.RunFailed) {
			ts.State = proto.TaskCancelled
		}
		ts.Executions = a.sum
		if a.multi {
			ts.Executions = 0
			for _, x := range f.execs[key] {
				ts.Executions += x.n
			}
		}
		if out := f.output(key); sink && len(out) > 0 {
			ts.Output = hex.EncodeToString(out)
		}
		st.Tasks = append(st.Tasks, ts)
	}
	for _, v := range g.Vertices {
		emit(v.Path, len(v.Succ) == 0)
		for _, x := range f.extra {
			if !done[x] && strings.HasPrefix(x, v.Path+"/") {
				emit(x, true)
			}
		}
	}
	for _, x := range f.extra {
		if !done[x] {
			emit(x, true)
		}
	}
	return st
}

// BenchmarkStatus100K is one status read of a finished 100,000-task run
// by each path, in the same process: before (a RunStatus built and given
// to encoding/json, every read), render (AppendJSON: the first read of a
// version), cached (the repeat read of a finished run: a copy of the kept
// bytes), summary (?view=summary) and delta (?since= with 1,000 rows
// changed). The ratios against before are the figures of
// docs/benchmarks/cluster-speed.md.
func BenchmarkStatus100K(b *testing.B) {
	g, fo := layered100K(b)
	r := Run{ID: "r0000000000000-000000", FlowName: "layered", State: proto.RunSucceeded, Gen: 1}
	fo.Touch()
	body := append(fo.AppendJSON(nil, r, g), '\n')
	b.Run("before", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			_ = json.NewEncoder(io.Discard).Encode(statusBefore(fo, r, g))
		}
	})
	b.Run("render", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			_, _ = io.Discard.Write(append(fo.AppendJSON(nil, r, g), '\n'))
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		dst := make([]byte, len(body))
		for b.Loop() {
			copy(dst, body) // what writing the kept bytes to a connection costs here, beyond the kernel's copy
		}
	})
	b.Run("summary", func(b *testing.B) {
		for b.Loop() {
			_ = json.NewEncoder(io.Discard).Encode(fo.Progress(r, g))
		}
	})
	v := fo.Version()
	for i := range 1000 {
		fo.Add(g, &transport.TaskEvent{Run: "r", Gen: 1, Task: uint32(i * 97), Node: "n1", State: transport.TaskDone, Act: 1, Executions: 2})
	}
	b.Run("delta", func(b *testing.B) {
		for b.Loop() {
			_ = json.NewEncoder(io.Discard).Encode(fo.Delta(r, g, v))
		}
	})
}

// BenchmarkFoldMemory100K reports the heap a finished 100,000-task run's
// status cache holds: its graph and its fold (heap-B/run), and the rendered
// status a coordinator keeps of it (body-B/run).
func BenchmarkFoldMemory100K(b *testing.B) {
	for b.Loop() {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		g, fo := layered100K(b)
		fo.journal = nil // a finished run's, after Touch
		runtime.GC()
		runtime.ReadMemStats(&m1)
		b.ReportMetric(float64(m1.HeapAlloc)-float64(m0.HeapAlloc), "heap-B/run")
		body := fo.AppendJSON(nil, Run{ID: "r0000000000000-000000", FlowName: "layered", State: proto.RunSucceeded}, g)
		b.ReportMetric(float64(len(body)), "body-B/run")
		runtime.KeepAlive(g)
		runtime.KeepAlive(fo)
	}
}

// BenchmarkFoldRecord100K is the coordinator's share of a 100,000-task
// run's record, from the stored messages to the verdict: each message
// decoded (transport.EachEvent), each event checked (EventFromOwner) and
// folded, then CheckSuccess. "events": the EventBatch messages an earlier
// node stored (a TaskEvent per task, with its run, node, path and times;
// batches of up to 256); "reports": the TaskReports a node stores now (a
// delta per task, named by index; 10,000 a message, as ~256 KiB holds).
func BenchmarkFoldRecord100K(b *testing.B) {
	g, _ := layered100K(b)
	r := Run{ID: "r0000000000001-000001", Gen: 1, Assignment: make([]string, len(g.Vertices))}
	for i := range r.Assignment {
		r.Assignment[i] = "n1"
	}
	t0 := time.Unix(1700000000, 0)
	var events, reports [][]byte
	for lo := 0; lo < len(g.Vertices); lo += 256 {
		var eb transport.EventBatch
		for i := lo; i < min(lo+256, len(g.Vertices)); i++ {
			eb.Events = append(eb.Events, transport.TaskEvent{Run: r.ID, Gen: 1, Task: uint32(i), Name: g.Vertices[i].Path, Node: "n1",
				State: transport.TaskDone, Act: 1, Executions: 1, Start: t0.Add(time.Duration(i) * time.Microsecond), End: t0.Add(time.Duration(i+1) * time.Microsecond)})
		}
		events = append(events, transport.Encode(&eb))
	}
	for lo := 0; lo < len(g.Vertices); lo += 10000 {
		tr := transport.TaskReport{Run: r.ID, Gen: 1, Node: "n1"}
		for i := lo; i < min(lo+10000, len(g.Vertices)); i++ {
			tr.Tasks = append(tr.Tasks, transport.TaskDelta{Task: uint32(i), State: transport.TaskDone, Act: 1, Executions: 1,
				Start: t0.Add(time.Duration(i) * time.Microsecond).UnixNano(), End: t0.Add(time.Duration(i+1) * time.Microsecond).UnixNano()})
		}
		reports = append(reports, transport.Encode(&tr))
	}
	for _, c := range []struct {
		name string
		msgs [][]byte
	}{{"events", events}, {"reports", reports}} {
		bytes := 0
		for _, m := range c.msgs {
			bytes += len(m)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				f := NewFold()
				for _, m := range c.msgs {
					err := transport.EachEvent(m, transport.Limits{}, func(e *transport.TaskEvent) error {
						if EventFromOwner(r, e) {
							f.Add(g, e)
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
				if owed, failed := CheckSuccess(g, f); len(owed) > 0 || len(failed) > 0 {
					b.Fatalf("owed %v, failed %v", owed, failed)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(g.Vertices)), "ns/task")
			b.ReportMetric(float64(bytes)/float64(len(g.Vertices)), "stored-B/task")
		})
	}
	// The check alone, through the graph's kept plan, of one fold of
	// every task done once (a run again's success, the leader's last step
	// before its verdict).
	b.Run("check", func(b *testing.B) {
		var tr transport.TaskReport
		var runs []uint32
		f := NewFold()
		for _, m := range reports {
			if err := tr.DecodeRuns(m, transport.Limits{}, &runs); err != nil {
				b.Fatal(err)
			}
			f.addReport(g, &tr, runs, &r)
		}
		p := verdictPlanOf(g)
		b.ResetTimer()
		for range b.N {
			if owed, failed := p.check(g, f); len(owed) > 0 || len(failed) > 0 {
				b.Fatalf("owed %v, failed %v", owed, failed)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(g.Vertices)), "ns/task")
	})
	// The leader's way with reports: each decoded into one TaskReport
	// reused (the cursor's), its ranges left whole (DecodeRuns), folded
	// whole (addReport, EventFromOwner's rule a report at a time, each row
	// proved as it is folded), then the check of the rows not proved
	// (checkFold) through the graph's kept plan.
	b.Run("leader", func(b *testing.B) {
		b.ReportAllocs()
		var tr transport.TaskReport
		var runs []uint32
		for range b.N {
			f := NewFold()
			f.KeepProof()
			for _, m := range reports {
				if err := tr.DecodeRuns(m, transport.Limits{}, &runs); err != nil {
					b.Fatal(err)
				}
				f.addReport(g, &tr, runs, &r)
			}
			if owed, failed := verdictPlanOf(g).checkFold(g, f); len(owed) > 0 || len(failed) > 0 {
				b.Fatalf("owed %v, failed %v", owed, failed)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(g.Vertices)), "ns/task")
	})
}
