// Command saxpy-capture runs the seed paper's Listing 8: Listing 7 (two CPU
// tasks allocate_x and allocate_y, then one GPU task on device 1) with the GPU
// task graph recorded through the capturer. The GPU task's graph has a single
// capture node whose function makes stream-based calls (gpu.H2DAsync,
// gpu.SaxpyAsync, gpu.D2HAsync), the way a library that only takes a stream
// is put into a graph. The result is checked against a plain Go loop; the
// command exits 1 on a mismatch (2 on bad flags).
//
//	go run ./examples/saxpy-capture
//	go run ./examples/saxpy-capture -n 1000 -runs 3 -dot
//
// The capture function runs once, when the graph is first instantiated; each
// later run of the taskflow replays what it recorded (-runs N shows it: every
// run starts from fresh host vectors and must give the same result).
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
	runs    int       // runs of the taskflow; each must give the reference result
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
	flag.IntVar(&c.runs, "runs", 1, "times to run the taskflow (the capture is recorded once, then replayed)")
	flag.Parse()
	c.a = float32(a)
	if *dot {
		c.dot = os.Stdout
	}
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "saxpy-capture:", err)
		os.Exit(2)
	}
	summary, err := run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "saxpy-capture:", err)
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
	case c.runs < 1:
		return fmt.Errorf("-runs %d: want at least one", c.runs)
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

	// The host vectors are allocated once (the capture records these
	// slices) and refilled by allocate_x / allocate_y on every run; the
	// device buffers are allocated on the first run.
	hx, hy := make([]float32, c.n), make([]float32, c.n)
	var (
		dx, dy     *gpu.Buffer[float32]
		errX, errY error
		captures   int
	)
	tf := localexec.NewTaskflow("saxpy-capture")
	allocX := tf.Emplace(func() {
		x, _ := input(c.n)
		copy(hx, x)
		if dx == nil {
			dx, errX = gpu.Alloc[float32](dev, c.n)
		}
	}).Name("allocate_x")
	allocY := tf.Emplace(func() {
		_, y := input(c.n)
		copy(hy, y)
		if dy == nil {
			dy, errY = gpu.Alloc[float32](dev, c.n)
		}
	}).Name("allocate_y")
	capturer := tf.EmplaceGPU(func(g *gpu.Graph) {
		g.Capture(func(s *gpu.Stream) error {
			captures++
			return saxpyOnStream(s, c.n, c.a, hx, hy, dx, dy)
		}).Name("saxpy_capture")
	}).Name("capturer").On(c.device)
	capturer.Succeed(allocX, allocY)

	for r := 0; r < c.runs; r++ {
		runErr := ex.Run(tf).Wait()
		if err := errors.Join(errX, errY); err != nil {
			return "", fmt.Errorf("allocating device buffers: %w", err)
		}
		if runErr != nil {
			return "", fmt.Errorf("run %d: %w", r+1, runErr)
		}
		if err := verify(c.n, c.a, hx, hy); err != nil {
			return "", fmt.Errorf("run %d: %w", r+1, err)
		}
	}
	if captures != 1 {
		return "", fmt.Errorf("the capture function ran %d times in %d runs, want once", captures, c.runs)
	}
	if c.dot != nil {
		if err := tf.Dump(c.dot); err != nil {
			return "", err
		}
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
	return fmt.Sprintf("saxpy-capture ok: n=%d a=%g on %s device %d (%d devices); %d runs, 1 capture; sum(y)=%.6g; executed cpu=%d gpu%d=%d%s",
		c.n, c.a, gpu.Backend(), c.device, len(ex.Devices()), c.runs, sum,
		st.Domain("cpu").Executed, c.device, st.Domain(fmt.Sprintf("gpu%d", c.device)).Executed, timed), nil
}

// saxpyOnStream is a stream-based library call in the style of cuBLAS: it
// only takes a stream. It copies x and y in, runs y = a*x + y and copies both
// out, all queued on s.
func saxpyOnStream(s *gpu.Stream, n int, a float32, hx, hy []float32, dx, dy *gpu.Buffer[float32]) error {
	if err := gpu.H2DAsync(s, dx, hx); err != nil {
		return fmt.Errorf("h2d_x: %w", err)
	}
	if err := gpu.H2DAsync(s, dy, hy); err != nil {
		return fmt.Errorf("h2d_y: %w", err)
	}
	if err := gpu.SaxpyAsync(s, n, a, dx, dy); err != nil {
		return fmt.Errorf("saxpy: %w", err)
	}
	if err := gpu.D2HAsync(s, hx, dx); err != nil {
		return fmt.Errorf("d2h_x: %w", err)
	}
	if err := gpu.D2HAsync(s, hy, dy); err != nil {
		return fmt.Errorf("d2h_y: %w", err)
	}
	return nil
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
