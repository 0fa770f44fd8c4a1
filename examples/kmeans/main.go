// Command kmeans runs the seed paper's Listing 9 (Figure 8): k-means
// clustering of 2-D points with the GPU steps inside a loop that a CPU
// condition task closes.
//
//	init (CPU) → h2d (GPU) → assign (GPU) → update (GPU) → converged? (CPU)
//	                           ↑                               │0     │1
//	                           └───────────────────────────────┘      ↓
//	                                                               d2h (GPU)
//
// init generates the points deterministically from -seed (-k Gaussian blobs
// on a circle)
// and picks -k of them as the initial centroids; h2d copies points and
// centroids to the device; assign zeroes the per-cluster sums and runs
// gpu.KMeansAssign; update runs gpu.KMeansUpdate and copies the centroids back
// to the host; the condition task stops when no centroid moved by -eps or
// more, or after -iters iterations; d2h copies the assignment out. Each GPU
// task's graph is built on its first run and replayed on every later one, so
// the loop builds nothing per iteration.
//
// The result is checked against a plain-Go k-means run from the same initial
// centroids (same number of iterations, centroids within 1e-4); the command
// exits 1 on a mismatch, 2 on bad flags.
//
//	go run ./examples/kmeans
//	go run ./examples/kmeans -n 1000000 -k 8 -seed 7
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/hetflow/hetflow/gpu"
	"github.com/hetflow/hetflow/localexec"
)

type config struct {
	n, k     int
	seed     uint64
	maxIters int
	eps      float64
	gpus     int
	device   int
	workers  int
	dot      io.Writer // nil: no DOT dump
}

func main() {
	var c config
	dot := flag.Bool("dot", false, "print the task graph as Graphviz DOT after the run")
	flag.IntVar(&c.n, "n", 100_000, "number of points")
	flag.IntVar(&c.k, "k", 5, "number of clusters (and of Gaussian blobs the points come from)")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the generated points and initial centroids")
	flag.IntVar(&c.maxIters, "iters", 100, "iteration limit")
	flag.Float64Var(&c.eps, "eps", 1e-4, "converged when no centroid moves this far or farther in one iteration")
	flag.IntVar(&c.gpus, "gpus", 1, "GPU devices the executor opens (sim devices on the default build)")
	flag.IntVar(&c.device, "device", 0, "device the GPU tasks run on")
	flag.IntVar(&c.workers, "workers", 2, "CPU workers")
	flag.Parse()
	if *dot {
		c.dot = os.Stdout
	}
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "kmeans:", err)
		os.Exit(2)
	}
	res, err := run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kmeans:", err)
		os.Exit(1)
	}
	fmt.Print(res)
}

var errMismatch = errors.New("result differs from the CPU reference")

func (c config) validate() error {
	switch {
	case c.n <= 0 || c.n > 1<<31-1:
		return fmt.Errorf("-n %d: want 1 ≤ n < 2^31", c.n)
	case c.k <= 0 || c.k > c.n:
		return fmt.Errorf("-k %d: want 1 ≤ k ≤ n (%d)", c.k, c.n)
	case c.maxIters < 1:
		return fmt.Errorf("-iters %d: want at least one", c.maxIters)
	case !(c.eps >= 0) || math.IsInf(c.eps, 0):
		return fmt.Errorf("-eps %v: want a finite number ≥ 0", c.eps)
	case c.gpus < 1:
		return fmt.Errorf("-gpus %d: want at least one device", c.gpus)
	case c.device < 0 || c.device >= c.gpus:
		return fmt.Errorf("-device %d: want 0 ≤ device < -gpus (%d)", c.device, c.gpus)
	case c.workers < 1:
		return fmt.Errorf("-workers %d: want at least one", c.workers)
	}
	return nil
}

// problem is one generated input: points and the initial centroids.
type problem struct {
	px, py []float32
	mx, my []float32
}

// generate draws n points from k Gaussian blobs (standard deviation 1) whose
// centres lie evenly spaced, at a random angle, on a circle of radius 3k
// around the origin, and picks k distinct points as the initial centroids,
// all from seed.
func generate(n, k int, seed uint64) problem {
	rng := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	cx, cy := make([]float64, k), make([]float64, k)
	phi, r := rng.Float64()*2*math.Pi, 3*float64(k)
	for j := range cx {
		a := phi + 2*math.Pi*float64(j)/float64(k)
		cx[j], cy[j] = r*math.Cos(a), r*math.Sin(a)
	}
	p := problem{px: make([]float32, n), py: make([]float32, n), mx: make([]float32, k), my: make([]float32, k)}
	for i := range p.px {
		j := rng.IntN(k)
		p.px[i] = float32(cx[j] + rng.NormFloat64())
		p.py[i] = float32(cy[j] + rng.NormFloat64())
	}
	for j, i := range rng.Perm(n)[:k] {
		p.mx[j], p.my[j] = p.px[i], p.py[i]
	}
	return p
}

// result is what a k-means run ends with.
type result struct {
	iters  int
	mx, my []float32
	assign []int32
}

// maxMove is the largest distance a centroid moved between two iterations.
func maxMove(mx, my, px, py []float32) float64 {
	m := 0.0
	for j := range mx {
		m = max(m, math.Hypot(float64(mx[j])-float64(px[j]), float64(my[j])-float64(py[j])))
	}
	return m
}

// reference is k-means in plain Go with the same float32 arithmetic, in the
// same order, as the kernels' Go bodies: the CPU reference.
func reference(p problem, eps float64, maxIters int) result {
	n, k := len(p.px), len(p.mx)
	mx, my := append([]float32(nil), p.mx...), append([]float32(nil), p.my...)
	prevX, prevY := make([]float32, k), make([]float32, k)
	assign := make([]int32, n)
	sx, sy, cnt := make([]float32, k), make([]float32, k), make([]int32, k)
	it := 0
	for {
		it++
		copy(prevX, mx)
		copy(prevY, my)
		clear(sx)
		clear(sy)
		clear(cnt)
		for i := range n {
			x, y := p.px[i], p.py[i]
			best, bj := float32(math.MaxFloat32), 0
			for j := range k {
				dx, dy := x-mx[j], y-my[j]
				if d := float32(dx*dx) + float32(dy*dy); d < best {
					best, bj = d, j
				}
			}
			assign[i] = int32(bj)
			sx[bj] += x
			sy[bj] += y
			cnt[bj]++
		}
		for j := range k {
			if cnt[j] > 0 {
				c := float32(cnt[j])
				mx[j], my[j] = sx[j]/c, sy[j]/c
			}
		}
		if maxMove(mx, my, prevX, prevY) < eps || it >= maxIters {
			return result{iters: it, mx: mx, my: my, assign: assign}
		}
	}
}

// report is what run returns: the GPU result, the reference it matched, and
// how often the GPU graphs were built and launched.
type report struct {
	c           config
	gpu, ref    result
	builds      int // GPU graphs built (one per GPU task)
	launches    int // GPU graph launches, all tasks
	instantiate int // GPU graph instantiations, all tasks
	stats       localexec.Stats
	sim         *gpu.SimStats // the device's, on the timed sim
}

func (r report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kmeans ok: n=%d k=%d seed=%d on %s device %d: %d iterations (limit %d, eps %g), same as the CPU reference\n",
		r.c.n, r.c.k, r.c.seed, gpu.Backend(), r.c.device, r.gpu.iters, r.c.maxIters, r.c.eps)
	fmt.Fprintf(&b, "GPU graphs: %d built, %d instantiated, %d launches; executed cpu=%d gpu%d=%d\n",
		r.builds, r.instantiate, r.launches, r.stats.Domain("cpu").Executed, r.c.device,
		r.stats.Domain(fmt.Sprintf("gpu%d", r.c.device)).Executed)
	if r.sim != nil {
		fmt.Fprintf(&b, "timed sim, device time modeled: %v\n", r.sim)
	}
	counts := make([]int, r.c.k)
	for _, a := range r.gpu.assign {
		counts[a]++
	}
	for j := range r.gpu.mx {
		fmt.Fprintf(&b, "centroid %d: (%9.5f, %9.5f)  %d points\n", j, r.gpu.mx[j], r.gpu.my[j], counts[j])
	}
	return b.String()
}

// run builds Listing 9's taskflow, runs it once and checks it against the
// reference.
func run(c config) (report, error) {
	rep := report{c: c}
	if err := c.validate(); err != nil {
		return rep, err
	}
	ex := localexec.NewExecutor(localexec.WithWorkers(c.workers), localexec.WithGPUs(c.gpus))
	defer ex.Close()
	if err := ex.Err(); err != nil {
		return rep, err
	}
	dev := ex.Device(c.device)
	if dev == nil {
		return rep, fmt.Errorf("device %d: the executor has %d devices", c.device, len(ex.Devices()))
	}

	var (
		p       problem
		km      *gpu.KMeans
		initErr error
		// host side of the loop: centroids copied out by update, the
		// previous iteration's, the final assignment
		curX, curY   []float32
		prevX, prevY []float32
		assign       []int32
		iters        int
		graphs       []*gpu.Graph
	)
	built := func(g *gpu.Graph) { graphs = append(graphs, g) } // GPU tasks of one device run one at a time

	tf := localexec.NewTaskflow("kmeans")
	initT := tf.Emplace(func() {
		p = generate(c.n, c.k, c.seed)
		curX, curY = append([]float32(nil), p.mx...), append([]float32(nil), p.my...)
		prevX, prevY = append([]float32(nil), p.mx...), append([]float32(nil), p.my...)
		assign = make([]int32, c.n)
		iters = 0
		km, initErr = gpu.NewKMeans(dev, c.n, c.k)
	}).Name("init")
	h2d := tf.EmplaceGPU(func(g *gpu.Graph) {
		built(g)
		gpu.H2D(g, km.PX, p.px).Name("h2d_px")
		gpu.H2D(g, km.PY, p.py).Name("h2d_py")
		gpu.H2D(g, km.MX, p.mx).Name("h2d_mx")
		gpu.H2D(g, km.MY, p.my).Name("h2d_my")
	}).Name("h2d").On(c.device)
	assignT := tf.EmplaceGPU(func(g *gpu.Graph) {
		built(g)
		zx := gpu.Memset(g, km.SX, 0).Name("zero_sx")
		zy := gpu.Memset(g, km.SY, 0).Name("zero_sy")
		zc := gpu.Memset(g, km.C, 0).Name("zero_c")
		g.Kernel(gpu.KMeansAssign, gpu.D1(gpu.Blocks(c.n, gpu.BlockSize)), gpu.D1(gpu.BlockSize),
			int32(c.n), int32(c.k), km.PX, km.PY, km.MX, km.MY, km.Assign, km.SX, km.SY, km.C).
			Name("assign").Succeed(zx, zy, zc)
	}).Name("assign").On(c.device)
	update := tf.EmplaceGPU(func(g *gpu.Graph) {
		built(g)
		u := g.Kernel(gpu.KMeansUpdate, gpu.D1(gpu.Blocks(c.k, gpu.BlockSize)), gpu.D1(gpu.BlockSize),
			int32(c.k), km.MX, km.MY, km.SX, km.SY, km.C).Name("update")
		u.Precede(gpu.D2H(g, curX, km.MX).Name("d2h_mx"), gpu.D2H(g, curY, km.MY).Name("d2h_my"))
	}).Name("update").On(c.device)
	cond := tf.EmplaceCondition(func() int {
		iters++
		move := maxMove(curX, curY, prevX, prevY)
		copy(prevX, curX)
		copy(prevY, curY)
		if move < c.eps || iters >= c.maxIters {
			return 1
		}
		return 0
	}).Name("converged?")
	d2h := tf.EmplaceGPU(func(g *gpu.Graph) {
		built(g)
		gpu.D2H(g, assign, km.Assign).Name("d2h_assign")
	}).Name("d2h").On(c.device)

	initT.Precede(h2d)
	h2d.Precede(assignT)
	assignT.Precede(update)
	update.Precede(cond)
	cond.Precede(assignT, d2h) // 0: another iteration, 1: copy out

	runErr := ex.Run(tf).Wait()
	if initErr != nil {
		return rep, fmt.Errorf("allocating device buffers: %w", initErr)
	}
	if runErr != nil {
		return rep, runErr
	}
	if c.dot != nil {
		if err := tf.Dump(c.dot); err != nil {
			return rep, err
		}
	}
	rep.gpu = result{iters: iters, mx: curX, my: curY, assign: assign}
	rep.builds = len(graphs)
	for _, g := range graphs {
		st := g.Stats()
		rep.launches += st.Launches
		rep.instantiate += st.Instantiations
	}
	rep.stats = ex.Stats()
	if d := ex.Device(c.device); d != nil && d.SimProfile() != nil {
		st := d.SimStats()
		rep.sim = &st
	}
	rep.ref = reference(p, c.eps, c.maxIters)
	if err := compare(rep.gpu, rep.ref, 1e-4); err != nil {
		return rep, err
	}
	// h2d, assign, update and d2h: each built and instantiated once
	if rep.builds != 4 || rep.instantiate != 4 || rep.launches != 2+2*iters {
		return rep, fmt.Errorf("GPU graphs built %d, instantiated %d, launched %d times in %d iterations; want 4, 4, %d",
			rep.builds, rep.instantiate, rep.launches, iters, 2+2*iters)
	}
	return rep, nil
}

// compare checks a GPU result against the reference: the same iterations,
// centroids within tol, and (allowing for sums that on CUDA are added in
// another order) at most one point in a thousand assigned differently.
func compare(got, want result, tol float64) error {
	if got.iters != want.iters {
		return fmt.Errorf("%w: %d iterations, the reference took %d", errMismatch, got.iters, want.iters)
	}
	for j := range want.mx {
		if math.Abs(float64(got.mx[j]-want.mx[j])) > tol || math.Abs(float64(got.my[j]-want.my[j])) > tol {
			return fmt.Errorf("%w: centroid %d is (%v, %v), the reference's (%v, %v)",
				errMismatch, j, got.mx[j], got.my[j], want.mx[j], want.my[j])
		}
	}
	diff := 0
	for i := range want.assign {
		if got.assign[i] != want.assign[i] {
			diff++
		}
	}
	if diff*1000 > len(want.assign) {
		return fmt.Errorf("%w: %d of %d points assigned differently", errMismatch, diff, len(want.assign))
	}
	return nil
}
