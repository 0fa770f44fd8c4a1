package gpu

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// saxpyGraph builds the seed's Listing 7 GPU graph: h2d_x, h2d_y -> saxpy -> d2h_x, d2h_y.
func saxpyGraph(t testing.TB, d *Device, a float32, hx, hy, ox, oy []float32) *Graph {
	t.Helper()
	n := len(hx)
	dx, dy := mustAlloc[float32](t, d, n), mustAlloc[float32](t, d, n)
	g := NewGraph(d)
	h2dx := H2D(g, dx, hx).Name("h2d_x")
	h2dy := H2D(g, dy, hy).Name("h2d_y")
	k := SaxpyNode(g, n, a, dx, dy).Name("saxpy")
	d2hx := D2H(g, ox, dx).Name("d2h_x")
	d2hy := D2H(g, oy, dy).Name("d2h_y")
	k.Succeed(h2dx, h2dy).Precede(d2hx, d2hy)
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestSaxpyGraphMatchesLoop(t *testing.T) {
	d := openDev(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 255, 256, 257, 1000, 4096} {
		hx, hy := randF32(r, n), randF32(r, n)
		ox, oy := make([]float32, n), make([]float32, n)
		g := saxpyGraph(t, d, 2.5, hx, hy, ox, oy)
		if g.Len() != 5 {
			t.Fatalf("Len = %d, want 5", g.Len())
		}
		if err := g.Launch(); err != nil {
			t.Fatalf("n=%d: Launch: %v", n, err)
		}
		if !slices.Equal(ox, hx) {
			t.Fatalf("n=%d: d2h_x did not return x", n)
		}
		if want := plainSaxpy(2.5, hx, hy); !slices.Equal(oy, want) {
			t.Fatalf("n=%d: saxpy differs from the plain loop", n)
		}
	}
}

func TestLaunchReplaysAndReinstantiatesOnlyWhenChanged(t *testing.T) {
	d := openDev(t)
	n := 300
	hx := make([]float32, n)
	hy := make([]float32, n)
	for i := range hx {
		hx[i], hy[i] = 1, float32(i)
	}
	ox, oy := make([]float32, n), make([]float32, n)
	g := saxpyGraph(t, d, 1, hx, hy, ox, oy)
	for run := 1; run <= 3; run++ {
		// the graph captured hy: each launch copies what it holds now
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		copy(hy, oy)
		if oy[7] != float32(7+run) {
			t.Fatalf("run %d: y[7] = %v, want %v", run, oy[7], 7+run)
		}
	}
	if s := g.Stats(); s.Instantiations != 1 || s.Launches != 3 {
		t.Fatalf("stats %+v, want 1 instantiation, 3 launches", s)
	}
	// adding a node instantiates again
	extra := mustAlloc[float32](t, d, n)
	Memset(g, extra, 3).Name("late")
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	if s := g.Stats(); s.Instantiations != 2 || s.Launches != 4 {
		t.Fatalf("stats %+v, want 2 instantiations, 4 launches", s)
	}
	got := make([]float32, n)
	if err := extra.Read(got); err != nil || got[n-1] != 3 {
		t.Fatalf("late memset: %v %v", got[n-1], err)
	}
}

// TestDiamondPrecedence checks ordering through data: each node's output depends on its
// predecessors having run, across parallel branches.
func TestDiamondPrecedence(t *testing.T) {
	d := openDev(t)
	const n, width = 512, 8
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	src := mustAlloc[float32](t, d, n)
	acc := mustAlloc[float32](t, d, n)
	g := NewGraph(d)
	load := H2D(g, src, ones).Name("load")
	zero := Memset(g, acc, 0).Name("zero")
	// width branches each add src to its own buffer twice (a chain), then all add into acc in
	// a chain: acc = width * 2.
	var tails []*Node
	bufs := make([]*Buffer[float32], width)
	for b := range width {
		bufs[b] = mustAlloc[float32](t, d, n)
		z := Memset(g, bufs[b], 0)
		s1 := SaxpyNode(g, n, 1, src, bufs[b]).Succeed(load, z)
		s2 := SaxpyNode(g, n, 1, src, bufs[b]).Succeed(s1)
		tails = append(tails, s2)
	}
	prev := zero
	for b := range width {
		s := SaxpyNode(g, n, 1, bufs[b], acc).Succeed(tails[b], prev)
		prev = s
	}
	out := make([]float32, n)
	D2H(g, out, acc).Succeed(prev)
	for range 5 {
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		for i, v := range out {
			if v != 2*width {
				t.Fatalf("out[%d] = %v, want %d", i, v, 2*width)
			}
		}
	}
}

func TestCaptureMatchesGraph(t *testing.T) {
	d := openDev(t)
	r := rand.New(rand.NewPCG(3, 4))
	n := 1000
	hx, hy := randF32(r, n), randF32(r, n)
	dx, dy := mustAlloc[float32](t, d, n), mustAlloc[float32](t, d, n)
	out := make([]float32, n)
	g := NewGraph(d)
	calls := 0
	c := g.Capture(func(s *Stream) error {
		calls++
		if err := H2DAsync(s, dx, hx); err != nil {
			return err
		}
		if err := H2DAsync(s, dy, hy); err != nil {
			return err
		}
		if err := SaxpyAsync(s, n, 3, dx, dy); err != nil {
			return err
		}
		return D2HAsync(s, out, dy)
	}).Name("captured_saxpy")
	if c.Kind() != KindCapture || c.String() != "captured_saxpy" {
		t.Fatalf("capture node %v kind %v", c, c.Kind())
	}
	for range 2 {
		clear(out)
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out, plainSaxpy(3, hx, hy)) {
			t.Fatal("captured saxpy differs from the plain loop")
		}
	}
	if calls != 1 {
		t.Fatalf("capture function called %d times, want 1 (at instantiation)", calls)
	}
}

func TestCaptureErrors(t *testing.T) {
	d := openDev(t)
	boom := errors.New("library failed")
	g := NewGraph(d)
	g.Capture(func(s *Stream) error { return boom }).Name("lib")
	err := g.Launch()
	if !errors.Is(err, boom) || !errors.Is(err, ErrCapture) || !strings.Contains(err.Error(), "lib") {
		t.Fatalf("Launch = %v, want the capture's error naming the node", err)
	}
	g2 := NewGraph(d)
	g2.Capture(func(s *Stream) error { return s.Synchronize() })
	if err := g2.Launch(); !errors.Is(err, ErrCapture) {
		t.Fatalf("Synchronize in capture: %v, want ErrCapture", err)
	}
	g3 := NewGraph(d)
	g3.Capture(func(s *Stream) error { panic("oops") }).Name("panicky")
	if err := g3.Launch(); !errors.Is(err, ErrCapture) || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("panicking capture: %v", err)
	}
}

func TestMemsetAndD2D(t *testing.T) {
	d := openDev(t)
	n := 100
	g := NewGraph(d)
	f := mustAlloc[float32](t, d, n)
	f2 := mustAlloc[float32](t, d, n)
	u8 := mustAlloc[uint8](t, d, n)
	i16 := mustAlloc[int16](t, d, n)
	f64 := mustAlloc[float64](t, d, n)
	a := Memset(g, f, 1.5)
	D2D(g, f2, f).Succeed(a)
	Memset(g, u8, 7)
	Memset(g, i16, -3)
	Memset(g, f64, 0)
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	check := func(name string, ok bool) {
		if !ok {
			t.Errorf("%s wrong", name)
		}
	}
	gf, gu, gi, gd := make([]float32, n), make([]uint8, n), make([]int16, n), make([]float64, n)
	check("f2", f2.Read(gf) == nil && gf[0] == 1.5 && gf[n-1] == 1.5)
	check("u8", u8.Read(gu) == nil && gu[n-1] == 7)
	check("i16", i16.Read(gi) == nil && gi[n-1] == -3)
	check("f64", f64.Read(gd) == nil && gd[n-1] == 0)
	// a nonzero 8-byte memset is refused at build time on every backend
	g2 := NewGraph(d)
	Memset(g2, f64, 1)
	if err := g2.Launch(); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("8-byte memset: %v", err)
	}
}

func TestBuildErrors(t *testing.T) {
	devs := openDevs(t, 2)
	d0, d1 := devs[0], devs[1]
	b0 := mustAlloc[float32](t, d0, 10)
	b1 := mustAlloc[float32](t, d1, 10)
	cases := []struct {
		name  string
		build func(g *Graph)
		want  error
	}{
		{"other device buffer", func(g *Graph) { H2D(g, b1, make([]float32, 10)) }, ErrDevice},
		{"too long h2d", func(g *Graph) { H2D(g, b0, make([]float32, 11)) }, ErrInvalid},
		{"empty d2h", func(g *Graph) { D2H(g, nil, b0) }, ErrInvalid},
		{"d2d across devices", func(g *Graph) { D2D(g, b0, b1) }, ErrDevice},
		{"kernel arg on other device", func(g *Graph) { SaxpyNode(g, 10, 1, b0, b1) }, ErrDevice},
		{"kernel wrong arg type", func(g *Graph) { g.Kernel(Saxpy, D1(1), D1(32), 10, float32(1), b0, b0) }, ErrInvalid},
		{"kernel arg count", func(g *Graph) { g.Kernel(Saxpy, D1(1), D1(32), int32(10)) }, ErrInvalid},
		{"block too big", func(g *Graph) { g.Kernel(Saxpy, D1(1), D1(2048), int32(10), float32(1), b0, b0) }, ErrInvalid},
		{"zero grid", func(g *Graph) { g.Kernel(Saxpy, D1(0), D1(32), int32(10), float32(1), b0, b0) }, ErrInvalid},
		{"nil kernel", func(g *Graph) { g.Kernel(nil, D1(1), D1(1)) }, ErrInvalid},
		{"self edge", func(g *Graph) { n := Memset(g, b0, 0); n.Precede(n) }, ErrCycle},
		{"cycle", func(g *Graph) {
			a, b, c := Memset(g, b0, 0), Memset(g, b0, 1), Memset(g, b0, 2)
			a.Precede(b)
			b.Precede(c)
			c.Precede(a)
		}, ErrCycle},
		{"cross-graph edge", func(g *Graph) { Memset(g, b0, 0).Precede(Memset(NewGraph(d0), b0, 0)) }, ErrInvalid},
		{"nil capture", func(g *Graph) { g.Capture(nil) }, ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewGraph(d0)
			c.build(g)
			err := g.Launch()
			if !errors.Is(err, c.want) {
				t.Fatalf("Launch = %v, want %v", err, c.want)
			}
		})
	}
	if err := NewGraph(nil).Launch(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("nil-device graph: %v", err)
	}
}

func TestFreedBufferFailsLaunchNamingNode(t *testing.T) {
	d := openDev(t)
	b := mustAlloc[float32](t, d, 64)
	g := NewGraph(d)
	Memset(g, b, 1).Name("fill")
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	err := g.Launch()
	if !errors.Is(err, ErrFreed) {
		t.Fatalf("Launch after Free = %v, want ErrFreed", err)
	}
	var ne *NodeError
	if Backend() == "sim" && (!errors.As(err, &ne) || ne.Node != "fill") {
		t.Fatalf("error %v does not name node fill", err)
	}
}

func TestEmptyGraphAndClosedDevice(t *testing.T) {
	devs, err := Open(1)
	if err != nil || len(devs) == 0 {
		t.Skip("no device")
	}
	d := devs[0]
	if err := NewGraph(d).Launch(); err != nil {
		t.Fatalf("empty graph: %v", err)
	}
	b := mustAlloc[float32](t, d, 8)
	g := NewGraph(d)
	Memset(g, b, 1)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := g.Launch(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Launch on closed device: %v", err)
	}
	if _, err := Alloc[float32](d, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Alloc on closed device: %v", err)
	}
	if err := d.Bind(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Bind on closed device: %v", err)
	}
}

func TestDump(t *testing.T) {
	d := openDev(t)
	n := 16
	g := saxpyGraph(t, d, 1, make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n))
	Memset(g, mustAlloc[int32](t, d, 4), 0) // unnamed: kind#index
	var sb strings.Builder
	if err := g.Dump(&sb, "p_"); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	for _, want := range []string{
		`p_n0 [label="h2d_x", shape=cds];`,
		`p_n2 [label="saxpy", shape=box3d];`,
		`p_n5 [label="memset#5", shape=box];`,
		"p_n0 -> p_n2;", "p_n1 -> p_n2;", "p_n2 -> p_n3;", "p_n2 -> p_n4;",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Dump lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "digraph") {
		t.Error("Dump must not write a digraph header")
	}
	if got := strings.Count(out, "->"); got != 4 {
		t.Errorf("%d edges, want 4", got)
	}
}

func TestConcurrentLaunchesOnOneDevice(t *testing.T) {
	d := openDev(t)
	const graphs, n = 4, 2048
	type job struct {
		g      *Graph
		hx, hy []float32
		oy     []float32
	}
	jobs := make([]job, graphs)
	for w := range jobs {
		r := rand.New(rand.NewPCG(uint64(w), 9))
		j := job{hx: randF32(r, n), hy: randF32(r, n), oy: make([]float32, n)}
		j.g = saxpyGraph(t, d, float32(w), j.hx, j.hy, make([]float32, n), j.oy)
		jobs[w] = j
	}
	errs := make(chan error, graphs)
	for w, j := range jobs {
		go func() {
			for range 10 {
				if err := j.g.Launch(); err != nil {
					errs <- err
					return
				}
			}
			if !slices.Equal(j.oy, plainSaxpy(float32(w), j.hx, j.hy)) {
				errs <- errors.New("wrong result")
				return
			}
			errs <- nil
		}()
	}
	for range graphs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestUseStreamsMatchesGraph: the streams+events path (cuda's fallback) computes what the
// instantiated graph does, on a graph with parallel branches and joins.
func TestUseStreamsMatchesGraph(t *testing.T) {
	d := openDev(t)
	const n = 777
	results := make([][]float32, 2)
	for mode, streams := range []bool{false, true} {
		hx := randF32(rand.New(rand.NewPCG(5, 6)), n)
		a, b := mustAlloc[float32](t, d, n), mustAlloc[float32](t, d, n)
		c := mustAlloc[float32](t, d, n)
		g := NewGraph(d).UseStreams(streams)
		la := H2D(g, a, hx)
		mb := Memset(g, b, 1)
		mc := Memset(g, c, 2)
		s1 := SaxpyNode(g, n, 2, a, b).Succeed(la, mb) // b = 2a + 1
		s2 := SaxpyNode(g, n, 3, a, c).Succeed(la, mc) // c = 3a + 2
		s3 := SaxpyNode(g, n, 1, b, c).Succeed(s1, s2) // c = 5a + 3
		out := make([]float32, n)
		D2H(g, out, c).Succeed(s3)
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		if err := g.Launch(); err != nil { // replay: memsets reset b and c
			t.Fatal(err)
		}
		results[mode] = out
	}
	if !slices.Equal(results[0], results[1]) {
		t.Fatal("UseStreams(true) computed something else")
	}
}

// A device keeps the graphs made on it, for Close to release, and
// forgets one that is released: nothing of a released graph stays
// reachable through its device.
func TestReleaseForgetsTheGraph(t *testing.T) {
	d := openDev(t)
	n := 64
	hx, hy, ox, oy := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	a := saxpyGraph(t, d, 1, hx, hy, ox, oy)
	b := saxpyGraph(t, d, 2, hx, hy, ox, oy)
	for _, g := range []*Graph{a, b, a} {
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
	}
	if got := d.Graphs(); got != 2 {
		t.Fatalf("%d graphs kept with two made and launched, want 2", got)
	}
	a.Release()
	a.Release() // idempotent
	if got := d.Graphs(); got != 1 {
		t.Fatalf("%d graphs kept after releasing one, want 1", got)
	}
	if err := a.Launch(); !errors.Is(err, ErrClosed) {
		t.Fatalf("launch of a released graph: %v, want ErrClosed", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := d.Graphs(); got != 0 {
		t.Fatalf("%d graphs kept after Close, want 0", got)
	}
}
