//go:build !cuda

package gpu

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestOpenReadsEnv(t *testing.T) {
	for _, c := range []struct {
		env  string
		set  bool
		want int
		bad  bool
	}{
		{set: false, want: 1}, {env: "3", set: true, want: 3}, {env: "0", set: true, want: 0},
		{env: "-1", set: true, bad: true}, {env: "two", set: true, bad: true},
	} {
		if c.set {
			t.Setenv(SimGPUsEnv, c.env)
		} else {
			t.Setenv(SimGPUsEnv, "") // restore afterwards, then unset for this case
			unsetenv(t, SimGPUsEnv)
		}
		devs, err := Open(-1)
		for _, d := range devs {
			d.Close()
		}
		if c.bad {
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), SimGPUsEnv) {
				t.Errorf("env %q: err %v, want ErrConfig naming %s", c.env, err, SimGPUsEnv)
			}
			continue
		}
		if err != nil || len(devs) != c.want {
			t.Errorf("env %q (set %v): %d devices, %v; want %d", c.env, c.set, len(devs), err, c.want)
		}
	}
	devs, err := Open(2)
	if err != nil || len(devs) != 2 || devs[1].ID() != 1 || Backend() != "sim" {
		t.Fatalf("Open(2) = %v, %v", devs, err)
	}
	for _, d := range devs {
		d.Close()
	}
}

func TestBufferHostHelpersAndMemory(t *testing.T) {
	d := openDev(t)
	b := mustAlloc[int32](t, d, 10)
	if d.MemUsed() != 40 {
		t.Fatalf("MemUsed = %d, want 40", d.MemUsed())
	}
	if err := b.Write([]int32{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	got := make([]int32, 4)
	if err := b.Read(got); err != nil || got[2] != 3 || got[3] != 0 {
		t.Fatalf("Read = %v, %v", got, err)
	}
	// a host write after the copy does not reach the device: copies are real copies
	src := []int32{9}
	b.Write(src)
	src[0] = 100
	b.Read(got[:1])
	if got[0] != 9 {
		t.Fatalf("device saw a host write: %d", got[0])
	}
	if err := b.Write(make([]int32, 11)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized Write: %v", err)
	}
	v, err := b.Slice(2, 5)
	if err != nil || v.Len() != 3 {
		t.Fatalf("Slice: %v %v", v, err)
	}
	v.Read(got[:3])
	if got[0] != 3 {
		t.Fatalf("view reads %v", got[:3])
	}
	if err := v.Free(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Free of a view: %v", err)
	}
	for _, bad := range [][2]int{{-1, 2}, {3, 3}, {0, 11}} {
		if _, err := b.Slice(bad[0], bad[1]); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Slice%v: %v", bad, err)
		}
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	if d.MemUsed() != 0 {
		t.Fatalf("MemUsed after Free = %d", d.MemUsed())
	}
	if err := b.Free(); !errors.Is(err, ErrFreed) {
		t.Fatalf("double Free: %v", err)
	}
	if err := b.Read(got); !errors.Is(err, ErrFreed) {
		t.Fatalf("Read after Free: %v", err)
	}
	if _, err := Alloc[float32](d, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Alloc(0): %v", err)
	}
	if _, err := Alloc[float32](nil, 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Alloc on nil device: %v", err)
	}
}

func TestKernelPanicIsAnErrorNamingTheNode(t *testing.T) {
	d := openDev(t)
	x, y := mustAlloc[float32](t, d, 100), mustAlloc[float32](t, d, 100)
	var ran atomic.Int32
	after := &Kernel{Name: "after", Go: func(*Block, []any) { ran.Add(1) }}
	g := NewGraph(d)
	// n larger than the buffers: the Go body indexes out of range
	bad := g.Kernel(Saxpy, D1(1), D1(256), int32(200), float32(1), x, y).Name("too_far")
	g.Kernel(after, D1(1), D1(1)).Succeed(bad)
	for range 2 { // the device stays usable
		err := g.Launch()
		var ne *NodeError
		if !errors.Is(err, ErrKernel) || !errors.As(err, &ne) || ne.Node != "too_far" || !strings.Contains(err.Error(), "index out of range") {
			t.Fatalf("Launch = %v, want ErrKernel naming too_far", err)
		}
	}
	if ran.Load() != 0 {
		t.Fatal("a successor of a failed node ran")
	}
	// wrong argument type inside an unchecked kernel body
	loose := &Kernel{Name: "loose", Go: func(b *Block, args []any) { _ = args[0].(*Buffer[int32]) }}
	g2 := NewGraph(d)
	g2.Kernel(loose, D1(1), D1(1), x)
	if err := g2.Launch(); !errors.Is(err, ErrKernel) {
		t.Fatalf("bad assertion: %v", err)
	}
	// a kernel without a Go body cannot run on sim
	g3 := NewGraph(d)
	g3.Kernel(&Kernel{Name: "ptx_only", PTX: ".version 7.0"}, D1(1), D1(1))
	if err := g3.Launch(); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("PTX-only kernel: %v", err)
	}
	// Mem of a buffer of another device panics inside the body
	other := openDevs(t, 1)[0]
	ob := mustAlloc[float32](t, other, 4)
	sneaky := &Kernel{Name: "sneaky", Go: func(b *Block, _ []any) { _ = ob.Mem(b) }}
	g4 := NewGraph(d)
	g4.Kernel(sneaky, D1(1), D1(1))
	if err := g4.Launch(); !errors.Is(err, ErrDevice) || !errors.Is(err, ErrKernel) {
		t.Fatalf("cross-device Mem: %v", err)
	}
}

func TestGridCoversEveryBlockOnce(t *testing.T) {
	d := openDev(t)
	grid, block := Dim3{3, 4, 2}, Dim3{8, 2, 1}
	out := mustAlloc[int32](t, d, grid.Size())
	k := &Kernel{Name: "mark", Go: func(b *Block, args []any) {
		o := args[0].(*Buffer[int32]).Mem(b)
		if b.Dim != block.norm() || b.Grid != grid || b.Threads() != 16 || b.Device() != d {
			panic("wrong shape")
		}
		o[b.Idx.X+b.Grid.X*(b.Idx.Y+b.Grid.Y*b.Idx.Z)]++
	}}
	g := NewGraph(d)
	g.Kernel(k, grid, block, out)
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	got := make([]int32, grid.Size())
	out.Read(got)
	for i, v := range got {
		if v != 1 {
			t.Fatalf("block %d ran %d times", i, v)
		}
	}
}

// TestParallelBranchesRunConcurrently: two independent nodes rendezvous; on one goroutine
// they would wait for each other until the deadline.
func TestParallelBranchesRunConcurrently(t *testing.T) {
	d := openDev(t)
	a, b := make(chan struct{}), make(chan struct{})
	meet := func(mine, theirs chan struct{}) *Kernel {
		return &Kernel{Name: "meet", Go: func(*Block, []any) {
			close(mine)
			select {
			case <-theirs:
			case <-time.After(10 * time.Second):
				panic("the other branch never ran")
			}
		}}
	}
	g := NewGraph(d)
	g.Kernel(meet(a, b), D1(1), D1(1))
	g.Kernel(meet(b, a), D1(1), D1(1))
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
}

func TestStreamsAndEvents(t *testing.T) {
	d := openDev(t)
	s1, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := d.NewStream()
	ev, _ := d.NewEvent()
	n := 1000
	x, y := mustAlloc[float32](t, d, n), mustAlloc[float32](t, d, n)
	hx := make([]float32, n)
	for i := range hx {
		hx[i] = float32(i)
	}
	gate := make(chan struct{})
	slow := &Kernel{Name: "slow", Go: func(*Block, []any) { <-gate }}
	// s1: slow kernel, load x, record; s2: wait, saxpy (needs x), read back
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s1.Launch(slow, D1(1), D1(1)))
	must(H2DAsync(s1, x, hx))
	must(s1.Record(ev))
	must(MemsetAsync(s2, y, 1))
	must(s2.Wait(ev))
	must(SaxpyAsync(s2, n, 2, x, y))
	out := make([]float32, n)
	must(D2HAsync(s2, out, y))
	if ev.Query() {
		t.Fatal("event complete before its stream ran")
	}
	close(gate)
	must(s2.Synchronize())
	must(ev.Synchronize())
	if !ev.Query() {
		t.Fatal("event not complete after Synchronize")
	}
	for i, v := range out {
		if v != float32(2*i+1) {
			t.Fatalf("out[%d] = %v, want %d", i, v, 2*i+1)
		}
	}
	// an error is reported by the next Synchronize, then cleared
	bad := &Kernel{Name: "bad", Go: func(*Block, []any) { panic("kaboom") }}
	must(s1.Launch(bad, D1(1), D1(1)))
	must(MemsetAsync(s1, x, 5)) // skipped after the failure
	if err := s1.Synchronize(); !errors.Is(err, ErrKernel) || !strings.Contains(err.Error(), "kaboom") {
		t.Fatalf("Synchronize = %v", err)
	}
	must(s1.Synchronize())
	x.Read(out[:1])
	if out[0] != 0 {
		t.Fatalf("operation after a failure ran: x[0] = %v", out[0])
	}
	// cross-device and closed
	other := openDevs(t, 1)[0]
	oev, _ := other.NewEvent()
	if err := s1.Record(oev); !errors.Is(err, ErrDevice) {
		t.Fatalf("Record of another device's event: %v", err)
	}
	if err := H2DAsync(s1, mustAlloc[float32](t, other, 1), []float32{1}); !errors.Is(err, ErrDevice) {
		t.Fatalf("copy to another device's buffer: %v", err)
	}
	must(s2.Destroy())
	if err := s2.Synchronize(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Synchronize after Destroy: %v", err)
	}
	must(ev.Destroy())
}

// TestCloseDrainsQueuedWork: Close with work queued on a stream finishes it and leaks nothing
// (goleak in TestMain checks the goroutines).
func TestCloseDrainsQueuedWork(t *testing.T) {
	devs, _ := Open(1)
	d := devs[0]
	s, _ := d.NewStream()
	b := mustAlloc[int32](t, d, 4)
	out := make([]int32, 4)
	for i := range 100 {
		MemsetAsync(s, b, int32(i))
	}
	D2HAsync(s, out, b)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if out[3] != 99 {
		t.Fatalf("queued work not drained: %v", out)
	}
	if _, err := d.NewStream(); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewStream after Close: %v", err)
	}
}
