//go:build !cuda

package gpu

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// graphExec is an instantiated graph on sim: successor lists and join counts by node index,
// the operations recorded by capture nodes, and the state of the launch in progress (launches
// of one graph are serialised by Graph.mu, so one state is reused).
type graphExec struct {
	g        *Graph
	d        *Device
	nodes    []*Node
	ops      []*op
	recorded [][]*op
	succ     [][]int32
	joins    []int32
	sources  []task

	pending   []atomic.Int32
	remaining atomic.Int32
	failed    atomic.Bool
	errMu     sync.Mutex
	err       error
	done      chan struct{}

	// timed sim only: each node's ready time (the latest end of its predecessors so far), in
	// the model (ns since the clock's origin)
	readyAt []atomic.Int64
	order   []int32 // a topological order: the timed sim runs the nodes in it, inline
}

type task struct {
	x *graphExec
	i int32
}

func (d *Device) instantiate(g *Graph, order []*Node) (*graphExec, error) {
	if err := d.Bind(); err != nil {
		return nil, err
	}
	n := len(g.nodes)
	x := &graphExec{
		g:        g,
		d:        d,
		nodes:    g.nodes,
		ops:      make([]*op, n),
		recorded: make([][]*op, n),
		succ:     make([][]int32, n),
		joins:    make([]int32, n),
		pending:  make([]atomic.Int32, n),
		done:     make(chan struct{}, 1),
	}
	if d.tm != nil {
		x.readyAt = make([]atomic.Int64, n)
		for _, nd := range order {
			x.order = append(x.order, int32(nd.idx))
		}
	}
	for _, nd := range g.nodes {
		x.ops[nd.idx] = nd.op
		x.joins[nd.idx] = int32(len(nd.pred))
		s := make([]int32, len(nd.succ))
		for j, t := range nd.succ {
			s[j] = int32(t.idx)
		}
		x.succ[nd.idx] = s
		if len(nd.pred) == 0 {
			x.sources = append(x.sources, task{x, int32(nd.idx)})
		}
	}
	for _, nd := range order { // captures run in a topological order, once
		if nd.op.kind != KindCapture {
			continue
		}
		var rec []*op
		s := &Stream{dev: d, rec: &rec}
		if err := callCapture(nd.op.capture, s); err != nil {
			return nil, nodeError(nd, fmt.Errorf("%w: %w", ErrCapture, err))
		}
		x.recorded[nd.idx] = rec
	}
	return x, nil
}

func (x *graphExec) destroy() {}

func (x *graphExec) launch() error {
	for i := range x.pending {
		x.pending[i].Store(x.joins[i])
	}
	x.remaining.Store(int32(len(x.ops)))
	x.failed.Store(false)
	x.err = nil
	if tm := x.d.tm; tm != nil {
		return x.launchTimed(tm)
	}
	if err := x.d.push(x.sources); err != nil {
		return err
	}
	<-x.done
	x.errMu.Lock()
	defer x.errMu.Unlock()
	return x.err
}

// launchTimed runs the launch on the timed sim: the nodes one after another in a topological
// order on the calling goroutine (the engines' timelines model what runs in parallel, so the
// hand-offs to engine goroutines would only add CPU time), then waits for the model's end.
func (x *graphExec) launchTimed(tm *simTiming) error {
	x.d.smu.Lock()
	closed := x.d.sclosed
	x.d.smu.Unlock()
	if closed {
		return fmt.Errorf("%w: launch on device %d", ErrClosed, x.d.id)
	}
	h := x.g.host
	if h == nil {
		h = tm.w.host()
	}
	at := int64(tm.submitAt(h))
	for i := range x.readyAt {
		x.readyAt[i].Store(at)
	}
	end := at
	for _, i := range x.order {
		e := x.readyAt[i].Load()
		if !x.failed.Load() {
			t, err := x.d.execTimed(x.ops[i], x.recorded[i], time.Duration(e))
			if err != nil {
				x.fail(i, err)
			}
			e = int64(t)
		}
		end = max(end, e)
		for _, s := range x.succ[i] {
			atomicMax(&x.readyAt[s], e)
		}
	}
	tm.hostWait(h, time.Duration(end))
	x.errMu.Lock()
	defer x.errMu.Unlock()
	return x.err
}

func atomicMax(a *atomic.Int64, v int64) {
	for {
		o := a.Load()
		if v <= o || a.CompareAndSwap(o, v) {
			return
		}
	}
}

func (x *graphExec) fail(i int32, err error) {
	x.errMu.Lock()
	if x.err == nil {
		x.err = nodeError(x.nodes[i], err)
	}
	x.errMu.Unlock()
	x.failed.Store(true)
}

// run executes node i and then, on this engine, one successor it made ready (the others go to
// the device's run queue for other engines): a chain costs no hand-offs.
func (x *graphExec) run(i int32) {
	for {
		if !x.failed.Load() {
			if err := x.d.exec(x.ops[i], x.recorded[i]); err != nil {
				x.fail(i, err)
			}
		}
		next := int32(-1)
		for _, s := range x.succ[i] {
			if x.pending[s].Add(-1) == 0 {
				if next < 0 {
					next = s
				} else {
					x.d.pushInternal(task{x, s})
				}
			}
		}
		if x.remaining.Add(-1) == 0 {
			x.done <- struct{}{}
		}
		if next < 0 {
			return
		}
		i = next
	}
}

// push queues the sources of a launch; it fails once the device is closing.
func (d *Device) push(ts []task) error {
	d.smu.Lock()
	defer d.smu.Unlock()
	if d.sclosed {
		return fmt.Errorf("%w: launch on device %d", ErrClosed, d.id)
	}
	d.runq = append(d.runq, ts...)
	if len(ts) == 1 {
		d.scond.Signal()
	} else {
		d.scond.Broadcast()
	}
	return nil
}

// pushInternal queues a node made ready by a running node. It never fails: engines drain the
// queue before they exit, so a launch in flight always completes.
func (d *Device) pushInternal(t task) {
	d.smu.Lock()
	d.runq = append(d.runq, t)
	d.scond.Signal()
	d.smu.Unlock()
}

// engine is one of the device's graph-execution goroutines (owner: the device; stop: Close;
// join: Close waits on d.wg).
func (d *Device) engine() {
	defer d.wg.Done()
	d.smu.Lock()
	for {
		for len(d.runq) == 0 && !d.sclosed {
			d.scond.Wait()
		}
		if len(d.runq) == 0 {
			d.smu.Unlock()
			return
		}
		t := d.runq[len(d.runq)-1]
		d.runq = d.runq[:len(d.runq)-1]
		d.smu.Unlock()
		t.x.run(t.i)
		d.smu.Lock()
	}
}

// exec runs one operation on the calling device goroutine.
func (d *Device) exec(o *op, rec []*op) error {
	switch o.kind {
	case KindKernel:
		return runKernel(o)
	case KindCapture:
		for j, c := range rec {
			if err := d.exec(c, nil); err != nil {
				return fmt.Errorf("captured operation %d (%v): %w", j, c, err)
			}
		}
		return nil
	case KindH2D:
		return guard(func() { copy(bytesOf(o.dst), hostBytes(o.host, o.bytes)) })
	case KindD2H:
		return guard(func() { copy(hostBytes(o.host, o.bytes), bytesOf(o.src)) })
	case KindD2D:
		return guard(func() { copy(bytesOf(o.dst), bytesOf(o.src)) })
	case KindMemset:
		return guard(func() { fill(bytesOf(o.dst), o.width, o.count, o.pattern) })
	}
	return fmt.Errorf("%w: operation kind %v", ErrInvalid, o.kind)
}

func fill(b []byte, width, count int, pattern uint32) {
	p := unsafe.Pointer(unsafe.SliceData(b))
	switch width {
	case 1:
		s := b[:count]
		for i := range s {
			s[i] = byte(pattern)
		}
	case 2:
		s := unsafe.Slice((*uint16)(p), count)
		for i := range s {
			s[i] = uint16(pattern)
		}
	case 4:
		s := unsafe.Slice((*uint32)(p), count)
		for i := range s {
			s[i] = pattern
		}
	}
}

func runKernel(o *op) (err error) {
	blk := &Block{Dim: o.block, Grid: o.grid, dev: o.dev}
	defer func() {
		if v := recover(); v != nil {
			if e, ok := v.(error); ok {
				err = fmt.Errorf("%w: %s, block %v: %w", ErrKernel, o.k.Name, blk.Idx, e)
			} else {
				err = fmt.Errorf("%w: %s, block %v: %v", ErrKernel, o.k.Name, blk.Idx, v)
			}
		}
	}()
	body := o.k.Go
	for z := 0; z < o.grid.Z; z++ {
		for y := 0; y < o.grid.Y; y++ {
			for x := 0; x < o.grid.X; x++ {
				blk.Idx = Dim3{x, y, z}
				body(blk, o.args)
			}
		}
	}
	return nil
}
