package coord

import (
	"errors"
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/partition"
)

// ErrPlan is matched by a flow that cannot be placed on the alive nodes.
var ErrPlan = errors.New("coord: cannot place the flow")

// Plan partitions an expanded flow over nodes (docs/cluster-protocol.md,
// Partitioning) and returns, per vertex, the id of the node that runs it.
//
// Every module instance (an outermost module vertex and everything nested
// under it) runs on one node: its vertices share a partition group, and an
// instance the partitioner split anyway is moved whole to the node of its
// module vertex. A pin inside an instance pins the instance; a GPU task
// inside one makes its module vertex need a GPU. Condition loops
// (LoopGroups) are groups too, kept together when the balance allows.
// seed makes the answer deterministic (the leader derives it from the run id).
func Plan(g *spec.Graph, nodes []Node, seed uint64) ([]string, error) {
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
	for _, grp := range g.LoopGroups() {
		for _, v := range grp[1:] {
			uf.join(grp[0], v)
		}
	}
	size := map[int]int{}
	for v := range g.Vertices {
		size[uf.find(v)]++
	}

	b := partition.NewBuilder(nv)
	for v, vx := range g.Vertices {
		w := cpuWeight(vx.Task)
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
	for _, e := range g.Edges() {
		b.AddEdge(e.From, e.To, 1+outputBytes(g.Vertices[e.From].Task)/1024)
	}
	pg, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPlan, err)
	}
	res, err := partition.Partition(pg, pnodes, partition.Options{Seed: seed})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPlan, err)
	}
	assign := res.Assign
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

// cpuWeight estimates a task's work: spin its microseconds, saxpy n/1000,
// anything else 1.
func cpuWeight(t spec.Task) int64 {
	switch t.Func {
	case "spin":
		return max(argInt(t.Args, "us"), 1)
	case "saxpy":
		return max(argInt(t.Args, "n")/1000, 1)
	}
	return 1
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
