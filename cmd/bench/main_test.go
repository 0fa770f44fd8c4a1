package main

import (
	"fmt"
	"testing"

	"github.com/hetflow/hetflow/bench"
	"github.com/hetflow/hetflow/gpu"
)

// Bad flags and a results directory without results are invalid input (exit
// 2), as they were under `coordinator bench`; so are bad sweep flags, all
// refused before a cluster starts.
func TestBadInputExitsInvalid(t *testing.T) {
	t.Setenv(gpu.SimProfileEnv, "") // --sim-profile sets it: restored after the test
	for _, args := range [][]string{
		{"--no-such-flag"},
		{"extra-argument"},
		{"--replot", t.TempDir()},
		{"--resim", t.TempDir(), "--quiet"},
		{"--quick", "--sizes", "0"},
		{"--quick", "--sizes", "1K,x"},
		{"--quick", "--sizes", "2000K"},
		{"--quick", "--box-sizes", "-1"},
		{"--quick", "--nodes", "0"},
		{"--quick", "--nodes", "17"},
		{"--quick", "--gpus-per-node", "two"},
		{"--quick", "--reps", "0"},
		{"--quick", "--timeout", "0s"},
		{"--quick", "--only", "nosuch"},
		{"--quick", "--only", "sim"}, // the simulation needs the HTDG results
		{"--quick", "--sim-profile", "h300"},
		{"--quick", "--sim-profile", "/nonexistent/p.json"},
	} {
		if got := run(append(args, "--out", t.TempDir())); got != exitInvalid {
			t.Errorf("bench %q exits %d, want %d", args, got, exitInvalid)
		}
	}
}

// The sweep flags narrow the preset and leave the rest of it as it is.
func TestNarrow(t *testing.T) {
	cmd := benchCmd()
	if err := cmd.ParseFlags([]string{"--sizes", "1K,5k,20", "--nodes", "1,3", "--gpus-per-node", "2", "--only", "htdg", "--reps", "4"}); err != nil {
		t.Fatal(err)
	}
	fl := cmd.Flags()
	list := func(name string) []string { v, _ := fl.GetStringSlice(name); return v }
	sizes, _ := fl.GetString("sizes")
	reps, _ := fl.GetInt("reps")
	c := bench.Quick()
	if err := narrow(fl.Changed, &c, sweep{sizes: sizes, nodes: list("nodes"), gpusPerNode: list("gpus-per-node"), only: list("only"), reps: reps}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.Sizes, c.NodeSet, c.GPUSet, c.Only, c.Reps); got != "[1000 5000 20] [1 3] [2] [htdg] 4" {
		t.Errorf("narrowed: %s", got)
	}
	q := bench.Quick()
	if got, want := fmt.Sprint(c.BoxSizes, c.BoxRuns, c.Timeout, c.Out), fmt.Sprint(q.BoxSizes, q.BoxRuns, q.Timeout, q.Out); got != want {
		t.Errorf("flags not given changed the preset: %s, want %s", got, want)
	}
}
