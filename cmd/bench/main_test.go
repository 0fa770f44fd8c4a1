package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// On timed sim devices (--sim-profile) the results' notes and every plot's
// title say the times are modeled and name the profile (issue 20, as
// cmd/htdg's TestTimedCLI checks for htdg); on the plain sim they say
// neither; --replot draws them again the same way. One tiny HTDG experiment
// (--only htdg) on one node each time.
func TestTimedRunsSayModeled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dev clusters")
	}
	t.Setenv(gpu.SimProfileEnv, "") // --sim-profile sets it: restored after the test
	tiny := []string{"--quick", "--only", "htdg", "--sizes", "40", "--nodes", "1", "--gpus-per-node", "1",
		"--reps", "1", "--box-sizes", "40", "--box-runs", "1", "--quiet"}
	for _, c := range []struct {
		name    string
		flags   []string
		modeled bool
	}{
		{"plain sim", nil, false},
		{"timed sim", []string{"--sim-profile", "h200"}, true},
	} {
		out := t.TempDir()
		if code := run(append(append(append([]string{}, tiny...), c.flags...), "--out", out)); code != exitOK {
			t.Fatalf("%s: exit %d", c.name, code)
		}
		var h struct {
			Meta bench.Meta `json:"meta"`
		}
		b, err := os.ReadFile(filepath.Join(out, "htdg.json"))
		if err == nil {
			err = json.Unmarshal(b, &h)
		}
		if err != nil {
			t.Fatalf("%s: htdg.json: %v", c.name, err)
		}
		noted := false
		for _, n := range h.Meta.Notes {
			noted = noted || strings.Contains(n, "MODELED") && strings.Contains(n, "profile h200")
		}
		if noted != c.modeled {
			t.Errorf("%s: htdg.json's notes say modeled (profile h200): %v, want %v: %q", c.name, noted, c.modeled, h.Meta.Notes)
		}
		svgs, _ := filepath.Glob(filepath.Join(out, "*.svg"))
		if len(svgs) == 0 {
			t.Fatalf("%s: no plots in %s", c.name, out)
		}
		for _, f := range svgs {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(string(b), "timed sim (h200): times MODELED"); got != c.modeled {
				t.Errorf("%s: %s's title says modeled: %v, want %v", c.name, filepath.Base(f), got, c.modeled)
			}
		}
		if got := h.Meta.SimProfile; (got == "h200") != c.modeled {
			t.Errorf("%s: htdg.json's sim_profile %q", c.name, got)
		}
		// Drawn again without the profile set, the titles still say it:
		// --replot reads it from the results.
		if c.modeled {
			t.Setenv(gpu.SimProfileEnv, "")
			for _, f := range svgs {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
			if code := run([]string{"--replot", out}); code != exitOK {
				t.Fatalf("--replot: exit %d", code)
			}
			for _, f := range svgs {
				if b, err := os.ReadFile(f); err != nil || !strings.Contains(string(b), "timed sim (h200): times MODELED") {
					t.Errorf("--replot: %s's title does not say modeled (%v)", filepath.Base(f), err)
				}
			}
		}
		// --only htdg: the other experiments did not run
		if _, err := os.Stat(filepath.Join(out, "loop.json")); !os.IsNotExist(err) {
			t.Errorf("%s: --only htdg wrote loop.json (%v)", c.name, err)
		}
	}
}
