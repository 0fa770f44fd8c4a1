// Package spec is hetflow's serializable taskflow: the flow file (YAML or
// JSON; docs/design.md, "The contract"), its validation, a Go builder that produces the same
// flows, and the resolved graph the coordinator partitions and a node runs.
// It imports nothing else of hetflow.
//
// # Reading a flow file
//
//	f, err := spec.ReadFile("flows.yaml")          // or spec.Parse(name, data)
//	err = f.Validate(spec.Options{
//		Funcs:     funcs.Default(),                 // any spec.Catalog; nil skips function checks
//		Resources: &spec.Resources{Nodes: nodes},   // nil skips node and GPU checks (offline validate)
//	})
//
// Parse is strict: unknown fields, wrong types, bad durations ("10m", "30s"),
// duplicate keys are errors. Both steps collect every problem into a
// spec.Errors, sorted by line; each is a *spec.Error whose Error() reads
//
//	flows.yaml:12: flow "demo" task "cond" field "precede": unknown task "bdy"
//
// and which matches spec.ErrInvalid and one finer sentinel (ErrUnknownTask,
// ErrCycle, ErrNoGPU, ...) with errors.Is. The rules are listed on
// File.Validate, with the exact cycle rule: a cycle of strong edges (edges
// out of non-condition tasks) is an error; a cycle through a condition task
// is a loop. Load reads, parses and validates in one call.
//
// A file holds one flow (name, timeout, tasks) or several under flows:; the
// first is the one run (File.Root), the others are for module tasks.
//
// # Parameters
//
// The first flow may declare params: (name → {type: string|int|float|bool,
// default: V}). In any argument of any flow of the file, a string that is
// exactly "${name}" takes the parameter's typed value and "${name}" inside a
// longer string is replaced by its text; "$${" is a literal "${". File.Bind
// fills them (values by name; strings are parsed by type, as submit --param
// name=value gives them) and returns a copy with every reference
// substituted and no parameters left, plus the values taken: what the
// coordinator validates, runs and stores. A missing or ill-typed value, one
// for an undeclared parameter, and a reference to an undeclared parameter are
// errors of kind ErrParam naming it. Validate on an unbound file checks the
// declarations and references, and leaves arguments holding "${" to be
// checked by their function once bound. In a file without params, "${" is
// plain text.
//
// # Building a flow in Go
//
//	b := spec.NewFlow("demo")
//	init := b.Task("init").Func("hash")
//	body := b.Task("body").Func("spin").Arg("us", 200).Succeed(init)
//	cond := b.Condition("cond").Func("loop").Arg("n", 10).Succeed(body)
//	done := b.Task("done").Func("hash")
//	cond.Precede(body, done)
//	fl, err := b.Build()                            // validated alone
//	file, err := spec.NewFile(opts, fl, other)      // validated with module references
//
// # The graph
//
// File.Expand returns a *Graph of the first flow with module tasks inlined
// as "module/task" vertices (File.Graph keeps modules as single vertices).
// Each Vertex has its ordered out-edges (a condition's precede order: the
// index it returns selects Succ[index]), in-edges, join counter (StrongIn:
// strong in-edges only), scope (Parent: the module vertex it runs under) and,
// for a module vertex, its instance's Members. Helpers: Sources,
// ScopeSources, Sinks, Successors, StrongPreds, WeakPreds, StrongSuccs,
// Descendants, Lookup, and LoopGroups, the strongly connected components that
// loop through conditions, which the partitioner should keep on one node.
// Edges never cross scopes: a module vertex starts its instance's sources
// and completes when the instance has nothing left to run.
//
// # Writing
//
// Marshal (File.YAML, File.JSON) writes a file that parses back to the same
// flows; File implements json.Marshaler and json.Unmarshaler for API
// messages. Dump writes Graphviz DOT: conditions as diamonds with dashed,
// index-labelled out-edges, modules as clusters.
//
// # Bundled examples
//
// Examples returns the flows under examples/ (embedded): the seed's Listings
// 1–6 and saxpy on CPU and GPU, for `coordinator dev`.
package spec
