package localexec

import (
	"context"
	"iter"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hetflow/hetflow/gpu"
)

// kind is what a node does when it runs.
type kind uint8

const (
	kindPlaceholder    kind = iota // no work; a node to be given work later or a pure join point
	kindStatic                     // func()
	kindCondition                  // func() int: index of the one successor to run
	kindMultiCondition             // func() []int: indices of the successors to run
	kindSubflow                    // func(*Subflow): spawns a child graph
	kindModule                     // runs another Taskflow's graph in place
	kindRuntime                    // func(*Runtime)
	kindGPU                        // func(*gpu.Graph): a GPU task graph run on a GPU worker
	kindAsync                      // an Executor.Async call (not part of any graph)
	kindStart                      // a topology's starter: begins its first run on a worker
	kindHold                       // an open run's hold on its root frame, released by OpenRun.Close
	kindContext                    // func(context.Context) error: a static task that can fail
	kindSilent                     // an Executor.SilentAsync call: a bare node, no future
	kindRange                      // a run of a graph's sources, split by the workers that take it (see rangeTask)
	kindSilentBatch                // a run of SilentAsync calls taken from a shared queue at once (see silentBatch)
)

var kindNames = [...]string{"placeholder", "static", "condition", "multicondition", "subflow", "module", "runtime", "gpu", "async", "start", "hold", "context", "async", "range", "async"}

func (k kind) String() string { return kindNames[k] }

// weakOut reports whether edges out of a node of this kind are weak: they do
// not count in the successor's join counter; the node picks successors.
// silent reports whether a node of this kind is SilentAsync calls.
func (k kind) silent() bool { return k == kindSilent || k == kindSilentBatch }

func (k kind) weakOut() bool { return k == kindCondition || k == kindMultiCondition }

// node is one task of a graph. Nodes of a built graph are allocated in slabs
// (see graph.alloc) and nodes spawned by subflows come from a pool, so the run
// path allocates nothing per task.
//
// A node is one 64-byte cache line with five pointer words: a run streams
// through its graph's nodes, so every byte counts (a 1M-task chain ran 12
// ns a task at 88 bytes a task and 5 ns when it fit in cache), and the GC
// scans every node of a graph being built. What only some kinds need lives
// in ext, the name lives in the graph (see graph.intern), and a single
// successor needs no array.
type node struct {
	name    *string // nil: no name
	join    atomic.Int32
	nStrong int32 // strong predecessors: the join counter's reset value
	nPreds  int32 // all predecessors; a node with none is a source
	nSucc   int32 // successors (see succ)
	kind    kind
	// external marks a task that is not a source even without
	// predecessors: it runs only when scheduled (OpenRun.Schedule,
	// Runtime.Schedule). Proxies for remote predecessors are external.
	external bool
	// carried marks a static task whose static is a func(*int64)
	// (EmplaceCarried), called with its worker's carry word.
	carried bool
	// hint is 1 + the index of the lines of the task's run tables
	// (Taskflow.SetHints) that warmClosures asks for with its closure's
	// (Task.Hint); 0: none. It fills padding: the node stays 64 bytes.
	hint uint32

	static func()
	frame  *frame // the frame this node runs in (set when its graph is scheduled)
	// succ holds the successors in Precede order: with one, succ is that
	// *node; with more, it points at the first of nSucc *node in a row
	// whose capacity is the power of two at or above nSucc (see addEdge).
	// successors gives them as a slice.
	succ unsafe.Pointer
	ext  *nodeExt // for the rarer kinds; nil for static tasks
}

// successors returns n's successors in Precede order. The slice aliases n's
// storage: read it, never append to it.
func (n *node) successors() []*node {
	switch n.nSucc {
	case 0:
		return nil
	case 1:
		return unsafe.Slice((**node)(unsafe.Pointer(&n.succ)), 1)
	}
	return unsafe.Slice((**node)(n.succ), n.nSucc)
}

// taskName returns n's name, "" when it has none.
func (n *node) taskName() string {
	if n.name == nil {
		return ""
	}
	return *n.name
}

// nodeExt holds what only subflow, module, runtime, multi-condition, GPU and
// async nodes need, keeping the common node small.
type nodeExt struct {
	cond     func() int
	subflow  func(*Subflow)
	multi    func() []int
	runtime  func(*Runtime)
	ctxFn    func(context.Context) error
	gpuFn    func(*gpu.Graph)
	module   *Taskflow
	child    frame  // the frame of this node's joined subflow or module run
	sub      *graph // children spawned by the last run of a subflow (when retained)
	sf       Subflow
	gpuGraph *gpu.Graph
	device   int32 // GPU device of a GPU task
}

func (n *node) x() *nodeExt {
	if n.ext == nil {
		n.ext = &nodeExt{}
	}
	return n.ext
}

// graph is a set of nodes: a Taskflow's, or a subflow's children.
type graph struct {
	// chunks hold the nodes in insertion order: chunks before the one
	// being filled are full, later ones (kept by release for reuse)
	// empty. Nodes never move. There is no slice of node pointers: it
	// would be a million interior pointers for the collector to resolve
	// on every cycle while a large graph is built.
	chunks [][]node
	fill   int // index of the chunk being filled
	count  int
	// A subflow's children come from nodePool instead and are listed in
	// pnodes: spawns are many and small, and pooled nodes keep their
	// successor arrays from spawn to spawn.
	pooled bool
	pnodes []*node
	edges  []*node  // unused tail of the current successor slab (see addEdge)
	names  []string // unused tail of the current name slab (see setName)
	// version counts structural changes; checked caches (module
	// validation) compare against it.
	version uint64

	// special lists the run-start check walks instead of every node
	modules []*node
	gpus    []*node
	conds   int // condition and multi-condition tasks

	// sched caches what scheduleGraph derives from the structure, valid
	// while version == sched.version and the nodes point at sched.frame.
	sched struct {
		valid   bool
		version uint64
		frame   *frame
		sources []*node
		multi   []*node // nodes with more than one strong predecessor
		// clean: the last run through this frame completed every node,
		// so each counter was restarted at its last release (see
		// releaseJoin) and the multi resets can be skipped. Only DAGs
		// without condition or external tasks qualify, and only after a
		// run that was not cancelled, nor steered from outside its
		// graph's round (Runtime.Schedule, an open run's Schedule,
		// ScheduleAll or Release: topology.dirty).
		clean   bool
		dagOnly bool
	}
}

const (
	// Nodes come in slabs that grow with the graph, from minSlab nodes
	// (a small taskflow stays small) to maxSlab (one allocation per 256
	// nodes of a large one).
	minSlab, maxSlab = 4, 256
	// Successor arrays come from slabs of up to edgeSlabSize pointers.
	edgeSlabSize = 1024
)

func (g *graph) empty() bool { return g.count == 0 }

func (g *graph) alloc() *node {
	if g.pooled {
		n := nodePool.Get().(*node)
		g.pnodes = append(g.pnodes, n)
		g.count++
		g.version++
		return n
	}
	for {
		if g.fill < len(g.chunks) {
			if c := g.chunks[g.fill]; len(c) < cap(c) {
				c = c[:len(c)+1]
				g.chunks[g.fill] = c
				g.count++
				g.version++
				return &c[len(c)-1]
			}
			g.fill++
			continue
		}
		g.chunks = append(g.chunks, make([]node, 0, min(max(g.count, minSlab), maxSlab)))
	}
}

// all yields g's nodes in insertion order.
func (g *graph) all() iter.Seq[*node] {
	return func(yield func(*node) bool) {
		for _, n := range g.pnodes {
			if !yield(n) {
				return
			}
		}
		for _, c := range g.chunks {
			for i := range c {
				if !yield(&c[i]) {
					return
				}
			}
		}
	}
}

var nodePool = sync.Pool{New: func() any { return new(node) }}

// release empties g (a subflow's children, after the subflow): pooled nodes
// go back to the pool with their successor arrays emptied, chunked ones are
// zeroed, dropping what they hold, and their chunks kept.
func (g *graph) release() {
	for i, n := range g.pnodes {
		if n.ext != nil {
			n.ext.releaseGPU()
		}
		*n = node{}
		nodePool.Put(n)
		g.pnodes[i] = nil
	}
	g.pnodes = g.pnodes[:0]
	for i, c := range g.chunks {
		for j := range c {
			if x := c[j].ext; x != nil {
				x.releaseGPU()
			}
		}
		clear(c)
		g.chunks[i] = c[:0]
	}
	g.fill, g.count = 0, 0
	g.modules = g.modules[:0]
	g.gpus = g.gpus[:0]
	g.conds = 0
	g.sched.valid = false
	g.version++
}

// releaseGPU releases the GPU graphs that g's GPU tasks built, and those of
// the subflow children g's subflow tasks still hold: a device keeps a
// graph, and what its copies name, until it is released.
func (g *graph) releaseGPU() {
	for n := range g.all() {
		if n.ext != nil {
			n.ext.releaseGPU()
		}
	}
}

// releaseGPU releases the GPU graph this task built, if any, and those of
// the subflow children it holds.
func (x *nodeExt) releaseGPU() {
	if x.gpuGraph != nil {
		x.gpuGraph.Release()
		x.gpuGraph = nil
	}
	if x.sub != nil {
		x.sub.releaseGPU()
	}
}

// Task is a handle to a node of a Taskflow or Subflow. The zero Task is empty:
// its methods are no-ops and String returns "".
type Task struct {
	n *node
	g *graph
}

// Name sets the task's name and returns the task.
func (t Task) Name(name string) Task {
	if t.n != nil {
		t.g.setName(t.n, name)
	}
	return t
}

// String returns the task's name.
func (t Task) String() string {
	if t.n == nil {
		return ""
	}
	return t.n.taskName()
}

// Empty reports whether t refers to no task.
func (t Task) Empty() bool { return t.n == nil }

// Kind returns what the task does: "static", "condition", "subflow", ...
func (t Task) Kind() string {
	if t.n == nil {
		return ""
	}
	return t.n.kind.String()
}

// Precede adds edges t→s for each s and returns t. Edges out of a condition
// task are weak; all others are strong. The order of calls is the order of
// successors that a condition's index refers to.
func (t Task) Precede(succs ...Task) Task {
	for _, s := range succs {
		t.g.addEdge(t.n, s.n)
	}
	if t.g != nil {
		t.g.version++
	}
	return t
}

// Succeed adds edges p→t for each p and returns t.
func (t Task) Succeed(preds ...Task) Task {
	for _, p := range preds {
		p.g.addEdge(p.n, t.n)
	}
	if t.g != nil {
		t.g.version++
	}
	return t
}

// addEdge adds from→to. A first successor is stored in the node itself;
// from the second on, successor arrays are carved out of slabs of up to
// edgeSlabSize pointers that g hands out in order, so that building a graph
// makes no allocation per node for its edges and the successors of nodes
// built one after the other lie side by side. An array is full when its
// length is a power of two; it then moves to one twice its size (the old one
// is left to the slab).
func (g *graph) addEdge(from, to *node) {
	if from == nil || to == nil {
		return
	}
	switch k := from.nSucc; {
	case k == 0:
		from.succ = unsafe.Pointer(to)
	case k&(k-1) == 0: // full: 1 (in the node), 2, 4, 8, ...
		s := g.carve(2 * int(k))
		copy(s, from.successors())
		s[k] = to
		from.succ = unsafe.Pointer(&s[0])
	default:
		unsafe.Slice((**node)(from.succ), k+1)[k] = to
	}
	from.nSucc++
	to.nPreds++
	if !from.kind.weakOut() {
		to.nStrong++
	}
}

// carve returns room for c successors: from g's edge slab when c is small,
// else an array of its own.
func (g *graph) carve(c int) []*node {
	if c > edgeSlabSize/8 {
		return make([]*node, c)
	}
	if len(g.edges) < c {
		// slabs grow with the graph, so a small one stays small
		g.edges = make([]*node, max(c, min(2*g.count, edgeSlabSize)))
	}
	s := g.edges[:c:c]
	g.edges = g.edges[c:]
	return s
}

// setName names n, keeping the string in g's name slab: a node holds a
// pointer to its name, not the name.
func (g *graph) setName(n *node, name string) {
	if n.name != nil {
		*n.name = name // the slot is n's own
		return
	}
	if len(g.names) == 0 {
		g.names = make([]string, min(max(g.count, minSlab), maxSlab))
	}
	g.names[0] = name
	n.name = &g.names[0]
	g.names = g.names[1:]
}

// NumSuccessors returns the number of outgoing edges.
func (t Task) NumSuccessors() int {
	if t.n == nil {
		return 0
	}
	return int(t.n.nSucc)
}

// NumPredecessors returns the number of incoming edges, strong and weak.
func (t Task) NumPredecessors() int {
	if t.n == nil {
		return 0
	}
	return int(t.n.nPreds)
}

// NumStrongPredecessors returns the number of incoming strong edges (the join
// counter's initial value).
func (t Task) NumStrongPredecessors() int {
	if t.n == nil {
		return 0
	}
	return int(t.n.nStrong)
}

// Hint names the lines that t's function reads first: the i-th entry of
// each table the taskflow's runs are given (SetHints). With
// WithWarmSuccessors, a worker that has run a carried predecessor of t
// (EmplaceCarried) asks for them (a prefetch) with t's closure, before t
// may run next on it: a function that reads state of its own one pointer
// beyond its closure (the cluster node's vertex state and event row) finds
// it on its way. Only a carried task's worker warms its successors, so a
// hint is seen only through a carried predecessor; t itself may be of any
// kind. A hint changes nothing but when lines are read: an entry beyond
// the tables a run is given is not asked for. A negative i (or one of
// math.MaxUint32 or more) clears t's hint.
func (t Task) Hint(i int) Task {
	if t.n == nil {
		return t
	}
	t.n.hint = 0
	if i >= 0 && i < math.MaxUint32 {
		t.n.hint = uint32(i) + 1
	}
	return t
}

// hintTables are up to two tables of equal-sized entries that carried
// tasks' hints index (Taskflow.SetHints): a and b their first entries, n
// entries each, stride bytes apart.
type hintTables struct {
	a, b   unsafe.Pointer
	n      uint32
	stride uintptr
}

// line is the address of entry i of table p, or nil for none.
func (h *hintTables) line(p unsafe.Pointer, i uint32) unsafe.Pointer {
	if p == nil || i >= h.n {
		return nil
	}
	return unsafe.Add(p, uintptr(i)*h.stride)
}

// SetHints gives the runs of tf submitted from now on (and their modules'
// and subflows' tasks: one run's) the tables its tasks' hints index (see
// Task.Hint): a and b point at the first of n entries each (b may be nil),
// stride bytes apart. The tables are only ever prefetched, never read or
// written; they must be allocations of at least n entries (the run's
// state, say), and tf keeps them reachable (as its last run does) until
// it is given others: a prefetch of freed memory would be harmless, but
// the pointer warmClosures forms to it would not be (the collector may
// find it). They may be replaced between runs. A nil a or n 0 gives runs none.
// SetHints writes tf's tables without tf's lock: it must not be called
// while a run of tf is being submitted (Run, RunN, RunUntil, RunOpen),
// which copies them; a run already submitted keeps its copy.
func (tf *Taskflow) SetHints(a, b unsafe.Pointer, n int, stride uintptr) {
	if a == nil || n <= 0 || stride == 0 {
		tf.hints = hintTables{}
		return
	}
	tf.hints = hintTables{a: a, b: b, n: uint32(min(n, math.MaxUint32)), stride: stride}
}

// Work gives a placeholder (or any static task) a static body.
func (t Task) Work(fn func()) Task {
	if t.n != nil {
		if t.n.kind != kindPlaceholder && t.n.kind != kindStatic {
			panic("localexec: Work on a " + t.n.kind.String() + " task " + t.n.taskName())
		}
		t.n.kind = kindStatic
		t.n.static, t.n.carried = fn, false
	}
	return t
}

// External marks t as not a source: with no predecessors it still does not
// start with the run, and runs only when scheduled (OpenRun.Schedule or
// Runtime.Schedule). It returns t.
func (t Task) External() Task {
	if t.n != nil {
		t.n.external = true
		if t.g != nil {
			t.g.version++
		}
	}
	return t
}

// Await gives t k strong predecessors outside its graph, which an open run
// counts in with OpenRun.Release: t's join counter waits for them as for
// its predecessors in the graph, and t is not a source (as External). A
// cluster node counts a remote predecessor's completion into its successor
// this way, without a proxy task. It returns t.
func (t Task) Await(k int) Task {
	if t.n != nil && k > 0 {
		t.n.nStrong += int32(k)
		t.n.nPreds += int32(k)
		t.n.external = true
		if t.g != nil {
			t.g.version++
		}
	}
	return t
}

// On places a GPU task on a device (default 0). It has no effect on other
// kinds.
func (t Task) On(device int) Task {
	if t.n != nil && t.n.kind == kindGPU {
		t.n.ext.device = int32(device)
		if t.g != nil {
			t.g.version++
		}
	}
	return t
}

// Device returns the device a GPU task is placed on.
func (t Task) Device() int {
	if t.n == nil {
		return 0
	}
	if t.n.kind != kindGPU {
		return 0
	}
	return int(t.n.ext.device)
}

// builder is the graph-building half shared by Taskflow and Subflow.
type builder struct {
	g *graph
	// joined is set by Subflow.Join: the children have run, and a task
	// added now would never run.
	joined bool
}

func (b *builder) add(k kind) *node {
	if b.joined {
		panic("localexec: a task added to a subflow after Join (a joined subflow takes no more children)")
	}
	n := b.g.alloc()
	n.kind = k
	switch k {
	case kindModule:
		b.g.modules = append(b.g.modules, n)
	case kindGPU:
		b.g.gpus = append(b.g.gpus, n)
	case kindCondition, kindMultiCondition:
		b.g.conds++
	}
	return n
}

func (b *builder) task(n *node) Task { return Task{n: n, g: b.g} }

// Emplace adds a static task.
func (b *builder) Emplace(fn func()) Task {
	n := b.add(kindStatic)
	n.static = fn
	return b.task(n)
}

// EmplaceCarried adds a static task whose function gets a word its worker
// carries from task to task: the value the carried task its worker ran
// last left there, when the worker came to this one straight from it
// (handed over at its completion or popped from the worker's own deque
// next), and 0 when it came from a task of another kind than static, a
// steal, a park or a panic. Plain static tasks do not touch the word (the
// loop every graph runs pays nothing for it): one that runs between two
// carried tasks on a worker is carried across; a task whose time matters
// to the word's users should be carried and reset it. So a function can
// hand its successor on the worker what both need and the worker already
// holds: the cluster node hands on its end stamp, which is the next
// task's start (one clock read an activation instead of two). The word is
// the worker's alone: read and write it only during the call.
func (b *builder) EmplaceCarried(fn func(carry *int64)) Task {
	if fn == nil {
		return b.Emplace(nil)
	}
	n := b.add(kindStatic)
	n.static = *(*func())(unsafe.Pointer(&fn)) // called as what it is: runGuarded
	n.carried = true
	return b.task(n)
}

// EmplaceContext adds a static task that can fail, shaped like a function
// given to errgroup's Go: fn receives a context that is cancelled when the
// run is (by Future.Cancel, or because another task failed or panicked; its
// cause is then the run's error, see context.Cause) or has finished. A
// non-nil error from fn fails the run as a panic does: the run's error is a
// *TaskError naming the task and wrapping the error (find it with
// errors.Is or errors.As), and tasks of the run not yet started do not
// start. A panic in fn is a *PanicError, as for Emplace.
func (b *builder) EmplaceContext(fn func(ctx context.Context) error) Task {
	n := b.add(kindContext)
	n.x().ctxFn = fn
	return b.task(n)
}

// EmplaceCondition adds a condition task: the returned index picks the one
// successor to run (in Precede order); an index out of range runs nothing.
func (b *builder) EmplaceCondition(fn func() int) Task {
	n := b.add(kindCondition)
	n.x().cond = fn
	return b.task(n)
}

// EmplaceMultiCondition adds a task that picks any subset of its successors.
func (b *builder) EmplaceMultiCondition(fn func() []int) Task {
	n := b.add(kindMultiCondition)
	n.x().multi = fn
	return b.task(n)
}

// EmplaceSubflow adds a dynamic task: fn builds a child graph each time the
// task runs. The subflow joins the task unless fn calls Detach.
func (b *builder) EmplaceSubflow(fn func(*Subflow)) Task {
	n := b.add(kindSubflow)
	n.x().subflow = fn
	return b.task(n)
}

// EmplaceRuntime adds a task that receives the Runtime of its run.
func (b *builder) EmplaceRuntime(fn func(*Runtime)) Task {
	n := b.add(kindRuntime)
	n.x().runtime = fn
	return b.task(n)
}

// EmplaceGPU adds a GPU task: fn builds a GPU task graph once, on the first
// run, on a GPU worker of the task's device (see Task.On); every run then
// launches it.
func (b *builder) EmplaceGPU(fn func(*gpu.Graph)) Task {
	n := b.add(kindGPU)
	n.x().gpuFn = fn
	return b.task(n)
}

// ComposedOf adds a module task that runs other's graph in place. It keeps a
// reference, not a copy: later changes to other show in later runs.
func (b *builder) ComposedOf(other *Taskflow) Task {
	n := b.add(kindModule)
	n.x().module = other
	if other != nil {
		b.g.setName(n, other.name)
	}
	return b.task(n)
}

// Placeholder adds a task with no work yet (see Task.Work).
func (b *builder) Placeholder() Task {
	return b.task(b.add(kindPlaceholder))
}

// NumTasks returns the number of tasks.
func (b *builder) NumTasks() int { return b.g.count }

// Empty reports whether there are no tasks.
func (b *builder) Empty() bool { return b.g.count == 0 }

// ForEachTask calls fn for every task, in insertion order.
func (b *builder) ForEachTask(fn func(Task)) {
	for n := range b.g.all() {
		fn(b.task(n))
	}
}

// Taskflow is a task graph. Build it with the Emplace calls, run it with an
// Executor. A Taskflow must not be modified while it runs.
type Taskflow struct {
	builder
	name  string
	graph graph

	// root is the frame of this taskflow's top-level graph in its current
	// run: runs of one taskflow never overlap, so one frame serves them all
	// and the nodes' frame pointers stay valid from run to run.
	root frame

	// runs of this taskflow queue; mu guards the queue.
	mu      sync.Mutex
	queue   []*topology
	running bool

	// hints are the tables a carried task's Hint indexes, for the runs
	// submitted from now on (SetHints).
	hints hintTables

	// module-conflict check cache (see check.go)
	checkedVersion uint64
	checkErr       error
	checkedEx      *Executor
}

// NewTaskflow returns an empty taskflow with the given name.
func NewTaskflow(name string) *Taskflow {
	tf := &Taskflow{name: name}
	tf.builder.g = &tf.graph
	return tf
}

// Name returns the taskflow's name.
func (tf *Taskflow) Name() string { return tf.name }

// SetName renames the taskflow.
func (tf *Taskflow) SetName(name string) { tf.name = name }

// Clear removes every task. It must not be called while the taskflow runs.
// The GPU graphs its GPU tasks built are released (see gpu.Graph.Release):
// call Clear on a taskflow with GPU tasks that is done with, or the devices
// keep its graphs, and the host memory their copies name, until they close.
func (tf *Taskflow) Clear() {
	tf.graph.releaseGPU()
	v := tf.graph.version
	tf.graph = graph{version: v + 1}
}
