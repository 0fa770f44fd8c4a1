package partition

import (
	"errors"
	"testing"
)

// FuzzPartition drives the Builder and Partition with arbitrary input: a
// byte program of vertices (weights possibly negative), edges (endpoints
// possibly out of range), pins (possibly to missing nodes) and nodes. It
// must never panic; it must return either an error wrapping ErrInvalid or
// ErrInfeasible, or an assignment that passes Check with the cut reported
// right; and PartitionLevels with the cost model an assignment that passes
// Check too.
func FuzzPartition(f *testing.F) {
	f.Add([]byte{3, 1, 2, 0, 1, 1, 0, 5, 1, 2, 2, 9})
	f.Add([]byte{2, 4, 0, 1, 0, 1, 3, 4, 0, 255, 1, 7})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{5, 2, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			x := int(data[0])
			data = data[1:]
			return x
		}
		k := next()%6 + 0 // 0 nodes is an error case too
		nodes := make([]Node, k)
		for i := range nodes {
			nodes[i] = Node{CPU: int64(next()%4) - 0, GPU: int64(next() % 3)}
			if next()%17 == 0 {
				nodes[i].CPU = -1
			}
		}
		b := NewBuilder(0)
		nv := 0
		for len(data) > 0 {
			switch next() % 4 {
			case 0, 1:
				cpu := int64(next()%5) - 1 // -1 is a negative weight
				gpu := int64(next()%7) - 4 // mostly 0, sometimes negative
				if gpu < 0 && next()%2 == 0 {
					gpu = 0
				}
				b.AddVertex(Vertex{CPU: cpu, GPU: max(gpu, -1), Group: next() % 3})
				nv++
			case 2:
				b.AddEdge(next()%(nv+2)-1, next()%(nv+2)-1, int64(next()%9)-1)
			case 3:
				b.Pin(next()%(nv+2)-1, next()%(k+2)-1)
			}
		}
		g, err := b.Build()
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Build: %v does not wrap ErrInvalid", err)
			}
			return
		}
		res, err := Partition(g, nodes, Options{Seed: 1})
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrInfeasible) {
				t.Fatalf("Partition: %v wraps no sentinel", err)
			}
			return
		}
		if err := Check(g, nodes, res.Assign); err != nil {
			t.Fatalf("assignment breaks a hard constraint: %v", err)
		}
		if c, err := g.Cut(res.Assign); err != nil || c != res.Cut {
			t.Fatalf("cut %d reported, %d real", res.Cut, c)
		}
		// By level, with the cost model: windows kept on one node must keep
		// the hard constraints too.
		levels := make([]int, g.NumVertices())
		for v := range levels {
			levels[v] = v / 2
		}
		lev, err := PartitionLevels(g, nodes, levels, Options{Seed: 1, Hop: 3, EdgeCost: 1, WindowPerNode: 1})
		if err != nil {
			t.Fatalf("PartitionLevels: %v, where Partition placed the graph", err)
		}
		if err := Check(g, nodes, lev.Assign); err != nil {
			t.Fatalf("by level with the cost model: %v", err)
		}
	})
}
