package node

import (
	"fmt"
	"sync"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/gpu"
)

// gpuJob is one GPU task of a run: build adds its work to the task's GPU
// graph (once, on a GPU worker of its device; every activation launches the
// graph again), output reads the result after a launch, on the hidden CPU
// task that follows, and free releases the device memory when the run ends.
type gpuJob struct {
	build  func(g *gpu.Graph)
	output func() []byte
	mu     sync.Mutex
	frees  []func() error
}

func (j *gpuJob) onFree(f func() error) {
	j.mu.Lock()
	j.frees = append(j.frees, f)
	j.mu.Unlock()
}

func (j *gpuJob) free() {
	j.mu.Lock()
	fs := j.frees
	j.frees = nil
	j.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// gpuBuilder makes the GPU job of a task with domain gpu from its
// arguments.
type gpuBuilder func(args map[string]any) (*gpuJob, error)

// gpuBuilders are the functions with a device implementation, by name. A
// gpu-domain task whose function has none runs its registry body (the GPU
// one, else the CPU one) on a CPU worker.
var gpuBuilders = map[string]gpuBuilder{
	funcs.Saxpy: saxpyJob,
}

// saxpyJob: copy x and y in, y = a·x + y with the gpu package's kernel, copy
// y out; the CPU finisher sums it as funcs.SaxpySum does, so the 8 output
// bytes equal those of the CPU body. The input slices are never written
// (the result lands in a third one), so every launch starts from the same
// vectors.
func saxpyJob(args map[string]any) (*gpuJob, error) {
	n, a, err := funcs.SaxpyArgs(funcs.Args(args))
	if err != nil {
		return nil, err
	}
	x, y := funcs.SaxpyInputs(n)
	out := make([]float32, n)
	j := &gpuJob{}
	j.build = func(g *gpu.Graph) {
		dx, err := gpu.Alloc[float32](g.Device(), n)
		if err != nil {
			panic(fmt.Errorf("saxpy: allocating x: %w", err))
		}
		j.onFree(dx.Free)
		dy, err := gpu.Alloc[float32](g.Device(), n)
		if err != nil {
			panic(fmt.Errorf("saxpy: allocating y: %w", err))
		}
		j.onFree(dy.Free)
		hx := gpu.H2D(g, dx, x).Name("h2d_x")
		hy := gpu.H2D(g, dy, y).Name("h2d_y")
		k := gpu.SaxpyNode(g, n, a, dx, dy).Name("saxpy")
		dh := gpu.D2H(g, out, dy).Name("d2h_y")
		k.Succeed(hx, hy).Precede(dh)
	}
	j.output = func() []byte { return funcs.Float64Bytes(funcs.SaxpySum(out)) }
	return j, nil
}
