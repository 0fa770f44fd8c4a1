//go:build !cuda

package gpu

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Backend is the backend this build uses: "sim" here, "cuda" in builds with -tags cuda.
func Backend() string { return "sim" }

// SimGPUsEnv is the environment variable Open(-1) reads on the sim backend.
const SimGPUsEnv = "HETFLOW_SIM_GPUS"

// Device is one GPU. On sim it is a set of goroutines that stand in for the hardware: engines
// that run graph nodes (parallel branches of a graph run on different engines), and one
// goroutine per Stream. The device owns them; Close stops and joins them.
type Device struct {
	id int

	mu      sync.Mutex
	closed  bool
	allocs  map[*allocation]struct{}
	used    int64
	graphs  map[*Graph]struct{} // made here and not released (see track)
	streams map[*Stream]struct{}
	events  map[*Event]struct{}

	// graph engines
	smu     sync.Mutex
	scond   *sync.Cond
	sclosed bool
	runq    []task
	wg      sync.WaitGroup

	tm *simTiming // the timed sim's model; nil on the plain sim
}

// Open returns n sim devices; n < 0 reads HETFLOW_SIM_GPUS (1 when unset), n == 0 returns none.
// With HETFLOW_SIM_PROFILE set (SimProfileEnv) they are timed sim devices of that profile.
func Open(n int) ([]*Device, error) {
	p, err := LookupProfile(os.Getenv(SimProfileEnv))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SimProfileEnv, err)
	}
	return openSim(n, p, defaultWorld)
}

func openSim(n int, p *Profile, w *simWorld) ([]*Device, error) {
	if n < 0 {
		n = 1
		if v, ok := os.LookupEnv(SimGPUsEnv); ok {
			k, err := strconv.Atoi(v)
			if err != nil || k < 0 {
				return nil, fmt.Errorf("%w: %s=%q is not a non-negative integer", ErrConfig, SimGPUsEnv, v)
			}
			n = k
		}
	}
	devs := make([]*Device, n)
	for i := range devs {
		devs[i] = newSimDevice(i)
		if p != nil {
			devs[i].tm = newSimTiming(w, *p)
		}
	}
	return devs, nil
}

func simEngines() int {
	return max(2, min(4, runtime.GOMAXPROCS(0)))
}

func newSimDevice(id int) *Device {
	d := &Device{
		id:      id,
		allocs:  map[*allocation]struct{}{},
		streams: map[*Stream]struct{}{},
		events:  map[*Event]struct{}{},
	}
	d.scond = sync.NewCond(&d.smu)
	for range simEngines() {
		d.wg.Add(1)
		go d.engine()
	}
	return d
}

// ID is the device's ordinal (-1 for a nil device).
func (d *Device) ID() int {
	if d == nil {
		return -1
	}
	return d.id
}

func (d *Device) String() string { return fmt.Sprintf("sim:%d", d.ID()) }

// Bind makes d the current device of the calling OS thread; GPU workers call it right after
// runtime.LockOSThread. It is a no-op on sim apart from reporting a closed device.
func (d *Device) Bind() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("%w: device %d", ErrClosed, d.id)
	}
	return nil
}

// MemUsed is the number of bytes currently allocated on the device.
func (d *Device) MemUsed() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used
}

// Close waits for launches in flight, stops and joins the device's goroutines, releases its
// graphs, destroys its streams and events and frees its memory. It is idempotent.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	graphs := d.graphs
	d.graphs = nil
	streams := make([]*Stream, 0, len(d.streams))
	for s := range d.streams {
		streams = append(streams, s)
	}
	d.mu.Unlock()

	for g := range graphs { // waits for a launch in flight of g
		g.Release()
	}
	for _, s := range streams {
		s.live.stop()
	}
	d.smu.Lock()
	d.sclosed = true
	d.scond.Broadcast()
	d.smu.Unlock()
	d.wg.Wait()

	d.mu.Lock()
	for e := range d.events {
		e.close()
	}
	for a := range d.allocs {
		a.freed.Store(true)
		a.m.words.Store(nil)
	}
	d.allocs, d.used = nil, 0
	d.mu.Unlock()
	return nil
}

// devMem is sim device memory: a Go array of words, so every element type is aligned. Free
// drops it (atomically: a kernel still running reports ErrFreed instead of racing).
type devMem struct{ words atomic.Pointer[[]uint64] }

func (d *Device) alloc(bytes int) (*allocation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("%w: Alloc on device %d", ErrClosed, d.id)
	}
	a := &allocation{dev: d, bytes: bytes}
	w := make([]uint64, (bytes+7)/8)
	a.m.words.Store(&w)
	d.allocs[a] = struct{}{}
	d.used += int64(bytes)
	return a, nil
}

func (d *Device) free(a *allocation) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.allocs[a]; !ok {
		return nil // device closed already freed it
	}
	delete(d.allocs, a)
	d.used -= int64(a.bytes)
	a.m.words.Store(nil)
	return nil
}

// bytesOf is the byte view of a region; it panics with ErrFreed if the memory is gone (the
// executing node recovers it into an error).
func bytesOf(r region) []byte {
	wp := r.a.m.words.Load()
	if wp == nil || r.a.freed.Load() {
		panic(fmt.Errorf("%w: memory of device %d", ErrFreed, r.a.dev.ID()))
	}
	w := *wp
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)
	return b[r.off : r.off+r.bytes]
}

func memBase(r region) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(bytesOf(r))) }

func hostBytes(p unsafe.Pointer, n int) []byte { return unsafe.Slice((*byte)(p), n) }

func (d *Device) writeSync(r region, host unsafe.Pointer) error {
	body := func() error { return guard(func() { copy(bytesOf(r), hostBytes(host, r.bytes)) }) }
	if d.tm != nil {
		return d.syncCopy(KindH2D, r.bytes, body)
	}
	return body()
}

func (d *Device) readSync(host unsafe.Pointer, r region) error {
	body := func() error { return guard(func() { copy(hostBytes(host, r.bytes), bytesOf(r)) }) }
	if d.tm != nil {
		return d.syncCopy(KindD2H, r.bytes, body)
	}
	return body()
}

func kernelSupported(k *Kernel) error {
	if k.Go == nil {
		return fmt.Errorf("%w: kernel %s has no Go body (the sim backend runs Go bodies)", ErrUnsupported, k.Name)
	}
	return nil
}
