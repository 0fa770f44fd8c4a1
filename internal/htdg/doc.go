// Package htdg generates the seed paper's random heterogeneous task
// dependency graphs (HTDGs) and makes them runnable on hetflow's local
// executor. It is shared by cmd/htdg (the local HTDG experiment) and bench
// (the cluster benchmark, which turns the same graphs into flows and runs
// this package's instances as its single-process baselines).
//
//	g, err := htdg.Generate(5000, seed, gpus)      // layers of ~√n tasks, half of them GPU tasks
//	in, err := htdg.Build(g, htdg.ModeHetflow, devs) // or ModeBaseline: GPU work inside CPU tasks
//	ex := in.Executor(workers)
//	err = in.Run(ex)                                 // one run of the whole graph
//	err = in.Verify(1)                               // every vector after 1 run, bit for bit
//
// Every task is a SAXPY over Elems float32 elements with a = Alpha; a GPU
// task is a GPU graph of copy-in, kernel, copy-out.
package htdg
