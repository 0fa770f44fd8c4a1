package node

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/gpu"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// A function whose only body is a device implementation registered by the
// user (funcs.Entry.Graph) runs through it: the node builds its work into
// the task's GPU graph once, launches it at every activation, reads the
// output after each, and frees it when the run ends.
func TestUserGPUGraphRunsOnTheDevice(t *testing.T) {
	var built, freed atomic.Int32
	reg := funcs.Default()
	reg.MustRegister(funcs.Entry{Name: "fill", Graph: func(a funcs.Args) (*funcs.GPUWork, error) {
		v, err := a.NonNeg("v", 0)
		if err != nil {
			return nil, err
		}
		out := make([]int32, 4)
		var buf *gpu.Buffer[int32]
		return &funcs.GPUWork{
			Build: func(g *gpu.Graph) error {
				built.Add(1)
				b, err := gpu.Alloc[int32](g.Device(), len(out))
				if err != nil {
					return err
				}
				buf = b
				gpu.Memset(g, b, int32(v)).Precede(gpu.D2H(g, out, b))
				return nil
			},
			Output: func() []byte {
				var o []byte
				for _, x := range out {
					o = append(o, byte(x))
				}
				return o
			},
			Free: func() {
				freed.Add(1)
				if buf != nil {
					buf.Free()
				}
			},
		}, nil
	}})
	c := newCluster(t, nodeSpec{gpus: 1, reg: reg})
	ctx := testCtx(t, 60*time.Second)
	run := func(text string) *outcome {
		f, err := spec.Parse("gpu.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Validate(spec.Options{Funcs: reg}); err != nil {
			t.Fatal(err)
		}
		g, err := f.Expand()
		if err != nil {
			t.Fatal(err)
		}
		return c.runFlow(ctx, f, make([]uint32, len(g.Vertices)), runOpts{})
	}
	got := run(`
name: fill
tasks:
  - {name: start, func: noop}
  - {name: f, func: fill, domain: gpu, args: {v: 7}, succeed: [start]}
  - {name: again, kind: condition, func: loop, args: {n: 2}, succeed: [f], precede: [f, done]}
  - {name: done, func: noop}
  - {name: out, func: hash, succeed: [f]}
`)
	if got.failed != nil {
		t.Fatalf("failed: %+v", got.failed)
	}
	if f := got.tasks["f"]; f == nil || f.acts != 3 {
		t.Fatalf("task f: %v, want 3 activations", f)
	}
	// out hashes f's output (07070707) after each of f's activations
	want := funcs.HashOf("out", map[string][]byte{"f": {7, 7, 7, 7}})
	if o := got.tasks["out"]; o == nil || o.acts != 3 || !bytes.Equal(o.output, want[:]) {
		t.Fatalf("task out: %v, want 3 activations with the hash of f's 07070707", o)
	}
	if n := built.Load(); n != 1 {
		t.Fatalf("built %d times for 3 activations, want once", n)
	}
	testsupport.Eventually(t, 10*time.Second, "the run's GPU work freed", func() bool { return freed.Load() == 1 })

}
