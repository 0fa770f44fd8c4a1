package gpu

import (
	"fmt"
	"testing"
)

// BenchmarkLaunch3Node is one GPU task of the seed's HTDG experiment: h2d, saxpy over 1K
// elements, d2h, launched again and again (instantiated once).
func BenchmarkLaunch3Node(b *testing.B) {
	d := openDev(b)
	const n = 1024
	hx, out := make([]float32, n), make([]float32, n)
	x, y := mustAlloc[float32](b, d, n), mustAlloc[float32](b, d, n)
	g := NewGraph(d)
	in := H2D(g, x, hx)
	k := SaxpyNode(g, n, 2, x, y).Succeed(in)
	D2H(g, out, y).Succeed(k)
	if err := g.Launch(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := g.Launch(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLaunch1000Node is a 1000-node graph: shape "chain" is one dependency chain,
// "wide" is 10 parallel chains of 100 (each node a 1K saxpy).
func BenchmarkLaunch1000Node(b *testing.B) {
	for _, width := range []int{1, 10} {
		name := "chain"
		if width > 1 {
			name = fmt.Sprintf("wide%d", width)
		}
		b.Run(name, func(b *testing.B) {
			d := openDev(b)
			const n = 1024
			g := NewGraph(d)
			for w := range width {
				_ = w
				x, y := mustAlloc[float32](b, d, n), mustAlloc[float32](b, d, n)
				var prev *Node
				for range 1000 / width {
					k := SaxpyNode(g, n, 1, x, y)
					if prev != nil {
						k.Succeed(prev)
					}
					prev = k
				}
			}
			if err := g.Launch(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := g.Launch(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/node")
		})
	}
}

// BenchmarkSaxpyKernel1K is the kernel alone, on a stream (what the Go body costs).
func BenchmarkSaxpyKernel1K(b *testing.B) {
	d := openDev(b)
	const n = 1024
	x, y := mustAlloc[float32](b, d, n), mustAlloc[float32](b, d, n)
	g := NewGraph(d)
	SaxpyNode(g, n, 2, x, y)
	g.Launch()
	for b.Loop() {
		g.Launch()
	}
}

// BenchmarkCopy is raw host<->device copy throughput through the synchronous helpers.
func BenchmarkCopy(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20, 16 << 20} {
		d := openDev(b)
		host := make([]byte, size)
		buf := mustAlloc[byte](b, d, size)
		b.Run(fmt.Sprintf("H2D/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := buf.Write(host); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("D2H/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := buf.Read(host); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLaunch1000NodeStreams is BenchmarkLaunch1000Node/wide10 with UseStreams(true):
// the same on sim; on cuda it compares CUDA-graph launch with streams+events.
func BenchmarkLaunch1000NodeModes(b *testing.B) {
	for _, streams := range []bool{false, true} {
		b.Run(fmt.Sprintf("streams=%v", streams), func(b *testing.B) {
			d := openDev(b)
			const n = 1024
			g := NewGraph(d).UseStreams(streams)
			for range 10 {
				x, y := mustAlloc[float32](b, d, n), mustAlloc[float32](b, d, n)
				var prev *Node
				for range 100 {
					k := SaxpyNode(g, n, 1, x, y)
					if prev != nil {
						k.Succeed(prev)
					}
					prev = k
				}
			}
			if err := g.Launch(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := g.Launch(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
