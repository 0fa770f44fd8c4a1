package main

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func cfg(n, k int, seed uint64) config {
	return config{n: n, k: k, seed: seed, maxIters: 100, eps: 1e-4, gpus: 1, device: 0, workers: 2}
}

// The loop converges before the limit, matches the reference (run checks
// it), replays its GPU graphs, and finds the blobs the points came from.
func TestListing9(t *testing.T) {
	c := cfg(20_000, 5, 1)
	var dot bytes.Buffer
	c.dot = &dot
	r, err := run(c)
	if err != nil {
		t.Fatal(err)
	}
	if r.gpu.iters < 2 || r.gpu.iters >= c.maxIters {
		t.Fatalf("%d iterations", r.gpu.iters)
	}
	// per iteration: assign and update on the GPU, the condition on the CPU
	if got := r.stats.Domain("gpu0").Executed; got != uint64(2+2*r.gpu.iters) {
		t.Fatalf("gpu0 executed %d tasks in %d iterations", got, r.gpu.iters)
	}
	if got := r.stats.Domain("cpu").Executed; got != uint64(1+r.gpu.iters) {
		t.Fatalf("cpu executed %d tasks in %d iterations", got, r.gpu.iters)
	}
	// converged: every centroid is (within float32 summing error) the mean
	// of the points assigned to it, and every point is nearest its centroid
	p := generate(c.n, c.k, c.seed)
	sx, sy, cnt := make([]float64, c.k), make([]float64, c.k), make([]int, c.k)
	for i, a := range r.gpu.assign {
		sx[a] += float64(p.px[i])
		sy[a] += float64(p.py[i])
		cnt[a]++
		d := func(j int) float64 {
			return math.Hypot(float64(p.px[i]-r.gpu.mx[j]), float64(p.py[i]-r.gpu.my[j]))
		}
		for j := range c.k {
			if d(j) < d(int(a))-1e-3 {
				t.Fatalf("point %d assigned to %d but nearer %d", i, a, j)
			}
		}
	}
	for j := range c.k {
		if cnt[j] == 0 {
			continue
		}
		if mx, my := sx[j]/float64(cnt[j]), sy[j]/float64(cnt[j]); math.Abs(mx-float64(r.gpu.mx[j])) > 1e-3 || math.Abs(my-float64(r.gpu.my[j])) > 1e-3 {
			t.Errorf("centroid %d at (%v, %v), its points' mean (%v, %v)", j, r.gpu.mx[j], r.gpu.my[j], mx, my)
		}
	}
	for _, s := range []string{"init", "h2d", "assign", "update", "converged?", "d2h", `label="0"`, `label="1"`} {
		if !strings.Contains(dot.String(), s) {
			t.Errorf("DOT lacks %s", s)
		}
	}
	if out := r.String(); !strings.Contains(out, "kmeans ok") || strings.Count(out, "centroid ") != 5 {
		t.Errorf("report:\n%s", out)
	}
}

func TestIterationLimitAndDeterminism(t *testing.T) {
	c := cfg(3000, 8, 4)
	c.maxIters = 3
	a, err := run(c)
	if err != nil {
		t.Fatal(err)
	}
	b, err := run(c)
	if err != nil {
		t.Fatal(err)
	}
	if a.gpu.iters != 3 || !slices.Equal(a.gpu.mx, b.gpu.mx) || !slices.Equal(a.gpu.assign, b.gpu.assign) {
		t.Fatalf("iters %d; runs differ: %v vs %v", a.gpu.iters, a.gpu.mx, b.gpu.mx)
	}
	c.seed = 5
	d, err := run(c)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a.gpu.mx, d.gpu.mx) {
		t.Fatal("another seed gave the same centroids")
	}
}

// Small and odd shapes: one point, k = n, a partial last block, device 1.
func TestShapes(t *testing.T) {
	for _, c := range []config{cfg(1, 1, 1), cfg(7, 7, 2), cfg(257, 3, 3)} {
		if _, err := run(c); err != nil {
			t.Fatalf("n=%d k=%d: %v", c.n, c.k, err)
		}
	}
	c := cfg(500, 2, 9)
	c.gpus, c.device = 2, 1
	r, err := run(c)
	if err != nil {
		t.Fatal(err)
	}
	if r.stats.Domain("gpu0").Executed != 0 || r.stats.Domain("gpu1").Executed == 0 {
		t.Fatalf("stats %+v", r.stats.Domains)
	}
}

func TestCompareCatchesMismatch(t *testing.T) {
	ref := reference(generate(1000, 3, 1), 1e-4, 100)
	cp := func() result {
		return result{iters: ref.iters, mx: slices.Clone(ref.mx), my: slices.Clone(ref.my), assign: slices.Clone(ref.assign)}
	}
	if err := compare(cp(), ref, 1e-4); err != nil {
		t.Fatal(err)
	}
	r := cp()
	r.iters++
	if err := compare(r, ref, 1e-4); !errors.Is(err, errMismatch) {
		t.Errorf("iterations: %v", err)
	}
	r = cp()
	r.my[2] += 2e-4
	if err := compare(r, ref, 1e-4); !errors.Is(err, errMismatch) || !strings.Contains(err.Error(), "centroid 2") {
		t.Errorf("centroid: %v", err)
	}
	r = cp()
	r.assign[0], r.assign[1] = r.assign[0]+1, r.assign[1]+1
	if err := compare(r, ref, 1e-4); !errors.Is(err, errMismatch) {
		t.Errorf("assignments: %v", err)
	}
}

func TestBadConfig(t *testing.T) {
	mod := func(f func(*config)) config { c := cfg(100, 3, 1); f(&c); return c }
	for name, c := range map[string]config{
		"n":       mod(func(c *config) { c.n = 0 }),
		"k":       mod(func(c *config) { c.k = 101 }),
		"k0":      mod(func(c *config) { c.k = 0 }),
		"iters":   mod(func(c *config) { c.maxIters = 0 }),
		"eps":     mod(func(c *config) { c.eps = math.NaN() }),
		"gpus":    mod(func(c *config) { c.gpus = 0 }),
		"device":  mod(func(c *config) { c.device = 1 }),
		"workers": mod(func(c *config) { c.workers = 0 }),
	} {
		if _, err := run(c); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
