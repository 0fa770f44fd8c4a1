package main

import (
	"fmt"
	"github.com/hetflow/hetflow/internal/htdg"
	"runtime"
	"testing"

	"github.com/hetflow/hetflow/gpu"
)

// BenchmarkHTDG runs one random HTDG per size and mode; ns/op is one run of
// the whole graph.
func BenchmarkHTDG(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		for _, m := range []mode{modeHetflow, modeBaseline} {
			b.Run(fmt.Sprintf("%s/%d", m, n), func(b *testing.B) {
				g, err := htdg.Generate(n, 1, 2)
				if err != nil {
					b.Fatal(err)
				}
				devs, _ := gpu.Open(2)
				defer func() {
					for _, d := range devs {
						_ = d.Close()
					}
				}()
				in, err := htdg.Build(g, m, devs)
				if err != nil {
					b.Fatal(err)
				}
				ex := in.Executor(runtime.GOMAXPROCS(0))
				defer ex.Close()
				if err := in.Run(ex); err != nil { // builds the GPU graphs
					b.Fatal(err)
				}
				b.ResetTimer()
				for b.Loop() {
					if err := in.Run(ex); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkSimLaunch is one GPU task's graph (copy in, saxpy over 1K, copy
// out) launched on a sim device from a plain goroutine and from one locked to
// its OS thread, as localexec's GPU workers are. It isolates what a GPU task
// costs on the sim backend apart from scheduling.
func BenchmarkSimLaunch(b *testing.B) {
	for _, locked := range []bool{false, true} {
		b.Run(fmt.Sprintf("locked=%v", locked), func(b *testing.B) {
			devs, _ := gpu.Open(1)
			d := devs[0]
			defer d.Close()
			dx, _ := gpu.Alloc[float32](d, htdg.Elems)
			dy, _ := gpu.Alloc[float32](d, htdg.Elems)
			hy := make([]float32, htdg.Elems)
			g := gpu.NewGraph(d)
			h2d := gpu.H2D(g, dy, hy)
			k := gpu.SaxpyNode(g, htdg.Elems, htdg.Alpha, dx, dy)
			h2d.Precede(k)
			k.Precede(gpu.D2H(g, hy, dy))
			done := make(chan error)
			go func() {
				if locked {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
				}
				if err := g.Launch(); err != nil {
					done <- err
					return
				}
				b.ResetTimer()
				for b.Loop() {
					if err := g.Launch(); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
