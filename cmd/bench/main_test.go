package main

import "testing"

// Bad flags and a results directory without results are invalid input (exit
// 2), as they were under `coordinator bench`.
func TestBadInputExitsInvalid(t *testing.T) {
	for _, args := range [][]string{
		{"--no-such-flag"},
		{"extra-argument"},
		{"--replot", t.TempDir()},
		{"--resim", t.TempDir(), "--quiet"},
	} {
		if got := run(args); got != exitInvalid {
			t.Errorf("bench %q exits %d, want %d", args, got, exitInvalid)
		}
	}
}
