package dashboard

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// fakeSource is an in-memory Source for the handler tests: runs, their
// events, and a status folded the simple way (latest event per task).
type fakeSource struct {
	mu        sync.Mutex
	runs      map[string]*fakeRun
	order     []string
	nodes     []proto.NodeInfo
	signals   uint64
	cancelled []string
}

type fakeRun struct {
	info   RunInfo
	params map[string]any // the run's parameter values, for its status
	g      *spec.Graph
	evs    []transport.TaskEvent
}

func newFake() *fakeSource {
	return &fakeSource{runs: map[string]*fakeRun{}, nodes: []proto.NodeInfo{
		{ID: "n1", Address: "127.0.0.1:1", State: proto.NodeAlive, CPUs: 2},
		{ID: "n2", Address: "127.0.0.1:2", State: proto.NodeAlive, CPUs: 2, GPUs: 1},
	}}
}

// addRun adds a running run of the flow text, its tasks assigned round-robin
// to n1, n2.
func (f *fakeSource) addRun(t testing.TB, id, text string, submitted time.Time) *fakeRun {
	t.Helper()
	name := id + ".yaml"
	if strings.HasPrefix(text, "{") {
		name = id + ".json"
	}
	file, err := spec.Parse(name, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	canon, err := spec.Marshal(file, spec.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	g, err := file.Expand()
	if err != nil {
		t.Fatal(err)
	}
	asg := make([]string, len(g.Vertices))
	for i := range asg {
		asg[i] = []string{"n1", "n2"}[i%2]
	}
	r := &fakeRun{g: g, info: RunInfo{RunSummary: proto.RunSummary{ID: id, Flow: g.Name, State: proto.RunRunning, Submitted: submitted},
		FlowFile: canon, Assignment: asg, Gen: 1}}
	f.mu.Lock()
	f.runs[id] = r
	f.order = append(f.order, id)
	f.mu.Unlock()
	return r
}

// event appends a task event of vertex path.
func (f *fakeSource) event(id, path, node string, st transport.TaskState, act uint64, start, end time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.runs[id]
	v, ok := r.g.Lookup(path)
	if !ok {
		panic("no task " + path)
	}
	r.evs = append(r.evs, transport.TaskEvent{Run: id, Gen: 1, Task: uint32(v), Node: node, State: st, Act: act, Executions: act, Start: start, End: end})
}

func (f *fakeSource) finish(id, state string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.runs[id]
	r.info.State = state
	r.info.Finished = &at
}

func (f *fakeSource) Coordinators() ([]Coordinator, uint64) {
	return []Coordinator{{ID: "c1", Raft: "127.0.0.1:9", HTTP: "127.0.0.1:8", Suffrage: "voter", Leader: true, State: proto.NodeAlive},
		{ID: "c2", Raft: "127.0.0.1:10", Suffrage: "voter", State: proto.NodeSuspect}}, 3
}

func (f *fakeSource) Nodes() []proto.NodeInfo { return f.nodes }

func (f *fakeSource) Runs() []proto.RunSummary {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []proto.RunSummary
	for _, id := range f.order {
		out = append(out, f.runs[id].info.RunSummary)
	}
	return out
}

func (f *fakeSource) Run(id string) (RunInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[id]
	if !ok {
		return RunInfo{}, false
	}
	return r.info, true
}

func (f *fakeSource) Status(ctx context.Context, id string) (proto.RunStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[id]
	if !ok {
		return proto.RunStatus{}, fmt.Errorf("run %s: %w", id, proto.ErrNotFound)
	}
	latest := map[uint32]*transport.TaskEvent{}
	for i := range r.evs {
		latest[r.evs[i].Task] = &r.evs[i]
	}
	st := proto.RunStatus{ID: id, Flow: r.info.RunSummary.Flow, State: r.info.State, Params: r.params}
	for i, v := range r.g.Vertices {
		ts := proto.TaskStatus{Name: v.Path, State: proto.TaskPending}
		if e := latest[uint32(i)]; e != nil {
			ts.State, ts.Node, ts.Activations = e.State.String(), e.Node, e.Act
		} else if proto.Finished(r.info.State) {
			ts.State = proto.TaskSkipped
		}
		st.Tasks = append(st.Tasks, ts)
	}
	return st, nil
}

func (f *fakeSource) Events(ctx context.Context, run string, after uint64, fn func(*transport.TaskEvent)) (uint64, error) {
	f.mu.Lock()
	r := f.runs[run]
	evs := append([]transport.TaskEvent(nil), r.evs[min(int(after), len(r.evs)):]...)
	f.mu.Unlock()
	for i := range evs {
		fn(&evs[i])
	}
	return after + uint64(len(evs)), nil
}

func (f *fakeSource) Cancel(ctx context.Context, id string) error {
	f.mu.Lock()
	f.cancelled = append(f.cancelled, id)
	f.mu.Unlock()
	f.finish(id, proto.RunCancelled, time.Now())
	return nil
}

func (f *fakeSource) Signals() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.signals
}
