// Package localexec is hetflow's local runtime: the Taskflow programming
// model (static, dynamic, composable, conditional and heterogeneous task
// graphs) on a work-stealing executor with CPU and GPU worker domains.
//
// # Building a graph
//
// A Taskflow holds tasks and the edges between them:
//
//	tf := localexec.NewTaskflow("demo")
//	a := tf.Emplace(func() { ... }).Name("A")      // static task
//	b := tf.EmplaceSubflow(func(sf *localexec.Subflow) {
//		b1 := sf.Emplace(...)                        // children, built each run
//		...                                          // sf.Detach() to not join
//	}).Name("B")
//	c := tf.EmplaceCondition(func() int { return 0 }) // picks successor 0
//	m := tf.ComposedOf(other)                       // module: other's graph in place
//	g := tf.EmplaceGPU(func(g *gpu.Graph) { ... }).On(0) // GPU task graph
//	a.Precede(b, c)                                 // edges; Succeed is the reverse
//
// Edges out of a condition task are weak: the index it returns schedules that
// successor directly, whatever its join counter. Every other edge is strong
// and counts in the successor's join counter. So a cycle through a condition
// task is a loop, and a task reached only through condition edges runs only
// when a condition picks it. A task with no predecessors at all is a source.
// A task with both strong and condition predecessors runs once per pick, at
// once, and once per round of its strong predecessors: a pick leaves the
// join counter alone, and the counter starts its next round as soon as a
// round completes, so the number of runs does not depend on which comes
// first.
// Subflows join their parent by default; a detached subflow runs on its own
// and joins the end of the run. Two module tasks over one taskflow must be
// ordered by a strong path (they share its nodes); the executor checks this
// before a run starts. Runtime tasks (EmplaceRuntime) can schedule a task of
// the graph and co-run another taskflow without blocking their worker.
// Every worker is also a gpu.Host, a host thread of gpu's timed sim: GPU tasks
// launch from their GPU worker's, and a runtime task that launches a GPU graph
// itself passes Runtime.GPUHost to gpu.Graph.LaunchFrom, so that on the timed
// sim its worker is blocked, in the model, while the graph runs.
//
// A subflow can also join its children itself: Subflow.Join runs the children
// spawned so far and returns when they have finished (the worker runs other
// tasks meanwhile), so that the parent reads their results — recursive
// Fibonacci spawns fib(n-1) and fib(n-2), joins, and adds. A joined subflow
// takes no more children.
//
// A task that can fail without panicking is a context task, shaped like a
// function given to errgroup's Go:
//
//	tf.EmplaceContext(func(ctx context.Context) error { ... })
//
// Its context is cancelled with the run (Future.Cancel, another task's
// failure; context.Cause gives the run's error) and when the run ends; a
// non-nil error fails the run as a panic does, as a *TaskError naming the
// task and wrapping the error.
//
// A graph with tasks of which none is a source (every task has a predecessor:
// a cycle with no condition task and no entry) could never start: its run
// fails with an error wrapping ErrNoSource, as does a module or subflow
// graph of that shape.
//
// # Running it
//
//	ex := localexec.NewExecutor(localexec.WithWorkers(4))
//	defer ex.Close()
//	err := ex.Run(tf).Wait()     // also RunN, RunUntil; Async for one function
//
// Runs of one taskflow queue and run in order. A panicking task fails its run
// with a *PanicError naming the task (with the panic value and stack); tasks
// of that run not yet started do not start. Future.Cancel stops a run the same
// way, with an error wrapping ErrCancelled. The zero Future refers to no work
// (Taskflow's empty future): Wait returns nil at once and Cancel returns
// false.
//
// Async runs one function on a worker; DependentAsync (Taskflow's dependent
// async) runs one after the futures it is given have finished, whatever
// their outcome:
//
//	a := ex.Async(loadA)
//	b := ex.Async(loadB)
//	c := ex.DependentAsync(merge, a, b) // starts when a and b are done
//
// SilentAsync (Taskflow's silent_async) runs a function and returns no
// Future and allocates nothing per call, for fire-and-forget work that WaitForAll
// (or Close) waits for; a panic in it is recovered and not reported.
//
// # The scheduler
//
// Every worker owns a Chase–Lev deque; each domain (CPU, and each GPU device)
// has a shared queue for work from outside it. A finishing task runs one ready
// successor inline and pushes the rest to the right domain. Idle workers
// steal a bounded number of times and park; at most one spins per domain when
// no work is visible, and a spinner that finds work — while spinning or in
// its last look before parking — wakes another. scheduler.go opens with the
// essay on this invariant and how it avoids both lost wake-ups and wasted
// steals; a model of the protocol checked in every interleaving of a few
// workers (parkmodel_test.go) backs it, and Executor.Stats exposes its
// counters.
//
// # Seeing it
//
// Taskflow.Dump writes Graphviz DOT. An Observer sees every task start and
// end; ChromeTracer is one that writes a Chrome trace for Perfetto.
package localexec
