package partition_test

import (
	"fmt"

	"github.com/hetflow/hetflow/partition"
)

// A small flow on a three-node cluster: a CPU pipeline, a GPU task that
// only node 2 can run, a condition loop kept together, and a task pinned to
// node 0.
func Example() {
	b := partition.NewBuilder(8)
	load := b.AddVertex(partition.Vertex{CPU: 2})
	prep := b.AddVertex(partition.Vertex{CPU: 2})
	saxpy := b.AddVertex(partition.Vertex{CPU: 1, GPU: 4})  // a GPU task graph
	body := b.AddVertex(partition.Vertex{CPU: 3, Group: 1}) // loop body
	cond := b.AddVertex(partition.Vertex{CPU: 1, Group: 1}) // loop condition
	report := b.AddVertex(partition.Vertex{CPU: 1})
	b.Pin(report, 0) // say, it writes to node 0's disk

	b.AddEdge(load, prep, 10) // edge weight: bytes moved, say
	b.AddEdge(prep, saxpy, 10)
	b.AddEdge(saxpy, body, 5)
	b.AddEdge(body, cond, 1)
	b.AddEdge(cond, body, 1) // the loop's back edge
	b.AddEdge(cond, report, 1)
	g, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}

	nodes := []partition.Node{{CPU: 4}, {CPU: 4}, {CPU: 4, GPU: 1}}
	res, err := partition.Partition(g, nodes, partition.Options{Tolerance: 1.5, Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("saxpy on node", res.Assign[saxpy])
	fmt.Println("report on node", res.Assign[report])
	fmt.Println("loop together:", res.Assign[body] == res.Assign[cond])
	fmt.Println("balanced:", res.Balanced)
	// Output:
	// saxpy on node 2
	// report on node 0
	// loop together: true
	// balanced: true
}

// Errors name the vertex and wrap a sentinel.
func Example_errors() {
	b := partition.NewBuilder(2)
	b.AddVertex(partition.Vertex{CPU: 1})
	b.AddVertex(partition.Vertex{GPU: 2})
	b.AddEdge(0, 1, 1)
	g, _ := b.Build()
	_, err := partition.Partition(g, []partition.Node{{CPU: 8}, {CPU: 8}}, partition.Options{})
	fmt.Println(err)
	// Output:
	// partition: infeasible: vertex 1: GPU vertex, and no node has GPUs
}
