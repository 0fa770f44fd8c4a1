package gpu

import (
	"fmt"
	"reflect"
)

// Dim3 is a grid or block shape, as CUDA's dim3. A zero Y or Z counts as 1.
type Dim3 struct{ X, Y, Z int }

// D1 is the one-dimensional shape {x, 1, 1}.
func D1(x int) Dim3 { return Dim3{X: x, Y: 1, Z: 1} }

// Blocks is the number of blocks of blockSize threads that cover n elements: ceil(n/blockSize).
// Non-positive inputs give 0 (and a kernel node over a 0 grid is rejected).
func Blocks(n, blockSize int) int {
	if n <= 0 || blockSize <= 0 {
		return 0
	}
	return (n + blockSize - 1) / blockSize
}

func (d Dim3) norm() Dim3 {
	if d.Y == 0 {
		d.Y = 1
	}
	if d.Z == 0 {
		d.Z = 1
	}
	return d
}

// Size is X*Y*Z (after normalising zero Y and Z to 1).
func (d Dim3) Size() int { d = d.norm(); return d.X * d.Y * d.Z }

func (d Dim3) String() string { d = d.norm(); return fmt.Sprintf("(%d,%d,%d)", d.X, d.Y, d.Z) }

// Limits every backend enforces, so a graph that builds on sim also builds on CUDA.
const (
	MaxBlockThreads = 1024      // threads per block
	MaxGridX        = 1<<31 - 1 // blocks along X
	MaxGridYZ       = 65535     // blocks along Y and along Z
	MaxBlockZ       = 64        // threads along Z
	maxBlockXY      = 1024      // threads along X and along Y
)

func checkLaunchShape(grid, block Dim3) error {
	grid, block = grid.norm(), block.norm()
	switch {
	case grid.X <= 0 || grid.Y <= 0 || grid.Z <= 0:
		return fmt.Errorf("%w: grid %v has a non-positive dimension", ErrInvalid, grid)
	case block.X <= 0 || block.Y <= 0 || block.Z <= 0:
		return fmt.Errorf("%w: block %v has a non-positive dimension", ErrInvalid, block)
	case grid.X > MaxGridX || grid.Y > MaxGridYZ || grid.Z > MaxGridYZ:
		return fmt.Errorf("%w: grid %v exceeds (%d,%d,%d)", ErrInvalid, grid, MaxGridX, MaxGridYZ, MaxGridYZ)
	case block.X > maxBlockXY || block.Y > maxBlockXY || block.Z > MaxBlockZ:
		return fmt.Errorf("%w: block %v exceeds (%d,%d,%d)", ErrInvalid, block, maxBlockXY, maxBlockXY, MaxBlockZ)
	case block.Size() > MaxBlockThreads:
		return fmt.Errorf("%w: block %v has %d threads, more than %d", ErrInvalid, block, block.Size(), MaxBlockThreads)
	}
	return nil
}

// Kernel is one GPU function with two bodies: PTX for the cuda backend and a Go reference body
// for the sim backend. The built-in kernels (Saxpy, KMeansAssign, KMeansUpdate) ship both and
// the tests check the Go bodies against plain loops.
//
// Arguments are passed as given to Graph.Kernel or Stream.Launch. Each must be one of int32,
// uint32, int64, uint64, float32, float64 (the sizes PTX parameters have; plain int is refused
// because its size differs between Go and CUDA C) or a *Buffer[T] of the launching device, which
// the Go body reads with Buffer.Mem and PTX receives as a 64-bit device pointer.
type Kernel struct {
	// Name is the kernel's entry name in PTX (the .entry directive) and its label in errors.
	Name string
	// PTX is the module text for the cuda backend; it must define an .entry called Name.
	PTX string
	// Go runs one block of the launch on the sim backend. It is called once per block, blocks
	// one after another in X, then Y, then Z order on one device goroutine, and loops over the
	// block's threads itself (see Block.Range). Because blocks of one launch never run
	// concurrently, what is an atomicAdd in PTX is a plain += in the Go body. A panic (e.g. an
	// index out of range) fails the launch with ErrKernel naming the node.
	Go func(b *Block, args []any)
	// Params, if set, is the exact argument signature (use reflect.TypeFor); arguments are
	// checked against it when a node or stream launch is created.
	Params []reflect.Type
	// Work, if set, is what a launch does, for the timed sim's roofline (see Profile): given
	// the launch shape and arguments (checked already), the bytes it moves to and from device
	// memory and its flops. A kernel without Work costs the profile's KernelOverhead plus the
	// time its Go body took. Other backends ignore it.
	Work func(grid, block Dim3, args []any) Work
}

func (k *Kernel) String() string {
	if k == nil {
		return "<nil kernel>"
	}
	return k.Name
}

// Block is what a Go kernel body sees: the block it runs and the launch shape. The sim backend
// reuses one Block for all blocks of a launch: do not keep it after the body returns.
type Block struct {
	Idx  Dim3 // blockIdx
	Dim  Dim3 // blockDim
	Grid Dim3 // gridDim
	dev  *Device
}

// Threads is the number of threads in the block (blockDim.x*y*z).
func (b *Block) Threads() int { return b.Dim.X * b.Dim.Y * b.Dim.Z }

// Range is the global X thread indices this block covers, [lo, hi): lo = blockIdx.x*blockDim.x,
// hi = lo+blockDim.x. A 1-D body is `for i := lo; i < hi && i < n; i++ {...}`.
func (b *Block) Range() (lo, hi int) {
	lo = b.Idx.X * b.Dim.X
	return lo, lo + b.Dim.X
}

// Device is the device the launch runs on.
func (b *Block) Device() *Device { return b.dev }

var allowedScalars = map[reflect.Type]bool{
	reflect.TypeFor[int32](): true, reflect.TypeFor[uint32](): true,
	reflect.TypeFor[int64](): true, reflect.TypeFor[uint64](): true,
	reflect.TypeFor[float32](): true, reflect.TypeFor[float64](): true,
}

// checkKernelArgs validates a launch against the device d, returning a copy of args.
func checkKernelArgs(d *Device, k *Kernel, grid, block Dim3, args []any) ([]any, error) {
	if k == nil {
		return nil, fmt.Errorf("%w: nil kernel", ErrInvalid)
	}
	if k.Name == "" {
		return nil, fmt.Errorf("%w: kernel has no Name", ErrInvalid)
	}
	if err := checkLaunchShape(grid, block); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	if k.Params != nil && len(k.Params) != len(args) {
		return nil, fmt.Errorf("%w: kernel %s takes %d arguments, got %d", ErrInvalid, k.Name, len(k.Params), len(args))
	}
	for i, a := range args {
		if a == nil {
			return nil, fmt.Errorf("%w: kernel %s argument %d is nil", ErrInvalid, k.Name, i)
		}
		t := reflect.TypeOf(a)
		if k.Params != nil && k.Params[i] != t {
			return nil, fmt.Errorf("%w: kernel %s argument %d is %v, want %v", ErrInvalid, k.Name, i, t, k.Params[i])
		}
		if m, ok := a.(memory); ok {
			r, err := m.region()
			if err != nil {
				return nil, fmt.Errorf("kernel %s argument %d: %w", k.Name, i, err)
			}
			if r.a.dev != d {
				return nil, fmt.Errorf("%w: kernel %s argument %d is a buffer of device %d, launch is on device %d", ErrDevice, k.Name, i, r.a.dev.ID(), d.ID())
			}
			continue
		}
		if !allowedScalars[t] {
			return nil, fmt.Errorf("%w: kernel %s argument %d has type %v; want int32, uint32, int64, uint64, float32, float64 or *gpu.Buffer[T]", ErrInvalid, k.Name, i, t)
		}
	}
	return append([]any(nil), args...), nil
}
