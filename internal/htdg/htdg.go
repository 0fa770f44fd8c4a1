package htdg

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/hetflow/hetflow/gpu"
	"github.com/hetflow/hetflow/localexec"
)

// Elems is the length of every task's SAXPY, as in the seed's experiment.
const Elems = 1024

// Alpha is the a of every task's y = a*x + y.
const Alpha float32 = 0.5

// Graph is a random heterogeneous task dependency graph: tasks in layers,
// every task of a layer after the first depending on one to three distinct
// tasks of the layer before; half the tasks (rounded down) are GPU tasks,
// spread over the devices round-robin.
type Graph struct {
	N      int       // tasks
	Layers int       // layers
	GPU    []bool    // task i is a GPU task
	Device []int     // the device of a GPU task
	Preds  [][]int32 // strong predecessors of each task
	Edges  int       // dependency edges
	NGPU   int       // GPU tasks
}

// Generate draws an HTDG of n tasks from seed. Layer widths are uniform in
// [1, 2√n), so there are about √n layers of about √n tasks.
func Generate(n int, seed uint64, devices int) (*Graph, error) {
	if n < 1 {
		return nil, fmt.Errorf("htdg: %d tasks: want at least 1", n)
	}
	if devices < 1 {
		return nil, fmt.Errorf("htdg: %d devices: want at least 1", devices)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0xD1B54A32D192ED03))
	g := &Graph{N: n, GPU: make([]bool, n), Device: make([]int, n), Preds: make([][]int32, n)}
	g.NGPU = n / 2
	for _, j := range rng.Perm(n)[:g.NGPU] {
		g.GPU[j] = true
	}
	k := 0
	for i := range g.GPU {
		if g.GPU[i] {
			g.Device[i] = k % devices
			k++
		}
	}
	w := max(1, int(math.Sqrt(float64(n))))
	prevLo, prevHi := 0, 0 // the previous layer is tasks [prevLo, prevHi)
	for lo := 0; lo < n; {
		hi := min(n, lo+1+rng.IntN(2*w-1))
		if g.Layers > 0 {
			width := prevHi - prevLo
			for t := lo; t < hi; t++ {
				d := 1 + rng.IntN(min(3, width))
				// d distinct tasks of the previous layer
				seen := make(map[int32]bool, d)
				for len(seen) < d {
					p := int32(prevLo + rng.IntN(width))
					if !seen[p] {
						seen[p] = true
						g.Preds[t] = append(g.Preds[t], p)
					}
				}
				g.Edges += d
			}
		}
		prevLo, prevHi = lo, hi
		lo = hi
		g.Layers++
	}
	return g, nil
}

// Mode is how GPU tasks run.
type Mode string

const (
	// ModeHetflow: GPU tasks are localexec GPU tasks (tf.EmplaceGPU(...).On(d)),
	// run by the GPU workers of their device's domain.
	ModeHetflow Mode = "hetflow"
	// ModeBaseline: no GPU domain; each GPU task is a CPU task (a runtime
	// task, to know its worker) that builds the same gpu.Graph on its first
	// run and launches it synchronously from the CPU worker, as that worker's
	// gpu.Host (the seed's oneTBB baseline: "encapsulate each GPU task in a
	// CPU function").
	ModeBaseline Mode = "baseline"
)

// Instance is an htdg made runnable in one mode: a taskflow, its data and
// the devices it uses.
type Instance struct {
	G    *Graph
	Mode Mode
	TF   *localexec.Taskflow
	devs []*gpu.Device
	x    []float32   // shared, read-only
	Y    [][]float32 // per task
	dx   []*gpu.Buffer[float32]
	dy   []*gpu.Buffer[float32] // per GPU task (nil for CPU tasks)

	errMu sync.Mutex
	err   error // first error of a baseline GPU launch
}

func initX() []float32 {
	x := make([]float32, Elems)
	for i := range x {
		x[i] = float32(i%97) / 97
	}
	return x
}

func initY(y []float32) {
	for i := range y {
		y[i] = float32(i%89) / 89
	}
}

// saxpy is the CPU tasks' body, with the rounding of the gpu.Saxpy kernel.
func saxpy(a float32, x, y []float32) {
	for i := range y {
		y[i] = float32(a*x[i]) + y[i]
	}
}

// Build makes g runnable in mode m on devs: host vectors for every task,
// device vectors for every GPU task (x once per device), and the taskflow.
func Build(g *Graph, m Mode, devs []*gpu.Device) (*Instance, error) {
	in := &Instance{G: g, Mode: m, devs: devs, x: initX(), Y: make([][]float32, g.N)}
	in.dx = make([]*gpu.Buffer[float32], len(devs))
	for d, dev := range devs {
		b, err := gpu.Alloc[float32](dev, Elems)
		if err != nil {
			return nil, err
		}
		if err := b.Write(in.x); err != nil {
			return nil, err
		}
		in.dx[d] = b
	}
	in.dy = make([]*gpu.Buffer[float32], g.N)
	backing := make([]float32, g.N*Elems)
	in.TF = localexec.NewTaskflow(fmt.Sprintf("htdg-%d-%s", g.N, m))
	tasks := make([]localexec.Task, g.N)
	for i := range g.N {
		y := backing[i*Elems : (i+1)*Elems : (i+1)*Elems]
		initY(y)
		in.Y[i] = y
		name := fmt.Sprintf("t%d", i)
		if !g.GPU[i] {
			x := in.x
			tasks[i] = in.TF.Emplace(func() { saxpy(Alpha, x, y) }).Name(name)
			continue
		}
		dev := devs[g.Device[i]]
		dy, err := gpu.Alloc[float32](dev, Elems)
		if err != nil {
			return nil, err
		}
		in.dy[i] = dy
		dx := in.dx[g.Device[i]]
		// the GPU task: copy y in, y = a*x + y, copy y out (x is on the
		// device already), the seed's three operations in a chain
		body := func(gg *gpu.Graph) {
			h2d := gpu.H2D(gg, dy, y).Name("h2d_y")
			k := gpu.SaxpyNode(gg, Elems, Alpha, dx, dy).Name("saxpy")
			d2h := gpu.D2H(gg, y, dy).Name("d2h_y")
			h2d.Precede(k)
			k.Precede(d2h)
		}
		switch m {
		case ModeHetflow:
			tasks[i] = in.TF.EmplaceGPU(body).On(g.Device[i]).Name(name)
		case ModeBaseline:
			var gg *gpu.Graph
			// a runtime task only to know its worker: on the timed sim the
			// launch blocks that worker, in the model, for as long as the GPU
			// graph runs (as the GPU domain's launches block their GPU worker)
			tasks[i] = in.TF.EmplaceRuntime(func(rt *localexec.Runtime) {
				if gg == nil {
					gg = gpu.NewGraph(dev)
					body(gg)
				}
				if err := gg.LaunchFrom(rt.GPUHost()); err != nil {
					in.fail(fmt.Errorf("task %s: %w", name, err))
				}
			}).Name(name)
		default:
			return nil, fmt.Errorf("htdg: unknown mode %q", m)
		}
	}
	for i, ps := range g.Preds {
		for _, p := range ps {
			tasks[p].Precede(tasks[i])
		}
	}
	return in, nil
}

func (in *Instance) fail(err error) {
	in.errMu.Lock()
	in.err = errors.Join(in.err, err)
	in.errMu.Unlock()
}

// Executor returns an executor for the Instance's mode: workers CPU workers,
// and in hetflow mode a GPU domain over the Instance's devices.
func (in *Instance) Executor(workers int) *localexec.Executor {
	return in.ExecutorGPUWorkers(workers, 1)
}

// ExecutorGPUWorkers is Executor with gpuWorkers GPU workers per device in
// hetflow mode (the baseline has none).
func (in *Instance) ExecutorGPUWorkers(workers, gpuWorkers int) *localexec.Executor {
	if in.Mode == ModeHetflow {
		return localexec.NewExecutor(localexec.WithWorkers(workers), localexec.WithDevices(in.devs...), localexec.WithGPUWorkers(gpuWorkers))
	}
	return localexec.NewExecutor(localexec.WithWorkers(workers), localexec.WithGPUs(0))
}

// Run runs the taskflow once on ex.
func (in *Instance) Run(ex *localexec.Executor) error {
	err := ex.Run(in.TF).Wait()
	in.errMu.Lock()
	defer in.errMu.Unlock()
	return errors.Join(err, in.err)
}

// Verify checks that after runs runs every task's y is y0 with runs SAXPYs
// applied, bit for bit (the kernel's Go body rounds as saxpy does).
func (in *Instance) Verify(runs int) error {
	want := make([]float32, Elems)
	initY(want)
	for range runs {
		saxpy(Alpha, in.x, want)
	}
	for i, y := range in.Y {
		for j := range y {
			if y[j] != want[j] {
				kind := "CPU"
				if in.G.GPU[i] {
					kind = "GPU"
				}
				return fmt.Errorf("htdg: %s task t%d after %d runs: y[%d] = %v, want %v", kind, i, runs, j, y[j], want[j])
			}
		}
	}
	return nil
}
