package main

import (
	"fmt"
	"github.com/hetflow/hetflow/internal/htdg"
	"runtime"
	"time"

	"github.com/hetflow/hetflow/gpu"
	"github.com/hetflow/hetflow/localexec"
)

// benchConfig is what one measurement needs.
type benchConfig struct {
	seed    uint64
	gpus    int // devices (sim devices on the default build)
	workers int // CPU workers
	reps    int // timed runs after the warm-up run
	// gpuWorkers is the GPU workers per device in hetflow mode (0: 1)
	gpuWorkers int
}

// modeResult is one graph size measured in one mode.
type modeResult struct {
	Mode     string    `json:"mode"`
	Tasks    int       `json:"tasks"`
	CPUTasks int       `json:"cpu_tasks"`
	GPUTasks int       `json:"gpu_tasks"`
	Edges    int       `json:"edges"`
	Layers   int       `json:"layers"`
	BuildS   float64   `json:"build_s"` // taskflow construction and data allocation
	FirstS   float64   `json:"first_run_s"`
	RunsS    []float64 `json:"runs_s"` // timed runs after the first
	MedianS  float64   `json:"median_s"`
	MinS     float64   `json:"min_s"`
	// CPUPerRunS is the process's user+system CPU time per timed run
	// (getrusage); CPUPerRunS/MedianS is the cores it kept busy.
	CPUPerRunS float64                 `json:"cpu_per_run_s"`
	Peak       htdg.MemPeak            `json:"peak"`
	Runs       int                     `json:"runs"` // first + timed
	Domains    []localexec.DomainStats `json:"domains"`
	// Sim is the timed sim's counters over all runs and devices (nil on the plain sim).
	Sim *gpu.SimStats `json:"sim,omitempty"`
}

func (r modeResult) total() localexec.DomainStats {
	return localexec.Stats{Domains: r.Domains}.Total()
}

func (r modeResult) domain(name string) localexec.DomainStats {
	return localexec.Stats{Domains: r.Domains}.Domain(name)
}

// measure generates the n-task graph of c.seed and runs it 1 + c.reps times
// in mode m on fresh devices and a fresh executor, checking the result and
// the counters. barrier, when not nil, is called between the first run and
// the timed ones (co-run children wait there for their siblings).
func measure(n int, m mode, c benchConfig, barrier func() error) (modeResult, error) {
	g, err := htdg.Generate(n, c.seed, c.gpus)
	if err != nil {
		return modeResult{}, err
	}
	res := modeResult{Mode: string(m), Tasks: n, GPUTasks: g.NGPU, CPUTasks: n - g.NGPU, Edges: g.Edges, Layers: g.Layers}
	runtime.GC()
	devs, err := gpu.Open(c.gpus)
	if err != nil {
		return res, err
	}
	defer func() {
		for _, d := range devs {
			_ = d.Close()
		}
	}()
	mem := htdg.StartMem(2 * time.Millisecond)
	peakDone := false
	defer func() {
		if !peakDone {
			mem.Stop()
		}
	}()

	t0 := time.Now()
	in, err := htdg.Build(g, m, devs)
	if err != nil {
		return res, err
	}
	res.BuildS = time.Since(t0).Seconds()
	ex := in.ExecutorGPUWorkers(c.workers, max(c.gpuWorkers, 1))
	defer ex.Close()
	if err := ex.Err(); err != nil {
		return res, err
	}

	// a run ends when the executor is done and the devices are, in the model (the timed
	// sim's tail; nothing on the plain sim)
	run := func() error {
		err := in.Run(ex)
		gpu.SettleModel(devs...)
		return err
	}
	t0 = time.Now()
	if err := run(); err != nil {
		return res, fmt.Errorf("%s, %d tasks, first run: %w", m, n, err)
	}
	res.FirstS = time.Since(t0).Seconds()
	if barrier != nil {
		if err := barrier(); err != nil {
			return res, err
		}
	}

	durs := make([]time.Duration, c.reps)
	cpu0 := htdg.CPUTime()
	for i := range durs {
		t0 = time.Now()
		if err := run(); err != nil {
			return res, fmt.Errorf("%s, %d tasks, run %d: %w", m, n, i+2, err)
		}
		durs[i] = time.Since(t0)
	}
	cpu := htdg.CPUTime() - cpu0
	res.Peak = mem.Stop()
	peakDone = true
	res.Runs = 1 + c.reps
	for _, d := range durs {
		res.RunsS = append(res.RunsS, d.Seconds())
	}
	if c.reps > 0 {
		res.MedianS = median(durs).Seconds()
		res.MinS = minDur(durs).Seconds()
		res.CPUPerRunS = cpu.Seconds() / float64(c.reps)
	}
	res.Domains = ex.Stats().Domains
	if devs[0].SimProfile() != nil {
		var st gpu.SimStats
		for _, d := range devs {
			st = st.Add(d.SimStats())
		}
		res.Sim = &st
	}
	if err := in.Verify(res.Runs); err != nil {
		return res, err
	}
	if err := checkCounters(g, m, res); err != nil {
		return res, err
	}
	return res, nil
}

func minDur(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d[1:] {
		m = min(m, x)
	}
	return m
}

// checkCounters checks that every task ran exactly once per run, in its
// domain: in hetflow mode CPU tasks on "cpu" and each GPU task on its
// device's "gpuD"; in the baseline every task on "cpu".
func checkCounters(g *htdg.Graph, m mode, r modeResult) error {
	runs := uint64(r.Runs)
	want := map[string]uint64{"cpu": uint64(g.N) * runs}
	if m == modeHetflow {
		want["cpu"] = uint64(g.N-g.NGPU) * runs
		for i, isGPU := range g.GPU {
			if isGPU {
				want[fmt.Sprintf("gpu%d", g.Device[i])] += runs
			}
		}
	}
	var total uint64
	for _, d := range r.Domains {
		total += d.Executed
		if d.Executed != want[d.Domain] {
			return fmt.Errorf("htdg: %s, %d tasks, %d runs: domain %s executed %d tasks, want %d",
				m, g.N, r.Runs, d.Domain, d.Executed, want[d.Domain])
		}
	}
	if total != uint64(g.N)*runs {
		return fmt.Errorf("htdg: %s: %d tasks executed in %d runs of %d tasks", m, total, r.Runs, g.N)
	}
	return nil
}
