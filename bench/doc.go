// Package bench is hetflow's cluster benchmark, behind `cmd/bench`.
// It submits generated workloads to in-process dev clusters (or a running
// cluster) and writes one JSON result file per experiment and SVG/PNG plots
// (gonum.org/v1/plot):
//
//   - htdg: the seed's random heterogeneous task dependency graphs
//     (internal/htdg: half CPU, half GPU tasks, each a SAXPY over 1K
//     elements; a GPU task is a copy-in / kernel / copy-out GPU graph) at
//     several sizes on 1, 2 and 3 nodes with 1 or 2 GPUs each: runtime,
//     tasks per second, cross-node edges, re-executions, the process's
//     peak memory and every node's scheduler counters (on a running
//     cluster, from each node's /metrics, with its peak RSS and heap);
//     box plots of 100 runs at 5K and 20K tasks (the seed's Figure 14);
//     and, in the same run, one localexec process with the
//     same total workers, with a GPU domain and with the GPU work inside
//     CPU tasks (the seed's baseline).
//   - loop: a condition loop whose body branches by a seeded coin to a CPU
//     path (a fanout of spin tasks) or a GPU path, against the same
//     iterations unrolled into a flat DAG: runtime and graph size.
//   - corun: k flows submitted at once: weighted speedup, throughput, CPU
//     utilisation.
//   - granularity: Task Bench's stencil of spin tasks at grains from 1 µs
//     to 10 ms on one node against several (equal total workers), and the
//     smallest grain at 50% efficiency (METG).
//   - sim: a model with the coordinator's real planner (coord.PlanWith, Spread) and a
//     list schedule per node, calibrated against the measured runs (its
//     error is reported) and projected to 10, 100 and 1,000 nodes, next
//     to the plain least-cut placement (coord.PlanLeastCut).
//
// Drive it with a preset:
//
//	c := bench.Quick()        // or bench.Full(); edit fields as needed
//	c.Out = dir
//	rep, err := bench.Run(ctx, c)
//
// In-process nodes share the machine's cores, so every comparison is at
// equal total workers (EqualWorkersNote), and memory is the whole
// process's; a running cluster's nodes (Config.Servers) are read through
// their /metrics, found in GET /v1/nodes, and a node without --http is
// named in the output. See docs/benchmarks/cluster-bench.md.
package bench
