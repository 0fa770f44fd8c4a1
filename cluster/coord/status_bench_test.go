package coord

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/flowgen"
	"github.com/hetflow/hetflow/transport"
)

// layered100K is the cluster speed benchmarks' flow (100 layers × 1,000
// no-op tasks) and a fold of it run to its end on one node.
func layered100K(b *testing.B) (*spec.Graph, *Fold) {
	b.Helper()
	f, err := spec.ParseJSON("layered.json", flowgen.Layered(100, 1000, 1, true))
	if err != nil {
		b.Fatal(err)
	}
	g, err := f.Expand()
	if err != nil {
		b.Fatal(err)
	}
	fo := NewFold()
	for i := range g.Vertices {
		fo.Add(g, &transport.TaskEvent{Run: "r", Gen: 1, Task: uint32(i), Node: "n1", State: transport.TaskRunning, Act: 1})
		fo.Add(g, &transport.TaskEvent{Run: "r", Gen: 1, Task: uint32(i), Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1})
	}
	return g, fo
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
		a := f.tasks[name]
		if a == nil {
			st.Tasks = append(st.Tasks, proto.TaskStatus{Name: name, State: none})
			return
		}
		ts := proto.TaskStatus{Name: name, Node: a.node, State: a.state.String(), Activations: a.act}
		if a.state == transport.TaskRunning && (r.State == proto.RunCancelled || r.State == proto.RunFailed) {
			ts.State = proto.TaskCancelled
		}
		for _, x := range a.execs {
			ts.Executions += x.n
		}
		if sink && len(a.output) > 0 {
			ts.Output = hex.EncodeToString(a.output)
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
