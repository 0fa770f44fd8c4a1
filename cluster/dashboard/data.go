package dashboard

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// Span is one task activation (or, where the node coalesced several
// activations of a task into one event, the latest of them, N > 1) as the
// event stream recorded it.
type Span struct {
	Vertex     int // vertex index, -1 for a subflow child
	Name       string
	Node       string
	Act        uint64
	N          uint64 // activations this event accounts for (≥ 1)
	Start, End time.Time
	State      transport.TaskState
	GPU        int // device + 1 for a GPU task, 0 for CPU
}

// runData is what the dashboard keeps of one run: its graph, and the spans
// read so far from the event stream.
type runData struct {
	mu      sync.Mutex
	info    RunInfo
	g       *spec.Graph
	seq     uint64
	spans   []Span
	running map[string]Span // task name → its running span, until done
	lastAct map[string]uint64
	loops   map[int]bool
	scopes  map[int]*scopeOrder
	loaded  time.Time
	st      proto.RunStatus // the latest status the source gave, at stAt
	stAt    time.Time
}

// scopeOrder is a scope's vertices sorted by (layer, layout order), for
// grouping large scopes by level.
type scopeOrder struct {
	verts []int // sorted
	layer []int // per entry of verts
}

// run returns the run's data with its events read up to now.
func (d *Dashboard) run(ctx context.Context, id string) (*runData, error) {
	info, ok := d.src.Run(id)
	if !ok {
		return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	d.mu.Lock()
	rd := d.runs[id]
	if rd == nil {
		rd = &runData{running: map[string]Span{}, lastAct: map[string]uint64{}, scopes: map[int]*scopeOrder{}}
		d.runs[id] = rd
	}
	d.mu.Unlock()

	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.info = info
	if rd.g == nil {
		f, err := spec.ParseJSON(id+".json", info.FlowFile)
		if err == nil {
			rd.g, err = f.Expand()
		}
		if err != nil {
			return nil, fmt.Errorf("dashboard: run %s: its flow does not expand: %w", id, err)
		}
		rd.loops = map[int]bool{}
		for _, grp := range rd.g.LoopGroups() {
			for _, v := range grp {
				rd.loops[v] = true
			}
		}
	}
	if !rd.final() && (rd.loaded.IsZero() || d.now().Sub(rd.loaded) >= minRefresh) {
		if err := rd.read(ctx, d.src); err != nil {
			return rd, err
		}
		rd.loaded = d.now()
	}
	return rd, nil
}

// final: the run has ended and its events were read after it ended.
func (rd *runData) final() bool {
	return rd.info.Finished != nil && !rd.loaded.IsZero() && rd.loaded.After(*rd.info.Finished)
}

func (rd *runData) read(ctx context.Context, src Source) error {
	seq, err := src.Events(ctx, rd.info.ID, rd.seq, rd.add)
	rd.seq = max(rd.seq, seq)
	return err
}

// add folds one event (under rd.mu).
func (rd *runData) add(e *transport.TaskEvent) {
	v := -1
	name := e.Name
	if int(e.Task) < len(rd.g.Vertices) {
		if name == "" || name == rd.g.Vertices[e.Task].Path {
			v = int(e.Task)
			name = rd.g.Vertices[v].Path
		}
	}
	if name == "" {
		return
	}
	sp := Span{Vertex: v, Name: name, Node: e.Node, Act: e.Act, N: 1, Start: e.Start, End: e.End, State: e.State}
	if v >= 0 && rd.g.Vertices[v].Task.Domain == spec.DomainGPU {
		sp.GPU = 1
		if dev := rd.g.Vertices[v].Task.Device; dev != nil {
			sp.GPU = *dev + 1
		}
	}
	if e.State == transport.TaskRunning {
		rd.running[name] = sp
		return
	}
	delete(rd.running, name)
	key := name + "\x00" + e.Node
	if last, ok := rd.lastAct[key]; ok && e.Act > last {
		sp.N = e.Act - last
	}
	if e.Act > rd.lastAct[key] {
		rd.lastAct[key] = e.Act
	}
	rd.spans = append(rd.spans, sp)
}

// scope returns the sorted vertices of a scope (under rd.mu).
func (rd *runData) scope(module int) *scopeOrder {
	if so := rd.scopes[module]; so != nil {
		return so
	}
	verts := rd.g.Scope(module)
	idx := make(map[int]int, len(verts))
	for i, v := range verts {
		idx[v] = i
	}
	var edges []LEdge
	for _, v := range verts {
		for _, e := range rd.g.Vertices[v].Succ {
			if j, ok := idx[e.To]; ok {
				edges = append(edges, LEdge{From: idx[v], To: j, Weak: e.Weak})
			}
		}
	}
	layer, _ := Layers(len(verts), edges)
	order := Order(len(verts), edges)
	rank := make([]int, len(verts))
	for i, v := range order {
		rank[v] = i
	}
	loc := make([]int, len(verts))
	for i := range loc {
		loc[i] = i
	}
	sort.Slice(loc, func(a, b int) bool {
		x, y := loc[a], loc[b]
		if layer[x] != layer[y] {
			return layer[x] < layer[y]
		}
		return rank[x] < rank[y]
	})
	so := &scopeOrder{verts: make([]int, len(verts)), layer: make([]int, len(verts))}
	for i, l := range loc {
		so.verts[i], so.layer[i] = verts[l], layer[l]
	}
	rd.scopes[module] = so
	return so
}

// NodeLoad is one node's recent activity, over the last loadWindow.
type NodeLoad struct {
	proto.NodeInfo
	CPUBusy  float64 `json:"cpu_busy"` // 0…1: share of the CPU workers' time spent in tasks
	GPUBusy  float64 `json:"gpu_busy"`
	Running  int     `json:"running"` // tasks running now (as events tell)
	TasksSec float64 `json:"tasks_per_sec"`
}

const loadWindow = 5 * time.Second

// loads computes each node's recent activity from the spans of the runs
// that are running or ended within the window.
func (d *Dashboard) loads(ctx context.Context, nodes []proto.NodeInfo, runs []proto.RunSummary) ([]NodeLoad, float64) {
	now := d.now()
	from := now.Add(-loadWindow)
	type acc struct {
		cpu, gpu time.Duration
		tasks    uint64
		running  int
	}
	per := map[string]*acc{}
	for _, n := range nodes {
		per[n.ID] = &acc{}
	}
	var total uint64
	for _, r := range runs {
		if r.Finished != nil && r.Finished.Before(from) {
			continue
		}
		rd, err := d.run(ctx, r.ID)
		if err != nil || rd == nil {
			continue
		}
		rd.mu.Lock()
		for i := len(rd.spans) - 1; i >= 0; i-- {
			sp := &rd.spans[i]
			if sp.End.Before(from.Add(-time.Minute)) {
				break // spans are in stream order, roughly time order
			}
			a := per[sp.Node]
			if a == nil || sp.End.Before(from) {
				continue
			}
			a.tasks += sp.N
			total += sp.N
			busy := overlap(sp.Start, sp.End, from, now) * time.Duration(sp.N)
			if sp.GPU > 0 {
				a.gpu += busy
			} else {
				a.cpu += busy
			}
		}
		for _, sp := range rd.running {
			if rd.info.Finished != nil {
				break // an ended run runs nothing (a cancelled task sends no done event)
			}
			if a := per[sp.Node]; a != nil {
				a.running++
				if sp.GPU > 0 {
					a.gpu += overlap(sp.Start, now, from, now)
				} else {
					a.cpu += overlap(sp.Start, now, from, now)
				}
			}
		}
		rd.mu.Unlock()
	}
	out := make([]NodeLoad, 0, len(nodes))
	for _, n := range nodes {
		a := per[n.ID]
		nl := NodeLoad{NodeInfo: n, Running: a.running, TasksSec: float64(a.tasks) / loadWindow.Seconds()}
		if n.CPUs > 0 {
			nl.CPUBusy = min(1, a.cpu.Seconds()/(loadWindow.Seconds()*float64(n.CPUs)))
		}
		if n.GPUs > 0 {
			nl.GPUBusy = min(1, a.gpu.Seconds()/(loadWindow.Seconds()*float64(n.GPUs)))
		}
		out = append(out, nl)
	}
	return out, float64(total) / loadWindow.Seconds()
}

func overlap(s, e, from, to time.Time) time.Duration {
	if s.Before(from) {
		s = from
	}
	if e.After(to) {
		e = to
	}
	if e.Before(s) {
		return 0
	}
	return e.Sub(s)
}
