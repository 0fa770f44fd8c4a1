package gpu

import "errors"

// Sentinel errors. Every error this package returns wraps one of them (test with errors.Is) and
// says what went wrong and where: which device, buffer, graph node or kernel.
var (
	// ErrClosed: the device (or a stream of it) was closed.
	ErrClosed = errors.New("gpu: device closed")
	// ErrInvalid: a bad argument (nil buffer, negative length, size mismatch, bad grid, ...).
	ErrInvalid = errors.New("gpu: invalid argument")
	// ErrDevice: an object of one device was used with another device.
	ErrDevice = errors.New("gpu: wrong device")
	// ErrFreed: a buffer was used after Free (or Free was called twice).
	ErrFreed = errors.New("gpu: buffer freed")
	// ErrKernel: a kernel failed: its Go body panicked (out-of-range access, bad argument type)
	// on sim, or the launch failed on CUDA.
	ErrKernel = errors.New("gpu: kernel failed")
	// ErrCycle: a graph's precedence edges form a cycle.
	ErrCycle = errors.New("gpu: graph has a cycle")
	// ErrCapture: a capture node's function failed, or used a call a capture cannot record.
	ErrCapture = errors.New("gpu: capture failed")
	// ErrUnsupported: the operation is not available on this backend or for this element type.
	ErrUnsupported = errors.New("gpu: unsupported")
	// ErrConfig: bad configuration (e.g. HETFLOW_SIM_GPUS is not a non-negative integer).
	ErrConfig = errors.New("gpu: bad configuration")
	// ErrBackend: the CUDA driver reported an error.
	ErrBackend = errors.New("gpu: backend error")
)
