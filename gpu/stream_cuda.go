//go:build cuda

package gpu

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"
)

const maxKernelArgs = 32

// Stream is a CUDA stream. The stream a capture node's function receives is in capture mode.
// Host slices of queued copies are pinned (runtime.Pinner) until Synchronize, since the driver
// reads them after the call returns.
type Stream struct {
	dev        *Device
	s          cu.Stream
	pin        *runtime.Pinner
	user       bool   // made by NewStream (registered with the device)
	restricted bool   // given to a capture function: no Record, Wait, Synchronize
	rec        *[]*op // capture mode: what was enqueued, to check buffers before each launch
}

// NewStream creates a non-blocking stream on d.
func (d *Device) NewStream() (*Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen("NewStream"); err != nil {
		return nil, err
	}
	s := &Stream{dev: d, pin: new(runtime.Pinner), user: true}
	err := d.do(func() (err error) {
		s.s, err = cu.MakeStream(cu.NonBlocking)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w: cuStreamCreate on device %d: %v", ErrBackend, d.id, err)
	}
	d.streams[s] = struct{}{}
	return s, nil
}

// Device is the stream's device.
func (s *Stream) Device() *Device { return s.dev }

// Destroy waits for the stream's work and destroys it.
func (s *Stream) Destroy() error {
	if s.restricted {
		return fmt.Errorf("%w: Destroy of a capture stream", ErrCapture)
	}
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.streams[s]; !ok {
		return nil
	}
	delete(d.streams, s)
	err := d.do(func() error {
		if err := s.s.Synchronize(); err != nil {
			return err
		}
		return s.s.Destroy()
	})
	s.pin.Unpin()
	if err != nil {
		return fmt.Errorf("%w: destroying a stream of device %d: %v", ErrBackend, d.id, err)
	}
	return nil
}

func (s *Stream) live() error {
	if !s.user {
		return nil
	}
	s.dev.mu.Lock()
	defer s.dev.mu.Unlock()
	if _, ok := s.dev.streams[s]; !ok || s.dev.closed {
		return fmt.Errorf("%w: stream of device %d", ErrClosed, s.dev.id)
	}
	return nil
}

func (s *Stream) submit(o *op) error {
	if o.dev != s.dev {
		return fmt.Errorf("%w: operation on device %d submitted to a stream of device %d", ErrDevice, o.dev.ID(), s.dev.ID())
	}
	if err := s.live(); err != nil {
		return err
	}
	if s.rec != nil {
		*s.rec = append(*s.rec, o)
	}
	return s.dev.do(func() error { return s.dev.enqueue(o, s.s, s.pin) })
}

// enqueue puts one operation on stream st. Call inside d.do.
func (d *Device) enqueue(o *op, st cu.Stream, pin *runtime.Pinner) error {
	if err := o.checkLive(); err != nil {
		return err
	}
	var err error
	switch o.kind {
	case KindH2D:
		pin.Pin(o.host)
		err = cu.MemcpyHtoDAsync(o.dst.ptr(), o.host, int64(o.bytes), st)
	case KindD2H:
		pin.Pin(o.host)
		err = cu.MemcpyDtoHAsync(o.host, o.src.ptr(), int64(o.bytes), st)
	case KindD2D:
		err = cu.MemcpyDtoDAsync(o.dst.ptr(), o.src.ptr(), int64(o.bytes), st)
	case KindMemset:
		switch o.width {
		case 1:
			err = cu.MemsetD8Async(o.dst.ptr(), byte(o.pattern), int64(o.count), st)
		case 2:
			err = cu.MemsetD16Async(o.dst.ptr(), uint16(o.pattern), int64(o.count), st)
		default:
			err = cu.MemsetD32Async(o.dst.ptr(), uint(o.pattern), int64(o.count), st)
		}
	case KindKernel:
		var f cu.Function
		if f, err = d.function(o.k); err != nil {
			return err
		}
		vals, aerr := kernelArgBits(o.args)
		if aerr != nil {
			return aerr
		}
		// cu's Launch reads 8 bytes through each pointer, so every argument gets a full slot.
		params := make([]unsafe.Pointer, len(vals))
		for i := range vals {
			params[i] = unsafe.Pointer(&vals[i])
		}
		err = f.Launch(o.grid.X, o.grid.Y, o.grid.Z, o.block.X, o.block.Y, o.block.Z, 0, st, params)
		if err != nil {
			return fmt.Errorf("%w: launching %s %v x %v: %v", ErrKernel, o.k.Name, o.grid, o.block, err)
		}
		return nil
	default:
		return fmt.Errorf("%w: operation kind %v on a stream", ErrInvalid, o.kind)
	}
	if err != nil {
		return fmt.Errorf("%w: %v: %v", ErrBackend, o, err)
	}
	return nil
}

// checkLive refuses an operation that touches freed memory: on a real GPU it would fault and
// poison the context.
func (o *op) checkLive() error {
	for _, r := range []region{o.dst, o.src} {
		if r.a != nil && r.a.freed.Load() {
			return fmt.Errorf("%w: %v uses freed memory of device %d", ErrFreed, o, r.a.dev.ID())
		}
	}
	for i, a := range o.args {
		if m, ok := a.(memory); ok {
			if _, err := m.region(); err != nil {
				return fmt.Errorf("%v argument %d: %w", o, i, err)
			}
		}
	}
	return nil
}

// kernelArgBits turns arguments into 8-byte parameter slots (the value in the low bytes, as
// the little-endian ABI expects for 4-byte parameters).
func kernelArgBits(args []any) ([]uint64, error) {
	if len(args) > maxKernelArgs {
		return nil, fmt.Errorf("%w: %d kernel arguments, at most %d", ErrUnsupported, len(args), maxKernelArgs)
	}
	out := make([]uint64, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case int32:
			out[i] = uint64(uint32(v))
		case uint32:
			out[i] = uint64(v)
		case int64:
			out[i] = uint64(v)
		case uint64:
			out[i] = v
		case float32:
			out[i] = uint64(math.Float32bits(v))
		case float64:
			out[i] = math.Float64bits(v)
		case memory:
			r, err := v.region()
			if err != nil {
				return nil, fmt.Errorf("kernel argument %d: %w", i, err)
			}
			out[i] = uint64(r.ptr())
		default:
			return nil, fmt.Errorf("%w: kernel argument %d has type %T", ErrInvalid, i, a)
		}
	}
	return out, nil
}

// Synchronize waits for the stream's work and reports the driver's error, if any.
func (s *Stream) Synchronize() error {
	if s.restricted {
		return fmt.Errorf("%w: Synchronize inside a capture", ErrCapture)
	}
	if err := s.live(); err != nil {
		return err
	}
	err := s.dev.do(func() error { return s.s.Synchronize() })
	s.pin.Unpin()
	if err != nil {
		return fmt.Errorf("%w: stream of device %d: %v", ErrKernel, s.dev.id, err)
	}
	return nil
}

// Record makes e complete when the work queued on s so far is done.
func (s *Stream) Record(e *Event) error {
	if s.restricted {
		return fmt.Errorf("%w: Record inside a capture", ErrCapture)
	}
	if e == nil || e.dev != s.dev {
		return fmt.Errorf("%w: Record of an event of another device (or nil)", ErrDevice)
	}
	if err := s.dev.do(func() error { return e.e.Record(s.s) }); err != nil {
		return fmt.Errorf("%w: cuEventRecord: %v", ErrBackend, err)
	}
	return nil
}

// Wait makes work queued on s after this call wait for e's latest Record.
func (s *Stream) Wait(e *Event) error {
	if s.restricted {
		return fmt.Errorf("%w: Wait inside a capture", ErrCapture)
	}
	if e == nil || e.dev != s.dev {
		return fmt.Errorf("%w: Wait on an event of another device (or nil)", ErrDevice)
	}
	if err := s.dev.do(func() error { return s.s.Wait(e.e, 0) }); err != nil {
		return fmt.Errorf("%w: cuStreamWaitEvent: %v", ErrBackend, err)
	}
	return nil
}

// Event is a CUDA event (without timing).
type Event struct {
	dev *Device
	e   cu.Event
}

// NewEvent makes an event on d.
func (d *Device) NewEvent() (*Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen("NewEvent"); err != nil {
		return nil, err
	}
	e := &Event{dev: d}
	err := d.do(func() (err error) {
		e.e, err = cu.MakeEvent(cu.DisableTiming)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w: cuEventCreate on device %d: %v", ErrBackend, d.id, err)
	}
	d.events[e] = struct{}{}
	return e, nil
}

// Query reports whether the work before the latest Record has completed.
func (e *Event) Query() bool {
	return e.dev.do(func() error { return e.e.Query() }) == nil
}

// Synchronize blocks until the work before the latest Record has completed.
func (e *Event) Synchronize() error {
	if err := e.dev.do(func() error { return e.e.Synchronize() }); err != nil {
		return fmt.Errorf("%w: cuEventSynchronize: %v", ErrKernel, err)
	}
	return nil
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	d := e.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.events[e]; !ok {
		return nil
	}
	delete(d.events, e)
	if err := d.do(func() error { return cu.DestroyEvent(&e.e) }); err != nil {
		return fmt.Errorf("%w: cuEventDestroy: %v", ErrBackend, err)
	}
	return nil
}
