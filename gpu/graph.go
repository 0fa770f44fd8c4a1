package gpu

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Graph is a GPU task graph bound to one device, the equivalent of Taskflow's cudaFlow: copies,
// memsets, kernels and captures of stream-based calls, with precedence between them. Build it
// once, then Launch it as often as needed: the first Launch instantiates it (on cuda: one CUDA
// graph), later Launches replay the instance, and it is instantiated again only if nodes or
// edges were added since.
//
// Building never fails loudly: a bad node (wrong device, size mismatch, ...) is recorded and
// returned by Err and by every Launch, so a builder can chain calls freely.
type Graph struct {
	mu       sync.Mutex
	dev      *Device
	nodes    []*Node
	err      error
	version  uint64 // bumped on every node or edge added
	execVer  uint64
	exec     *graphExec
	stats    GraphStats
	streams  bool
	released bool
	host     *Host // the launch in progress's (timed sim), nil: the calling goroutine's
}

// GraphStats counts what a graph did.
type GraphStats struct {
	Instantiations int // times the graph was (re)instantiated
	Launches       int // successful and failed launches after instantiation
}

// Node is a handle to one node of a Graph, like Taskflow's cudaTask.
type Node struct {
	g    *Graph
	idx  int
	name string
	op   *op
	succ []*Node
	pred []*Node
}

// NewGraph returns an empty graph bound to d.
func NewGraph(d *Device) *Graph {
	g := &Graph{dev: d}
	if d == nil {
		g.err = fmt.Errorf("%w: NewGraph on a nil device", ErrInvalid)
	} else {
		d.track(g)
	}
	return g
}

// Device is the device the graph runs on.
func (g *Graph) Device() *Device { return g.dev }

// Len is the number of nodes.
func (g *Graph) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.nodes)
}

// Nodes returns the nodes in creation order.
func (g *Graph) Nodes() []*Node {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Node(nil), g.nodes...)
}

// Err is the first error recorded while building, or nil.
func (g *Graph) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Stats reports instantiations and launches.
func (g *Graph) Stats() GraphStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stats
}

// UseStreams makes Launch run the graph as operations on streams ordered by events instead of
// as one instantiated graph. The cuda backend falls back to this by itself when the driver lacks
// graph support; the option exists to compare the two (gpu/cuda/gpucheck). The sim backend
// schedules the same way either way.
func (g *Graph) UseStreams(on bool) *Graph {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.streams != on {
		g.streams = on
		g.version++
	}
	return g
}

func (g *Graph) add(o *op, err error, what string) *Node {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := &Node{g: g, idx: len(g.nodes), op: o}
	if o == nil {
		n.op = &op{}
	}
	g.nodes = append(g.nodes, n)
	g.version++
	if err == nil && o != nil && o.dev != g.dev {
		err = fmt.Errorf("%w: operation on device %d in a graph of device %d", ErrDevice, o.dev.ID(), g.dev.ID())
	}
	if err != nil && g.err == nil {
		g.err = fmt.Errorf("gpu: graph node %d (%s): %w", n.idx, what, err)
	}
	return n
}

// H2D adds a node that copies src to the first len(src) elements of dst.
// The graph keeps src (not a copy of it): each launch copies what src holds at that moment.
func H2D[T Elem](g *Graph, dst *Buffer[T], src []T) *Node {
	o, err := h2dOp(dst, src)
	return g.add(o, err, "h2d")
}

// D2H adds a node that copies the first len(dst) elements of src to dst.
func D2H[T Elem](g *Graph, dst []T, src *Buffer[T]) *Node {
	o, err := d2hOp(dst, src)
	return g.add(o, err, "d2h")
}

// D2D adds a node that copies all of src to the start of dst (dst must be at least as long).
func D2D[T Elem](g *Graph, dst, src *Buffer[T]) *Node {
	o, err := d2dOp(dst, src)
	return g.add(o, err, "d2d")
}

// Memset adds a node that sets every element of dst to v. 8-byte element types only allow v == 0
// (CUDA memsets are 1, 2 or 4 bytes wide).
func Memset[T Elem](g *Graph, dst *Buffer[T], v T) *Node {
	o, err := memsetOp(dst, v)
	return g.add(o, err, "memset")
}

// Kernel adds a kernel launch over grid blocks of block threads. args are checked now (see
// Kernel for the allowed types) and passed to every launch.
func (g *Graph) Kernel(k *Kernel, grid, block Dim3, args ...any) *Node {
	if g.dev == nil {
		return g.add(nil, fmt.Errorf("%w: nil device", ErrInvalid), "kernel")
	}
	o, err := kernelOp(g.dev, k, grid, block, args)
	return g.add(o, err, "kernel "+k.String())
}

// Capture adds a node whose work is whatever fn enqueues on the stream it is given: the way to
// put a library call that only takes a stream into a graph (Taskflow's cudaFlow capturer).
// fn is called once, when the graph is instantiated (on the goroutine that calls Launch), not on
// every launch: on sim its operations are recorded and replayed in order, on cuda the stream is
// in capture mode and the result becomes a child graph. Inside fn use only the given stream;
// Record, Wait and Synchronize on it fail with ErrCapture.
func (g *Graph) Capture(fn func(s *Stream) error) *Node {
	if fn == nil {
		return g.add(nil, fmt.Errorf("%w: nil capture function", ErrInvalid), "capture")
	}
	return g.add(&op{kind: KindCapture, dev: g.dev, capture: fn}, nil, "capture")
}

// Name sets the node's name (used by Dump and in errors) and returns the node.
func (n *Node) Name(name string) *Node {
	n.g.mu.Lock()
	n.name = name
	n.g.mu.Unlock()
	return n
}

// String is the node's name, or kind#index when it has none.
func (n *Node) String() string {
	n.g.mu.Lock()
	defer n.g.mu.Unlock()
	return n.label()
}

func (n *Node) label() string {
	if n.name != "" {
		return n.name
	}
	return fmt.Sprintf("%v#%d", n.op.kind, n.idx)
}

// Kind is what the node does.
func (n *Node) Kind() NodeKind { return n.op.kind }

// Precede makes n run before each of others and returns n.
func (n *Node) Precede(others ...*Node) *Node {
	for _, o := range others {
		n.g.edge(n, o)
	}
	return n
}

// Succeed makes n run after each of others and returns n.
func (n *Node) Succeed(others ...*Node) *Node {
	for _, o := range others {
		n.g.edge(o, n)
	}
	return n
}

func (g *Graph) edge(from, to *Node) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var err error
	switch {
	case from == nil || to == nil:
		err = fmt.Errorf("%w: precedence with a nil node", ErrInvalid)
	case from.g != to.g:
		err = fmt.Errorf("%w: precedence between nodes of different graphs (%s -> %s)", ErrInvalid, from.label(), to.label())
	case from == to:
		err = fmt.Errorf("%w: node %s precedes itself", ErrCycle, from.label())
	}
	if err != nil {
		if g.err == nil {
			g.err = fmt.Errorf("gpu: graph: %w", err)
		}
		return
	}
	for _, s := range from.succ {
		if s == to {
			return
		}
	}
	from.succ = append(from.succ, to)
	to.pred = append(to.pred, from)
	g.version++
}

// topo returns the nodes in a topological order (Kahn, stable in creation order).
// Called with g.mu held.
func (g *Graph) topo() ([]*Node, error) {
	indeg := make([]int, len(g.nodes))
	for _, n := range g.nodes {
		indeg[n.idx] = len(n.pred)
	}
	order := make([]*Node, 0, len(g.nodes))
	for _, n := range g.nodes {
		if indeg[n.idx] == 0 {
			order = append(order, n)
		}
	}
	for i := 0; i < len(order); i++ {
		for _, s := range order[i].succ {
			if indeg[s.idx]--; indeg[s.idx] == 0 {
				order = append(order, s)
			}
		}
	}
	if len(order) != len(g.nodes) {
		var in []string
		for _, n := range g.nodes {
			if indeg[n.idx] > 0 {
				in = append(in, n.label())
			}
		}
		return nil, fmt.Errorf("%w: nodes on or after a cycle: %s", ErrCycle, strings.Join(in, ", "))
	}
	return order, nil
}

// Launch runs the whole graph once and waits for it to finish. The first call instantiates the
// graph (and, for capture nodes, calls their functions); later calls replay that instance
// unless nodes or edges were added since. Call it from a goroutine bound to the graph's device
// (Device.Bind), as the executor's GPU workers are. A failing node (a kernel whose Go body
// panics, a freed buffer, ...) makes Launch return an error naming it; nodes that depend on it
// do not run.
func (g *Graph) Launch() error { return g.LaunchFrom(nil) }

// LaunchFrom is Launch by the host thread h (see Host): on the timed sim, the launch starts
// no earlier than h is free and h is blocked until it ends. A nil h is the calling
// goroutine's own Host. Other backends ignore h.
func (g *Graph) LaunchFrom(h *Host) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.host = h
	defer func() { g.host = nil }()
	if g.err != nil {
		return g.err
	}
	if g.released {
		return fmt.Errorf("%w: graph was released", ErrClosed)
	}
	if len(g.nodes) == 0 {
		return nil
	}
	if g.exec == nil || g.execVer != g.version {
		if g.exec != nil {
			g.exec.destroy()
			g.exec = nil
		}
		order, err := g.topo()
		if err != nil {
			return err
		}
		x, err := g.dev.instantiate(g, order)
		if err != nil {
			return fmt.Errorf("gpu: instantiate: %w", err)
		}
		g.exec, g.execVer = x, g.version
		g.stats.Instantiations++
	}
	g.stats.Launches++
	return g.exec.launch()
}

// Release frees what instantiation made (on cuda: the CUDA graph and its pinned host memory),
// and the device forgets the graph, so that nothing of it (host buffers its copies name
// included) outlives its user's last reference. The graph can still be launched afterwards
// only if it is rebuilt; Device.Close releases every graph of the device that is not released
// yet. Release is idempotent.
func (g *Graph) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.releaseLocked()
	if g.dev != nil {
		g.dev.untrack(g)
	}
}

func (g *Graph) releaseLocked() {
	if g.exec != nil {
		g.exec.destroy()
		g.exec = nil
	}
	g.released = true
}

// Dump writes the graph as DOT node and edge statements, without the digraph header, every
// node id prefixed with prefix; Taskflow.Dump embeds it as a cluster.
func (g *Graph) Dump(w io.Writer, prefix string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var b strings.Builder
	for _, n := range g.nodes {
		shape := "box"
		switch n.op.kind {
		case KindKernel:
			shape = "box3d"
		case KindH2D, KindD2H, KindD2D:
			shape = "cds"
		case KindCapture:
			shape = "folder"
		}
		fmt.Fprintf(&b, "%sn%d [label=%s, shape=%s];\n", prefix, n.idx, dotQuote(n.label()), shape)
	}
	for _, n := range g.nodes {
		for _, s := range n.succ {
			fmt.Fprintf(&b, "%sn%d -> %sn%d;\n", prefix, n.idx, prefix, s.idx)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// nodeError names the node in a launch failure.
func nodeError(n *Node, err error) error {
	var ne *NodeError
	if errors.As(err, &ne) {
		return err
	}
	return &NodeError{Node: n.label(), Kind: n.op.kind, Err: err}
}

// NodeError is a launch failure of one node; errors.Is sees through it to the sentinel.
type NodeError struct {
	Node string
	Kind NodeKind
	Err  error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("gpu: node %s (%v): %v", e.Node, e.Kind, e.Err)
}
func (e *NodeError) Unwrap() error { return e.Err }
