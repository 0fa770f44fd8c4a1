package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/hetflow/hetflow/internal/htdg"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/hetflow/hetflow/gpu"
	"github.com/hetflow/hetflow/localexec"
	"go.uber.org/goleak"
)

// TestMain doubles as the co-run child: corun re-executes this test binary
// with HTDG_CORUN_CHILD=1 and the child's flags.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(cli(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// orderObserver records, per task name, how often it started and the
// sequence numbers of its (last) start and end.
type orderObserver struct {
	mu         sync.Mutex
	seq        int
	starts     map[string]int
	start, end map[string]int
}

func newOrderObserver() *orderObserver {
	return &orderObserver{starts: map[string]int{}, start: map[string]int{}, end: map[string]int{}}
}

func (o *orderObserver) TaskStart(_ localexec.WorkerInfo, t localexec.TaskInfo) {
	o.mu.Lock()
	o.seq++
	o.starts[t.Name]++
	o.start[t.Name] = o.seq
	o.mu.Unlock()
}

func (o *orderObserver) TaskEnd(_ localexec.WorkerInfo, t localexec.TaskInfo) {
	o.mu.Lock()
	o.seq++
	o.end[t.Name] = o.seq
	o.mu.Unlock()
}

// Every task of a random HTDG runs exactly once per run, after all its
// predecessors, in both modes, and computes the right vector.
func TestRunOrderAndResults(t *testing.T) {
	for _, m := range []mode{modeHetflow, modeBaseline} {
		t.Run(string(m), func(t *testing.T) {
			g, err := htdg.Generate(300, 3, 2)
			if err != nil {
				t.Fatal(err)
			}
			devs, err := gpu.Open(2)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, d := range devs {
					_ = d.Close()
				}
			}()
			in, err := htdg.Build(g, m, devs)
			if err != nil {
				t.Fatal(err)
			}
			ex := in.Executor(2)
			defer ex.Close()
			for run := 1; run <= 2; run++ {
				o := newOrderObserver()
				ex.AddObserver(o)
				if err := in.Run(ex); err != nil {
					t.Fatal(err)
				}
				ex.RemoveObserver(o)
				for i := range g.N {
					name := fmt.Sprintf("t%d", i)
					if o.starts[name] != 1 {
						t.Fatalf("run %d: %s started %d times", run, name, o.starts[name])
					}
					for _, p := range g.Preds[i] {
						pn := fmt.Sprintf("t%d", p)
						if o.end[pn] > o.start[name] {
							t.Fatalf("run %d: %s started before its predecessor %s ended", run, name, pn)
						}
					}
				}
				if err := in.Verify(run); err != nil {
					t.Fatal(err)
				}
			}
			r := modeResult{Runs: 2, Domains: ex.Stats().Domains}
			if err := checkCounters(g, m, r); err != nil {
				t.Fatal(err)
			}
			// the checks can fail: a wrong element, a wrong count
			in.Y[17][5]++
			if err := in.Verify(2); err == nil || !strings.Contains(err.Error(), "t17") {
				t.Fatalf("verify missed a corrupted element: %v", err)
			}
			r.Runs = 3
			if err := checkCounters(g, m, r); err == nil {
				t.Fatal("checkCounters accepted counts of 2 runs as 3")
			}
		})
	}
}

// The quick path on a tiny graph, through the command line, with --json:
// both modes, every task executed once per run in its domain.
func TestQuickCLI(t *testing.T) {
	file := filepath.Join(t.TempDir(), "out.json")
	var out, errb bytes.Buffer
	code := cli([]string{"--quick", "--sizes", "40,101", "--gpus", "2", "--workers", "2", "--json", file}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "baseline/hetflow median runtime") {
		t.Fatalf("output:\n%s", out.String())
	}
	rep := readReport(t, file)
	if rep.Reps != 3 || len(rep.Sizes) != 2 || rep.Sizes[1].Tasks != 101 || rep.Corun != nil {
		t.Fatalf("report %+v", rep)
	}
	for _, s := range rep.Sizes {
		if len(s.Modes) != 2 {
			t.Fatalf("%d tasks: modes %+v", s.Tasks, s.Modes)
		}
		for _, r := range s.Modes {
			if r.Runs != 4 || len(r.RunsS) != 3 || r.MedianS <= 0 || r.Peak.HeapInuse == 0 {
				t.Fatalf("%+v", r)
			}
			var gpuExec uint64
			for _, d := range r.Domains {
				if strings.HasPrefix(d.Domain, "gpu") {
					gpuExec += d.Executed
				}
			}
			cpu := r.domain("cpu").Executed
			switch mode(r.Mode) {
			case modeHetflow:
				if cpu != uint64(4*r.CPUTasks) || gpuExec != uint64(4*r.GPUTasks) || len(r.Domains) != 3 {
					t.Fatalf("hetflow counters %+v", r.Domains)
				}
			case modeBaseline:
				if cpu != uint64(4*r.Tasks) || gpuExec != 0 || len(r.Domains) != 1 {
					t.Fatalf("baseline counters %+v", r.Domains)
				}
			}
		}
	}
}

func readReport(t *testing.T, file string) report {
	t.Helper()
	var rep report
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// --sim-profile runs on timed sim devices: same checks pass (results bit for
// bit, counters), the report says the times are modeled and carries the
// model's counters per mode.
func TestTimedCLI(t *testing.T) {
	t.Setenv(gpu.SimProfileEnv, "") // cli sets it; restored after the test
	file := filepath.Join(t.TempDir(), "out.json")
	var out, errb bytes.Buffer
	code := cli([]string{"--sim-profile", "h200", "--sizes", "60", "--reps", "2", "--gpus", "2", "--workers", "2", "--json", file}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "MODELED") || !strings.Contains(out.String(), "median runtime (modeled)") {
		t.Fatalf("output does not say the times are modeled:\n%s", out.String())
	}
	rep := readReport(t, file)
	if !rep.Modeled || rep.SimProfile == nil || rep.SimProfile.Name != "h200" || len(rep.Sizes) != 1 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Sizes[0].Modes {
		// 3 operations per GPU task per run, and one initial write of x per device
		if r.Sim == nil || r.Sim.Ops != int64(3*r.GPUTasks*r.Runs+2) || r.Sim.Modeled <= 0 {
			t.Fatalf("%s: sim stats %+v (%d GPU tasks, %d runs)", r.Mode, r.Sim, r.GPUTasks, r.Runs)
		}
	}

	// --plot folds reports into SVGs that say modeled
	dir := t.TempDir()
	out.Reset()
	if code := cli([]string{"--plot", dir, file, file}, nil, &out, &errb); code != 0 {
		t.Fatalf("--plot: exit %d: %s", code, errb.String())
	}
	for _, f := range []string{"htdg_modeled_runtime.svg", "htdg_modeled_ratio.svg", "htdg_modeled.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !strings.Contains(string(b), "modeled") {
			t.Errorf("%s: %v, says modeled: %v", f, err, strings.Contains(string(b), "modeled"))
		}
	}
	if !strings.Contains(out.String(), "baseline/hetflow") || !strings.Contains(out.String(), "60: ") {
		t.Errorf("--plot table:\n%s", out.String())
	}
	if code := cli([]string{"--plot", dir}, nil, &out, &errb); code != 1 {
		t.Errorf("--plot without reports: exit %d", code)
	}
	if code := cli([]string{"--plot", dir, filepath.Join(dir, "missing.json")}, nil, &out, &errb); code != 1 {
		t.Errorf("--plot of a missing file: exit %d", code)
	}
}

// Co-run re-executes the (test) binary: k = 1, 2 children per mode.
func TestCorun(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("co-run children use pipes the way unix does")
	}
	file := filepath.Join(t.TempDir(), "out.json")
	var out, errb bytes.Buffer
	code := cli([]string{"--sizes", "30", "--reps", "1", "--corun", "2", "--corun-size", "200", "--corun-reps", "1", "--json", file}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep report
	b, _ := os.ReadFile(file)
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Corun == nil || rep.Corun.Tasks != 200 || len(rep.Corun.Rows) != 4 {
		t.Fatalf("corun %+v", rep.Corun)
	}
	for _, r := range rep.Corun.Rows {
		if len(r.Procs) != r.K || r.WeightedSpeedup <= 0 {
			t.Fatalf("row %+v", r)
		}
		if r.SoloS <= 0 || r.K == 1 && r.WeightedSpeedup != 1 {
			t.Fatalf("k=1 weighted speedup %v", r.WeightedSpeedup)
		}
		for _, p := range r.Procs {
			if p.Tasks != 200 || p.Mode != r.Mode || p.TotalS <= 0 || p.MaxRSS == 0 {
				t.Fatalf("proc %+v", p)
			}
		}
	}
	if !strings.Contains(out.String(), "weighted speedup") {
		t.Fatalf("output:\n%s", out.String())
	}
}

func TestCorunChildFailure(t *testing.T) {
	// a child that cannot start is an error naming it, not a hang
	cc := corunConfig{self: filepath.Join(t.TempDir(), "missing"), n: 10, maxK: 1, modes: []mode{modeHetflow},
		bench: benchConfig{seed: 1, gpus: 1, workers: 1, reps: 1}}
	if _, err := corun(t.Context(), cc, nil); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("got %v", err)
	}
	// a child that exits before it is ready: its stderr comes back
	if runtime.GOOS != "windows" {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cc.self = self
		cc.n = 0 // the child rejects --n 0
		_, err = corun(t.Context(), cc, nil)
		if err == nil || !strings.Contains(err.Error(), "bad --n 0") {
			t.Fatalf("got %v", err)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--sizes", "0"}, {"--sizes", "1,x"}, {"--reps", "0"}, {"--gpus", "0"}, {"--workers", "0"},
		{"--corun", "9"}, {"--modes", "fast"}, {"--corun-size", "0"}, {"extra"}, {"-nosuch"},
		{"--corun-child", "--mode", "hetflow"}, {"--corun-child", "--n", "5", "--mode", "x"},
		{"--sim-profile", "h300"}, {"--sim-profile", "/nonexistent/p.json"}, {"--gpu-workers", "0"},
	} {
		var out, errb bytes.Buffer
		if code := cli(args, nil, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
	for _, help := range []string{"--help", "-h"} {
		var out, errb bytes.Buffer
		if code := cli([]string{help}, nil, &out, &errb); code != 0 || strings.Contains(out.String(), "corun-child") || !strings.Contains(out.String(), "--corun K") {
			t.Errorf("%s: exit %d, usage:\n%s", help, code, out.String())
		}
	}
}

// htdg speaks the CLI style of the other binaries (issue 18): --version
// exits 0 and says the version, and the old single-dash flags are refused
// with a hint to the two-dash name.
func TestCommandLineStyle(t *testing.T) {
	var out, errb bytes.Buffer
	if code := cli([]string{"--version"}, nil, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "htdg version ") {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := cli([]string{"-sizes", "1K"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "two dashes: --sizes") {
		t.Errorf("-sizes: exit %d, stderr %q", code, errb.String())
	}
}

func TestParseSizes(t *testing.T) {
	got, err := parseSizes("1K, 2k,500")
	if err != nil || fmt.Sprint(got) != "[1000 2000 500]" {
		t.Fatalf("%v %v", got, err)
	}
}
