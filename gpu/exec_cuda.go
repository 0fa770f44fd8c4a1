//go:build cuda

package gpu

/*
#cgo LDFLAGS: -lcuda
#cgo linux LDFLAGS: -L/usr/local/cuda/lib64 -L/usr/local/cuda/lib64/stubs
#cgo linux CFLAGS: -I/usr/local/cuda/include
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

// CUDA graph calls gorgonia.org/cu lacks (instantiate, launch, stream capture, kernel nodes
// with arguments). Nodes are added without dependencies; edges are added in one call after.

static CUresult hf_graph_create(CUgraph *g) { return cuGraphCreate(g, 0); }
static CUresult hf_graph_destroy(CUgraph g) { return cuGraphDestroy(g); }

// kind: 0 host->device, 1 device->host, 2 device->device
static CUresult hf_add_memcpy(CUgraph g, CUgraphNode *out, int kind, CUdeviceptr dst,
		CUdeviceptr src, void *host, size_t bytes) {
	CUDA_MEMCPY3D p;
	CUcontext ctx;
	CUresult r = cuCtxGetCurrent(&ctx);
	if (r != CUDA_SUCCESS) return r;
	memset(&p, 0, sizeof p);
	switch (kind) {
	case 0:
		p.srcMemoryType = CU_MEMORYTYPE_HOST; p.srcHost = host;
		p.dstMemoryType = CU_MEMORYTYPE_DEVICE; p.dstDevice = dst;
		break;
	case 1:
		p.srcMemoryType = CU_MEMORYTYPE_DEVICE; p.srcDevice = src;
		p.dstMemoryType = CU_MEMORYTYPE_HOST; p.dstHost = host;
		break;
	default:
		p.srcMemoryType = CU_MEMORYTYPE_DEVICE; p.srcDevice = src;
		p.dstMemoryType = CU_MEMORYTYPE_DEVICE; p.dstDevice = dst;
	}
	p.WidthInBytes = bytes;
	p.Height = 1;
	p.Depth = 1;
	return cuGraphAddMemcpyNode(out, g, NULL, 0, &p, ctx);
}

static CUresult hf_add_memset(CUgraph g, CUgraphNode *out, CUdeviceptr dst, unsigned int value,
		unsigned int elemSize, size_t count) {
	CUDA_MEMSET_NODE_PARAMS p;
	CUcontext ctx;
	CUresult r = cuCtxGetCurrent(&ctx);
	if (r != CUDA_SUCCESS) return r;
	memset(&p, 0, sizeof p);
	p.dst = dst;
	p.pitch = 0;
	p.value = value;
	p.elementSize = elemSize;
	p.width = count;
	p.height = 1;
	return cuGraphAddMemsetNode(out, g, NULL, 0, &p, ctx);
}

// vals holds one 8-byte slot per argument; the node copies the values.
static CUresult hf_add_kernel(CUgraph g, CUgraphNode *out, CUfunction f,
		unsigned int gx, unsigned int gy, unsigned int gz,
		unsigned int bx, unsigned int by, unsigned int bz,
		unsigned long long *vals, int nargs) {
	void *params[32];
	CUDA_KERNEL_NODE_PARAMS p;
	int i;
	if (nargs > 32) return CUDA_ERROR_INVALID_VALUE;
	for (i = 0; i < nargs; i++) params[i] = &vals[i];
	memset(&p, 0, sizeof p);
	p.func = f;
	p.gridDimX = gx; p.gridDimY = gy; p.gridDimZ = gz;
	p.blockDimX = bx; p.blockDimY = by; p.blockDimZ = bz;
	p.sharedMemBytes = 0;
	p.kernelParams = nargs > 0 ? params : NULL;
	p.extra = NULL;
	return cuGraphAddKernelNode(out, g, NULL, 0, &p);
}

static CUresult hf_capture_begin(CUstream s) {
	return cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
}
static CUresult hf_capture_end(CUstream s, CUgraph *g) { return cuStreamEndCapture(s, g); }

static CUresult hf_add_child(CUgraph g, CUgraphNode *out, CUgraph child) {
	return cuGraphAddChildGraphNode(out, g, NULL, 0, child);
}

static CUresult hf_add_edges(CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t n) {
	if (n == 0) return CUDA_SUCCESS;
	return cuGraphAddDependencies(g, from, to, n);
}

static CUresult hf_instantiate(CUgraphExec *x, CUgraph g) {
	return cuGraphInstantiateWithFlags(x, g, 0);
}
static CUresult hf_exec_destroy(CUgraphExec x) { return cuGraphExecDestroy(x); }
static CUresult hf_launch(CUgraphExec x, CUstream s) { return cuGraphLaunch(x, s); }
static const char *hf_error_name(CUresult r) {
	const char *s = NULL;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_UNKNOWN";
	return s;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"
)

// cu.Function and cu.Stream wrap one driver handle each; the graph code needs the raw
// handles. These fail to compile if cu's layout ever changes.
var (
	_ = [1]struct{}{}[unsafe.Sizeof(cu.Function{})-unsafe.Sizeof(uintptr(0))]
	_ = [1]struct{}{}[unsafe.Sizeof(cu.Stream{})-unsafe.Sizeof(uintptr(0))]
)

func rawFunction(f cu.Function) C.CUfunction { return *(*C.CUfunction)(unsafe.Pointer(&f)) }
func rawStream(s cu.Stream) C.CUstream       { return C.CUstream(unsafe.Pointer(s.C())) }

// driverError is a failed driver call of our own cgo; errors.Is(err, ErrBackend) holds.
type driverError struct {
	what string
	code C.CUresult
}

func (e *driverError) Error() string {
	return fmt.Sprintf("gpu: %s: %s (%d)", e.what, C.GoString(C.hf_error_name(e.code)), int(e.code))
}
func (e *driverError) Unwrap() error { return ErrBackend }

func curesult(what string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return &driverError{what: what, code: r}
}

// graphExec is an instantiated graph on cuda: a CUDA graph exec launched on its own stream,
// or, without graph support (or with Graph.UseStreams), a plan that runs the nodes on a few
// streams ordered by events.
type graphExec struct {
	d      *Device
	order  []*Node
	stream cu.Stream
	pin    runtime.Pinner // host memory the instance refers to
	rec    [][]*op        // per node index: operations a capture enqueued
	graph  C.CUgraph
	exec   C.CUgraphExec
	// streams fallback
	plan *streamPlan
}

// maxPlanStreams is how many streams the fallback spreads parallel branches over.
const maxPlanStreams = 4

type streamPlan struct {
	streams  []cu.Stream
	events   []cu.Event // by node index; zero when no other stream waits on it
	streamOf []int
	waits    [][]int // by node index: predecessors on other streams
	pins     runtime.Pinner
}

func (d *Device) instantiate(g *Graph, order []*Node) (*graphExec, error) {
	d.mu.Lock()
	err := d.checkOpen("Launch")
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	x := &graphExec{d: d, order: order, rec: make([][]*op, len(g.nodes))}
	err = d.do(func() error {
		var err error
		if x.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
			return fmt.Errorf("%w: cuStreamCreate: %v", ErrBackend, err)
		}
		if !g.streams {
			err = x.buildGraph(g)
			if err == nil || !isNotSupported(err) {
				return err
			}
			x.destroyGraph()
		}
		return x.buildPlan(g)
	})
	if err != nil {
		x.destroy()
		return nil, err
	}
	return x, nil
}

// isNotSupported: the driver has no graph support (or cannot capture here): fall back.
func isNotSupported(err error) bool {
	var de *driverError
	return errors.As(err, &de) && (de.code == C.CUDA_ERROR_NOT_SUPPORTED || de.code == C.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
}

// buildGraph makes one CUDA graph of all nodes and instantiates it. Inside d.do.
func (x *graphExec) buildGraph(g *Graph) error {
	if err := curesult("cuGraphCreate", C.hf_graph_create(&x.graph)); err != nil {
		return err
	}
	cn := make([]C.CUgraphNode, len(g.nodes))
	for _, n := range x.order {
		if err := x.addNode(n, &cn[n.idx]); err != nil {
			return nodeError(n, err)
		}
	}
	var from, to []C.CUgraphNode
	for _, n := range g.nodes {
		for _, s := range n.succ {
			from = append(from, cn[n.idx])
			to = append(to, cn[s.idx])
		}
	}
	if len(from) > 0 {
		if err := curesult("cuGraphAddDependencies", C.hf_add_edges(x.graph, &from[0], &to[0], C.size_t(len(from)))); err != nil {
			return err
		}
	}
	return curesult("cuGraphInstantiateWithFlags", C.hf_instantiate(&x.exec, x.graph))
}

func (x *graphExec) addNode(n *Node, out *C.CUgraphNode) error {
	o := n.op
	if err := o.checkLive(); err != nil {
		return err
	}
	switch o.kind {
	case KindH2D:
		x.pin.Pin(o.host)
		return curesult("cuGraphAddMemcpyNode", C.hf_add_memcpy(x.graph, out, 0, C.CUdeviceptr(o.dst.ptr()), 0, o.host, C.size_t(o.bytes)))
	case KindD2H:
		x.pin.Pin(o.host)
		return curesult("cuGraphAddMemcpyNode", C.hf_add_memcpy(x.graph, out, 1, 0, C.CUdeviceptr(o.src.ptr()), o.host, C.size_t(o.bytes)))
	case KindD2D:
		return curesult("cuGraphAddMemcpyNode", C.hf_add_memcpy(x.graph, out, 2, C.CUdeviceptr(o.dst.ptr()), C.CUdeviceptr(o.src.ptr()), nil, C.size_t(o.bytes)))
	case KindMemset:
		return curesult("cuGraphAddMemsetNode", C.hf_add_memset(x.graph, out, C.CUdeviceptr(o.dst.ptr()), C.uint(o.pattern), C.uint(o.width), C.size_t(o.count)))
	case KindKernel:
		f, err := x.d.function(o.k)
		if err != nil {
			return err
		}
		vals, err := kernelArgBits(o.args)
		if err != nil {
			return err
		}
		cvals := (*C.ulonglong)(C.malloc(C.size_t(8 * max(1, len(vals)))))
		defer C.free(unsafe.Pointer(cvals))
		copy(unsafe.Slice((*uint64)(unsafe.Pointer(cvals)), len(vals)), vals)
		return curesult("cuGraphAddKernelNode "+o.k.Name, C.hf_add_kernel(x.graph, out, rawFunction(f),
			C.uint(o.grid.X), C.uint(o.grid.Y), C.uint(o.grid.Z),
			C.uint(o.block.X), C.uint(o.block.Y), C.uint(o.block.Z), cvals, C.int(len(vals))))
	case KindCapture:
		var rec []*op
		s := &Stream{dev: x.d, s: x.stream, pin: &x.pin, restricted: true, rec: &rec}
		cs := rawStream(x.stream)
		if err := curesult("cuStreamBeginCapture", C.hf_capture_begin(cs)); err != nil {
			return err
		}
		ferr := callCapture(o.capture, s)
		var child C.CUgraph
		eerr := curesult("cuStreamEndCapture", C.hf_capture_end(cs, &child))
		if child != nil {
			defer C.hf_graph_destroy(child)
		}
		if ferr != nil {
			return fmt.Errorf("%w: %w", ErrCapture, ferr)
		}
		if eerr != nil {
			return fmt.Errorf("%w: %w", ErrCapture, eerr)
		}
		x.rec[n.idx] = rec
		return curesult("cuGraphAddChildGraphNode", C.hf_add_child(x.graph, out, child))
	}
	return fmt.Errorf("%w: node kind %v", ErrInvalid, o.kind)
}

// buildPlan assigns nodes to streams: a node continues the stream of a predecessor that is
// still that stream's last node, else takes the next stream round robin; each edge between
// streams becomes an event record and wait. Inside d.do.
func (x *graphExec) buildPlan(g *Graph) error {
	p := &streamPlan{
		events:   make([]cu.Event, len(g.nodes)),
		streamOf: make([]int, len(g.nodes)),
		waits:    make([][]int, len(g.nodes)),
	}
	x.plan = p
	ns := min(maxPlanStreams, len(g.nodes))
	p.streams = append(p.streams, x.stream)
	for len(p.streams) < ns {
		s, err := cu.MakeStream(cu.NonBlocking)
		if err != nil {
			return fmt.Errorf("%w: cuStreamCreate: %v", ErrBackend, err)
		}
		p.streams = append(p.streams, s)
	}
	tail := make([]int, ns)
	for i := range tail {
		tail[i] = -1
	}
	next := 0
	for _, n := range x.order {
		chosen := -1
		for _, pr := range n.pred {
			if s := p.streamOf[pr.idx]; tail[s] == pr.idx {
				chosen = s
				break
			}
		}
		if chosen < 0 {
			chosen = next % ns
			next++
		}
		p.streamOf[n.idx], tail[chosen] = chosen, n.idx
		for _, pr := range n.pred {
			if p.streamOf[pr.idx] == chosen {
				continue
			}
			p.waits[n.idx] = append(p.waits[n.idx], pr.idx)
			if (p.events[pr.idx] == cu.Event{}) {
				ev, err := cu.MakeEvent(cu.DisableTiming)
				if err != nil {
					return fmt.Errorf("%w: cuEventCreate: %v", ErrBackend, err)
				}
				p.events[pr.idx] = ev
			}
		}
	}
	return nil
}

func (x *graphExec) launch() error {
	return x.d.do(func() error {
		if x.plan != nil {
			return x.launchStreams()
		}
		for _, n := range x.order { // a freed buffer would fault the context: refuse first
			if err := n.op.checkLive(); err != nil {
				return nodeError(n, err)
			}
			for _, o := range x.rec[n.idx] {
				if err := o.checkLive(); err != nil {
					return nodeError(n, err)
				}
			}
		}
		if err := curesult("cuGraphLaunch", C.hf_launch(x.exec, rawStream(x.stream))); err != nil {
			return err
		}
		if err := x.stream.Synchronize(); err != nil {
			return fmt.Errorf("%w: CUDA graph of %d nodes failed (use Graph.UseStreams(true) to find the node): %v", ErrKernel, len(x.order), err)
		}
		return nil
	})
}

// launchStreams runs the plan. Capture nodes call their function on their stream at every
// launch (there is no graph to keep what they enqueued). Inside d.do.
func (x *graphExec) launchStreams() error {
	p := x.plan
	defer p.pins.Unpin()
	var first error
	for _, n := range x.order {
		st := p.streams[p.streamOf[n.idx]]
		for _, w := range p.waits[n.idx] {
			if err := st.Wait(p.events[w], 0); err != nil {
				first = fmt.Errorf("%w: cuStreamWaitEvent: %v", ErrBackend, err)
				break
			}
		}
		if first != nil {
			break
		}
		var err error
		if n.op.kind == KindCapture {
			s := &Stream{dev: x.d, s: st, pin: &p.pins, restricted: true}
			err = callCapture(n.op.capture, s)
			if err != nil {
				err = fmt.Errorf("%w: %w", ErrCapture, err)
			}
		} else {
			err = x.d.enqueue(n.op, st, &p.pins)
		}
		if err != nil {
			first = nodeError(n, err)
			break
		}
		if ev := p.events[n.idx]; ev != (cu.Event{}) {
			if err := ev.Record(st); err != nil {
				first = fmt.Errorf("%w: cuEventRecord: %v", ErrBackend, err)
				break
			}
		}
	}
	for _, st := range p.streams {
		if err := st.Synchronize(); err != nil && first == nil {
			first = fmt.Errorf("%w: stream launch of %d nodes: %v", ErrKernel, len(x.order), err)
		}
	}
	return first
}

func (x *graphExec) destroyGraph() {
	if x.exec != nil {
		C.hf_exec_destroy(x.exec)
		x.exec = nil
	}
	if x.graph != nil {
		C.hf_graph_destroy(x.graph)
		x.graph = nil
	}
}

func (x *graphExec) destroy() {
	x.d.do(func() error {
		if x.stream != (cu.Stream{}) {
			x.stream.Synchronize()
		}
		x.destroyGraph()
		if p := x.plan; p != nil {
			for i := range p.events {
				if p.events[i] != (cu.Event{}) {
					cu.DestroyEvent(&p.events[i])
				}
			}
			for i := 1; i < len(p.streams); i++ {
				p.streams[i].Destroy()
			}
			p.pins.Unpin()
		}
		if x.stream != (cu.Stream{}) {
			x.stream.Destroy()
		}
		return nil
	})
	x.pin.Unpin()
}
