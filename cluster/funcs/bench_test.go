package funcs_test

import (
	"context"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
)

func BenchmarkInvokeHash4x32(b *testing.B) {
	r := funcs.Default()
	in := map[string][]byte{"a": make([]byte, 32), "b": make([]byte, 32), "c": make([]byte, 32), "d": make([]byte, 32)}
	c := &funcs.Call{Task: "sink", Inputs: in}
	for b.Loop() {
		if _, err := r.Invoke(context.Background(), "hash", c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkInvokeCoinSeeded(b *testing.B) {
	r := funcs.Default()
	c := &funcs.Call{Task: "F1", Args: funcs.Args{"p": 0.5, "seed": int64(1)}}
	for b.Loop() {
		c.Activation++
		if _, err := r.Invoke(context.Background(), "coin", c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkInvokeLoop(b *testing.B) {
	r := funcs.Default()
	c := &funcs.Call{Task: "cond", Args: funcs.Args{"n": int64(100)}}
	for b.Loop() {
		res, err := r.Invoke(context.Background(), "loop", c)
		if err != nil {
			b.Fatal(err)
		}
		c.State = res.State
	}
}

func BenchmarkSaxpy1M(b *testing.B) {
	r := funcs.Default()
	c := &funcs.Call{Task: "s", Args: funcs.Args{"n": int64(1 << 20), "a": 2.0}}
	b.SetBytes(8 << 20)
	for b.Loop() {
		if _, err := r.Invoke(context.Background(), "saxpy", c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBoundNoop is a node's call of a bound no-op (a Transient,
// NoInputs built-in) into a Result of its caller's frame.
func BenchmarkBoundNoop(b *testing.B) {
	bd, err := funcs.Default().Bind("noop", "")
	if err != nil {
		b.Fatal(err)
	}
	c := &funcs.Call{Task: "t"}
	ctx := context.Background()
	var res funcs.Result
	for b.Loop() {
		if err := bd.InvokeTo(ctx, c, &res); err != nil {
			b.Fatal(err)
		}
	}
}
