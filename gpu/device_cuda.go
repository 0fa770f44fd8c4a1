//go:build cuda

package gpu

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"gorgonia.org/cu"
)

// Backend is the backend this build uses: "cuda" here, "sim" in default builds.
func Backend() string { return "cuda" }

// Device is one CUDA device, driven through its primary context.
type Device struct {
	id  int
	dev cu.Device
	ctx cu.CUContext

	mu      sync.Mutex
	closed  bool
	allocs  map[*allocation]struct{}
	used    int64
	graphs  map[*Graph]struct{} // made here and not released (see track)
	streams map[*Stream]struct{}
	events  map[*Event]struct{}
	funcs   map[*Kernel]cu.Function
	mods    []cu.Module
}

// Open returns the CUDA devices: all of them for n < 0, at most n otherwise. Note that
// gorgonia.org/cu initialises the driver when the program starts and exits the process if
// that fails, so a cuda build needs a working driver even to report zero devices.
func Open(n int) ([]*Device, error) {
	count, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("%w: cuDeviceGetCount: %v", ErrBackend, err)
	}
	if n >= 0 && n < count {
		count = n
	}
	devs := make([]*Device, 0, count)
	for i := range count {
		cd, err := cu.GetDevice(i)
		if err == nil {
			var ctx cu.CUContext
			if ctx, err = cd.RetainPrimaryCtx(); err == nil {
				devs = append(devs, &Device{
					id: i, dev: cd, ctx: ctx,
					allocs:  map[*allocation]struct{}{},
					streams: map[*Stream]struct{}{},
					events:  map[*Event]struct{}{},
					funcs:   map[*Kernel]cu.Function{},
				})
				continue
			}
		}
		for _, d := range devs {
			d.Close()
		}
		return nil, fmt.Errorf("%w: device %d: %v", ErrBackend, i, err)
	}
	return devs, nil
}

// ID is the device's ordinal (-1 for a nil device).
func (d *Device) ID() int {
	if d == nil {
		return -1
	}
	return d.id
}

func (d *Device) String() string { return fmt.Sprintf("cuda:%d", d.ID()) }

// Bind makes d's context current on the calling OS thread. Call it after runtime.LockOSThread.
func (d *Device) Bind() error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: device %d", ErrClosed, d.id)
	}
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		return fmt.Errorf("%w: cuCtxSetCurrent on device %d: %v", ErrBackend, d.id, err)
	}
	return nil
}

// do runs f on a locked OS thread with d's context current, restoring the thread's previous
// context after: safe from any goroutine, and on a GPU worker bound to another device.
func (d *Device) do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := cu.CurrentContext()
	if err != nil {
		return fmt.Errorf("%w: cuCtxGetCurrent: %v", ErrBackend, err)
	}
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		return fmt.Errorf("%w: cuCtxSetCurrent on device %d: %v", ErrBackend, d.id, err)
	}
	defer cu.SetCurrentContext(prev)
	return f()
}

func (d *Device) checkOpen(what string) error {
	if d.closed {
		return fmt.Errorf("%w: %s on device %d", ErrClosed, what, d.id)
	}
	return nil
}

// MemUsed is the number of bytes currently allocated through this package on the device.
func (d *Device) MemUsed() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used
}

// Close waits for launches in flight, releases graphs, streams, events, modules and memory,
// and releases the primary context. Idempotent.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	graphs := d.graphs
	d.graphs = nil
	d.mu.Unlock()
	for g := range graphs {
		g.Release()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = fmt.Errorf("%w: Close of device %d: %v", ErrBackend, d.id, err)
		}
	}
	keep(d.do(func() error {
		for s := range d.streams {
			keep(s.s.Synchronize())
			keep(s.s.Destroy())
			s.pin.Unpin()
		}
		for e := range d.events {
			keep(cu.DestroyEvent(&e.e))
		}
		for a := range d.allocs {
			a.freed.Store(true)
			keep(cu.MemFree(a.m.ptr))
		}
		for _, m := range d.mods {
			keep(m.Unload())
		}
		return nil
	}))
	d.streams, d.events, d.allocs, d.mods, d.funcs, d.used = nil, nil, nil, nil, nil, 0
	keep(d.dev.ReleasePrimaryCtx())
	return first
}

// devMem is a device allocation.
type devMem struct{ ptr cu.DevicePtr }

func (r region) ptr() cu.DevicePtr { return r.a.m.ptr + cu.DevicePtr(r.off) }

func (d *Device) alloc(bytes int) (*allocation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen("Alloc"); err != nil {
		return nil, err
	}
	a := &allocation{dev: d, bytes: bytes}
	err := d.do(func() error {
		p, err := cu.MemAlloc(int64(bytes))
		if err != nil {
			return err
		}
		a.m.ptr = p
		return cu.MemsetD8(p, 0, int64(bytes)) // zeroed, as on sim
	})
	if err != nil {
		return nil, fmt.Errorf("%w: cuMemAlloc(%d) on device %d: %v", ErrBackend, bytes, d.id, err)
	}
	d.allocs[a] = struct{}{}
	d.used += int64(bytes)
	return a, nil
}

func (d *Device) free(a *allocation) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.allocs[a]; !ok {
		return nil
	}
	delete(d.allocs, a)
	d.used -= int64(a.bytes)
	if err := d.do(func() error { return cu.MemFree(a.m.ptr) }); err != nil {
		return fmt.Errorf("%w: cuMemFree on device %d: %v", ErrBackend, d.id, err)
	}
	return nil
}

func (d *Device) writeSync(r region, host unsafe.Pointer) error {
	if err := d.do(func() error { return cu.MemcpyHtoD(r.ptr(), host, int64(r.bytes)) }); err != nil {
		return fmt.Errorf("%w: cuMemcpyHtoD on device %d: %v", ErrBackend, d.id, err)
	}
	return nil
}

func (d *Device) readSync(host unsafe.Pointer, r region) error {
	if err := d.do(func() error { return cu.MemcpyDtoH(host, r.ptr(), int64(r.bytes)) }); err != nil {
		return fmt.Errorf("%w: cuMemcpyDtoH on device %d: %v", ErrBackend, d.id, err)
	}
	return nil
}

func memBase(region) unsafe.Pointer {
	panic(fmt.Errorf("%w: Buffer.Mem: Go kernel bodies run only on the sim backend", ErrUnsupported))
}

func kernelSupported(k *Kernel) error {
	if k.PTX == "" {
		return fmt.Errorf("%w: kernel %s has no PTX body (the cuda backend runs PTX)", ErrUnsupported, k.Name)
	}
	if len(k.Params) > maxKernelArgs {
		return fmt.Errorf("%w: kernel %s has more than %d parameters", ErrUnsupported, k.Name, maxKernelArgs)
	}
	return nil
}

// function loads k's PTX into d (once) and returns its entry. Call inside d.do.
func (d *Device) function(k *Kernel) (cu.Function, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f, ok := d.funcs[k]; ok {
		return f, nil
	}
	m, err := cu.LoadData(k.PTX)
	if err != nil {
		return cu.Function{}, fmt.Errorf("%w: loading the PTX of kernel %s: %v", ErrKernel, k.Name, err)
	}
	f, err := m.Function(k.Name)
	if err != nil {
		m.Unload()
		return cu.Function{}, fmt.Errorf("%w: kernel %s: no .entry %q in its PTX: %v", ErrKernel, k.Name, k.Name, err)
	}
	d.mods = append(d.mods, m)
	d.funcs[k] = f
	return f, nil
}

// SimStats are zero on cuda: only the timed sim models device time.
func (d *Device) SimStats() SimStats { return SimStats{} }

// SimProfile is nil on cuda.
func (d *Device) SimProfile() *Profile { return nil }

// SettleModel does nothing on cuda (see the sim backend's).
func SettleModel(devs ...*Device) {}
