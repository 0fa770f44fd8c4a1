package coord

import (
	"errors"
	"fmt"
	"hash/fnv"
	"iter"
	"slices"
	"sort"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/topo"
	"github.com/hetflow/hetflow/partition"
)

// ErrPlan is matched by a flow that cannot be placed on the alive nodes.
var ErrPlan = errors.New("coord: cannot place the flow")

// Defaults of Placement.
const (
	// DefaultHop is the latency a cross-node edge adds on loopback NATS.
	DefaultHop = 100 * time.Microsecond
	// DefaultEdgeCost is the CPU a node spends on one end (sending or
	// receiving) of a cross-node edge, per KiB of output or less (measured
	// on loopback: the receive, NATS and the wake-ups about 1.1 µs each).
	DefaultEdgeCost = time.Microsecond
	// DefaultTaskCost is the cost of a task whose function has no estimate
	// and no declared cost (noop, hash, conditions, user functions).
	DefaultTaskCost = time.Microsecond
	// maxTaskCost caps one task's estimate (µs), so that a million of them
	// still sum within the partitioner's weights.
	maxTaskCost = 1 << 40
)

// Placement is the cost model Plan places tasks by: a window of levels is
// spread over the nodes only when its parallel work is worth more than the
// hops and the cross-node edges spreading adds (partition.PartitionLevels
// with Options.Hop and EdgeCost), so tiny tasks stay together and only work
// worth a hop crosses. The zero value is the default model.
type Placement struct {
	// Hop is the latency one cross-node hop adds to a run's path (0:
	// DefaultHop; a network of several ms between nodes wants its own).
	Hop time.Duration
	// EdgeCost is the CPU a node spends on each end of a cross-node edge
	// (0: DefaultEdgeCost).
	EdgeCost time.Duration
	// Funcs declares the cost of one execution of a function by name,
	// replacing the built-in estimate (TaskCost): a cluster whose own
	// functions do real work says so here.
	Funcs map[string]time.Duration
	// Spread turns the cost model off: every window of levels is balanced
	// across the nodes however little work it holds (the placement before
	// the cost model; tests that want cross-node edges).
	Spread bool
	// SoftLoops keeps a condition loop on one node only where the balance
	// allows (the partitioner's soft groups) and weighs a loop's tasks by
	// one execution, not by the iterations its conditions ask for: the
	// placement before loops were whole. The simulation (cluster/runsim) uses it, with
	// Spread, to explore loops across nodes, which a flow reaches by
	// pinning a loop's tasks apart.
	SoftLoops bool
}

// Check reports a Placement a coordinator refuses: a negative hop or edge
// cost, a declared cost without a function name or below zero.
func (p Placement) Check() error {
	if p.Hop < 0 || p.EdgeCost < 0 {
		return fmt.Errorf("placement: hop %v, edge cost %v: want >= 0", p.Hop, p.EdgeCost)
	}
	for name, d := range p.Funcs {
		switch {
		case name == "":
			return errors.New("placement: a declared cost without a function name")
		case d < 0:
			return fmt.Errorf("placement: function %q declared to cost %v: want >= 0", name, d)
		}
	}
	return nil
}

// options is the partitioner's cost model for p, in microseconds (the
// unit of the vertex weights, taskCost).
func (p Placement) options(seed uint64) partition.Options {
	if p.Spread {
		return partition.Options{Seed: seed}
	}
	hop, edge := p.Hop, p.EdgeCost
	if hop <= 0 {
		hop = DefaultHop
	}
	if edge <= 0 {
		edge = DefaultEdgeCost
	}
	return partition.Options{Seed: seed, Hop: max(int64(hop/time.Microsecond), 1), EdgeCost: max(int64(edge/time.Microsecond), 1)}
}

// Plan partitions an expanded flow over nodes (docs/cluster-protocol.md,
// Partitioning) by the default cost model (PlanWith with a zero Placement)
// and returns, per vertex, the id of the node that runs it. seed makes the
// answer deterministic (the leader derives it from the run id).
func Plan(g *spec.Graph, nodes []Node, seed uint64) ([]string, error) {
	return PlanWith(g, nodes, seed, Placement{})
}

// PlanWith is Plan under the cost model p.
//
// Every window of the DAG's levels (partition.PartitionLevels) is either
// balanced across the nodes or kept on one node, whichever p estimates
// faster (TaskCost per task; a loop's tasks times the iterations its
// conditions ask for, a `loop` {n} n+1). Pins are kept and GPU tasks go to GPU nodes
// either way. Every module instance (an outermost module vertex and
// everything nested under it) runs on one node: its vertices share a
// partition group, and an instance the partitioner split anyway is moved
// whole to the node of its module vertex. A pin inside an instance pins the
// instance; a GPU task inside one makes its module vertex need a GPU.
// Every condition loop (LoopGroups) runs on one node too: a loop the
// partitioner split is moved whole to the node of its pinned member, else
// of its GPU member, else to the node holding most of its cost. Only a loop
// whose tasks are pinned to different nodes is split, as its pins say.
func PlanWith(g *spec.Graph, nodes []Node, seed uint64, p Placement) ([]string, error) {
	return plan(g, nodes, seed, nil, true, p)
}

// PlanLeastCut is Plan with the plain least-cut placement (partition.Partition:
// only the nodes' total loads balanced, no cost model), which gives a layered
// DAG's nodes bands of consecutive levels. The leader never uses it; it is
// there to compare placements (the bench's simulation).
func PlanLeastCut(g *spec.Graph, nodes []Node, seed uint64) ([]string, error) {
	return plan(g, nodes, seed, nil, false, Placement{Spread: true})
}

// PlanReassign places the tasks of a running run again after nodes were lost
// (docs/cluster-protocol.md, Recovery): every task whose node in prev is among
// alive stays there (it is pinned), and the tasks of the lost nodes go to the
// alive nodes by the partitioner, in whole groups as Plan places them, under
// the same capacity and GPU rules. lost lists the nodes of prev that are not
// alive (nil and prev itself when none is). A task that cannot move — pinned
// by `node:` to a lost node, or needing a GPU no alive node has — is an
// ErrPlan naming the task and its lost node. The cost model is the default
// one (PlanReassignWith takes another).
func PlanReassign(g *spec.Graph, prev []string, alive []Node, seed uint64) (assign, lost []string, err error) {
	return PlanReassignWith(g, prev, alive, seed, Placement{})
}

// PlanReassignWith is PlanReassign under the cost model p.
func PlanReassignWith(g *spec.Graph, prev []string, alive []Node, seed uint64, p Placement) (assign, lost []string, err error) {
	if len(prev) != len(g.Vertices) {
		return nil, nil, fmt.Errorf("%w: the assignment places %d tasks, the flow has %d", ErrPlan, len(prev), len(g.Vertices))
	}
	live := map[string]bool{}
	anyGPU := false
	for _, n := range alive {
		live[n.ID] = true
		anyGPU = anyGPU || n.GPUs > 0
	}
	fixed := make([]string, len(prev))
	seen := map[string]bool{}
	for v, n := range prev {
		if live[n] {
			fixed[v] = n
			continue
		}
		if !seen[n] {
			seen[n] = true
			lost = append(lost, n)
		}
		vx := &g.Vertices[v]
		if p := vx.Task.Node; p != "" && !live[p] {
			return nil, nil, fmt.Errorf("%w: task %q is pinned to node %s, which was lost; it cannot move", ErrPlan, vx.Path, p)
		}
		if vx.Task.Domain.Or() == spec.DomainGPU && !anyGPU {
			return nil, nil, fmt.Errorf("%w: task %q needs a GPU and its node %s was lost; no live node has a GPU", ErrPlan, vx.Path, n)
		}
	}
	if len(lost) == 0 {
		return prev, nil, nil
	}
	sort.Strings(lost)
	if len(alive) == 0 {
		return nil, nil, fmt.Errorf("%w: nodes %v were lost and no node is alive", ErrPlan, lost)
	}
	assign, err = plan(g, alive, seed, fixed, true, p)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (moving the tasks of lost nodes %v)", err, lost)
	}
	return assign, lost, nil
}

// plan is Plan with fixed[v] (when fixed is not nil and the entry not "")
// pinning vertex v to that node; byLevel false is PlanLeastCut.
func plan(g *spec.Graph, nodes []Node, seed uint64, fixed []string, byLevel bool, pl Placement) ([]string, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no alive node", ErrPlan)
	}
	nodes = append([]Node(nil), nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	index := map[string]int{}
	pnodes := make([]partition.Node, len(nodes))
	for i, n := range nodes {
		index[n.ID] = i
		pnodes[i] = partition.Node{CPU: int64(max(n.CPUs, 1)), GPU: int64(max(n.GPUs, 0))}
	}

	nv := len(g.Vertices)
	// instance[v]: the outermost module vertex v runs under (v itself for an
	// outermost module vertex), -1 at the top level outside any module.
	instance := make([]int, nv)
	for v := range g.Vertices {
		top := v
		for g.Vertices[top].Parent >= 0 {
			top = g.Vertices[top].Parent
		}
		instance[v] = -1
		if g.Vertices[top].Task.Kind == spec.KindModule {
			instance[v] = top
		}
	}

	// Pins and GPU needs of whole instances.
	pin := make([]string, nv)
	gpu := make([]bool, nv)
	for v, vx := range g.Vertices {
		gpu[v] = vx.Task.Domain.Or() == spec.DomainGPU
		pin[v] = vx.Task.Node
		if fixed != nil && fixed[v] != "" {
			pin[v] = fixed[v]
		}
	}
	for v := range g.Vertices {
		m := instance[v]
		if m < 0 || m == v {
			continue
		}
		if gpu[v] {
			gpu[m] = true
		}
		if p := pin[v]; p != "" {
			if pin[m] != "" && pin[m] != p {
				return nil, fmt.Errorf("%w: module instance %q has tasks pinned to both %s and %s", ErrPlan, g.Vertices[m].Path, pin[m], p)
			}
			pin[m] = p
		}
	}

	// Groups: union of instances and loops.
	uf := newUnion(nv)
	for v := range g.Vertices {
		if m := instance[v]; m >= 0 {
			uf.join(v, m)
		}
	}
	loops := g.LoopGroups()
	for _, grp := range loops {
		for _, v := range grp[1:] {
			uf.join(grp[0], v)
		}
	}
	size := make([]int, nv) // by group representative: its vertices
	for v := range g.Vertices {
		size[uf.find(v)]++
	}

	b := partition.NewBuilder(nv)
	cost := make([]int64, nv)
	times := make([]int64, nv) // per vertex: the executions its loops make of it
	if !pl.SoftLoops {
		for _, grp := range loops {
			it := iterations(g, grp)
			for _, v := range grp {
				times[v] = max(times[v], it)
			}
		}
	}
	for v, vx := range g.Vertices {
		w := taskCost(vx.Task, pl.Funcs)
		if t := times[v]; t > 1 {
			w = min(w*t, maxTaskCost) // both at most 2^40 and 2^20: no overflow
		}
		cost[v] = w
		pv := partition.Vertex{CPU: w}
		if gpu[v] {
			pv = partition.Vertex{GPU: w}
		}
		if r := uf.find(v); size[r] > 1 {
			pv.Group = r + 1
		}
		b.AddVertex(pv)
		if p := pin[v]; p != "" {
			i, ok := index[p]
			if !ok {
				return nil, fmt.Errorf("%w: task %q is pinned to node %q, which is not alive", ErrPlan, vx.Path, p)
			}
			b.Pin(v, i)
		}
	}
	ne := 0
	for v := range g.Vertices {
		ne += len(g.Vertices[v].Succ)
	}
	b.GrowEdges(ne)
	for v := range g.Vertices {
		w := 1 + outputBytes(g.Vertices[v].Task)/1024
		for _, e := range g.Vertices[v].Succ {
			b.AddEdge(e.From, e.To, w)
		}
	}
	pg, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPlan, err)
	}
	// A DAG runs level by level: balance each window of levels across the
	// nodes, not only the totals, or the least cut gives each node a band of
	// consecutive levels and the nodes run one after the other.
	var res *partition.Result
	if levels := groupLevels(g, uf); byLevel && levels != nil {
		res, err = partition.PartitionLevels(pg, pnodes, levels, pl.options(seed))
	} else {
		res, err = partition.Partition(pg, pnodes, partition.Options{Seed: seed})
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPlan, err)
	}
	assign := res.Assign
	if !pl.SoftLoops {
		wholeLoops(g, uf, size, assign, pin, gpu, cost, index, nodes)
	}
	for v := range g.Vertices {
		if m := instance[v]; m >= 0 {
			assign[v] = assign[m] // an instance never splits
		}
	}
	if err := partition.Check(pg, pnodes, assign); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPlan, err)
	}
	out := make([]string, nv)
	for v, i := range assign {
		out[v] = nodes[i].ID
	}
	return out, nil
}

// groupLevels is each vertex's level: the longest path, in groups, from a
// group without predecessors to its group, where a group is a set of
// vertices uf joined (a module instance, a condition loop) and counts as
// one step. Edges inside a group are ignored. It returns nil when the groups
// still form a cycle (not expected: every cycle of a flow is a loop group).
func groupLevels(g *spec.Graph, uf union) []int {
	nv := len(g.Vertices)
	rep := make([]int, nv) // each vertex's group's representative
	for v := range nv {
		rep[v] = uf.find(v)
	}
	// The edges between the groups' representatives, each one's laid out
	// in one array (in the order appending them gave): counted, then placed.
	off := make([]int, nv+1)
	for v := range g.Vertices {
		for _, e := range g.Vertices[v].Succ {
			if a, b := rep[e.From], rep[e.To]; a != b {
				off[a+1]++
			}
		}
	}
	for a := range nv {
		off[a+1] += off[a]
	}
	to, at := make([]int, off[nv]), slices.Clone(off[:nv])
	for v := range g.Vertices {
		for _, e := range g.Vertices[v].Succ {
			if a, b := rep[e.From], rep[e.To]; a != b {
				to[at[a]] = b
				at[a]++
			}
		}
	}
	succ := make([][]int, nv)
	for a := range nv {
		if off[a] < off[a+1] {
			succ[a] = to[off[a]:off[a+1]:off[a+1]]
		}
	}
	order, ok := topo.Order(succ)
	if !ok {
		return nil
	}
	level := make([]int, nv)
	for _, a := range order {
		for _, b := range succ[a] {
			level[b] = max(level[b], level[a]+1)
		}
	}
	for v := range nv {
		level[v] = level[rep[v]]
	}
	return level
}

// wholeLoops moves every group of uf (a condition loop, with any module
// instance in it) that the partitioner split onto one node: the node of its
// pinned members, else of a member that needs a GPU, else the one holding
// most of its cost (the first such member's on a tie). A group whose members
// are pinned to different nodes stays as placed; a member that needs a GPU
// the target lacks stays too (the GPU node was its only choice).
func wholeLoops(g *spec.Graph, uf union, size []int, assign []int, pin []string, gpu []bool, cost []int64, index map[string]int, nodes []Node) {
	members := map[int][]int{}
	for v := range g.Vertices {
		if r := uf.find(v); size[r] > 1 {
			members[r] = append(members[r], v)
		}
	}
	for _, vs := range members {
		target, pinned, split := -1, "", false
		for _, v := range vs {
			if p := pin[v]; p != "" {
				if pinned != "" && p != pinned {
					split = true
				}
				pinned = p
			}
		}
		if split {
			continue
		}
		if pinned != "" {
			target = index[pinned]
		}
		for _, v := range vs {
			if target < 0 && gpu[v] {
				target = assign[v]
			}
		}
		if target < 0 {
			on := map[int]int64{}
			for _, v := range vs {
				on[assign[v]] += cost[v]
				if target < 0 || on[assign[v]] > on[target] {
					target = assign[v]
				}
			}
		}
		for _, v := range vs {
			if pin[v] == "" && (!gpu[v] || nodes[target].GPUs > 0) {
				assign[v] = target
			}
		}
	}
}

// maxIterations caps the executions a loop is estimated to make.
const maxIterations = 1 << 20

// iterations estimates how often the tasks of loop group grp run in a run:
// the most any of its conditions asks for, a `loop` {n} n+1 times, a
// `coin` {p} 1/(1-p) times (the mean of its geometric draw; at most
// maxIterations), any other condition once (its choices are unknown).
// Nested loops count their inner group's own iterations, not the product.
func iterations(g *spec.Graph, grp []int) int64 {
	it := int64(1)
	for _, v := range grp {
		t := g.Vertices[v].Task
		if t.Kind != spec.KindCondition {
			continue
		}
		switch t.Func {
		case funcs.Loop:
			it = max(it, min(argInt(t.Args, "n"), maxIterations-1)+1)
		case funcs.Coin:
			p := 0.5 // coin's default
			switch x := t.Args["p"].(type) {
			case float64:
				p = x
			case int64:
				p = float64(x)
			case uint64:
				p = float64(x)
			}
			if p >= 1-1.0/maxIterations {
				it = maxIterations
			} else if p > 0 {
				it = max(it, int64(1/(1-p)))
			}
		}
	}
	return it
}

// TaskCost estimates one execution of a task, the weight the placement
// balances: declared (by function name) when given, else spin its us, sleep
// its ms, saxpy 1 µs a thousand elements of n, fanout its n children of us
// each, anything else DefaultTaskCost. It is counted in whole microseconds,
// at least 1 and at most about 12.7 days (funcs.MaxSpinUS).
func TaskCost(t spec.Task, declared map[string]time.Duration) time.Duration {
	return time.Duration(taskCost(t, declared)) * time.Microsecond
}

// taskCost is TaskCost in microseconds, the partitioner's weight unit.
func taskCost(t spec.Task, declared map[string]time.Duration) int64 {
	sat := func(x, unit int64) int64 {
		if x <= 0 || unit <= 0 {
			return 0
		}
		if x > maxTaskCost/unit {
			return maxTaskCost
		}
		return x * unit
	}
	var us int64
	if d, ok := declared[t.Func]; ok && t.Func != "" {
		us = int64(d / time.Microsecond)
	} else {
		switch t.Func {
		case funcs.Spin:
			us = sat(argInt(t.Args, "us"), 1)
		case funcs.Sleep:
			us = sat(argInt(t.Args, "ms"), 1e3)
		case funcs.Saxpy:
			us = argInt(t.Args, "n") / 1000
		case funcs.Fanout:
			us = sat(argInt(t.Args, "n"), argInt(t.Args, "us"))
		default:
			us = int64(DefaultTaskCost / time.Microsecond)
		}
	}
	return min(max(us, 1), maxTaskCost)
}

// outputBytes estimates the size of a task's output.
func outputBytes(t spec.Task) int64 {
	switch t.Func {
	case "hash":
		return 32
	case "saxpy":
		return 8
	case "blob":
		return max(argInt(t.Args, "n"), 0)
	}
	return 0
}

func argInt(args map[string]any, key string) int64 {
	switch v := args[key].(type) {
	case int64:
		return v
	case uint64:
		return int64(min(v, 1<<62))
	case float64:
		if v > 0 && v < 1<<62 {
			return int64(v)
		}
	}
	return 0
}

// Seed derives a partitioning seed from a run id.
func Seed(run string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(run))
	return h.Sum64()
}

type union []int

func newUnion(n int) union {
	u := make(union, n)
	for i := range u {
		u[i] = i
	}
	return u
}

func (u union) find(x int) int {
	for u[x] != x {
		u[x] = u[u[x]]
		x = u[x]
	}
	return x
}

func (u union) join(a, b int) {
	if ra, rb := u.find(a), u.find(b); ra != rb {
		u[max(ra, rb)] = min(ra, rb)
	}
}

// nodeRuns yields each maximal run assign[lo:hi] of consecutive tasks on
// one node. A placement keeps tasks together (a 100K-task assignment is a
// handful of runs where the cost model keeps a flow on one node), so what
// is looked up a node is looked up a run, not a task: a map lookup a task
// was milliseconds of every run's submit, apply and plans.
func nodeRuns(assign []string) iter.Seq2[int, int] {
	return func(yield func(lo, hi int) bool) {
		for lo := 0; lo < len(assign); {
			hi := lo + 1
			for hi < len(assign) && assign[hi] == assign[lo] {
				hi++
			}
			if !yield(lo, hi) {
				return
			}
			lo = hi
		}
	}
}

// owners gives each task of assign its node's place in nodes; bad is the
// first task whose node is not among them (its owner is 0), -1 if none.
func owners(nodes, assign []string) (owner []uint32, bad int) {
	idx := make(map[string]uint32, len(nodes))
	for i, n := range nodes {
		idx[n] = uint32(i)
	}
	owner, bad = make([]uint32, len(assign)), -1
	for lo, hi := range nodeRuns(assign) {
		i, ok := idx[assign[lo]]
		if !ok && bad < 0 {
			bad = lo
		}
		for v := lo; v < hi; v++ {
			owner[v] = i
		}
	}
	return owner, bad
}
