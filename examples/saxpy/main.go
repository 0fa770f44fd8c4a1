// Command saxpy runs the seed paper's Listing 7 on the local executor: two CPU
// tasks, allocate_x and allocate_y, fill host vectors and allocate device
// buffers on GPU device 1; one GPU task on device 1 runs the GPU task graph
// h2d_x, h2d_y → saxpy → d2h_x, d2h_y. The result is checked against a plain
// Go loop; the command exits 1 on a mismatch (2 on bad flags).
//
//	go run ./examples/saxpy                 # 2 sim GPUs, n = 1M, a = 2
//	go run ./examples/saxpy -n 1000 -dot    # also print the graph as DOT
//
// On the default build the GPUs are sim devices (kernels run their Go body);
// built with -tags cuda the same program runs on real devices.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/hetflow/hetflow/gpu"
	"github.com/hetflow/hetflow/localexec"
)

type config struct {
	n       int
	a       float32
	gpus    int
	device  int
	workers int
	dot     io.Writer // nil: no DOT dump
}

func main() {
	var c config
	var a float64
	dot := flag.Bool("dot", false, "print the task graph as Graphviz DOT after the run")
	flag.IntVar(&c.n, "n", 1<<20, "vector length")
	flag.Float64Var(&a, "a", 2, "the scalar a of y = a*x + y")
	flag.IntVar(&c.gpus, "gpus", 2, "GPU devices the executor opens (sim devices on the default build)")
	flag.IntVar(&c.device, "device", 1, "device the GPU task runs on (.On)")
	flag.IntVar(&c.workers, "workers", 2, "CPU workers")
	flag.Parse()
	c.a = float32(a)
	if *dot {
		c.dot = os.Stdout
	}
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "saxpy:", err)
		os.Exit(2)
	}
	summary, err := run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "saxpy:", err)
		os.Exit(1)
	}
	fmt.Println(summary)
}

var errMismatch = errors.New("result differs from the CPU reference")

func (c config) validate() error {
	switch {
	case c.n <= 0 || c.n > 1<<31-1:
		return fmt.Errorf("-n %d: want 1 ≤ n < 2^31", c.n)
	case c.gpus < 1:
		return fmt.Errorf("-gpus %d: want at least one device", c.gpus)
	case c.device < 0 || c.device >= c.gpus:
		return fmt.Errorf("-device %d: want 0 ≤ device < -gpus (%d); Listing 7 uses device 1, so it needs -gpus 2 or more", c.device, c.gpus)
	case c.workers < 1:
		return fmt.Errorf("-workers %d: want at least one", c.workers)
	}
	return nil
}

// input returns the vectors of the built-in saxpy's (cluster/funcs/doc.go): x[i] = (i mod 97)/97,
// y[i] = (i mod 89)/89.
func input(n int) (x, y []float32) {
	x, y = make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(i%97) / 97
		y[i] = float32(i%89) / 89
	}
	return x, y
}

// run builds and runs Listing 7 and checks the result; it returns a one-line
// summary.
func run(c config) (string, error) {
	if err := c.validate(); err != nil {
		return "", err
	}
	ex := localexec.NewExecutor(localexec.WithWorkers(c.workers), localexec.WithGPUs(c.gpus))
	defer ex.Close()
	if err := ex.Err(); err != nil {
		return "", err
	}
	dev := ex.Device(c.device)
	if dev == nil {
		return "", fmt.Errorf("device %d: the executor has %d devices", c.device, len(ex.Devices()))
	}

	var (
		hx, hy     []float32
		dx, dy     *gpu.Buffer[float32]
		errX, errY error
	)
	tf := localexec.NewTaskflow("saxpy")
	allocX := tf.Emplace(func() {
		hx, _ = input(c.n)
		dx, errX = gpu.Alloc[float32](dev, c.n)
	}).Name("allocate_x")
	allocY := tf.Emplace(func() {
		_, hy = input(c.n)
		dy, errY = gpu.Alloc[float32](dev, c.n)
	}).Name("allocate_y")
	cudaflow := tf.EmplaceGPU(func(g *gpu.Graph) {
		h2dx := gpu.H2D(g, dx, hx).Name("h2d_x")
		h2dy := gpu.H2D(g, dy, hy).Name("h2d_y")
		kernel := gpu.SaxpyNode(g, c.n, c.a, dx, dy).Name("saxpy")
		d2hx := gpu.D2H(g, hx, dx).Name("d2h_x")
		d2hy := gpu.D2H(g, hy, dy).Name("d2h_y")
		kernel.Succeed(h2dx, h2dy).Precede(d2hx, d2hy)
	}).Name("cudaflow").On(c.device)
	cudaflow.Succeed(allocX, allocY)

	runErr := ex.Run(tf).Wait()
	if err := errors.Join(errX, errY); err != nil {
		return "", fmt.Errorf("allocating device buffers: %w", err)
	}
	if runErr != nil {
		return "", runErr
	}
	if c.dot != nil {
		if err := tf.Dump(c.dot); err != nil {
			return "", err
		}
	}

	if err := verify(c.n, c.a, hx, hy); err != nil {
		return "", err
	}
	var sum float64
	for _, v := range hy {
		sum += float64(v)
	}
	st := ex.Stats()
	timed := ""
	if dev.SimProfile() != nil {
		timed = "; timed sim, device time modeled: " + dev.SimStats().String()
	}
	return fmt.Sprintf("saxpy ok: n=%d a=%g on %s device %d (%d devices); sum(y)=%.6g; executed cpu=%d gpu%d=%d%s",
		c.n, c.a, gpu.Backend(), c.device, len(ex.Devices()), sum,
		st.Domain("cpu").Executed, c.device, st.Domain(fmt.Sprintf("gpu%d", c.device)).Executed, timed), nil
}

// verify checks x and y after the run against the plain-Go reference.
func verify(n int, a float32, x, y []float32) error {
	wantX, wantY := input(n)
	for i := range wantY {
		wantY[i] = float32(a*wantX[i]) + wantY[i]
	}
	if len(x) != n || len(y) != n {
		return fmt.Errorf("%w: got %d and %d elements, want %d", errMismatch, len(x), len(y), n)
	}
	bad, first := 0, -1
	for i := range wantY {
		if x[i] != wantX[i] || y[i] != wantY[i] {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%w: %d of %d elements, first at %d: x=%v y=%v, want x=%v y=%v",
			errMismatch, bad, n, first, x[first], y[first], wantX[first], wantY[first])
	}
	return nil
}
