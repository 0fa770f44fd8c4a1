// Package gpu is hetflow's GPU layer: devices, device memory, streams and the GPU task graph
// (the equivalent of Taskflow's cudaFlow) that a GPU task of a localexec.Taskflow builds and
// replays. It has two backends, chosen at build time: sim (every default build; the GPU is
// simulated by goroutines and kernels run their Go bodies) and cuda (-tags cuda, through
// gorgonia.org/cu and a little cgo of our own). Code written against this package runs
// unchanged on either. Read it in this order.
//
// # Devices
//
// Open(n) returns the devices of the backend in the build. On sim, n devices (n < 0 reads
// HETFLOW_SIM_GPUS, default 1); on cuda the real GPUs (all for n < 0, else at most n).
// Backend() says which. A device owns goroutines (sim) or a CUDA context (cuda); Close waits
// for work in flight, stops them and frees everything the device holds. The executor's GPU
// workers lock themselves to an OS thread and call Device.Bind before they launch anything.
//
// # Buffers
//
// Device memory is separate from host memory. Alloc[T](d, n) returns a *Buffer[T] of n
// elements on d; Free releases it (Device.Close frees what is left). Host code never touches
// device memory: it copies, through graph nodes, stream operations, or the synchronous
// Buffer.Write and Buffer.Read (handy in tests). Buffer.Slice makes a view. Copies are real
// copies: changing a host slice after a copy does not change the device.
//
// # Graphs
//
// NewGraph(d) starts an empty GPU task graph on d. Add nodes, then order them with
// Node.Precede and Node.Succeed (both return the node, for chaining; Name labels it):
//
//	g := gpu.NewGraph(d)
//	h2dx := gpu.H2D(g, dx, hx).Name("h2d_x")          // host -> device
//	h2dy := gpu.H2D(g, dy, hy).Name("h2d_y")
//	k := gpu.SaxpyNode(g, n, 2, dx, dy).Name("saxpy") // a kernel node
//	d2hy := gpu.D2H(g, hy, dy).Name("d2h_y")          // device -> host
//	k.Succeed(h2dx, h2dy).Precede(d2hy)
//	err := g.Launch()
//
// The node kinds are H2D, D2H, D2D, Memset, Graph.Kernel and Graph.Capture. Copies keep the
// host slice they were given, not its contents: every launch copies what it holds then. A bad
// node (wrong device, size mismatch, bad grid) does not panic: the first such error is kept,
// reported by Graph.Err and returned by every Launch.
//
// Launch instantiates the graph on its first call (on cuda: one CUDA graph) and replays the
// instance on later calls; it instantiates again only if nodes or edges were added. It returns
// when the whole graph has run. A failing node fails the launch with a *NodeError naming it
// (errors.Is finds the sentinel: ErrKernel, ErrFreed, ...); the nodes after it do not run, and
// the device stays usable. Graph.Dump writes DOT lines for Taskflow.Dump to embed.
//
// # Kernels
//
// A Kernel is one object with two bodies: PTX for cuda and a Go function for sim. The Go body
// runs once per block and loops over the block's threads (Block.Range gives a 1-D block's
// global indices); it reads buffers with Buffer.Mem. Blocks of a launch run one after another,
// so an atomicAdd in PTX is a plain += in Go. Arguments are int32, uint32, int64, uint64,
// float32, float64 or buffers of the launching device, checked when the node is added (and
// against Kernel.Params when set). Built in, with both bodies: Saxpy (and SaxpyNode,
// SaxpyAsync), and the k-means steps KMeansAssign (nearest centroid, per-cluster sums and
// counts) and KMeansUpdate (centroid = sum/count); KMeans bundles the buffers and KMeans.Step
// adds one iteration (zero sums, assign, update) to a graph.
//
// # Capture
//
// Libraries such as cuBLAS only take a stream. Graph.Capture(func(s *Stream) error) adds a node
// whose work is whatever the function enqueues on s: H2DAsync, D2HAsync, D2DAsync,
// MemsetAsync, Stream.Launch, or a library function built on them (SaxpyAsync). The function
// runs once, at instantiation; on sim the operations are recorded and replayed in order on
// each launch, on cuda s is in stream-capture mode and the captured graph becomes a child
// node. Streams also exist on their own: Device.NewStream, Stream.Synchronize, and events
// (Device.NewEvent, Stream.Record, Stream.Wait) to order one stream after another.
//
// # Backends
//
// sim: each device has a few engine goroutines that run graph nodes as their dependencies
// complete (a chain stays on one engine; parallel branches spread over the others), and one
// goroutine per stream that runs its operations in order. Kernels run their Go bodies; device
// memory is Go memory the host cannot see except through copies. This is what every test and
// example uses without a GPU.
//
// timed sim (HETFLOW_SIM_PROFILE=h200, another built-in name, or a JSON file; SimProfileEnv):
// the same sim devices, computing the same results with the same Go bodies, but each
// operation is also charged device time from a Profile, a small data struct: a per-launch
// latency, kernels by a roofline of the Work they declare (Kernel.Work: bytes moved and
// flops; a kernel that declares none costs the profile's overhead plus its body's time),
// copies by the host link's bandwidth and latency. Each device has three engines (compute,
// host-to-device copy, device-to-host copy), each a timeline: an operation starts when it is
// ready and in the earliest gap of its engine's timeline, and ends at the later of its
// modelled end and its body's end, so work on one device queues as on hardware while copies
// and kernels overlap. A graph launch runs its nodes one after another on the launching
// goroutine (the timelines model what runs in parallel; bodies must not wait for each other,
// which CUDA does not promise either). A host thread waiting on a device is a Host, blocked
// in the model until what it waited for ends (Graph.LaunchFrom names it; other calls use one
// per calling goroutine); it really sleeps (a timer, never a spin) only when the model is
// more than the profile's Slack ahead of wall time. Device.SimStats reports what was charged
// and how much of it the bodies took on the CPU; SettleModel waits for the model's tail. The default
// profile (H200) is datasheet figures and assumptions, not calibrated against hardware; see
// docs/benchmarks/timed-sim.md.
//
// cuda (build with -tags cuda, needs the CUDA toolkit's cuda.h and libcuda): devices are
// primary contexts, buffers are cuMemAlloc memory, kernels load their PTX once per device.
// A graph becomes one CUDA graph (cuGraphInstantiate, one cuGraphLaunch per Launch); where the
// driver has no graph support, or Graph.UseStreams(true) asks for it, the nodes run on streams
// ordered by events instead. gpu/cuda/check.sh builds and checks this path on a GPU machine.
package gpu
