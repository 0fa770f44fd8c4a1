package funcs

import (
	"context"
	"encoding/binary"
	"math"
)

// SaxpyArgs reads saxpy's arguments: n (default DefaultSaxpyN, at most
// MaxSaxpyN) and a (default DefaultSaxpyA, a finite float32).
func SaxpyArgs(a Args) (n int, alpha float32, err error) {
	if err = a.Only("n", "a"); err != nil {
		return
	}
	n64, err := a.IntRange("n", DefaultSaxpyN, 0, MaxSaxpyN)
	if err != nil {
		return
	}
	f, err := a.Float("a", DefaultSaxpyA)
	if err != nil {
		return
	}
	if math.Abs(f) > math.MaxFloat32 {
		return 0, 0, argErr("a", "a float32 number", a["a"])
	}
	return int(n64), float32(f), nil
}

// SaxpyInputs returns saxpy's vectors: x[i] = (i mod 97)/97 and
// y[i] = (i mod 89)/89, in float32.
func SaxpyInputs(n int) (x, y []float32) {
	x = make([]float32, n)
	y = make([]float32, n)
	for i := range x {
		x[i] = float32(i%97) / 97
		y[i] = float32(i%89) / 89
	}
	return x, y
}

// SaxpyKernel computes y[i] = a*x[i] + y[i] in float32 without fusing the
// multiply and the add: a*x[i] is rounded to float32 first. A GPU body must
// do the same (CUDA: __fadd_rn(__fmul_rn(a, x), y)) to give identical bytes.
func SaxpyKernel(a float32, x, y []float32) {
	for i := range y {
		y[i] = float32(a*x[i]) + y[i]
	}
}

// SaxpySum adds y in index order in float64: saxpy's result.
func SaxpySum(y []float32) float64 {
	s := 0.0
	for _, v := range y {
		s += float64(v)
	}
	return s
}

// Float64Bytes encodes f as 8 bytes little-endian (saxpy's output).
func Float64Bytes(f float64) []byte {
	return binary.LittleEndian.AppendUint64(nil, math.Float64bits(f))
}

// BytesFloat64 decodes an 8-byte little-endian float64; ok is false for
// another length.
func BytesFloat64(b []byte) (f float64, ok bool) {
	if len(b) != 8 {
		return 0, false
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b)), true
}

// saxpyCPU is saxpy's host body. Default also installs it as the GPU body
// (run on a CPU worker where the Graph is not used); the device
// implementation, saxpyGraph, gives the same bytes.
func saxpyCPU(ctx context.Context, c *Call) (Result, error) {
	n, a, err := SaxpyArgs(c.Args)
	if err != nil {
		return Result{}, err
	}
	x, y := SaxpyInputs(n)
	const chunk = 1 << 16
	for lo := 0; lo < n; lo += chunk {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		hi := min(lo+chunk, n)
		SaxpyKernel(a, x[lo:hi], y[lo:hi])
	}
	return Result{Output: Float64Bytes(SaxpySum(y))}, nil
}
