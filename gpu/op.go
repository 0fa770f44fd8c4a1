package gpu

import (
	"fmt"
	"unsafe"
)

// NodeKind is what a graph node (or a stream operation) does.
type NodeKind int

// The node kinds.
const (
	KindH2D     NodeKind = iota + 1 // host to device copy
	KindD2H                         // device to host copy
	KindD2D                         // device to device copy
	KindMemset                      // fill device memory with a value
	KindKernel                      // kernel launch
	KindCapture                     // operations recorded from a stream-based call
)

func (k NodeKind) String() string {
	switch k {
	case KindH2D:
		return "h2d"
	case KindD2H:
		return "d2h"
	case KindD2D:
		return "d2d"
	case KindMemset:
		return "memset"
	case KindKernel:
		return "kernel"
	case KindCapture:
		return "capture"
	}
	return fmt.Sprintf("NodeKind(%d)", int(k))
}

// op is one device operation, shared by graph nodes and stream submissions; each backend
// interprets it.
type op struct {
	kind     NodeKind
	dev      *Device
	dst, src region         // device side(s)
	host     unsafe.Pointer // host side of h2d / d2h
	bytes    int            // copy size
	pattern  uint32         // memset value (low width bytes)
	width    int            // memset element size: 1, 2 or 4
	count    int            // memset elements of width
	k        *Kernel
	grid     Dim3
	block    Dim3
	args     []any
	capture  func(*Stream) error
}

func (o *op) String() string {
	switch o.kind {
	case KindKernel:
		return "kernel " + o.k.Name
	case KindH2D, KindD2H, KindD2D:
		return fmt.Sprintf("%v %dB", o.kind, o.bytes)
	case KindMemset:
		return fmt.Sprintf("memset %dx%dB", o.count, o.width)
	}
	return o.kind.String()
}

func h2dOp[T Elem](dst *Buffer[T], src []T) (*op, error) {
	r, err := dst.region()
	if err != nil {
		return nil, fmt.Errorf("h2d destination: %w", err)
	}
	if len(src) == 0 || len(src) > dst.n {
		return nil, fmt.Errorf("%w: h2d of %d elements into %v (want 1..%d)", ErrInvalid, len(src), dst, dst.n)
	}
	r.bytes = len(src) * elemSize[T]()
	return &op{kind: KindH2D, dev: r.a.dev, dst: r, host: unsafe.Pointer(unsafe.SliceData(src)), bytes: r.bytes}, nil
}

func d2hOp[T Elem](dst []T, src *Buffer[T]) (*op, error) {
	r, err := src.region()
	if err != nil {
		return nil, fmt.Errorf("d2h source: %w", err)
	}
	if len(dst) == 0 || len(dst) > src.n {
		return nil, fmt.Errorf("%w: d2h of %d elements from %v (want 1..%d)", ErrInvalid, len(dst), src, src.n)
	}
	r.bytes = len(dst) * elemSize[T]()
	return &op{kind: KindD2H, dev: r.a.dev, src: r, host: unsafe.Pointer(unsafe.SliceData(dst)), bytes: r.bytes}, nil
}

func d2dOp[T Elem](dst, src *Buffer[T]) (*op, error) {
	rd, err := dst.region()
	if err != nil {
		return nil, fmt.Errorf("d2d destination: %w", err)
	}
	rs, err := src.region()
	if err != nil {
		return nil, fmt.Errorf("d2d source: %w", err)
	}
	if rd.a.dev != rs.a.dev {
		return nil, fmt.Errorf("%w: d2d from device %d to device %d", ErrDevice, rs.a.dev.ID(), rd.a.dev.ID())
	}
	if src.n > dst.n {
		return nil, fmt.Errorf("%w: d2d of %v into %v", ErrInvalid, src, dst)
	}
	rd.bytes = rs.bytes
	return &op{kind: KindD2D, dev: rd.a.dev, dst: rd, src: rs, bytes: rs.bytes}, nil
}

func memsetOp[T Elem](dst *Buffer[T], v T) (*op, error) {
	r, err := dst.region()
	if err != nil {
		return nil, fmt.Errorf("memset destination: %w", err)
	}
	o := &op{kind: KindMemset, dev: r.a.dev, dst: r, width: elemSize[T](), count: dst.n}
	p := unsafe.Pointer(&v)
	switch o.width {
	case 1:
		o.pattern = uint32(*(*uint8)(p))
	case 2:
		o.pattern = uint32(*(*uint16)(p))
	case 4:
		o.pattern = *(*uint32)(p)
	case 8:
		if *(*uint64)(p) != 0 {
			return nil, fmt.Errorf("%w: memset of %v to a nonzero 8-byte value (CUDA memsets are 1, 2 or 4 bytes wide; use a kernel)", ErrUnsupported, dst)
		}
		o.width, o.count = 4, 2*dst.n
	}
	return o, nil
}

func kernelOp(d *Device, k *Kernel, grid, block Dim3, args []any) (*op, error) {
	a, err := checkKernelArgs(d, k, grid, block, args)
	if err != nil {
		return nil, err
	}
	if err := kernelSupported(k); err != nil {
		return nil, err
	}
	return &op{kind: KindKernel, dev: d, k: k, grid: grid.norm(), block: block.norm(), args: a}, nil
}
