package localexec

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/hetflow/hetflow/gpu"
)

// Executor runs taskflows on a fixed set of worker goroutines grouped by
// domain: CPU workers, and GPU workers per device (each locked to an OS thread
// bound to its device). See scheduler.go for how workers find work and sleep.
type Executor struct {
	domains []*domain // [0] CPU, [1+d] GPU device d
	workers []*worker
	devices []*gpu.Device
	ownDevs bool // devices were opened by the executor and are closed by Close

	wg       sync.WaitGroup
	stopping atomic.Bool
	closed   atomic.Bool
	closeMu  sync.Mutex

	// inflight counts submitted runs and Async calls not yet finished
	// (WaitForAll waits for zero).
	inflight atomic.Int64
	idleMu   sync.Mutex
	idleCond *sync.Cond

	observers atomic.Pointer[[]Observer]
	openErr   error

	// joinResets and joinSkips count the iterations of runs of graphs with
	// join tasks that reset their join counters first, and that skipped
	// the pass (Stats.JoinResets).
	joinResets, joinSkips atomic.Uint64
}

type config struct {
	workers       int
	gpuPerDevice  int
	simGPUs       int // -1: HETFLOW_SIM_GPUS / backend default
	devices       []*gpu.Device
	observers     []Observer
	maxStealsMult int
	warmSucc      bool
}

// Option configures an Executor.
type Option func(*config)

// WithWorkers sets the number of CPU workers (default GOMAXPROCS).
func WithWorkers(n int) Option { return func(c *config) { c.workers = n } }

// WithGPUs sets the number of GPU devices the executor opens from the
// backend of this build (sim: that many simulated devices; cuda: at most
// that many real ones). The default (n < 0) is HETFLOW_SIM_GPUS, else the
// backend's default (one sim device; every CUDA device). 0 disables the GPU
// domain.
func WithGPUs(n int) Option { return func(c *config) { c.simGPUs = n } }

// WithDevices gives the executor devices opened by the caller (who closes
// them after the executor).
func WithDevices(devs ...*gpu.Device) Option { return func(c *config) { c.devices = devs } }

// WithGPUWorkers sets the number of GPU workers per device (default 1).
func WithGPUWorkers(n int) Option { return func(c *config) { c.gpuPerDevice = n } }

// WithObserver attaches an observer from the start.
func WithObserver(o Observer) Option { return func(c *config) { c.observers = append(c.observers, o) } }

// WithWarmSuccessors has each worker ask for the lines of a carried task's
// (EmplaceCarried) successors (the first few) before it calls the task's function, and for
// the first line of their closures after (and a successor's hinted lines:
// Task.Hint), so that the successors' lines,
// which the task's completion reads and counts into, and what the next
// task's function reads first arrive while the function runs rather than
// one after another after it (prefetches on amd64; nothing elsewhere). It
// pays where functions do some work and graphs outgrow the cache (the
// cluster node's wrapped tasks); for empty functions it is a few
// instructions more a task.
func WithWarmSuccessors() Option { return func(c *config) { c.warmSucc = true } }

// NewExecutor starts an executor. With no options it has GOMAXPROCS CPU
// workers and the GPU devices of WithGPUs' default. A
// device the backend cannot open makes every run fail with the reason (see
// Executor.Err), rather than a panic here.
func NewExecutor(opts ...Option) *Executor {
	c := config{workers: runtime.GOMAXPROCS(0), gpuPerDevice: 1, simGPUs: -1, maxStealsMult: 2}
	for _, o := range opts {
		o(&c)
	}
	if c.workers < 1 {
		c.workers = 1
	}
	if c.gpuPerDevice < 1 {
		c.gpuPerDevice = 1
	}
	ex := &Executor{}
	ex.idleCond = sync.NewCond(&ex.idleMu)
	if len(c.observers) > 0 {
		obs := append([]Observer(nil), c.observers...)
		ex.observers.Store(&obs)
	}

	ex.devices = c.devices
	if ex.devices == nil && c.simGPUs != 0 {
		devs, err := gpu.Open(c.simGPUs) // <0: HETFLOW_SIM_GPUS, or the backend's default
		if err != nil {
			ex.openErr = fmt.Errorf("localexec: opening GPU devices: %w", err)
		}
		ex.devices, ex.ownDevs = devs, true
	}

	cpu := &domain{index: 0, kind: domCPU, name: "cpu"}
	ex.domains = append(ex.domains, cpu)
	for i := 0; i < c.workers; i++ {
		ex.addWorker(cpu)
	}
	for i, d := range ex.devices {
		gd := &domain{index: 1 + i, kind: domGPU, device: d.ID(), name: "gpu" + strconv.Itoa(i)}
		ex.domains = append(ex.domains, gd)
		for j := 0; j < c.gpuPerDevice; j++ {
			ex.addWorker(gd)
		}
	}
	for _, d := range ex.domains {
		d.maxSteals = c.maxStealsMult * (len(d.workers) + 1)
	}
	for _, w := range ex.workers {
		w.warmSucc = c.warmSucc
	}
	for _, o := range c.observers {
		if s, ok := o.(interface{ SetUp(workers []WorkerInfo) }); ok {
			s.SetUp(ex.Workers())
		}
	}
	ex.wg.Add(len(ex.workers))
	for _, w := range ex.workers {
		go w.loop()
	}
	return ex
}

func (ex *Executor) addWorker(d *domain) {
	w := &worker{id: len(ex.workers), ex: ex, dom: d, parker: newParker(), host: gpu.NewHost()}
	w.rng = uint64(w.id)*0x9E3779B97F4A7C15 + 0x2545F4914F6CDD1D
	w.one.kind = kindSilent
	w.q.init(256)
	w.info = WorkerInfo{ID: w.id, Domain: d.name, Device: -1}
	if d.kind == domGPU {
		w.info.Device = d.device
	}
	d.workers = append(d.workers, w)
	ex.workers = append(ex.workers, w)
}

func (ex *Executor) bindDevice(w *worker) {
	dev := ex.devices[w.dom.index-1]
	if err := dev.Bind(); err != nil {
		// The worker still runs GPU tasks; their launches report the
		// error.
		w.info.BindErr = err
	}
}

// Err reports a problem found while starting the executor (a GPU backend
// that could not open its devices); runs of graphs with GPU tasks fail with
// it.
func (ex *Executor) Err() error { return ex.openErr }

// NumWorkers returns the number of workers of every domain together.
func (ex *Executor) NumWorkers() int { return len(ex.workers) }

// NumCPUWorkers returns the number of CPU workers.
func (ex *Executor) NumCPUWorkers() int { return len(ex.domains[0].workers) }

// Devices returns the GPU devices the executor runs GPU tasks on.
func (ex *Executor) Devices() []*gpu.Device { return ex.devices }

// Device returns GPU device i, or nil.
func (ex *Executor) Device(i int) *gpu.Device {
	if i < 0 || i >= len(ex.devices) {
		return nil
	}
	return ex.devices[i]
}

// Workers describes every worker.
func (ex *Executor) Workers() []WorkerInfo {
	out := make([]WorkerInfo, len(ex.workers))
	for i, w := range ex.workers {
		out[i] = w.info
	}
	return out
}

func (ex *Executor) domainOf(n *node) *domain {
	if n.kind == kindGPU {
		return ex.domains[1+int(n.ext.device)]
	}
	return ex.domains[0]
}

// submit makes n visible from outside any worker.
func (ex *Executor) submit(n *node) {
	d := ex.domainOf(n)
	d.shared.push(n)
	d.wake(nil)
}

// submitNodes makes ns visible from outside any worker: each stretch of
// tasks of one domain is pushed under one lock, with one wake-up.
func (ex *Executor) submitNodes(ns []*node) {
	for i := 0; i < len(ns); {
		d := ex.domainOf(ns[i])
		j := i + 1
		for j < len(ns) && ex.domainOf(ns[j]) == d {
			j++
		}
		d.shared.mu.Lock()
		for _, n := range ns[i:j] {
			d.shared.pushLocked(n)
		}
		d.shared.mu.Unlock()
		d.wake(nil)
		i = j
	}
}

func (ex *Executor) begin() {
	ex.inflight.Add(1)
}

func (ex *Executor) end() { ex.endN(1) }

// endN ends k submissions at once (a worker's owed SilentAsync calls).
func (ex *Executor) endN(k int64) {
	if ex.inflight.Add(-k) == 0 {
		ex.idleMu.Lock()
		ex.idleCond.Broadcast()
		ex.idleMu.Unlock()
	}
}

// WaitForAll blocks until every run and Async call submitted so far has
// finished.
func (ex *Executor) WaitForAll() {
	ex.idleMu.Lock()
	for ex.inflight.Load() != 0 {
		ex.idleCond.Wait()
	}
	ex.idleMu.Unlock()
}

// Close waits for the work in flight, then stops every worker and returns
// when their goroutines have exited. Work submitted after Close fails with
// ErrClosed. Close is idempotent.
func (ex *Executor) Close() error {
	ex.closeMu.Lock()
	defer ex.closeMu.Unlock()
	if ex.stopping.Load() {
		return nil
	}
	ex.closed.Store(true)
	ex.WaitForAll()
	ex.stopping.Store(true)
	for _, d := range ex.domains {
		d.notifier.notifyAll()
	}
	ex.wg.Wait()
	if ex.ownDevs {
		for _, d := range ex.devices {
			_ = d.Close()
		}
	}
	return nil
}

// Run runs tf once. Runs of one taskflow queue and run in submission order.
func (ex *Executor) Run(tf *Taskflow) *Future { return ex.runN(tf, 1, nil) }

// RunN runs tf n times in a row.
func (ex *Executor) RunN(tf *Taskflow, n int) *Future { return ex.runN(tf, n, nil) }

// RunUntil runs tf repeatedly until pred returns true; pred is checked
// before each run (so a pred that is true at once runs nothing).
func (ex *Executor) RunUntil(tf *Taskflow, pred func() bool) *Future {
	return ex.runN(tf, -1, pred)
}

func (ex *Executor) runN(tf *Taskflow, n int, pred func() bool) *Future {
	if ex.closed.Load() {
		return doneFuture(ErrClosed)
	}
	if err := ex.check(tf); err != nil {
		return doneFuture(err)
	}
	if n == 0 || tf.graph.empty() && pred == nil {
		return doneFuture(nil)
	}
	t := newTopology(ex, tf, n, pred)
	ex.begin()
	tf.mu.Lock()
	if tf.running {
		tf.queue = append(tf.queue, t)
		tf.mu.Unlock()
		return t.future
	}
	tf.running = true
	tf.mu.Unlock()
	ex.submit(&t.starter)
	return t.future
}

// Async runs fn on a CPU worker. Cancel before it starts keeps it from
// running; a panic in fn comes back from Wait as a *PanicError.
func (ex *Executor) Async(fn func()) *Future {
	if ex.closed.Load() {
		return doneFuture(ErrClosed)
	}
	a := newAsync(fn)
	ex.begin()
	ex.submit(&a.n)
	return &a.f
}

// DependentAsync runs fn on a CPU worker once every future in after has
// finished: Taskflow's dependent async. The futures may be those of Async
// or DependentAsync calls, or of runs; nil and zero futures count as
// finished. fn runs whatever their outcome (a dependency orders, it does
// not propagate failure): fn may read their errors with Wait, which returns
// at once. The returned future is like Async's: Cancel before fn starts
// keeps it from running (its own dependents then start), a panic comes back
// as a *PanicError, and WaitForAll and Close wait for it.
func (ex *Executor) DependentAsync(fn func(), after ...*Future) *Future {
	if ex.closed.Load() {
		return doneFuture(ErrClosed)
	}
	a := newAsync(fn)
	a.ex = ex
	a.deps.Store(1)
	ex.begin()
	for _, f := range after {
		if f == nil {
			continue
		}
		a.deps.Add(1)
		if !f.after(a) {
			a.deps.Add(-1)
		}
	}
	a.depDone()
	return &a.f
}

// AddObserver attaches o to every worker; it sees the tasks that start after
// the call.
func (ex *Executor) AddObserver(o Observer) {
	if s, ok := o.(interface{ SetUp(workers []WorkerInfo) }); ok {
		s.SetUp(ex.Workers())
	}
	for {
		old := ex.observers.Load()
		var next []Observer
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, o)
		if ex.observers.CompareAndSwap(old, &next) {
			return
		}
	}
}

// RemoveObserver detaches o.
func (ex *Executor) RemoveObserver(o Observer) {
	for {
		old := ex.observers.Load()
		if old == nil {
			return
		}
		var next []Observer
		for _, x := range *old {
			if x != o {
				next = append(next, x)
			}
		}
		p := &next
		if len(next) == 0 {
			p = nil
		}
		if ex.observers.CompareAndSwap(old, p) {
			return
		}
	}
}

// SilentAsync runs fn on a CPU worker, like Async, but returns no Future:
// Taskflow's silent_async. The call allocates nothing (the worker that
// takes a run of calls at once makes one batch of them), where Async makes
// a task and a Future. WaitForAll and Close wait for it. A
// panic in fn is recovered, so the worker lives on, and not reported: use
// Async when the outcome matters. After Close it does nothing.
func (ex *Executor) SilentAsync(fn func()) {
	if ex.closed.Load() {
		return
	}
	ex.begin()
	d := ex.domains[domCPU]
	d.shared.pushFunc(fn)
	d.wake(nil)
}
