// Package partition splits a weighted graph across nodes: it is how the
// hetflow coordinator decides which node runs which task of a flow.
//
// It is a pure algorithm: no I/O, no goroutines (so its tests need no leak
// check), no clock; randomness comes in through Options (a seed or a
// *rand.Rand), so one input always gives one answer. It imports nothing from
// the rest of hetflow.
//
// # The model
//
// A vertex (a task) has a CPU weight and a GPU weight, its work on each
// resource. A vertex with GPU weight > 0 is a GPU vertex and is placed only
// on a node with GPUs; likewise CPU weight needs CPU capacity. A vertex may
// be pinned to a node, and may belong to a group: the coordinator puts every
// task of one condition loop in one group, and a group stays on one node
// when the balance allows, else it is split with the least cut. Edges are
// weighted (bytes moved, say); u->v and v->u are two edges, and the cut
// counts each edge whose ends are on different nodes once. A Node has a CPU
// and a GPU capacity; each node's load on each resource is kept within
// Options.Tolerance (default 1.03, as METIS's ufactor 30) of its share,
// proportional to capacity.
//
// # Driving it
//
//  1. Build the graph: b := NewBuilder(n); b.AddVertex(Vertex{CPU: w,
//     GPU: g, Group: loop}) returns the vertex index; b.Pin(v, node);
//     b.AddEdge(u, v, w); g, err := b.Build(). Build reports the first bad
//     input (a negative weight, an edge endpoint that is no vertex) as an
//     *EdgeError or *VertexError wrapping ErrInvalid.
//  2. res, err := Partition(g, nodes, Options{Seed: s}). Errors wrap
//     ErrInvalid (bad nodes or options, a pin to a node that does not
//     exist) or ErrInfeasible (a GPU vertex and no GPU node, a vertex pinned
//     where it cannot run, weight no node has capacity for), naming the
//     vertex. A balance the tolerance cannot meet is not an error:
//     res.Balanced says whether it was met.
//  3. Read res.Assign (vertex -> node index), res.Cut, res.Loads,
//     res.Imbalance, res.SplitGroups.
//
// PartitionLevels is Partition for a graph that runs in time steps: it
// balances each window of levels, and with a cost model (Options.Hop,
// Options.EdgeCost) keeps a window on one node when spreading it would
// cost more in hops and cut edges than its parallel work saves.
//
// Evaluate measures an assignment made elsewhere (by METIS, in the
// benchmark) the same way; Check verifies its hard constraints.
//
// # The algorithm
//
// Multilevel k-way partitioning, as in METIS: groups that fit on a node are
// contracted first; the graph is then coarsened by heavy-edge matching
// (vertices visited in random order, pairs merged only when the merged
// vertex still has a node it may go to: pins agree, GPU need met); the
// coarsest graph is split by recursive bisection over node ranges, each
// bisection itself multilevel and the best of several runs, each grown
// greedily from random seeds; and on the way back up, every level is
// balanced and refined: greedy boundary moves, then k-way
// Fiduccia–Mattheyses passes with rollback to the best prefix, under the
// CPU and GPU maxima of every node. Groups are locked at the finest level;
// if the balance still fails, groups on overloaded nodes are freed,
// heaviest first, and refined again. The graph is held in compressed sparse
// row form with int32 vertex ids: a million vertices and a few million edges
// partition in seconds on one core. docs/benchmarks/partition.md compares
// cut and time with gpmetis.
package partition
