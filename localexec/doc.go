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
// Subflows join their parent by default; a detached subflow runs on its own
// and joins the end of the run. Two module tasks over one taskflow must be
// ordered by a strong path (they share its nodes); the executor checks this
// before a run starts. Runtime tasks (EmplaceRuntime) can schedule a task of
// the graph and co-run another taskflow without blocking their worker.
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
// way, with an error wrapping ErrCancelled.
//
// # The scheduler
//
// Every worker owns a Chase–Lev deque; each domain (CPU, and each GPU device)
// has a shared queue for work from outside it. A finishing task runs one ready
// successor inline and pushes the rest to the right domain. Idle workers
// steal a bounded number of times and park; at most one spins per domain when
// no work is visible. scheduler.go opens with the essay on this invariant and
// how it avoids both lost wake-ups and wasted steals; Executor.Stats exposes
// its counters.
//
// # Seeing it
//
// Taskflow.Dump writes Graphviz DOT. An Observer sees every task start and
// end; ChromeTracer is one that writes a Chrome trace for Perfetto.
package localexec
