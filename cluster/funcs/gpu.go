package funcs

import (
	"fmt"
	"sync"

	"github.com/hetflow/hetflow/gpu"
)

// GPUGraph is the device implementation of a static function, the node's GPU
// extension point (Entry.Graph, Registry.SetGPUGraph). For one task it
// returns the GPU work that task launches, from the task's arguments; an
// error refuses the assignment, naming the task.
//
// A node calls it once per run for each gpu-domain task of the function,
// when it builds its part. Then, on its executor: Build adds the task's work
// to the task's gpu.Graph, once, on a GPU worker of the task's device (an
// error is a failure inside the executor, a localexec.PanicError naming the
// task, as a panic there would be); every activation launches that graph again; after
// each launch Output gives the task's output bytes, on a CPU worker. Free,
// when set, releases what Build allocated, once the run ends.
type GPUGraph func(args Args) (*GPUWork, error)

// GPUWork is one task's GPU work (see GPUGraph).
type GPUWork struct {
	Build  func(g *gpu.Graph) error
	Output func() []byte
	Free   func()
}

// SetGPUGraph attaches (or replaces) the device implementation of a
// registered static function.
func (r *Registry) SetGPUGraph(name string, fn GPUGraph) error {
	return r.setGPU(name, func(e *Entry) { e.Graph = fn })
}

// saxpyGraph is saxpy's device implementation: copy x and y in, y = a·x + y
// with the gpu package's kernel, copy y out; Output sums it as SaxpySum
// does, so the 8 output bytes equal those of the CPU body. The input slices
// are never written (the result lands in a third one), so every launch
// starts from the same vectors.
func saxpyGraph(args Args) (*GPUWork, error) {
	n, a, err := SaxpyArgs(args)
	if err != nil {
		return nil, err
	}
	x, y := SaxpyInputs(n)
	out := make([]float32, n)
	var mu sync.Mutex
	var frees []func() error
	onFree := func(f func() error) {
		mu.Lock()
		frees = append(frees, f)
		mu.Unlock()
	}
	return &GPUWork{
		Build: func(g *gpu.Graph) error {
			dx, err := gpu.Alloc[float32](g.Device(), n)
			if err != nil {
				return fmt.Errorf("saxpy: allocating x: %w", err)
			}
			onFree(dx.Free)
			dy, err := gpu.Alloc[float32](g.Device(), n)
			if err != nil {
				return fmt.Errorf("saxpy: allocating y: %w", err)
			}
			onFree(dy.Free)
			hx := gpu.H2D(g, dx, x).Name("h2d_x")
			hy := gpu.H2D(g, dy, y).Name("h2d_y")
			k := gpu.SaxpyNode(g, n, a, dx, dy).Name("saxpy")
			dh := gpu.D2H(g, out, dy).Name("d2h_y")
			k.Succeed(hx, hy).Precede(dh)
			return nil
		},
		Output: func() []byte { return Float64Bytes(SaxpySum(out)) },
		Free: func() {
			mu.Lock()
			fs := frees
			frees = nil
			mu.Unlock()
			for _, f := range fs {
				f()
			}
		},
	}, nil
}
