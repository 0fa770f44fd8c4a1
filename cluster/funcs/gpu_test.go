package funcs_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/gpu"
)

// saxpy's device implementation, built into a GPU graph on a device and
// launched twice, gives the CPU body's 8 bytes each time; a bad argument is
// refused before anything is built.
func TestSaxpyGraphMatchesTheCPUBody(t *testing.T) {
	e, ok := funcs.Default().Lookup(funcs.Saxpy)
	if !ok || e.Graph == nil {
		t.Fatalf("saxpy has no device implementation: %+v", e)
	}
	args := funcs.Args{"n": int64(10007), "a": 1.5}
	w, err := e.Graph(args)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := gpu.Open(1)
	if err != nil || len(devs) == 0 {
		t.Fatalf("gpu.Open: %v, %d devices", err, len(devs))
	}
	defer devs[0].Close()
	g := gpu.NewGraph(devs[0])
	if err := w.Build(g); err != nil {
		t.Fatal(err)
	}
	want := invoke(t, funcs.Saxpy, &funcs.Call{Task: "s", Args: args}).Output
	for launch := 1; launch <= 2; launch++ {
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		if got := w.Output(); !bytes.Equal(got, want) {
			t.Fatalf("launch %d: device output %x, CPU body %x", launch, got, want)
		}
	}
	g.Release()
	w.Free()
	if _, err := e.Graph(funcs.Args{"n": "many"}); err == nil {
		t.Fatal("saxpy graph accepted n: many")
	}
}

// The device implementation is the registry's: a function may have one from
// Register or SetGPUGraph, it counts as a GPU body for validation, and only
// static functions take one.
func TestGPUGraphRegistration(t *testing.T) {
	r := funcs.NewRegistry()
	cpu := func(context.Context, *funcs.Call) (funcs.Result, error) { return funcs.Result{}, nil }
	graph := func(funcs.Args) (*funcs.GPUWork, error) { return &funcs.GPUWork{}, nil }
	r.MustRegister(funcs.Entry{Name: "mine", CPU: cpu})
	r.MustRegister(funcs.Entry{Name: "loop", Kind: spec.KindCondition, CPU: cpu})
	if info, _ := r.Func("mine"); info.GPU {
		t.Fatal("a CPU-only function reports a GPU body")
	}
	if err := r.SetGPUGraph("mine", graph); err != nil {
		t.Fatal(err)
	}
	if info, _ := r.Func("mine"); !info.GPU || !info.CPU {
		t.Fatalf("after SetGPUGraph: %+v", info)
	}
	if e, _ := r.Lookup("mine"); e.Graph == nil {
		t.Fatal("SetGPUGraph did not attach the graph")
	}
	if err := r.SetGPUGraph("loop", graph); !errors.Is(err, funcs.ErrBadEntry) {
		t.Errorf("graph on a condition: %v", err)
	}
	if err := r.SetGPUGraph("nope", graph); !errors.Is(err, funcs.ErrUnknown) {
		t.Errorf("unknown: %v", err)
	}
	if err := r.Register(funcs.Entry{Name: "devonly", Graph: graph}); err != nil {
		t.Fatalf("a device-only function: %v", err)
	}
	if info, _ := r.Func("devonly"); !info.GPU || info.CPU {
		t.Fatalf("device-only: %+v", info)
	}
	if err := r.Register(funcs.Entry{Name: "c", Kind: spec.KindCondition, Graph: graph}); !errors.Is(err, funcs.ErrBadEntry) {
		t.Errorf("a condition with a graph: %v", err)
	}
}
