package gpu_test

import (
	"fmt"

	"github.com/hetflow/hetflow/gpu"
)

// The seed's Listing 7 as a GPU graph on one device: copy x and y in, run saxpy, copy both out.
// Build once, launch as often as needed.
func Example() {
	devs, err := gpu.Open(1)
	if err != nil || len(devs) == 0 {
		fmt.Println("no device:", err)
		return
	}
	d := devs[0]
	defer d.Close()

	const n = 1000
	hx, hy := make([]float32, n), make([]float32, n)
	for i := range hx {
		hx[i], hy[i] = 1, float32(i)
	}
	dx, _ := gpu.Alloc[float32](d, n)
	dy, _ := gpu.Alloc[float32](d, n)

	g := gpu.NewGraph(d)
	h2dx := gpu.H2D(g, dx, hx).Name("h2d_x")
	h2dy := gpu.H2D(g, dy, hy).Name("h2d_y")
	kernel := g.Kernel(gpu.Saxpy, gpu.D1(gpu.Blocks(n, 256)), gpu.D1(256),
		int32(n), float32(2), dx, dy).Name("saxpy")
	d2hx := gpu.D2H(g, hx, dx).Name("d2h_x")
	d2hy := gpu.D2H(g, hy, dy).Name("d2h_y")
	kernel.Succeed(h2dx, h2dy).Precede(d2hx, d2hy)

	if err := g.Launch(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(g.Len(), "nodes; y[0], y[999] =", hy[0], hy[999])
	// Output: 5 nodes; y[0], y[999] = 2 1001
}

// A library that only takes a stream (here gpu.SaxpyAsync) becomes a graph node through a
// capture, the seed's Listing 8.
func ExampleGraph_Capture() {
	devs, _ := gpu.Open(1)
	d := devs[0]
	defer d.Close()

	x := []float32{1, 2, 3}
	y := []float32{10, 20, 30}
	dx, _ := gpu.Alloc[float32](d, len(x))
	dy, _ := gpu.Alloc[float32](d, len(y))
	g := gpu.NewGraph(d)
	g.Capture(func(s *gpu.Stream) error {
		if err := gpu.H2DAsync(s, dx, x); err != nil {
			return err
		}
		if err := gpu.H2DAsync(s, dy, y); err != nil {
			return err
		}
		if err := gpu.SaxpyAsync(s, len(x), 2, dx, dy); err != nil {
			return err
		}
		return gpu.D2HAsync(s, y, dy)
	}).Name("saxpy_capture")
	if err := g.Launch(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(y)
	// Output: [12 24 36]
}
