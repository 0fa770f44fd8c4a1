package bench

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"runtime"
	"strconv"

	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/spec"
)

// SimParams are the simulation model's parameters. Runtime of a run of N
// tasks:
//
//	FixedS + SerialS·N + makespan
//
// where makespan is a list schedule of the flow's graph under the real
// partitioner's placement (coord.PlanWith, Spread: every window of levels
// balanced over the nodes, as the projection asks): each node runs its CPU tasks on its
// CPU workers and its GPU tasks on one slot per GPU, every task taking
// TaskS (times a sharing factor, below), and a task starts only EdgeLatS +
// bytes/BandwidthBps after a predecessor on another node finished.
// SerialS is the per-task work that does not spread over nodes (the
// coordinator's status fold, every node parsing the whole flow); FixedS is
// submission, planning and assignment.
//
// Sharing: the calibration runs put n nodes of W workers on one machine of
// C cores, so there a task takes TaskS·max(1, n·W/C); a projected node has
// its own W cores (factor 1).
type SimParams struct {
	FixedS       float64 `json:"fixed_s"`
	SerialS      float64 `json:"serial_s_per_task"`
	TaskS        float64 `json:"task_s"`
	EdgeLatS     float64 `json:"edge_latency_s"`
	BandwidthBps float64 `json:"bandwidth_bytes_per_s"` // assumed, not fitted
	SignalBytes  int     `json:"signal_bytes"`          // assumed: envelope + 8-byte output per cross-node edge
}

// simGraph is an expanded flow with its strong edges and GPU flags.
type simGraph struct {
	g     *spec.Graph
	succ  [][]int32
	npred []int32
	gpu   []bool
	bytes []int64 // output bytes of each task (what an edge out of it carries)
}

func newSimGraph(f *spec.File) (*simGraph, error) {
	g, err := f.Expand()
	if err != nil {
		return nil, err
	}
	n := len(g.Vertices)
	s := &simGraph{g: g, succ: make([][]int32, n), npred: make([]int32, n), gpu: make([]bool, n), bytes: make([]int64, n)}
	for v, vx := range g.Vertices {
		s.gpu[v] = vx.Task.Domain.Or() == spec.DomainGPU
		if vx.Task.Func == "saxpy" {
			s.bytes[v] = 8
		}
	}
	for _, e := range g.Edges() {
		s.succ[e.From] = append(s.succ[e.From], int32(e.To))
		s.npred[e.To]++
	}
	return s, nil
}

// plan places the graph on n nodes of workers CPUs and gpus GPUs with the
// coordinator's own planner; it returns node indexes.
func (s *simGraph) plan(n, workers, gpus int, seed uint64) ([]int, error) {
	return s.placeWith(spreadPlan, n, workers, gpus, seed)
}

// spreadPlan is coord.Plan without its cost model: the HTDG's 1 µs saxpy
// tasks would otherwise stay on one node, and the projection is of the
// graph spread over n nodes.
func spreadPlan(g *spec.Graph, nodes []coord.Node, seed uint64) ([]string, error) {
	return coord.PlanWith(g, nodes, seed, coord.Placement{Spread: true})
}

// placeWith is plan with another planner (coord.PlanLeastCut, to compare).
func (s *simGraph) placeWith(planner func(*spec.Graph, []coord.Node, uint64) ([]string, error), n, workers, gpus int, seed uint64) ([]int, error) {
	nodes := make([]coord.Node, n)
	for i := range nodes {
		nodes[i] = coord.Node{ID: fmt.Sprintf("n%05d", i), CPUs: workers, GPUs: gpus}
	}
	ids, err := planner(s.g, nodes, seed)
	if err != nil {
		return nil, err
	}
	idx := make(map[string]int, n)
	for i, nd := range nodes {
		idx[nd.ID] = i
	}
	out := make([]int, len(ids))
	for v, id := range ids {
		out[v] = idx[id]
	}
	return out, nil
}

func (s *simGraph) cut(assign []int) (edges int, bytes int64, sig int) {
	for u, ss := range s.succ {
		for _, v := range ss {
			if assign[u] != assign[v] {
				edges++
				bytes += s.bytes[u]
			}
		}
	}
	return edges, bytes, 0
}

// readyHeap orders tasks by the time they become ready.
type readyItem struct {
	t float64
	v int32
}
type readyHeap []readyItem

func (h readyHeap) Len() int { return len(h) }
func (h readyHeap) Less(i, j int) bool {
	return h[i].t < h[j].t || (h[i].t == h[j].t && h[i].v < h[j].v)
}
func (h readyHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *readyHeap) Push(x any)   { *h = append(*h, x.(readyItem)) }
func (h *readyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// makespan list-schedules the graph: tasks in order of readiness, each on
// the earliest free slot of its node's CPU or GPU pool.
func (s *simGraph) makespan(assign []int, nodes, workers, gpus int, p SimParams, share float64) float64 {
	n := len(s.succ)
	cost := p.TaskS * share
	cpuFree := make([]float64, nodes*workers)
	gpuFree := make([]float64, nodes*max(gpus, 1))
	ready := make([]float64, n)
	left := append([]int32(nil), s.npred...)
	h := make(readyHeap, 0, 64)
	for v := range n {
		if left[v] == 0 {
			h = append(h, readyItem{0, int32(v)})
		}
	}
	heap.Init(&h)
	end := 0.0
	for h.Len() > 0 {
		it := heap.Pop(&h).(readyItem)
		v := int(it.v)
		nd := assign[v]
		pool, k := cpuFree[nd*workers:(nd+1)*workers], workers
		if s.gpu[v] {
			k = max(gpus, 1)
			pool = gpuFree[nd*k : (nd+1)*k]
		}
		best := 0
		for i := 1; i < k; i++ {
			if pool[i] < pool[best] {
				best = i
			}
		}
		start := max(it.t, pool[best])
		fin := start + cost
		pool[best] = fin
		end = max(end, fin)
		for _, w := range s.succ[v] {
			t := fin
			if assign[w] != nd {
				t += p.EdgeLatS + float64(s.bytes[v]+int64(p.SignalBytes))/p.BandwidthBps
			}
			ready[w] = max(ready[w], t)
			if left[w]--; left[w] == 0 {
				heap.Push(&h, readyItem{ready[w], w})
			}
		}
	}
	return end
}

// CalPoint is one measured run against the calibrated model.
type CalPoint struct {
	Nodes      int     `json:"nodes"`
	Tasks      int     `json:"tasks"`
	MeasuredS  float64 `json:"measured_s"`
	PredictedS float64 `json:"predicted_s"`
	RelError   float64 `json:"rel_error"` // (predicted − measured) / measured
}

// Projection is the model's answer for one node count.
type Projection struct {
	Nodes          int     `json:"nodes"`
	Tasks          int     `json:"tasks"`
	RuntimeS       float64 `json:"runtime_s"`
	MakespanS      float64 `json:"makespan_s"` // the part that spreads over nodes
	SerialS        float64 `json:"serial_s"`   // FixedS + SerialS·N
	CrossNodeEdges int     `json:"cross_node_edges"`
	TrafficBytes   int64   `json:"cross_node_bytes"`
	PlanS          float64 `json:"-"`
	// LeastCut is the same projection with the plain least-cut placement
	// (coord.PlanLeastCut), the planner before level balancing.
	LeastCut *LeastCutProjection `json:"least_cut,omitempty"`
	// Latency gives the makespan of both placements at other edge
	// latencies than the fitted one (which is an upper bound, see
	// SimReport.Assumptions): what the comparison depends on.
	Latency []LatencyPoint `json:"latency_sensitivity,omitempty"`
}

// LatencyPoint is one projection's makespans at one assumed edge latency.
type LatencyPoint struct {
	EdgeLatS          float64 `json:"edge_latency_s"`
	MakespanS         float64 `json:"makespan_s"`
	LeastCutMakespanS float64 `json:"least_cut_makespan_s"`
}

// sensitivityLatencies are the edge latencies every projection is also
// given at: loopback NATS, a LAN, a slow network.
var sensitivityLatencies = []float64{1e-4, 1e-3, 1e-2}

// LeastCutProjection is a Projection's figures with the least-cut placement.
type LeastCutProjection struct {
	RuntimeS       float64 `json:"runtime_s"`
	MakespanS      float64 `json:"makespan_s"`
	CrossNodeEdges int     `json:"cross_node_edges"`
}

// SimReport is sim.json.
type SimReport struct {
	Meta        Meta         `json:"meta"`
	Params      SimParams    `json:"params"`
	Calibration []CalPoint   `json:"calibration"`
	MeanAbsErr  float64      `json:"mean_abs_rel_error"`
	MaxAbsErr   float64      `json:"max_abs_rel_error"`
	Projections []Projection `json:"projections"`
	Assumptions []string     `json:"assumptions"`
}

type calInput struct {
	sg       *simGraph
	assign   []int
	nodes    int
	gpus     int
	workers  int
	measured float64
	tasks    int
}

// calibrate fits the model to the HTDG sweep's runs on 1 GPU per node: a
// grid over TaskS and EdgeLatS, with FixedS and SerialS solved by least
// squares of the relative error for each grid point.
func (c *Config) calibrate(ctx context.Context, rep *HTDGReport) (*SimReport, error) {
	sr := &SimReport{Meta: newMeta(c, "sim")}
	base := SimParams{BandwidthBps: 1e9, SignalBytes: 64}
	cores := float64(runtime.NumCPU())
	var in []calInput
	graphs := map[int]*simGraph{}
	for _, cr := range rep.Configs {
		if cr.GPUsPerNode != c.GPUSet[0] {
			continue
		}
		for _, p := range cr.Points {
			if p.Tasks > 20000 { // the grid search reruns every point; big ones add time, not information
				continue
			}
			sg := graphs[p.Tasks]
			if sg == nil {
				w, _, err := htdgWorkload(c, p.Tasks, cr.GPUsPerNode)
				if err != nil {
					return sr, err
				}
				if sg, err = newSimGraph(w.file); err != nil {
					return sr, err
				}
				graphs[p.Tasks] = sg
			}
			a, err := sg.plan(cr.Nodes, cr.Workers, cr.GPUsPerNode, c.Seed)
			if err != nil {
				return sr, err
			}
			in = append(in, calInput{sg: sg, assign: a, nodes: cr.Nodes, gpus: cr.GPUsPerNode, workers: cr.Workers, measured: p.MedianS, tasks: p.Tasks})
		}
	}
	if len(in) < 3 {
		return sr, fmt.Errorf("%w: calibration needs at least 3 measured runs, have %d", ErrConfig, len(in))
	}
	share := func(x calInput) float64 { return max(1, float64(x.nodes*x.workers)/cores) }
	bestErr := math.Inf(1)
	var best SimParams
	ms := make([]float64, len(in))
	for _, task := range logGrid(2e-6, 2e-3, 31) {
		for _, lat := range append([]float64{0}, logGrid(1e-5, 1e-2, 7)...) {
			if ctx.Err() != nil {
				return sr, ctx.Err()
			}
			p := base
			p.TaskS, p.EdgeLatS = task, lat
			for i, x := range in {
				ms[i] = x.sg.makespan(x.assign, x.nodes, x.workers, x.gpus, p, share(x))
			}
			fixed, serial := fitLinear(in, ms)
			p.FixedS, p.SerialS = fixed, serial
			e := 0.0
			for i, x := range in {
				r := (fixed + serial*float64(x.tasks) + ms[i] - x.measured) / x.measured
				e += r * r
			}
			if e < bestErr {
				bestErr, best = e, p
			}
		}
	}
	sr.Params = best
	for _, x := range in {
		pred := best.FixedS + best.SerialS*float64(x.tasks) + x.sg.makespan(x.assign, x.nodes, x.workers, x.gpus, best, share(x))
		cp := CalPoint{Nodes: x.nodes, Tasks: x.tasks, MeasuredS: x.measured, PredictedS: pred, RelError: (pred - x.measured) / x.measured}
		sr.Calibration = append(sr.Calibration, cp)
		sr.MeanAbsErr += math.Abs(cp.RelError) / float64(len(in))
		sr.MaxAbsErr = max(sr.MaxAbsErr, math.Abs(cp.RelError))
	}
	c.logf("sim: calibrated %+v; mean |error| %.1f%%, max %.1f%%", best, 100*sr.MeanAbsErr, 100*sr.MaxAbsErr)
	sr.Assumptions = []string{
		"every node has " + strconv.Itoa(c.Workers) + " CPU workers on cores of its own and " + strconv.Itoa(c.GPUSet[0]) + " GPU(s), each GPU one slot that runs one GPU task at a time",
		"every task costs the calibrated task_s on its worker (the HTDG's tasks are all the same SAXPY over 1K elements; sim GPUs run on the CPU here)",
		"a cross-node edge delays its successor by edge_latency_s plus (signal_bytes + output bytes) / bandwidth; bandwidth (1 GB/s) and signal_bytes (64) are assumed, not fitted: the calibration's outputs are 8 bytes and cannot tell them apart",
		"serial_s_per_task × tasks does not shrink with nodes (the coordinator folds every task event; every node parses and expands the whole flow), which is what bounds the projection",
		"the placement is the coordinator's own (coord.PlanWith with Spread: the real partitioner, balancing each window of levels, without the cost model that would keep tiny tasks on one node) on the projected node count; least_cut is the same projection with the plain least-cut placement (coord.PlanLeastCut), the planner before level balancing; no node fails, no re-executions",
		"calibrated on in-process nodes sharing this machine's cores: there a task takes task_s × max(1, nodes × workers / cores)",
	}
	return sr, nil
}

// fitLinear solves min Σ ((a + b·n_i + m_i − y_i)/y_i)² over a, b ≥ 0.
func fitLinear(in []calInput, ms []float64) (a, b float64) {
	var s00, s01, s11, r0, r1 float64
	for i, x := range in {
		w := 1 / (x.measured * x.measured)
		n := float64(x.tasks)
		y := x.measured - ms[i]
		s00 += w
		s01 += w * n
		s11 += w * n * n
		r0 += w * y
		r1 += w * n * y
	}
	det := s00*s11 - s01*s01
	if det != 0 {
		a = (r0*s11 - r1*s01) / det
		b = (s00*r1 - s01*r0) / det
	}
	if a < 0 || det == 0 {
		a, b = 0, max(r1/s11, 0)
	}
	if b < 0 {
		a, b = max(r0/s00, 0), 0
	}
	return a, b
}

func logGrid(lo, hi float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = lo * math.Pow(hi/lo, float64(i)/float64(n-1))
	}
	return out
}

// project runs the calibrated model on the SimTasks HTDG at every node
// count of SimNodes.
func (c *Config) project(ctx context.Context, sr *SimReport) error {
	w, _, err := htdgWorkload(c, c.SimTasks, c.GPUSet[0])
	if err != nil {
		return err
	}
	sg, err := newSimGraph(w.file)
	if err != nil {
		return err
	}
	for _, n := range c.SimNodes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a, err := sg.plan(n, c.Workers, c.GPUSet[0], c.Seed)
		if err != nil {
			return fmt.Errorf("bench: planning %d tasks on %d nodes: %w", c.SimTasks, n, err)
		}
		m := sg.makespan(a, n, c.Workers, c.GPUSet[0], sr.Params, 1)
		e, b, _ := sg.cut(a)
		serial := sr.Params.FixedS + sr.Params.SerialS*float64(c.SimTasks)
		pr := Projection{Nodes: n, Tasks: c.SimTasks, RuntimeS: serial + m, MakespanS: m, SerialS: serial,
			CrossNodeEdges: e, TrafficBytes: b + int64(e*sr.Params.SignalBytes)}
		if n > 1 {
			la, err := sg.placeWith(coord.PlanLeastCut, n, c.Workers, c.GPUSet[0], c.Seed)
			if err != nil {
				return fmt.Errorf("bench: planning %d tasks on %d nodes by least cut: %w", c.SimTasks, n, err)
			}
			lm := sg.makespan(la, n, c.Workers, c.GPUSet[0], sr.Params, 1)
			le, _, _ := sg.cut(la)
			pr.LeastCut = &LeastCutProjection{RuntimeS: serial + lm, MakespanS: lm, CrossNodeEdges: le}
			for _, lat := range sensitivityLatencies {
				p := sr.Params
				p.EdgeLatS = lat
				pr.Latency = append(pr.Latency, LatencyPoint{EdgeLatS: lat,
					MakespanS:         sg.makespan(a, n, c.Workers, c.GPUSet[0], p, 1),
					LeastCutMakespanS: sg.makespan(la, n, c.Workers, c.GPUSet[0], p, 1)})
			}
			c.logf("sim: least cut on %d nodes: %.3f s (makespan %.3f s), %d cross-node edges", n, serial+lm, lm, le)
		}
		c.logf("sim: %d tasks on %d nodes: %.3f s (makespan %.3f s), %d cross-node edges", pr.Tasks, n, pr.RuntimeS, m, e)
		sr.Projections = append(sr.Projections, pr)
	}
	return nil
}
