package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hetflow/hetflow/gpu"
	"github.com/hetflow/hetflow/internal/htdg"
)

// Config says what Run measures. Quick() and Full() are the two presets.
type Config struct {
	Out     string   // directory for the JSON result files and the plots (created)
	Servers []string // a running cluster's API URLs; empty: in-process dev clusters
	Token   string   // the running cluster's API token
	Seed    uint64
	Workers int // CPU workers per in-process node
	Timeout time.Duration

	// HTDG sweep: every size on every (nodes, GPUs per node) configuration,
	// Reps runs each; box plots of BoxRuns runs at BoxSizes on the largest
	// configuration and one node.
	Sizes   []int
	NodeSet []int
	GPUSet  []int
	Reps    int
	// LargeReps replaces Reps for sizes of 50K tasks and more (0: Reps).
	LargeReps int
	BoxSizes  []int
	BoxRuns   int

	// Loop against unrolled: LoopIters iterations, the CPU path a fanout of
	// LoopWidth spin tasks of LoopSpinUS.
	LoopIters, LoopWidth, LoopSpinUS int

	// Co-run: k = 1…CorunK HTDG flows of CorunTasks submitted at once.
	CorunK, CorunTasks int

	// Granularity: stencil flows of spin tasks, every grain in GrainsUS,
	// about GrainWorkS seconds of spinning per run (between GrainMinSteps
	// and GrainMaxSteps rows), on one node against GranNodes nodes.
	GrainsUS                     []int
	GrainWorkS                   float64
	GrainMinSteps, GrainMaxSteps int
	GranNodes                    int

	// Simulation: project the HTDG of SimTasks tasks to SimNodes nodes.
	SimTasks int
	SimNodes []int

	// Only names the experiments Run measures (Experiments; nil: all). The
	// simulation calibrates on the HTDG results, so "sim" needs "htdg".
	Only []string

	Progress io.Writer // a line per measurement (nil: none)

	remoteWarnings []string // what the running cluster's nodes do not let the bench read
}

// Quick is the CI-sized preset: under two minutes on the 2-core machine.
func Quick() Config {
	return Config{Out: "bench-out", Seed: 1, Workers: 2, Timeout: 2 * time.Minute,
		Sizes: []int{250, 1000, 2000}, NodeSet: []int{1, 2, 3}, GPUSet: []int{1}, Reps: 1,
		BoxSizes: []int{500, 1000}, BoxRuns: 5,
		LoopIters: 100, LoopWidth: 8, LoopSpinUS: 20,
		CorunK: 2, CorunTasks: 1000,
		GrainsUS: []int{10, 100, 1000, 10000}, GrainWorkS: 0.1, GrainMinSteps: 2, GrainMaxSteps: 40, GranNodes: 3,
		SimTasks: 5000, SimNodes: []int{1, 2, 3, 10, 100, 1000}}
}

// Full is the preset for docs/bench: sizes 1K…100K on 1, 2 and 3 nodes
// with 1 or 2 GPUs each, box plots of 100 runs at 5K and 20K tasks (the
// seed's Figure 14), co-runs of 20K.
func Full() Config {
	return Config{Out: "docs/bench", Seed: 1, Workers: 2, Timeout: 10 * time.Minute,
		Sizes: []int{1000, 2000, 5000, 10000, 20000, 50000, 100000}, NodeSet: []int{1, 2, 3}, GPUSet: []int{1, 2}, Reps: 3, LargeReps: 1,
		BoxSizes: []int{5000, 20000}, BoxRuns: 100,
		LoopIters: 1000, LoopWidth: 16, LoopSpinUS: 20,
		CorunK: 4, CorunTasks: 20000,
		GrainsUS: []int{1, 3, 10, 30, 100, 300, 1000, 3000, 10000}, GrainWorkS: 0.5, GrainMinSteps: 4, GrainMaxSteps: 200, GranNodes: 3,
		SimTasks: 100000, SimNodes: []int{1, 2, 3, 10, 100, 1000}}
}

// Validate names the first bad setting.
func (c *Config) Validate() error {
	switch {
	case c.Out == "":
		return fmt.Errorf("%w: no output directory", ErrConfig)
	case c.Workers < 1 || c.Workers > 256:
		return fmt.Errorf("%w: %d workers per node: want 1 to 256", ErrConfig, c.Workers)
	case c.Reps < 1 || c.BoxRuns < 1:
		return fmt.Errorf("%w: reps %d, box runs %d: want at least 1", ErrConfig, c.Reps, c.BoxRuns)
	case len(c.Sizes) == 0:
		return fmt.Errorf("%w: no HTDG sizes", ErrConfig)
	case c.LoopIters < 1 || c.LoopWidth < 1:
		return fmt.Errorf("%w: loop of %d iterations × %d tasks", ErrConfig, c.LoopIters, c.LoopWidth)
	case c.CorunK < 1 || c.CorunK > 16:
		return fmt.Errorf("%w: %d co-runs: want 1 to 16", ErrConfig, c.CorunK)
	case c.GranNodes < 2:
		return fmt.Errorf("%w: granularity on %d nodes: want at least 2", ErrConfig, c.GranNodes)
	}
	for _, n := range append(append(append([]int{}, c.Sizes...), c.BoxSizes...), c.CorunTasks, c.SimTasks) {
		if n < 1 || n > 1_000_000 {
			return fmt.Errorf("%w: %d tasks: want 1 to 1M", ErrConfig, n)
		}
	}
	for _, n := range append(append([]int{}, c.NodeSet...), c.GPUSet...) {
		if n < 1 || n > 16 {
			return fmt.Errorf("%w: %d nodes or GPUs per node: want 1 to 16", ErrConfig, n)
		}
	}
	for _, g := range c.GrainsUS {
		if g < 1 || g > 10_000_000 {
			return fmt.Errorf("%w: grain %d µs: want 1 µs to 10 s", ErrConfig, g)
		}
	}
	for _, n := range c.SimNodes {
		if n < 1 || n > 10000 {
			return fmt.Errorf("%w: %d simulated nodes: want 1 to 10000", ErrConfig, n)
		}
	}
	for _, e := range c.Only {
		if !slices.Contains(Experiments, e) {
			return fmt.Errorf("%w: no experiment %q: want one of %s", ErrConfig, e, strings.Join(Experiments, ", "))
		}
	}
	if c.runs("sim") && !c.runs("htdg") {
		return fmt.Errorf("%w: the simulation (sim) calibrates on the HTDG results: it needs htdg", ErrConfig)
	}
	return nil
}

// Experiments are the experiments of a Run, in the order it measures them.
var Experiments = []string{"htdg", "loop", "corun", "granularity", "sim"}

// runs reports whether Run measures experiment e (Only).
func (c *Config) runs(e string) bool { return len(c.Only) == 0 || slices.Contains(c.Only, e) }

// ErrConfig is matched by a Config that Validate refuses.
var ErrConfig = errors.New("bench: bad configuration")

func (c *Config) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}

// targets yields the clusters of the sweep: a dev cluster per (nodes,
// GPUs) or, with Servers, the one running cluster. fn gets each in turn;
// the dev cluster is closed after it.
func (c *Config) each(ctx context.Context, nodes, gpus []int, fn func(*target) error) error {
	if len(c.Servers) > 0 {
		t, err := remoteTarget(ctx, c.Servers, c.Token)
		if err != nil {
			return err
		}
		t.logf = c.logf
		for _, w := range t.warnings {
			c.logf("bench: %s", w)
		}
		c.remoteWarnings = t.warnings
		err = fn(t)
		if cerr := t.close(); err == nil && cerr != nil {
			err = cerr
		}
		return err
	}
	for _, n := range nodes {
		for _, g := range gpus {
			t, err := startDev(ctx, n, g, c.Workers)
			if err != nil {
				return err
			}
			t.logf = c.logf
			err = fn(t)
			if cerr := t.close(); err == nil && cerr != nil {
				err = fmt.Errorf("bench: closing %s: %w", t.label, cerr)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// --- HTDG ---

// SizePoint is one HTDG size on one configuration: Reps runs.
type SizePoint struct {
	Tasks   int         `json:"tasks"`
	MedianS float64     `json:"median_runtime_s"`
	Runs    []RunResult `json:"runs"`
}

// ConfigResult is the sweep on one cluster configuration.
type ConfigResult struct {
	Label        string      `json:"label"`
	Nodes        int         `json:"nodes"`
	GPUsPerNode  int         `json:"gpus_per_node"`
	Workers      int         `json:"workers_per_node"`
	TotalWorkers int         `json:"total_workers"`
	TotalGPUs    int         `json:"total_gpus,omitempty"`
	Points       []SizePoint `json:"points"`
}

// BaselinePoint is one localexec process on one HTDG size.
type BaselinePoint struct {
	Mode      string    `json:"mode"` // hetflow (GPU domain) or baseline (GPU work inside CPU tasks)
	Tasks     int       `json:"tasks"`
	Workers   int       `json:"workers"`
	GPUs      int       `json:"gpus"`
	MedianS   float64   `json:"median_runtime_s"`
	RunsS     []float64 `json:"runs_s"`
	TasksPerS float64   `json:"tasks_per_s"`
}

// Box is BoxRuns runtimes of one size on one system, for a box plot.
type Box struct {
	Tasks  int       `json:"tasks"`
	System string    `json:"system"`
	RunsS  []float64 `json:"runs_s"`
	// LoadAvg1 is the machine's 1-minute load average after each run
	// (cluster runs; other programs' share).
	LoadAvg1 []float64 `json:"loadavg1,omitempty"`
	// Hung counts the runs that hung and were cancelled and tried again
	// (ErrHung): they are not among RunsS.
	Hung int `json:"hung,omitempty"`
}

// HTDGReport is htdg.json.
type HTDGReport struct {
	Meta      Meta            `json:"meta"`
	Configs   []ConfigResult  `json:"configs"`
	Baselines []BaselinePoint `json:"baselines"`
	Boxes     []Box           `json:"boxes"`
}

func htdgWorkload(c *Config, n, gpus int) (*workload, *htdg.Graph, error) {
	g, err := htdg.Generate(n, c.Seed, max(gpus, 1))
	if err != nil {
		return nil, nil, err
	}
	w, err := htdgFlow(g, max(gpus, 1), c.Timeout)
	return w, g, err
}

func (c *Config) runHTDG(ctx context.Context) (*HTDGReport, error) {
	rep := &HTDGReport{Meta: newMeta(c, "htdg")}
	maxNodes := c.NodeSet[len(c.NodeSet)-1]
	err := c.each(ctx, c.NodeSet, c.GPUSet, func(t *target) error {
		cr := ConfigResult{Label: t.label, Nodes: t.nodes, GPUsPerNode: t.gpus, Workers: t.workers, TotalWorkers: t.totalWorkers, TotalGPUs: t.totalGPUs}
		for _, n := range c.Sizes {
			w, _, err := htdgWorkload(c, n, t.gpus)
			if err != nil {
				return err
			}
			p := SizePoint{Tasks: n}
			var rts []float64
			reps := c.Reps
			if n >= 50000 && c.LargeReps > 0 {
				reps = c.LargeReps
			}
			for range reps {
				r, err := t.run(ctx, w)
				if err != nil {
					return err
				}
				p.Runs = append(p.Runs, r)
				rts = append(rts, r.RuntimeS)
			}
			p.MedianS = median(rts)
			c.logf("htdg %s %s tasks: median %.3f s, %d cross-node edges", t.label, sizeLabel(n), p.MedianS, p.Runs[0].CrossNodeEdges)
			cr.Points = append(cr.Points, p)
		}
		// box plots on the largest configuration and on one node, 1 GPU each
		if len(c.Servers) > 0 || t.gpus == c.GPUSet[0] && (t.nodes == maxNodes || t.nodes == 1) {
			for _, n := range c.BoxSizes {
				w, _, err := htdgWorkload(c, n, t.gpus)
				if err != nil {
					return err
				}
				b := Box{Tasks: n, System: fmt.Sprintf("cluster, %d node%s", t.nodes, plural(t.nodes))}
				for i := range c.BoxRuns {
					if i > 0 && i%boxRestart == 0 {
						if err := t.restart(ctx); err != nil {
							return err
						}
					}
					rt, hung, err := t.runtime(ctx, w)
					b.Hung += hung
					if err != nil {
						return err
					}
					b.RunsS = append(b.RunsS, rt)
					b.LoadAvg1 = append(b.LoadAvg1, loadAvg1())
				}
				c.logf("box %s %s tasks: median %.3f s of %d runs", b.System, sizeLabel(n), median(b.RunsS), len(b.RunsS))
				rep.Boxes = append(rep.Boxes, b)
			}
		}
		rep.Configs = append(rep.Configs, cr)
		return nil
	})
	if err != nil {
		return rep, err
	}
	// Baselines: one localexec process with the same total workers as each
	// cluster configuration, in both modes.
	type key struct{ workers, gpus int }
	seen := map[key]bool{}
	for _, cr := range rep.Configs {
		k := key{cr.TotalWorkers, max(cr.TotalGPUs, 1)}
		if seen[k] {
			continue
		}
		seen[k] = true
		for _, m := range []htdg.Mode{htdg.ModeHetflow, htdg.ModeBaseline} {
			for _, n := range c.Sizes {
				bp, err := c.localRuns(n, m, k.workers, k.gpus, c.Reps)
				if err != nil {
					return rep, err
				}
				c.logf("localexec %s %d workers %d GPUs %s tasks: median %.3f s", m, k.workers, k.gpus, sizeLabel(n), bp.MedianS)
				rep.Baselines = append(rep.Baselines, bp)
			}
		}
	}
	w0, g0 := c.Workers*maxNodes, maxNodes*c.GPUSet[0]
	if len(c.Servers) > 0 && len(rep.Configs) > 0 {
		w0, g0 = rep.Configs[0].TotalWorkers, max(rep.Configs[0].TotalGPUs, 1)
	}
	for _, n := range c.BoxSizes {
		for _, m := range []htdg.Mode{htdg.ModeHetflow, htdg.ModeBaseline} {
			bp, err := c.localRuns(n, m, w0, g0, c.BoxRuns)
			if err != nil {
				return rep, err
			}
			rep.Boxes = append(rep.Boxes, Box{Tasks: n, System: fmt.Sprintf("localexec %s, %d workers", m, w0), RunsS: bp.RunsS})
		}
	}
	return rep, nil
}

// localRuns runs an HTDG reps times (after a warm-up) in one localexec
// executor of workers CPU workers and gpus sim devices, checking every
// vector afterwards.
func (c *Config) localRuns(n int, m htdg.Mode, workers, gpus, reps int) (BaselinePoint, error) {
	bp := BaselinePoint{Mode: string(m), Tasks: n, Workers: workers, GPUs: gpus}
	g, err := htdg.Generate(n, c.Seed, gpus)
	if err != nil {
		return bp, err
	}
	devs, err := gpu.Open(gpus)
	if err != nil {
		return bp, err
	}
	defer func() {
		for _, d := range devs {
			_ = d.Close()
		}
	}()
	in, err := htdg.Build(g, m, devs)
	if err != nil {
		return bp, err
	}
	ex := in.Executor(workers)
	defer ex.Close()
	if err := in.Run(ex); err != nil {
		return bp, err
	}
	for range reps {
		t0 := time.Now()
		if err := in.Run(ex); err != nil {
			return bp, err
		}
		bp.RunsS = append(bp.RunsS, time.Since(t0).Seconds())
	}
	if err := in.Verify(reps + 1); err != nil {
		return bp, err
	}
	bp.MedianS = median(bp.RunsS)
	bp.TasksPerS = float64(n) / bp.MedianS
	return bp, nil
}

// --- loop against unrolled ---

// LoopRow is one of the two flows on one configuration.
type LoopRow struct {
	Flow        string      `json:"flow"` // loop or unrolled
	Label       string      `json:"label"`
	Nodes       int         `json:"nodes"`
	Tasks       int         `json:"declared_tasks"`
	Activations uint64      `json:"activations"`
	FlowBytes   int         `json:"flow_bytes"`
	MedianS     float64     `json:"median_runtime_s"`
	Runs        []RunResult `json:"runs"`
}

// LoopReport is loop.json.
type LoopReport struct {
	Meta       Meta      `json:"meta"`
	Iterations int       `json:"iterations"`
	GPUIters   int       `json:"gpu_iterations"`
	Rows       []LoopRow `json:"rows"`
}

func (c *Config) runLoop(ctx context.Context) (*LoopReport, error) {
	seed := int64(c.Seed)
	rep := &LoopReport{Meta: newMeta(c, "loop"), Iterations: c.LoopIters}
	for _, g := range loopPaths(c.LoopIters, seed) {
		if g {
			rep.GPUIters++
		}
	}
	lw, err := loopFlow(c.LoopIters, c.LoopWidth, c.LoopSpinUS, seed, c.Timeout)
	if err != nil {
		return rep, err
	}
	uw, err := unrolledFlow(c.LoopIters, c.LoopWidth, c.LoopSpinUS, seed, c.Timeout)
	if err != nil {
		return rep, err
	}
	nodes := []int{1, c.GranNodes}
	err = c.each(ctx, nodes, []int{1}, func(t *target) error {
		for _, w := range []*workload{lw, uw} {
			row := LoopRow{Flow: w.name, Label: t.label, Nodes: t.nodes, Tasks: w.tasks, FlowBytes: len(w.text)}
			var rts []float64
			for range c.Reps {
				r, err := t.run(ctx, w)
				if err != nil {
					return err
				}
				row.Runs = append(row.Runs, r)
				rts = append(rts, r.RuntimeS)
				row.Activations = r.Activations
			}
			row.MedianS = median(rts)
			c.logf("loop %s %s: %d declared tasks, %d activations, median %.3f s", w.name, t.label, row.Tasks, row.Activations, row.MedianS)
			rep.Rows = append(rep.Rows, row)
		}
		return nil
	})
	return rep, err
}

// --- co-run ---

// CorunRow is k flows submitted at once.
type CorunRow struct {
	K     int         `json:"k"`
	SoloS float64     `json:"solo_s"` // one flow alone, run just before the co-run
	Runs  []RunResult `json:"runs"`
	// WeightedSpeedup is Σ over the k runs of SoloS / the run's runtime.
	WeightedSpeedup float64 `json:"weighted_speedup"`
	// ThroughputTPS is k × tasks / the wall time until the last finished.
	ThroughputTPS float64 `json:"throughput_tasks_per_s"`
	WallS         float64 `json:"wall_s"`
	// CPUUtil is the process's CPU time over the wall time × cores
	// (in-process clusters only).
	CPUUtil float64 `json:"cpu_utilisation,omitempty"`
}

// CorunReport is corun.json.
type CorunReport struct {
	Meta  Meta       `json:"meta"`
	Label string     `json:"label"`
	Tasks int        `json:"tasks"`
	Rows  []CorunRow `json:"rows"`
}

func (c *Config) runCorun(ctx context.Context) (*CorunReport, error) {
	rep := &CorunReport{Meta: newMeta(c, "corun"), Tasks: c.CorunTasks}
	nodes := c.NodeSet[len(c.NodeSet)-1]
	err := c.each(ctx, []int{nodes}, c.GPUSet[:1], func(t *target) error {
		rep.Label = t.label
		w, _, err := htdgWorkload(c, c.CorunTasks, t.gpus)
		if err != nil {
			return err
		}
		for k := 1; k <= c.CorunK; k++ {
			// the solo run just before each co-run: the machine's load drifts
			sr, err := t.run(ctx, w)
			if err != nil {
				return err
			}
			solo := sr.RuntimeS
			rs := []RunResult{sr}
			t0 := time.Now()
			if k > 1 {
				ws := make([]*workload, k)
				for i := range ws {
					ws[i] = w
				}
				if rs, err = t.runMany(ctx, ws); err != nil {
					return err
				}
			} else {
				t0 = time.Now().Add(-time.Duration(sr.WallS * float64(time.Second)))
			}
			row := CorunRow{K: k, Runs: rs, WallS: time.Since(t0).Seconds()}
			row.SoloS = solo
			for _, r := range rs {
				row.WeightedSpeedup += solo / r.RuntimeS
			}
			row.ThroughputTPS = float64(k*w.tasks) / row.WallS
			if t.dev != nil && len(rs) > 0 {
				row.CPUUtil = rs[0].CPUS / (row.WallS * float64(runtime.NumCPU()))
			}
			c.logf("corun k=%d on %s: weighted speedup %.2f, %.0f tasks/s, CPU %.0f%%", k, t.label, row.WeightedSpeedup, row.ThroughputTPS, 100*row.CPUUtil)
			rep.Rows = append(rep.Rows, row)
		}
		return nil
	})
	return rep, err
}

// --- granularity ---

// GrainRow is one task grain on one node and on GranNodes nodes.
type GrainRow struct {
	GrainUS int `json:"grain_us"`
	Tasks   int `json:"tasks"`
	// OneNodeS: one node with GranNodes × Workers workers; ManyNodesS:
	// GranNodes nodes of Workers workers (equal total workers).
	OneNodeS   float64 `json:"one_node_s"`
	ManyNodesS float64 `json:"many_nodes_s"`
	// Efficiency is OneNodeS / ManyNodesS; IdealS is the spinning alone
	// spread over min(cores, total workers).
	Efficiency float64 `json:"efficiency"`
	IdealS     float64 `json:"ideal_s"`
}

// GranReport is granularity.json.
type GranReport struct {
	Meta  Meta       `json:"meta"`
	Width int        `json:"width"`
	Nodes int        `json:"nodes"`
	Rows  []GrainRow `json:"rows"`
	// METGUS is the smallest grain whose efficiency reaches 50%,
	// interpolated in log(grain) between the measured grains; 0 when none
	// does, -1 when every grain does (it lies below the smallest).
	METGUS float64 `json:"metg_us"`
}

func (c *Config) stencils() ([]*workload, []int, error) {
	width := c.GranNodes * c.Workers
	var ws []*workload
	var steps []int
	for _, g := range c.GrainsUS {
		s := int(math.Round(c.GrainWorkS * 1e6 / float64(g*width)))
		s = min(max(s, c.GrainMinSteps), c.GrainMaxSteps)
		w, err := stencilFlow(width, s, g, c.Timeout)
		if err != nil {
			return nil, nil, err
		}
		ws = append(ws, w)
		steps = append(steps, s)
	}
	return ws, steps, nil
}

func (c *Config) runGranularity(ctx context.Context) (*GranReport, error) {
	rep := &GranReport{Meta: newMeta(c, "granularity"), Width: c.GranNodes * c.Workers, Nodes: c.GranNodes}
	if len(c.Servers) > 0 {
		return rep, fmt.Errorf("%w: granularity compares dev clusters of 1 and %d nodes; skip it against a running cluster", ErrConfig, c.GranNodes)
	}
	ws, _, err := c.stencils()
	if err != nil {
		return rep, err
	}
	times := func(nodes, workers int) ([]float64, error) {
		out := make([]float64, len(ws))
		t, err := startDev(ctx, nodes, 1, workers)
		if err != nil {
			return nil, err
		}
		defer t.close()
		for i, w := range ws {
			var rts []float64
			for range c.Reps {
				r, err := t.run(ctx, w)
				if err != nil {
					return nil, err
				}
				rts = append(rts, r.RuntimeS)
			}
			out[i] = median(rts)
		}
		return out, nil
	}
	one, err := times(1, c.GranNodes*c.Workers)
	if err != nil {
		return rep, err
	}
	many, err := times(c.GranNodes, c.Workers)
	if err != nil {
		return rep, err
	}
	cores := float64(min(runtime.NumCPU(), c.GranNodes*c.Workers))
	for i, g := range c.GrainsUS {
		r := GrainRow{GrainUS: g, Tasks: ws[i].tasks, OneNodeS: one[i], ManyNodesS: many[i],
			Efficiency: one[i] / many[i], IdealS: float64(ws[i].tasks*g) / 1e6 / cores}
		c.logf("grain %d µs, %d tasks: 1 node %.3f s, %d nodes %.3f s, efficiency %.2f", g, r.Tasks, r.OneNodeS, c.GranNodes, r.ManyNodesS, r.Efficiency)
		rep.Rows = append(rep.Rows, r)
	}
	rep.METGUS = metg(rep.Rows)
	return rep, nil
}

// metg is the smallest grain at 50% efficiency, interpolating in log grain
// between the last grain below and the first at or above, scanning from
// the largest grain down.
func metg(rows []GrainRow) float64 {
	if len(rows) == 0 {
		return 0
	}
	last := len(rows) - 1
	if rows[last].Efficiency < 0.5 {
		return 0
	}
	for i := last; i > 0; i-- {
		hi, lo := rows[i], rows[i-1]
		if lo.Efficiency >= 0.5 {
			continue
		}
		f := (0.5 - lo.Efficiency) / (hi.Efficiency - lo.Efficiency)
		return math.Exp(math.Log(float64(lo.GrainUS)) + f*(math.Log(float64(hi.GrainUS))-math.Log(float64(lo.GrainUS))))
	}
	return -1
}
