package gpu

import (
	"math/rand/v2"
	"testing"
)

// openDev opens one device of whatever backend this build has and closes it at the end.
func openDev(t testing.TB) *Device {
	t.Helper()
	return openDevs(t, 1)[0]
}

func openDevs(t testing.TB, n int) []*Device {
	t.Helper()
	devs, err := Open(n)
	if err != nil {
		t.Fatalf("Open(%d): %v", n, err)
	}
	if len(devs) < n {
		for _, d := range devs {
			d.Close()
		}
		t.Skipf("backend %s has %d devices, test needs %d", Backend(), len(devs), n)
	}
	t.Cleanup(func() {
		for _, d := range devs {
			if err := d.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	})
	return devs
}

func mustAlloc[T Elem](t testing.TB, d *Device, n int) *Buffer[T] {
	t.Helper()
	b, err := Alloc[T](d, n)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", n, err)
	}
	return b
}

func randF32(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*200 - 100
	}
	return s
}

// plainSaxpy is the reference the kernels are checked against.
func plainSaxpy(a float32, x, y []float32) []float32 {
	out := make([]float32, len(y))
	for i := range y {
		out[i] = float32(a*x[i]) + y[i]
	}
	return out
}

// plainKMeansStep is one reference k-means iteration: nearest centroid (lowest index on
// ties), sums and counts in point order, then means (empty clusters stay).
func plainKMeansStep(px, py, mx, my []float32) (assign []int32, nx, ny []float32, counts []int32) {
	k := len(mx)
	assign = make([]int32, len(px))
	sx, sy := make([]float32, k), make([]float32, k)
	counts = make([]int32, k)
	for i := range px {
		best, bj := float32(3.4028234663852886e38), 0
		for j := 0; j < k; j++ {
			dx, dy := px[i]-mx[j], py[i]-my[j]
			if d := float32(dx*dx) + float32(dy*dy); d < best {
				best, bj = d, j
			}
		}
		assign[i] = int32(bj)
		sx[bj] += px[i]
		sy[bj] += py[i]
		counts[bj]++
	}
	nx, ny = append([]float32(nil), mx...), append([]float32(nil), my...)
	for j := range nx {
		if counts[j] > 0 {
			nx[j], ny[j] = sx[j]/float32(counts[j]), sy[j]/float32(counts[j])
		}
	}
	return
}
