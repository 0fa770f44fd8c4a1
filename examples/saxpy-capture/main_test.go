package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestListing8(t *testing.T) {
	var dot bytes.Buffer
	out, err := run(config{n: 10_000, a: 3, gpus: 2, device: 1, workers: 2, runs: 3, dot: &dot})
	if err != nil {
		t.Fatal(err)
	}
	// two CPU tasks and one GPU task on device 1 per run, nothing on device 0
	if !strings.Contains(out, "3 runs, 1 capture") || !strings.Contains(out, "executed cpu=6 gpu1=3") {
		t.Fatalf("summary %q", out)
	}
	for _, name := range []string{"allocate_x", "allocate_y", "capturer", "saxpy_capture"} {
		if !strings.Contains(dot.String(), name) {
			t.Errorf("DOT lacks %s:\n%s", name, dot.String())
		}
	}
}

func TestOddSizesAndDevice0(t *testing.T) {
	for _, n := range []int{1, 255, 257} {
		if _, err := run(config{n: n, a: -1.5, gpus: 1, device: 0, workers: 1, runs: 1}); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
	}
}

func TestBadConfig(t *testing.T) {
	for _, c := range []config{
		{n: 0, gpus: 2, device: 1, workers: 1, runs: 1},
		{n: 10, gpus: 1, device: 1, workers: 1, runs: 1}, // Listing 7's device 1 needs two devices
		{n: 10, gpus: 0, device: 0, workers: 1, runs: 1},
		{n: 10, gpus: 2, device: -1, workers: 1, runs: 1},
		{n: 10, gpus: 2, device: 1, workers: 0, runs: 1},
		{n: 10, gpus: 2, device: 1, workers: 1, runs: 0},
	} {
		if _, err := run(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// The check itself catches a wrong element.
func TestVerifyCatchesMismatch(t *testing.T) {
	x, y := input(100)
	for i := range y {
		y[i] = float32(2*x[i]) + y[i]
	}
	if err := verify(100, 2, x, y); err != nil {
		t.Fatal(err)
	}
	y[42] += 1e-3
	if err := verify(100, 2, x, y); !errors.Is(err, errMismatch) || !strings.Contains(err.Error(), "first at 42") {
		t.Fatalf("got %v", err)
	}
}
