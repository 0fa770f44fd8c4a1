package localexec

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hetflow/hetflow/gpu"
)

// Listing 7: allocate_x, allocate_y (CPU) → one GPU graph on device 1:
// h2d_x, h2d_y → saxpy → d2h_x, d2h_y; a CPU task checks the result.
func TestListing7SaxpyOnDevice1(t *testing.T) {
	ex := newEx(t, WithWorkers(2), WithGPUs(2))
	const n = 1 << 12
	var hx, hy []float32
	var dx, dy *gpu.Buffer[float32]
	dev := ex.Device(1)
	tf := NewTaskflow("saxpy")
	allocX := tf.Emplace(func() {
		hx = make([]float32, n)
		for i := range hx {
			hx[i] = 1
		}
		var err error
		if dx, err = gpu.Alloc[float32](dev, n); err != nil {
			t.Error(err)
		}
	}).Name("allocate_x")
	allocY := tf.Emplace(func() {
		hy = make([]float32, n)
		for i := range hy {
			hy[i] = 2
		}
		var err error
		if dy, err = gpu.Alloc[float32](dev, n); err != nil {
			t.Error(err)
		}
	}).Name("allocate_y")
	var ranOn atomic.Int32
	ranOn.Store(-1)
	cf := tf.EmplaceGPU(func(g *gpu.Graph) {
		ranOn.Store(int32(g.Device().ID()))
		h2dx := gpu.H2D(g, dx, hx).Name("h2d_x")
		h2dy := gpu.H2D(g, dy, hy).Name("h2d_y")
		k := gpu.SaxpyNode(g, n, 2, dx, dy).Name("saxpy")
		d2hx := gpu.D2H(g, hx, dx).Name("d2h_x")
		d2hy := gpu.D2H(g, hy, dy).Name("d2h_y")
		k.Succeed(h2dx, h2dy).Precede(d2hx, d2hy)
	}).Name("saxpy").On(1)
	bad := 0
	check := tf.Emplace(func() {
		for i := range hy {
			if hy[i] != 4 {
				bad++
			}
		}
	}).Name("check")
	cf.Succeed(allocX, allocY).Precede(check)
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	if bad != 0 || ranOn.Load() != 1 || cf.Device() != 1 {
		t.Fatalf("%d wrong elements; built on device %d", bad, ranOn.Load())
	}
	st := ex.Stats()
	if st.Domain("gpu1").Executed != 1 || st.Domain("gpu0").Executed != 0 || st.Domain("cpu").Executed != 3 {
		t.Fatalf("per-domain executed: %+v", st.Domains)
	}
}

// A loop alternating CPU and GPU tasks: each GPU run replays the graph built
// on the first, and every hand-off between domains wakes the other domain.
func TestCPUGPULoopReplaysGraph(t *testing.T) {
	ex := newEx(t, WithWorkers(2), WithGPUs(1))
	dev := ex.Device(0)
	buf, err := gpu.Alloc[float32](dev, 256)
	if err != nil {
		t.Fatal(err)
	}
	host := make([]float32, 256)
	ones := make([]float32, 256)
	for i := range ones {
		ones[i] = 1
	}
	builds := 0
	iter := 0
	tf := NewTaskflow("loop")
	init := tf.Emplace(func() { iter = 0; _ = buf.Write(make([]float32, 256)) }).Name("init")
	step := tf.EmplaceGPU(func(g *gpu.Graph) {
		builds++
		one, _ := gpu.Alloc[float32](g.Device(), 256)
		up := gpu.H2D(g, one, ones)
		k := gpu.SaxpyNode(g, 256, 1, one, buf)
		down := gpu.D2H(g, host, buf)
		up.Precede(k)
		k.Precede(down)
	}).Name("gpu-step")
	cond := tf.EmplaceCondition(func() int {
		iter++
		if iter < 50 {
			return 0
		}
		return 1
	}).Name("cond")
	done := tf.Placeholder().Name("done")
	init.Precede(step)
	step.Precede(cond)
	cond.Precede(step, done)
	for rep := 0; rep < 3; rep++ {
		if err := ex.Run(tf).Wait(); err != nil {
			t.Fatal(err)
		}
		if host[0] != 50 || host[255] != 50 {
			t.Fatalf("rep %d: host[0]=%v want 50", rep, host[0])
		}
	}
	if builds != 1 {
		t.Fatalf("GPU graph built %d times, want once", builds)
	}
	if got := ex.Stats().Domain("gpu0").Executed; got != 150 {
		t.Fatalf("gpu executed %d", got)
	}
}

func TestGPUErrors(t *testing.T) {
	ex := newEx(t, WithWorkers(2), WithGPUs(1))
	tf := NewTaskflow("nodev")
	tf.EmplaceGPU(func(g *gpu.Graph) {}).Name("far").On(3)
	err := ex.Run(tf).Wait()
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), `"far"`) {
		t.Fatalf("got %v", err)
	}

	// a launch that fails (a freed buffer) fails the run naming the task
	buf, _ := gpu.Alloc[float32](ex.Device(0), 16)
	_ = buf.Free()
	tf2 := NewTaskflow("freed")
	tf2.EmplaceGPU(func(g *gpu.Graph) { gpu.Memset(g, buf, 1) }).Name("uses-freed")
	err = ex.Run(tf2).Wait()
	var te *TaskError
	if !errors.As(err, &te) || te.Task != "uses-freed" {
		t.Fatalf("got %v", err)
	}
	// a panic while building
	tf3 := NewTaskflow("panics")
	tf3.EmplaceGPU(func(g *gpu.Graph) { panic("build") }).Name("p")
	var pe *PanicError
	if err := ex.Run(tf3).Wait(); !errors.As(err, &pe) || pe.Task != "p" {
		t.Fatalf("got %v", err)
	}
	// the GPU domain is healthy afterwards
	ok := NewTaskflow("ok")
	ok.EmplaceGPU(func(g *gpu.Graph) {}).Name("empty")
	if err := ex.Run(ok).Wait(); err != nil {
		t.Fatal(err)
	}
}

// Many independent GPU tasks across two devices from CPU sources: every GPU
// task runs once, on its device's workers.
func TestManyGPUTasksAcrossDevices(t *testing.T) {
	ex := newEx(t, WithWorkers(2), WithGPUs(2), WithGPUWorkers(2))
	tf := NewTaskflow("fan")
	var cpu, g0, g1 atomic.Int32
	for i := 0; i < 200; i++ {
		c := tf.Emplace(func() { cpu.Add(1) })
		dev := i % 2
		gt := tf.EmplaceGPU(func(g *gpu.Graph) {}).On(dev)
		after := tf.Emplace(func() {
			if dev == 0 {
				g0.Add(1)
			} else {
				g1.Add(1)
			}
		})
		c.Precede(gt)
		gt.Precede(after)
	}
	if err := ex.RunN(tf, 5).Wait(); err != nil {
		t.Fatal(err)
	}
	st := ex.Stats()
	if cpu.Load() != 1000 || g0.Load() != 500 || g1.Load() != 500 ||
		st.Domain("gpu0").Executed != 500 || st.Domain("gpu1").Executed != 500 || st.Domain("gpu0").Workers != 2 {
		t.Fatalf("cpu %d g0 %d g1 %d stats %+v", cpu.Load(), g0.Load(), g1.Load(), st.Domains)
	}
}

// A device keeps every graph it instantiated until the graph is released.
// Clear releases a taskflow's GPU graphs, and a subflow's GPU children are
// released when the subflow joins; else a long-lived executor that runs a
// fresh taskflow each time (a cluster node) keeps every run's graphs, and
// the host buffers their copies name, until the device closes.
func TestGPUGraphsReleasedByClearAndSubflowJoin(t *testing.T) {
	ex := newEx(t, WithWorkers(2), WithGPUs(1))
	dev := ex.Device(0)
	copyTo := func(g *gpu.Graph, host []float32) {
		d, err := gpu.Alloc[float32](g.Device(), len(host))
		if err != nil {
			panic(err)
		}
		gpu.H2D(g, d, host).Precede(gpu.D2H(g, host, d))
	}
	host := make([]float32, 64)
	for i := 0; i < 5; i++ {
		tf := NewTaskflow("fresh")
		tf.EmplaceGPU(func(g *gpu.Graph) { copyTo(g, host) }).Name("copy")
		if err := ex.Run(tf).Wait(); err != nil {
			t.Fatal(err)
		}
		if got := dev.Graphs(); got != 1 {
			t.Fatalf("run %d: the device keeps %d graphs after the run, want 1 (the taskflow's, until Clear)", i, got)
		}
		tf.Clear()
		if got := dev.Graphs(); got != 0 {
			t.Fatalf("run %d: the device keeps %d graphs after Clear, want 0", i, got)
		}
	}
	sf := NewTaskflow("subflow")
	sf.EmplaceSubflow(func(s *Subflow) {
		for range 3 {
			s.EmplaceGPU(func(g *gpu.Graph) { copyTo(g, make([]float32, 16)) })
		}
	}).Name("spawn")
	for i := 0; i < 3; i++ {
		if err := ex.Run(sf).Wait(); err != nil {
			t.Fatal(err)
		}
		if got := dev.Graphs(); got != 0 {
			t.Fatalf("run %d: the device keeps %d graphs of joined subflow children, want 0", i, got)
		}
	}
}
