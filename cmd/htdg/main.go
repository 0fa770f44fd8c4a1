// Command htdg reproduces the seed paper's HTDG experiment (its Figures 13
// and 15) on hetflow's local executor.
//
// It generates random heterogeneous task dependency graphs (layered DAGs
// from a seed, half CPU tasks and half GPU tasks, every task a SAXPY over 1K
// float32 elements: CPU tasks in Go on host slices, GPU tasks a GPU graph of
// copy-in, kernel, copy-out on a device) at several sizes, runs each several
// times and reports per size the median runtime, the peak memory, the CPU
// time and the scheduler's counters, for two modes:
//
//   - hetflow: GPU tasks are GPU tasks (tf.EmplaceGPU(...).On(d)), run by the
//     executor's GPU domain;
//   - baseline: no GPU domain; each GPU task is a CPU task (a runtime task)
//     that launches the same GPU graph synchronously from its CPU worker (the
//     seed's oneTBB baseline, "encapsulate each GPU task in a CPU function").
//
// Every run's result is checked (each task's vector, bit for bit, against
// the same arithmetic in Go) and so are the counters (each task executed
// exactly once per run, in its domain); a failed check exits 1.
//
// With --corun K it also starts k = 1…K processes (this binary again, with a
// hidden flag) that each run the same graph (--corun-size, 20K tasks) at once,
// and reports each one's time and the weighted speedup, Σ solo/co-run time,
// with the solo time measured just before each co-run.
//
//	go run ./cmd/htdg                        # sizes 1K…20K, both modes
//	go run ./cmd/htdg --quick                 # CI-sized
//	go run ./cmd/htdg --corun 4 --json out.json
//	go run ./cmd/htdg --sim-profile h200 --gpus 4 --json a.json   # timed sim: times are modeled
//	go run ./cmd/htdg --plot DIR a.json b.json                  # SVGs and folded JSON of reports
//
// On the default build the devices are sim devices: copies and kernels run
// on the CPU, in the device's own goroutines. With --sim-profile (or
// HETFLOW_SIM_PROFILE) they are timed sim devices that also charge device
// time from a device model, and every time printed is marked modeled;
// --gpu-workers sets hetflow's GPU workers per device. See
// docs/benchmarks/htdg.md and docs/benchmarks/timed-sim.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hetflow/hetflow/gpu"
	hcli "github.com/hetflow/hetflow/internal/cli"
	"github.com/hetflow/hetflow/internal/htdg"
	"github.com/spf13/cobra"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// options are the command's flags.
type options struct {
	sizes      []int
	reps       int
	seed       uint64
	gpus       int
	workers    int
	gpuWorkers int
	modes      []mode
	jsonFile   string
	quick      bool
	corunK     int
	corunSize  int
	corunReps  int
	simProfile string // --sim-profile: "" leaves HETFLOW_SIM_PROFILE as it is
	plotDir    string // --plot: plot the reports plotFiles instead of running
	plotFiles  []string
	child      bool // hidden: this process is a co-run child
	childMode  mode
	childN     int
	executable string // what co-run starts; os.Executable() by default
}

// report is the --json output.
type report struct {
	Date       string `json:"date"`
	GoVersion  string `json:"go_version"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Backend    string `json:"backend"`
	Seed       uint64 `json:"seed"`
	GPUs       int    `json:"gpus"`
	Workers    int    `json:"workers"`
	GPUWorkers int    `json:"gpu_workers_per_device"`
	Reps       int    `json:"reps"`
	// Modeled: the devices are timed sim devices of SimProfile, and every time in this
	// report is wall time that follows their model, not a GPU's.
	Modeled    bool         `json:"modeled"`
	SimProfile *gpu.Profile `json:"sim_profile,omitempty"`
	MemoryNote string       `json:"memory_note"`
	Sizes      []sizeResult `json:"sizes"`
	Corun      *corunReport `json:"corun,omitempty"`
}

type sizeResult struct {
	Tasks int          `json:"tasks"`
	Modes []modeResult `json:"modes"`
}

type corunReport struct {
	Tasks int        `json:"tasks"`
	Reps  int        `json:"reps"`
	Rows  []corunRow `json:"rows"`
}

const memoryNote = "peak heap = high-water of runtime/metrics heap objects+unused (MemStats.HeapInuse), sys = of /memory/classes/total (MemStats.Sys), sampled every 2 ms from before the graph is built to the end of the last run; co-run children report getrusage ru_maxrss"

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		if strings.HasSuffix(f, "K") || strings.HasSuffix(f, "k") {
			mult, f = 1000, f[:len(f)-1]
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 || v > 10_000_000/mult {
			return nil, fmt.Errorf("--sizes: %q is not a task count (like 500, 2K; 1 to 10M)", f)
		}
		out = append(out, v*mult)
	}
	return out, nil
}

func parseModes(s string) ([]mode, error) {
	var out []mode
	for _, f := range strings.Split(s, ",") {
		switch m := mode(strings.TrimSpace(f)); m {
		case modeHetflow, modeBaseline:
			out = append(out, m)
		default:
			return nil, fmt.Errorf("--modes: %q: want hetflow or baseline", f)
		}
	}
	return out, nil
}

// errShown is parseFlags' answer when it printed the help or the version:
// the command exits 0 without running.
var errShown = errors.New("help or version shown")

// parseFlags parses the command line (cobra, in the style of the other
// binaries: --long flags, --help and --version exit 0; help and version go
// to stdout).
func parseFlags(args []string, stdout, stderr io.Writer) (options, error) {
	var o options
	ran := false
	root := &cobra.Command{
		Use:   "htdg [flags] | htdg --plot DIR REPORT.json...",
		Short: "random HTDGs on hetflow's GPU domain and on a baseline without one",
		Long: `htdg runs random heterogeneous task dependency graphs (the seed paper's HTDG
experiment) on hetflow's local executor in two modes, hetflow (GPU tasks in the
GPU domain) and baseline (GPU work inside CPU tasks), and reports per size the
median runtime, peak memory, CPU time and the scheduler's counters.
See docs/benchmarks/htdg.md and docs/benchmarks/timed-sim.md.`,
		Version:       hcli.Version(),
		Args:          cobra.ArbitraryArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, rest []string) error {
			ran = true
			o.plotFiles = rest
			return nil
		},
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	fs := root.Flags()
	fs.SortFlags = false
	sizes := fs.String("sizes", "1K,2K,5K,10K,20K", "graph sizes in tasks, comma-separated (K = 1000)")
	modes := fs.String("modes", "hetflow,baseline", "modes to run: hetflow (GPU domain), baseline (GPU work inside CPU tasks)")
	fs.IntVar(&o.reps, "reps", 9, "timed runs per size and mode, after one untimed warm-up run")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the random graphs")
	fs.IntVar(&o.gpus, "gpus", 2, "GPU devices (sim devices on the default build); GPU tasks are spread over them")
	fs.IntVar(&o.workers, "workers", runtime.GOMAXPROCS(0), "CPU workers")
	fs.IntVar(&o.gpuWorkers, "gpu-workers", 1, "GPU workers per device in hetflow mode")
	fs.StringVar(&o.jsonFile, "json", "", "also write the results as JSON to `FILE`")
	fs.BoolVar(&o.quick, "quick", false, "CI-sized run: sizes 500,1K,2K, 3 reps, co-run on 2K tasks with 2 reps")
	fs.IntVar(&o.corunK, "corun", 0, "also co-run k = 1…`K` processes (K ≤ 8) of the same graph and report the weighted speedup")
	fs.IntVar(&o.corunSize, "corun-size", 20_000, "tasks of the co-run graph")
	fs.IntVar(&o.corunReps, "corun-reps", 5, "timed runs of each co-run process")
	fs.StringVar(&o.plotDir, "plot", "", "do not run: plot the --json reports named after the flags (several invocations of one configuration are folded) as SVGs into `DIR`")
	fs.StringVar(&o.simProfile, "sim-profile", "", "run on timed sim devices of `PROFILE` (a built-in: h200, h100; or a JSON file); sets "+gpu.SimProfileEnv+", whose value is the default; off: the plain sim")
	// hidden: a co-run child (see corun.go)
	fs.BoolVar(&o.child, "corun-child", false, "")
	childMode := fs.String("mode", "", "")
	fs.IntVar(&o.childN, "n", 0, "")
	for _, name := range []string{"corun-child", "mode", "n"} {
		_ = fs.MarkHidden(name)
	}
	if err := root.Execute(); err != nil {
		for _, a := range args { // the old flag package's style
			if name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "="); len(a) > 2 && a[0] == '-' && a[1] != '-' && fs.Lookup(name) != nil {
				return o, fmt.Errorf("%w (flags take two dashes: --%s)", err, name)
			}
		}
		return o, err
	}
	if !ran {
		return o, errShown
	}
	if len(o.plotFiles) > 0 && o.plotDir == "" {
		return o, fmt.Errorf("unexpected arguments %q", o.plotFiles)
	}
	set := fs.Changed
	if o.quick {
		if !set("sizes") {
			*sizes = "500,1K,2K"
		}
		if !set("reps") {
			o.reps = 3
		}
		if !set("corun-size") {
			o.corunSize = 2000
		}
		if !set("corun-reps") {
			o.corunReps = 2
		}
	}
	var err error
	if o.sizes, err = parseSizes(*sizes); err != nil {
		return o, err
	}
	if o.modes, err = parseModes(*modes); err != nil {
		return o, err
	}
	switch {
	case o.reps < 1 || o.reps > 1000:
		return o, fmt.Errorf("--reps %d: want 1 to 1000", o.reps)
	case o.gpus < 1 || o.gpus > 64:
		return o, fmt.Errorf("--gpus %d: want 1 to 64", o.gpus)
	case o.workers < 1 || o.workers > 1024:
		return o, fmt.Errorf("--workers %d: want 1 to 1024", o.workers)
	case o.gpuWorkers < 1 || o.gpuWorkers > 64:
		return o, fmt.Errorf("--gpu-workers %d: want 1 to 64", o.gpuWorkers)
	case o.corunK < 0 || o.corunK > 8:
		return o, fmt.Errorf("--corun %d: want 0 (off) to 8", o.corunK)
	case o.corunSize < 1 || o.corunSize > 10_000_000:
		return o, fmt.Errorf("--corun-size %d: want 1 to 10M", o.corunSize)
	case o.corunReps < 1 || o.corunReps > 1000:
		return o, fmt.Errorf("--corun-reps %d: want 1 to 1000", o.corunReps)
	}
	if set("sim-profile") {
		if _, err := gpu.LookupProfile(o.simProfile); err != nil {
			return o, fmt.Errorf("--sim-profile: %w", err)
		}
	}
	if o.child {
		ms, err := parseModes(*childMode)
		if err != nil || len(ms) != 1 {
			return o, fmt.Errorf("--corun-child: bad --mode %q", *childMode)
		}
		o.childMode = ms[0]
		if o.childN < 1 {
			return o, fmt.Errorf("--corun-child: bad --n %d", o.childN)
		}
	}
	return o, nil
}

// cli runs the command and returns its exit code: 0 ok, 1 a run or check
// failed, 2 bad flags.
func cli(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stdout, stderr)
	if errors.Is(err, errShown) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "htdg:", err)
		return 2
	}
	if o.plotDir != "" {
		if err := plotReports(o.plotDir, o.plotFiles, stdout); err != nil {
			fmt.Fprintln(stderr, "htdg:", err)
			return 1
		}
		return 0
	}
	if o.simProfile != "" {
		// gpu.Open reads it, here and in co-run children
		if err := os.Setenv(gpu.SimProfileEnv, o.simProfile); err != nil {
			fmt.Fprintln(stderr, "htdg:", err)
			return 1
		}
	}
	prof, err := gpu.LookupProfile(os.Getenv(gpu.SimProfileEnv))
	if err != nil {
		fmt.Fprintln(stderr, "htdg:", err)
		return 2
	}
	bc := benchConfig{seed: o.seed, gpus: o.gpus, workers: o.workers, reps: o.reps, gpuWorkers: o.gpuWorkers}
	if o.child {
		if err := runChild(o.childN, o.childMode, bc, stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "htdg:", err)
			return 1
		}
		return 0
	}
	rep, err := bench(o, prof, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "htdg:", err)
		return 1
	}
	if o.jsonFile != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(o.jsonFile, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "htdg: writing --json:", err)
			return 1
		}
	}
	return 0
}

// bench runs the size sweep and, with --corun, the co-run experiment,
// printing tables to stdout as it goes.
func bench(o options, prof *gpu.Profile, stdout, stderr io.Writer) (*report, error) {
	rep := &report{
		Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(),
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Backend: gpu.Backend(), Seed: o.seed, GPUs: o.gpus, Workers: o.workers, GPUWorkers: o.gpuWorkers, Reps: o.reps, MemoryNote: memoryNote,
	}
	backend := rep.Backend
	if prof != nil && rep.Backend == "sim" {
		rep.Modeled, rep.SimProfile = true, prof
		backend = "timed sim (profile " + prof.Name + ": times are MODELED, not calibrated against hardware)"
	}
	fmt.Fprintf(stdout, "htdg: %s backend, %d GPUs, %d CPU workers, %d GPU worker(s) per device (hetflow), GOMAXPROCS %d, seed %d, %d timed runs after a warm-up\n\n",
		backend, o.gpus, o.workers, o.gpuWorkers, rep.GOMAXPROCS, o.seed, o.reps)
	bc := benchConfig{seed: o.seed, gpus: o.gpus, workers: o.workers, reps: o.reps, gpuWorkers: o.gpuWorkers}
	for _, n := range o.sizes {
		sr := sizeResult{Tasks: n}
		for _, m := range o.modes {
			r, err := measure(n, m, bc, nil)
			if err != nil {
				return rep, err
			}
			sr.Modes = append(sr.Modes, r)
		}
		rep.Sizes = append(rep.Sizes, sr)
	}
	writeSizeTable(stdout, rep.Sizes, rep.Modeled)

	if o.corunK > 0 {
		self := o.executable
		if self == "" {
			var err error
			if self, err = os.Executable(); err != nil {
				return rep, fmt.Errorf("co-run needs its own executable: %w", err)
			}
		}
		cc := corunConfig{self: self, n: o.corunSize, maxK: o.corunK, modes: o.modes,
			bench: benchConfig{seed: o.seed, gpus: o.gpus, workers: o.workers, reps: o.corunReps, gpuWorkers: o.gpuWorkers}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		rows, err := corun(ctx, cc, stderr)
		if err != nil {
			return rep, err
		}
		rep.Corun = &corunReport{Tasks: o.corunSize, Reps: o.corunReps, Rows: rows}
		fmt.Fprintln(stdout)
		writeCorunTable(stdout, rep.Corun, rep.Modeled)
	}
	return rep, nil
}

func ms(s float64) string { return strconv.FormatFloat(s*1000, 'f', 1, 64) }

func mib(b uint64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 0, 64) }

func perRun(v uint64, runs int) string {
	return strconv.FormatFloat(float64(v)/float64(runs), 'f', 0, 64)
}

// modeledTag is what a time made on the timed sim carries next to it.
func modeledTag(modeled bool) string {
	if modeled {
		return " (modeled)"
	}
	return ""
}

func writeSizeTable(w io.Writer, sizes []sizeResult, modeled bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	m := modeledTag(modeled)
	fmt.Fprintf(tw, "tasks\tmode\tmedian ms%s\tmin ms%s\tfirst ms%s\tcpu ms/run\tcores\theap MiB\tsys MiB\texec cpu\texec gpu\tsteals\tfailed\tparks\twakeups\t\n", m, m, m)
	for _, s := range sizes {
		for _, r := range s.Modes {
			t := r.total()
			cpu := r.domain("cpu").Executed
			cores := 0.0
			if r.MedianS > 0 {
				cores = r.CPUPerRunS / r.MedianS
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
				r.Tasks, r.Mode, ms(r.MedianS), ms(r.MinS), ms(r.FirstS), ms(r.CPUPerRunS), cores,
				mib(r.Peak.HeapInuse), mib(r.Peak.Sys),
				perRun(cpu, r.Runs), perRun(t.Executed-cpu, r.Runs),
				perRun(t.StealAttempts, r.Runs), perRun(t.FailedSteals, r.Runs),
				perRun(t.Parks, r.Runs), perRun(t.Wakeups, r.Runs))
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "(counters are per run, all domains; cores = CPU time / median wall time)")
	if modeled {
		fmt.Fprintln(w, "timed sim, per mode over all runs and devices: device time charged, the Go bodies' share of it (CPU), host sleeps and how far they overshot the model:")
		for _, s := range sizes {
			for _, r := range s.Modes {
				if r.Sim != nil {
					fmt.Fprintf(w, "  %d %s: %s\n", r.Tasks, r.Mode, r.Sim)
				}
			}
		}
	}
	for _, s := range sizes {
		var h, b *modeResult
		for i := range s.Modes {
			switch mode(s.Modes[i].Mode) {
			case modeHetflow:
				h = &s.Modes[i]
			case modeBaseline:
				b = &s.Modes[i]
			}
		}
		if h != nil && b != nil && h.MedianS > 0 {
			fmt.Fprintf(w, "%d tasks: baseline/hetflow median runtime%s %.2fx, CPU time %.2fx\n",
				s.Tasks, modeledTag(modeled), b.MedianS/h.MedianS, b.CPUPerRunS/max(h.CPUPerRunS, 1e-9))
		}
	}
}

func writeCorunTable(w io.Writer, c *corunReport, modeled bool) {
	fmt.Fprintf(w, "co-run: k processes each running the same %d-task graph %d times at once\n", c.Tasks, c.Reps)
	if modeled {
		fmt.Fprintln(w, "(timed sim: each process models devices of its own; CPU contention is real, device contention between processes is not modeled)")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	m := modeledTag(modeled)
	fmt.Fprintf(tw, "k\tmode\tsolo ms/run%s\tper-process median ms/run%s\tmean\tcpu s (all)\tmax rss MiB\tweighted speedup%s\t\n", m, m, m)
	for _, r := range c.Rows {
		var each []string
		var sum, cpu float64
		var rss uint64
		for _, p := range r.Procs {
			each = append(each, ms(p.MedianS))
			sum += p.MedianS
			cpu += p.CPUS
			rss = max(rss, p.MaxRSS)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%.2f\t%s\t%.2f\t\n", r.K, r.Mode, ms(r.SoloS), strings.Join(each, " "),
			ms(sum/float64(len(r.Procs))), cpu, mib(rss), r.WeightedSpeedup)
	}
	_ = tw.Flush()
}

// mode is how GPU tasks run (htdg.Mode), named here for the flags.
type mode = htdg.Mode

const (
	modeHetflow  = htdg.ModeHetflow
	modeBaseline = htdg.ModeBaseline
)
