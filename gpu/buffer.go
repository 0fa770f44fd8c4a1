package gpu

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Elem is the element types a Buffer can hold: fixed-size integers and floats.
type Elem interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// allocation is one block of device memory. devMem is the backend's part (a Go array on sim,
// a CUdeviceptr on cuda).
type allocation struct {
	dev   *Device
	bytes int
	freed atomic.Bool
	m     devMem
}

// region is a byte range of an allocation.
type region struct {
	a     *allocation
	off   int
	bytes int
}

// memory is implemented by every *Buffer[T]; it is how graph nodes and kernel arguments refer
// to device memory without knowing T.
type memory interface {
	region() (region, error)
}

// Buffer is n elements of T in one device's memory. Host code never sees device memory: it
// moves data with copies (graph nodes, stream operations, or the synchronous Read and Write).
// Go kernel bodies read it with Mem. A Buffer made by Slice is a view of its parent's memory.
type Buffer[T Elem] struct {
	a    *allocation
	off  int // elements
	n    int // elements
	view bool
}

func elemSize[T Elem]() int { var z T; return int(unsafe.Sizeof(z)) }

// Alloc allocates n elements of T on d, zeroed (on both backends).
func Alloc[T Elem](d *Device, n int) (*Buffer[T], error) {
	if d == nil {
		return nil, fmt.Errorf("%w: Alloc on a nil device", ErrInvalid)
	}
	if n <= 0 {
		return nil, fmt.Errorf("%w: Alloc of %d elements on device %d", ErrInvalid, n, d.ID())
	}
	sz := elemSize[T]()
	if n > int(^uint(0)>>1)/sz {
		return nil, fmt.Errorf("%w: Alloc of %d elements overflows", ErrInvalid, n)
	}
	a, err := d.alloc(n * sz)
	if err != nil {
		return nil, err
	}
	return &Buffer[T]{a: a, n: n}, nil
}

// Len is the number of elements.
func (b *Buffer[T]) Len() int { return b.n }

// Bytes is the size in bytes.
func (b *Buffer[T]) Bytes() int { return b.n * elemSize[T]() }

// Device is the device that holds the memory.
func (b *Buffer[T]) Device() *Device { return b.a.dev }

func (b *Buffer[T]) String() string {
	var z T
	return fmt.Sprintf("Buffer[%T](%d) on device %d", z, b.n, b.a.dev.ID())
}

func (b *Buffer[T]) region() (region, error) {
	if b == nil || b.a == nil {
		return region{}, fmt.Errorf("%w: nil buffer", ErrInvalid)
	}
	if b.a.freed.Load() {
		return region{}, fmt.Errorf("%w: %v", ErrFreed, b)
	}
	sz := elemSize[T]()
	return region{a: b.a, off: b.off * sz, bytes: b.n * sz}, nil
}

// Slice is a view of elements [lo, hi) sharing b's memory. Views cannot be freed; they die with
// their parent.
func (b *Buffer[T]) Slice(lo, hi int) (*Buffer[T], error) {
	if _, err := b.region(); err != nil {
		return nil, err
	}
	if lo < 0 || hi > b.n || lo >= hi {
		return nil, fmt.Errorf("%w: Slice(%d, %d) of %v", ErrInvalid, lo, hi, b)
	}
	return &Buffer[T]{a: b.a, off: b.off + lo, n: hi - lo, view: true}, nil
}

// Free releases the memory. Freeing twice, or freeing a view, is an error. Device.Close frees
// every buffer still allocated.
func (b *Buffer[T]) Free() error {
	if b == nil || b.a == nil {
		return fmt.Errorf("%w: Free of a nil buffer", ErrInvalid)
	}
	if b.view {
		return fmt.Errorf("%w: Free of a view (%v); free its parent", ErrInvalid, b)
	}
	if !b.a.freed.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: double Free of %v", ErrFreed, b)
	}
	return b.a.dev.free(b.a)
}

// Write copies src into the first len(src) elements, synchronously.
func (b *Buffer[T]) Write(src []T) error {
	r, err := b.region()
	if err != nil {
		return err
	}
	if len(src) > b.n {
		return fmt.Errorf("%w: Write of %d elements into %v", ErrInvalid, len(src), b)
	}
	if len(src) == 0 {
		return nil
	}
	r.bytes = len(src) * elemSize[T]()
	return b.a.dev.writeSync(r, unsafe.Pointer(unsafe.SliceData(src)))
}

// Read copies the first len(dst) elements into dst, synchronously.
func (b *Buffer[T]) Read(dst []T) error {
	r, err := b.region()
	if err != nil {
		return err
	}
	if len(dst) > b.n {
		return fmt.Errorf("%w: Read of %d elements from %v", ErrInvalid, len(dst), b)
	}
	if len(dst) == 0 {
		return nil
	}
	r.bytes = len(dst) * elemSize[T]()
	return b.a.dev.readSync(unsafe.Pointer(unsafe.SliceData(dst)), r)
}

// Mem is the device memory of b as a slice, for Go kernel bodies only: blk must be the Block
// the body was given. It panics (failing the launch with ErrKernel) if b was freed, lives on
// another device, or the backend has no host-visible device memory (cuda).
func (b *Buffer[T]) Mem(blk *Block) []T {
	r, err := b.region()
	if err != nil {
		panic(err)
	}
	if blk == nil || blk.dev != b.a.dev {
		panic(fmt.Errorf("%w: %v used in a kernel body of another device", ErrDevice, b))
	}
	p := memBase(r)
	return unsafe.Slice((*T)(p), b.n)
}
