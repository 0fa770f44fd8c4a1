package gpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// genPoints makes n points around k well-separated centres, deterministically from seed.
func genPoints(seed uint64, n, k int) (px, py []float32) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e37))
	px, py = make([]float32, n), make([]float32, n)
	for i := range px {
		c := i % k
		px[i] = float32(c*10) + float32(r.NormFloat64())
		py[i] = float32((c%3)*10) + float32(r.NormFloat64())
	}
	return
}

func closeTo(a, b []float32, rel float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > rel*math.Max(1, math.Abs(float64(b[i]))) {
			return false
		}
	}
	return true
}

// TestKMeansStepMatchesLoop runs KMeans.Step on the device and the plain loop side by side for
// several iterations. Assignments and counts must be equal; centroids equal on sim and within
// float tolerance on cuda (atomic adds in a varying order).
func TestKMeansStepMatchesLoop(t *testing.T) {
	d := openDev(t)
	for _, tc := range []struct{ n, k int }{{1, 1}, {10, 3}, {1000, 4}, {2049, 7}, {300, 300}} {
		px, py := genPoints(uint64(tc.n), tc.n, tc.k)
		mx, my := slices.Clone(px[:tc.k]), slices.Clone(py[:tc.k])
		km, err := NewKMeans(d, tc.n, tc.k)
		if err != nil {
			t.Fatal(err)
		}
		g := NewGraph(d)
		hmx, hmy := slices.Clone(mx), slices.Clone(my)
		lx := H2D(g, km.PX, px)
		ly := H2D(g, km.PY, py)
		lmx := H2D(g, km.MX, hmx)
		lmy := H2D(g, km.MY, hmy)
		first, last := km.Step(g)
		for _, f := range first {
			f.Succeed(lx, ly, lmx, lmy)
		}
		gotA, gotC := make([]int32, tc.n), make([]int32, tc.k)
		D2H(g, hmx, km.MX).Succeed(last)
		D2H(g, hmy, km.MY).Succeed(last)
		D2H(g, gotA, km.Assign).Succeed(last)
		D2H(g, gotC, km.C).Succeed(last)
		for iter := range 4 {
			// the graph reloads hmx/hmy (its own output of the previous launch)
			if err := g.Launch(); err != nil {
				t.Fatalf("n=%d k=%d iter %d: %v", tc.n, tc.k, iter, err)
			}
			wantA, nx, ny, wantC := plainKMeansStep(px, py, mx, my)
			if !slices.Equal(gotA, wantA) || !slices.Equal(gotC, wantC) {
				t.Fatalf("n=%d k=%d iter %d: assignments or counts differ", tc.n, tc.k, iter)
			}
			tol := 0.0
			if Backend() != "sim" {
				tol = 1e-5
			}
			if !closeTo(hmx, nx, tol) || !closeTo(hmy, ny, tol) {
				t.Fatalf("n=%d k=%d iter %d: centroids %v,%v want %v,%v", tc.n, tc.k, iter, hmx, hmy, nx, ny)
			}
			mx, my = nx, ny
		}
		if err := km.Free(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNewKMeansRejectsBadSizes(t *testing.T) {
	d := openDev(t)
	if _, err := NewKMeans(d, 0, 1); err == nil {
		t.Fatal("NewKMeans(0, 1) succeeded")
	}
	if _, err := NewKMeans(d, 5, -1); err == nil {
		t.Fatal("NewKMeans(5, -1) succeeded")
	}
}

// TestSaxpyKernelDirect checks the kernel itself, with grids larger than n (tail threads must
// do nothing) and a view offset.
func TestSaxpyKernelDirect(t *testing.T) {
	d := openDev(t)
	r := rand.New(rand.NewPCG(7, 7))
	n := 1000
	hx, hy := randF32(r, n), randF32(r, n)
	x, y := mustAlloc[float32](t, d, n), mustAlloc[float32](t, d, n)
	if err := x.Write(hx); err != nil {
		t.Fatal(err)
	}
	if err := y.Write(hy); err != nil {
		t.Fatal(err)
	}
	xv, _ := x.Slice(100, 600)
	yv, _ := y.Slice(100, 600)
	g := NewGraph(d)
	g.Kernel(Saxpy, D1(8), D1(128), int32(500), float32(-1.25), xv, yv) // 1024 threads for 500
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := y.Read(got); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(hy)
	copy(want[100:600], plainSaxpy(-1.25, hx[100:600], hy[100:600]))
	if !slices.Equal(got, want) {
		t.Fatal("saxpy over a view differs from the plain loop")
	}
}
