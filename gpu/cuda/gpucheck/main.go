// Command gpucheck runs fixed saxpy and k-means problems and a 1000-node launch-time
// comparison on whatever backend it was built with, so gpu/cuda/check.sh can compare a
// -tags cuda build against the sim build.
//
//	gpucheck run OUT.json        # results and timings of this build's backend
//	gpucheck compare A.json B.json  # exit 1 unless saxpy is bit-equal and k-means agrees
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"time"
	"unsafe"

	"github.com/hetflow/hetflow/gpu"
)

type result struct {
	Backend     string    `json:"backend"`
	SaxpyN      int       `json:"saxpy_n"`
	SaxpySHA256 string    `json:"saxpy_sha256"`
	KMeansIters int       `json:"kmeans_iters"`
	Centroids   []float32 `json:"centroids"` // x0, y0, x1, y1, ...
	Counts      []int32   `json:"counts"`
	GraphUS     float64   `json:"graph_launch_us"`   // median, 1000-node graph
	StreamsUS   float64   `json:"streams_launch_us"` // median, same graph via streams+events
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) == 2 && args[0] == "run":
		r, err := measure()
		if err != nil {
			return err
		}
		b, _ := json.MarshalIndent(r, "", "  ")
		fmt.Printf("%s: saxpy %s..., k-means %d iterations, 1000-node launch: graph %.1f us, streams %.1f us\n",
			r.Backend, r.SaxpySHA256[:12], r.KMeansIters, r.GraphUS, r.StreamsUS)
		return os.WriteFile(args[1], b, 0o644)
	case len(args) == 3 && args[0] == "compare":
		a, err := load(args[1])
		if err != nil {
			return err
		}
		b, err := load(args[2])
		if err != nil {
			return err
		}
		return compare(a, b)
	}
	return errors.New("usage: gpucheck run OUT.json | gpucheck compare A.json B.json")
}

func load(path string) (*result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

func compare(a, b *result) error {
	var errs []error
	if a.SaxpySHA256 != b.SaxpySHA256 || a.SaxpyN != b.SaxpyN {
		errs = append(errs, fmt.Errorf("saxpy differs: %s %s vs %s %s", a.Backend, a.SaxpySHA256, b.Backend, b.SaxpySHA256))
	} else {
		fmt.Println("saxpy: equal (bit for bit)")
	}
	if !slices.Equal(a.Counts, b.Counts) {
		errs = append(errs, fmt.Errorf("k-means cluster sizes differ: %v vs %v", a.Counts, b.Counts))
	}
	worst := 0.0
	if len(a.Centroids) != len(b.Centroids) {
		errs = append(errs, errors.New("k-means centroid counts differ"))
	} else {
		for i := range a.Centroids {
			d := math.Abs(float64(a.Centroids[i]-b.Centroids[i])) / math.Max(1, math.Abs(float64(b.Centroids[i])))
			worst = math.Max(worst, d)
		}
		if worst > 1e-4 {
			errs = append(errs, fmt.Errorf("k-means centroids differ by %.2g (relative)", worst))
		}
	}
	if len(errs) == 0 {
		fmt.Printf("k-means: equal (sizes exact, centroids within %.2g relative)\n", worst)
	}
	return errors.Join(errs...)
}

func measure() (*result, error) {
	devs, err := gpu.Open(1)
	if err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("no %s device", gpu.Backend())
	}
	d := devs[0]
	defer d.Close()
	r := &result{Backend: gpu.Backend()}
	if err := saxpy(d, r); err != nil {
		return nil, fmt.Errorf("saxpy: %w", err)
	}
	if err := kmeans(d, r); err != nil {
		return nil, fmt.Errorf("k-means: %w", err)
	}
	if r.GraphUS, err = launchTime(d, false); err != nil {
		return nil, fmt.Errorf("graph launch: %w", err)
	}
	if r.StreamsUS, err = launchTime(d, true); err != nil {
		return nil, fmt.Errorf("streams launch: %w", err)
	}
	return r, nil
}

func saxpy(d *gpu.Device, r *result) error {
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(42, 7))
	hx, hy := make([]float32, n), make([]float32, n)
	for i := range hx {
		hx[i], hy[i] = rng.Float32()*2-1, rng.Float32()*2-1
	}
	dx, err := gpu.Alloc[float32](d, n)
	if err != nil {
		return err
	}
	dy, err := gpu.Alloc[float32](d, n)
	if err != nil {
		return err
	}
	g := gpu.NewGraph(d)
	k := gpu.SaxpyNode(g, n, 2.5, dx, dy)
	k.Succeed(gpu.H2D(g, dx, hx), gpu.H2D(g, dy, hy))
	gpu.D2H(g, hy, dy).Succeed(k)
	if err := g.Launch(); err != nil {
		return err
	}
	sum := sha256.Sum256(unsafe.Slice((*byte)(unsafe.Pointer(&hy[0])), 4*n))
	r.SaxpyN, r.SaxpySHA256 = n, hex.EncodeToString(sum[:])
	return nil
}

func kmeans(d *gpu.Device, r *result) error {
	const n, k, iters = 100_000, 8, 20
	rng := rand.New(rand.NewPCG(1, 2))
	px, py := make([]float32, n), make([]float32, n)
	for i := range px {
		c := i % k
		px[i] = float32(c%4)*10 + float32(rng.NormFloat64())
		py[i] = float32(c/4)*10 + float32(rng.NormFloat64())
	}
	mx, my := slices.Clone(px[:k]), slices.Clone(py[:k])
	km, err := gpu.NewKMeans(d, n, k)
	if err != nil {
		return err
	}
	defer km.Free()
	if err := errors.Join(km.PX.Write(px), km.PY.Write(py), km.MX.Write(mx), km.MY.Write(my)); err != nil {
		return err
	}
	g := gpu.NewGraph(d)
	_, last := km.Step(g)
	gpu.D2H(g, mx, km.MX).Succeed(last)
	gpu.D2H(g, my, km.MY).Succeed(last)
	counts := make([]int32, k)
	gpu.D2H(g, counts, km.C).Succeed(last)
	for range iters {
		if err := g.Launch(); err != nil {
			return err
		}
	}
	r.KMeansIters, r.Counts = iters, counts
	for j := range k {
		r.Centroids = append(r.Centroids, mx[j], my[j])
	}
	return nil
}

// launchTime is the median wall time of one Launch of a 1000-node graph: 10 chains of 100
// saxpy kernels over 1K elements, instantiated once.
func launchTime(d *gpu.Device, streams bool) (float64, error) {
	const n, width, depth = 1024, 10, 100
	g := gpu.NewGraph(d).UseStreams(streams)
	for range width {
		x, err := gpu.Alloc[float32](d, n)
		if err != nil {
			return 0, err
		}
		y, err := gpu.Alloc[float32](d, n)
		if err != nil {
			return 0, err
		}
		var prev *gpu.Node
		for range depth {
			k := gpu.SaxpyNode(g, n, 1, x, y)
			if prev != nil {
				k.Succeed(prev)
			}
			prev = k
		}
	}
	if err := g.Launch(); err != nil { // instantiate + warm up
		return 0, err
	}
	var times []float64
	for range 21 {
		t0 := time.Now()
		if err := g.Launch(); err != nil {
			return 0, err
		}
		times = append(times, float64(time.Since(t0).Nanoseconds())/1e3)
	}
	sort.Float64s(times)
	return times[len(times)/2], nil
}
