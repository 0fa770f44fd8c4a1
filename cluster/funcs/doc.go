// Package funcs is the registry of functions hetflow nodes run, and the
// built-ins every node has (README, "Functions"). A node binary is built with the
// user's functions: it starts from Default() and registers its own.
//
// # Registering
//
//	reg := funcs.Default()
//	reg.MustRegister(funcs.Entry{
//		Name:  "resize",
//		Kind:  spec.KindStatic,                      // or condition, multicondition, subflow
//		CPU:   func(ctx context.Context, c *funcs.Call) (funcs.Result, error) { ... },
//		Check: func(a funcs.Args) error { _, err := a.NonNeg("width", 0); return err },
//	})
//	reg.SetGPUGraph("resize", resizeOnDevice)       // its device implementation (see GPU tasks)
//
// A *Registry is a spec.Catalog: spec validation uses it to check that every
// func exists, fits the task's kind and domain, and accepts its arguments.
//
// # Calling
//
// The node runs a task's function through the function bound once
// (Registry.Bind, then Bound.InvokeTo, which leaves the Result in the
// caller's), and with Registry.Invoke(ctx, name, call) only for a function
// it could not bind; Bound.Invoke is the same returning the Result:
//
//   - ctx is cancelled when the run is cancelled or times out (and carries
//     the task's per-activation timeout);
//   - Call.Args are the task's arguments, read with the Args getters, which
//     fail with errors like `task "body": args: "us" must be a non-negative
//     integer, got "abc"`; they are shared, read-only, by every activation
//     of the task and by the concurrent runs of the same flow (a node keeps
//     a flow compiled once), so a function must not change them;
//   - Call.Inputs holds the outputs of the task's strong predecessors (by
//     declared name, each from its latest activation) that have produced
//     one when the activation starts; a condition predecessor gives none.
//     A task with strong and condition predecessors runs once per pick and
//     once per round of its strong predecessors: an activation by the pick
//     sees the strong predecessors that completed before it (order one
//     before the condition by a strong path to be sure it is seen), one by
//     the round sees them all;
//   - Call.Activation counts the task's activations in the run (1 first);
//     Call.Attempt counts re-executions of one activation;
//   - Call.State is the Result.State of the task's previous activation.
//
// A function whose bodies read neither Call.Inputs nor Call.State may say
// so with Entry.NoInputs: the node then leaves both nil (and gathers no
// map of its predecessors' outputs for each activation). The built-ins
// that read neither (all but hash, loop and exec) are so registered.
//
// A function may keep its *Call after it returns, unless it is registered
// with Entry.Transient: it then promises to keep neither the Call nor its
// Inputs map past its return (values copied out of them are its own), and
// the node reuses one Call for many activations instead of allocating one
// for each. Once such a function has returned, the node overwrites its Call
// (Release: Task and Path read Released, Activation 0) before reusing it, so
// a Call kept against the promise shows as taken back, and a read of it from
// another goroutine is a data race the race detector may report. The built-ins
// (not exec) are Transient. A
// node binds each task's function once when it builds the task
// (Registry.Bind, a Bound) rather than looking it up at every call.
//
// A function returns a Result: Output bytes (static), Choice (condition),
// Choices (multicondition) or Children (subflow), and optional State.
// Invoke drops the fields the function's kind does not use.
//
// # Replay and per-run state
//
// Functions must be deterministic in (Task, Args, Inputs, Activation, State)
// (coin without a seed is the exception; its outcomes are recorded). The
// runtime records Result.State with each activation's outcome and hands it
// to the next activation, on whatever node that runs, so a task replayed
// after a failover continues exactly where it was. loop is built this way:
// its state counts the activations since it last returned 1.
//
// # Subflows
//
// A subflow function returns Children, static tasks naming registered
// functions, with Succeed edges among them. The node turns them into a
// localexec Subflow of the subflow task (joined: the parent's successors
// wait for every child), each child called with Task = child name, Path =
// "parent/child", the parent's Activation, and its Succeed children's
// outputs as Inputs. Invoke checks them with CheckChildren.
//
// # GPU tasks
//
// A task with domain gpu of a static function runs, on the node that holds
// it, the first the function's Entry has of:
//
//   - Graph (a GPUGraph; Register it or attach it with SetGPUGraph): the
//     device implementation. The node turns the task's arguments into
//     GPUWork when it builds its part, builds the work into the task's
//     gpu.Graph once on a GPU worker of the task's device (`device:`, default
//     0; a node without that device refuses the assignment), launches it at
//     every activation and then reads Output on a CPU worker; Free runs when
//     the run ends. This is the one extension point for device code.
//   - GPU (a Func; SetGPU): a host body run on a CPU worker, Call.Device
//     naming the task's device.
//   - CPU: the CPU body, on a CPU worker.
//
// Validation accepts domain gpu for a function with Graph or GPU.
//
// # Built-ins
//
//	noop                 nothing
//	spin {us}            busy CPU work for us microseconds (honours ctx)
//	sleep {ms}           sleeps (honours ctx)
//	hash                 SHA-256(task name ‖ strong predecessors' outputs in ascending byte order of their names); 32 bytes
//	loop {n}             condition: 0 on n activations in a row, then 1 (state in Result.State)
//	coin {p, seed}       condition: 0 with probability p (default 0.5), else 1; seeded draw = CoinDraw(seed, task, activation)
//	fail {msg, times}    returns an error (ErrFailed); with times: k only while Attempt < k
//	panic {msg}          panics
//	saxpy {n, a}         y = a·x + y over float32 x[i]=(i mod 97)/97, y[i]=(i mod 89)/89; output the float64 sum of y, 8 bytes LE
//	fanout {n, us}       subflow: n spin {us} children named "0".."n-1"
//	pick {choices}       multicondition: returns the given indices
//	blob {n}             outputs n bytes (byte i = i mod 256), for traffic tests
//	exec {cmd, args, stdin, env}  only with Registry.EnableExec(allow) (node --exec-allow): runs an
//	                     allowed program with its inputs as files (and stdin); stdout is the output
//
// Only hash, saxpy, blob and exec produce output. exec is off by default:
// see EnableExec, and the security section of docs/cluster-protocol.md
// (whoever may submit flows can run the allowed programs). saxpy has a
// Graph (the gpu package's saxpy kernel between copies in and out) and, as
// its GPU body, the host computation; both round a·x to float32 before
// adding (no fused multiply-add) and sum y on the host in index order, so
// every body gives the same 8 bytes (see SaxpyInputs, SaxpyKernel, SaxpySum).
package funcs
