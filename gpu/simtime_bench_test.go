//go:build !cuda

package gpu

import (
	"testing"
	"time"
)

// BenchmarkTimedLaunch3Node is BenchmarkLaunch3Node on a timed sim device whose clock is a
// fake one (its sleeps return at once): ns/op is the CPU cost of a launch with the model, the
// sim's share of the host's time, not the modelled device time. host=goroutine finds the
// calling goroutine's Host by its id, as Graph.Launch does; host=given passes one.
func BenchmarkTimedLaunch3Node(b *testing.B) {
	for _, given := range []bool{false, true} {
		name := "host=goroutine"
		if given {
			name = "host=given"
		}
		b.Run(name, func(b *testing.B) {
			p := H200
			devs, err := openSim(1, &p, newSimWorld(&fakeClock{}, curGoid, 0))
			if err != nil {
				b.Fatal(err)
			}
			d := devs[0]
			defer d.Close()
			const n = 1024
			hx, out := make([]float32, n), make([]float32, n)
			x, y := mustAlloc[float32](b, d, n), mustAlloc[float32](b, d, n)
			g := NewGraph(d)
			in := H2D(g, x, hx)
			k := SaxpyNode(g, n, 2, x, y).Succeed(in)
			D2H(g, out, y).Succeed(k)
			var h *Host
			if given {
				h = NewHost()
			}
			if err := g.LaunchFrom(h); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := g.LaunchFrom(h); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(d.SimStats().Modeled)/float64(time.Duration(b.N+1))/3, "modeled-ns/op-per-node")
		})
	}
}
