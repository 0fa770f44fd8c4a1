package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/hetflow/hetflow/gpu"
	"github.com/hetflow/hetflow/localexec"
)

// elems is the length of every task's SAXPY, as in the seed's experiment.
const elems = 1024

// alpha is the a of every task's y = a*x + y.
const alpha float32 = 0.5

// htdg is a random heterogeneous task dependency graph: tasks in layers,
// every task of a layer after the first depending on one to three distinct
// tasks of the layer before; half the tasks (rounded down) are GPU tasks,
// spread over the devices round-robin.
type htdg struct {
	n      int
	layers int
	gpu    []bool    // task i is a GPU task
	device []int     // the device of a GPU task
	preds  [][]int32 // strong predecessors of each task
	edges  int
	nGPU   int
}

// generate draws an HTDG of n tasks from seed. Layer widths are uniform in
// [1, 2√n), so there are about √n layers of about √n tasks.
func generate(n int, seed uint64, devices int) (*htdg, error) {
	if n < 1 {
		return nil, fmt.Errorf("htdg: %d tasks: want at least 1", n)
	}
	if devices < 1 {
		return nil, fmt.Errorf("htdg: %d devices: want at least 1", devices)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0xD1B54A32D192ED03))
	g := &htdg{n: n, gpu: make([]bool, n), device: make([]int, n), preds: make([][]int32, n)}
	g.nGPU = n / 2
	for _, j := range rng.Perm(n)[:g.nGPU] {
		g.gpu[j] = true
	}
	k := 0
	for i := range g.gpu {
		if g.gpu[i] {
			g.device[i] = k % devices
			k++
		}
	}
	w := max(1, int(math.Sqrt(float64(n))))
	prevLo, prevHi := 0, 0 // the previous layer is tasks [prevLo, prevHi)
	for lo := 0; lo < n; {
		hi := min(n, lo+1+rng.IntN(2*w-1))
		if g.layers > 0 {
			width := prevHi - prevLo
			for t := lo; t < hi; t++ {
				d := 1 + rng.IntN(min(3, width))
				// d distinct tasks of the previous layer
				seen := make(map[int32]bool, d)
				for len(seen) < d {
					p := int32(prevLo + rng.IntN(width))
					if !seen[p] {
						seen[p] = true
						g.preds[t] = append(g.preds[t], p)
					}
				}
				g.edges += d
			}
		}
		prevLo, prevHi = lo, hi
		lo = hi
		g.layers++
	}
	return g, nil
}

// mode is how GPU tasks run.
type mode string

const (
	// hetflow: GPU tasks are localexec GPU tasks (tf.EmplaceGPU(...).On(d)),
	// run by the GPU workers of their device's domain.
	modeHetflow mode = "hetflow"
	// baseline: no GPU domain; each GPU task is an ordinary CPU task that
	// builds the same gpu.Graph on its first run and launches it
	// synchronously from the CPU worker (the seed's oneTBB baseline:
	// "encapsulate each GPU task in a CPU function").
	modeBaseline mode = "baseline"
)

// instance is an htdg made runnable in one mode: a taskflow, its data and
// the devices it uses.
type instance struct {
	g    *htdg
	mode mode
	tf   *localexec.Taskflow
	devs []*gpu.Device
	x    []float32   // shared, read-only
	y    [][]float32 // per task
	dx   []*gpu.Buffer[float32]
	dy   []*gpu.Buffer[float32] // per GPU task (nil for CPU tasks)

	errMu sync.Mutex
	err   error // first error of a baseline GPU launch
}

func initX() []float32 {
	x := make([]float32, elems)
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

// build makes g runnable in mode m on devs: host vectors for every task,
// device vectors for every GPU task (x once per device), and the taskflow.
func build(g *htdg, m mode, devs []*gpu.Device) (*instance, error) {
	in := &instance{g: g, mode: m, devs: devs, x: initX(), y: make([][]float32, g.n)}
	in.dx = make([]*gpu.Buffer[float32], len(devs))
	for d, dev := range devs {
		b, err := gpu.Alloc[float32](dev, elems)
		if err != nil {
			return nil, err
		}
		if err := b.Write(in.x); err != nil {
			return nil, err
		}
		in.dx[d] = b
	}
	in.dy = make([]*gpu.Buffer[float32], g.n)
	backing := make([]float32, g.n*elems)
	in.tf = localexec.NewTaskflow(fmt.Sprintf("htdg-%d-%s", g.n, m))
	tasks := make([]localexec.Task, g.n)
	for i := range g.n {
		y := backing[i*elems : (i+1)*elems : (i+1)*elems]
		initY(y)
		in.y[i] = y
		name := fmt.Sprintf("t%d", i)
		if !g.gpu[i] {
			x := in.x
			tasks[i] = in.tf.Emplace(func() { saxpy(alpha, x, y) }).Name(name)
			continue
		}
		dev := devs[g.device[i]]
		dy, err := gpu.Alloc[float32](dev, elems)
		if err != nil {
			return nil, err
		}
		in.dy[i] = dy
		dx := in.dx[g.device[i]]
		// the GPU task: copy y in, y = a*x + y, copy y out (x is on the
		// device already), the seed's three operations in a chain
		body := func(gg *gpu.Graph) {
			h2d := gpu.H2D(gg, dy, y).Name("h2d_y")
			k := gpu.SaxpyNode(gg, elems, alpha, dx, dy).Name("saxpy")
			d2h := gpu.D2H(gg, y, dy).Name("d2h_y")
			h2d.Precede(k)
			k.Precede(d2h)
		}
		switch m {
		case modeHetflow:
			tasks[i] = in.tf.EmplaceGPU(body).On(g.device[i]).Name(name)
		case modeBaseline:
			var gg *gpu.Graph
			tasks[i] = in.tf.Emplace(func() {
				if gg == nil {
					gg = gpu.NewGraph(dev)
					body(gg)
				}
				if err := gg.Launch(); err != nil {
					in.fail(fmt.Errorf("task %s: %w", name, err))
				}
			}).Name(name)
		default:
			return nil, fmt.Errorf("htdg: unknown mode %q", m)
		}
	}
	for i, ps := range g.preds {
		for _, p := range ps {
			tasks[p].Precede(tasks[i])
		}
	}
	return in, nil
}

func (in *instance) fail(err error) {
	in.errMu.Lock()
	in.err = errors.Join(in.err, err)
	in.errMu.Unlock()
}

// executor returns an executor for the instance's mode: workers CPU workers,
// and in hetflow mode a GPU domain over the instance's devices.
func (in *instance) executor(workers int) *localexec.Executor {
	if in.mode == modeHetflow {
		return localexec.NewExecutor(localexec.WithWorkers(workers), localexec.WithDevices(in.devs...))
	}
	return localexec.NewExecutor(localexec.WithWorkers(workers), localexec.WithGPUs(0))
}

// run runs the taskflow once on ex.
func (in *instance) run(ex *localexec.Executor) error {
	err := ex.Run(in.tf).Wait()
	in.errMu.Lock()
	defer in.errMu.Unlock()
	return errors.Join(err, in.err)
}

// verify checks that after runs runs every task's y is y0 with runs SAXPYs
// applied, bit for bit (the kernel's Go body rounds as saxpy does).
func (in *instance) verify(runs int) error {
	want := make([]float32, elems)
	initY(want)
	for range runs {
		saxpy(alpha, in.x, want)
	}
	for i, y := range in.y {
		for j := range y {
			if y[j] != want[j] {
				kind := "CPU"
				if in.g.gpu[i] {
					kind = "GPU"
				}
				return fmt.Errorf("htdg: %s task t%d after %d runs: y[%d] = %v, want %v", kind, i, runs, j, y[j], want[j])
			}
		}
	}
	return nil
}
