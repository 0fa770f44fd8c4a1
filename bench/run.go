package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hetflow/hetflow/gpu"
)

// EqualWorkersNote goes next to every figure: the nodes of an in-process
// cluster share one machine's cores.
const EqualWorkersNote = "in-process nodes share this machine's cores: configurations and baselines are compared at equal total CPU workers (nodes × workers per node), not equal hardware"

// Meta is the header of every result file.
type Meta struct {
	Experiment string   `json:"experiment"`
	Date       string   `json:"date"`
	Command    string   `json:"command"`
	GoVersion  string   `json:"go_version"`
	GOOS       string   `json:"goos"`
	GOARCH     string   `json:"goarch"`
	NumCPU     int      `json:"num_cpu"`
	LoadAvg    string   `json:"loadavg_at_start,omitempty"` // /proc/loadavg: other programs on the machine
	GPUBackend string   `json:"gpu_backend"`
	Cluster    string   `json:"cluster"` // "in-process dev clusters" or the servers
	Seed       uint64   `json:"seed"`
	Notes      []string `json:"notes"`
	// SimProfile names the timed sim profile the GPU tasks ran on; empty:
	// not the timed sim (the times are not modeled).
	SimProfile string `json:"sim_profile,omitempty"`
}

// timedNote begins the note of results made on the timed sim.
const timedNote = "GPU tasks ran on timed sim devices (profile "

// TimedSim is the timed sim profile the results ran on ("" none): SimProfile,
// or for results written before it, the profile their note names.
func (m *Meta) TimedSim() string {
	if m.SimProfile != "" {
		return m.SimProfile
	}
	for _, n := range m.Notes {
		if rest, ok := strings.CutPrefix(n, timedNote); ok {
			if name, _, ok := strings.Cut(rest, ","); ok {
				return name
			}
		}
	}
	return ""
}

// Command is recorded in every Meta (set by the CLI).
var Command = "bench.Run"

func newMeta(c *Config, exp string) Meta {
	m := Meta{Experiment: exp, Date: time.Now().UTC().Format(time.RFC3339), Command: Command, GoVersion: runtime.Version(),
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU(), GPUBackend: gpu.Backend(), Seed: c.Seed,
		Cluster: "in-process dev clusters (embedded NATS with JetStream, one raft coordinator, N nodes)",
		Notes:   []string{EqualWorkersNote}}
	if gpu.Backend() == "sim" {
		if p, err := gpu.LookupProfile(os.Getenv(gpu.SimProfileEnv)); err == nil && p != nil {
			m.SimProfile = p.Name
			m.Notes = append(m.Notes, timedNote+p.Name+", not calibrated against hardware): every time is MODELED device time plus real CPU time")
		} else {
			m.Notes = append(m.Notes, "GPU tasks ran on sim devices (on the CPU): the CUDA figures are missing")
		}
	}
	if len(c.Servers) > 0 {
		m.Cluster = strings.Join(c.Servers, ",")
		m.SimProfile = "" // this process's sim profile says nothing of the cluster's devices
		m.Notes = []string{"a running cluster: each node's counters (node_counters: deltas over each run) and peak memory (peak_rss_bytes, peak_heap_bytes: sampled every 100 ms) are read from its /metrics (node --http; GET /v1/nodes gives the address); the bench process's memory and CPU time are not the cluster's and are not given"}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.TrimSpace(string(b))
	}
	return m
}

// Report is everything one Run measured.
type Report struct {
	HTDG        *HTDGReport  `json:"htdg"`
	Loop        *LoopReport  `json:"loop"`
	Corun       *CorunReport `json:"corun"`
	Granularity *GranReport  `json:"granularity,omitempty"`
	Sim         *SimReport   `json:"sim,omitempty"`
	Files       []string     `json:"files"` // what Run wrote under Out
}

// Run measures every experiment of c (those of c.Only when it names some) and writes, under c.Out, one JSON
// result file per experiment (htdg.json, loop.json, corun.json,
// granularity.json, sim.json) and the plots (SVG and PNG). It stops at the
// first failure; the files of the experiments done by then are written.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	rep := &Report{}
	write := func(name string, v any) error {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		p := filepath.Join(c.Out, name)
		if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		rep.Files = append(rep.Files, p)
		return nil
	}
	var err error
	step := func(name string, fn func() (any, error)) {
		if err != nil || !c.runs(name) {
			return
		}
		t0 := time.Now()
		var v any
		v, err = fn()
		c.logf("== %s: %.1f s", name, time.Since(t0).Seconds())
		if m := metaOf(v); m != nil {
			for _, w := range c.remoteWarnings {
				if !slices.Contains(m.Notes, w) {
					m.Notes = append(m.Notes, w)
				}
			}
		}
		if v != nil {
			if werr := write(name+".json", v); err == nil {
				err = werr
			}
		}
		// plot what is done so far: a later failure keeps these
		var part Report
		switch name {
		case "htdg":
			part.HTDG = rep.HTDG
		case "loop":
			part.Loop = rep.Loop
		case "corun":
			part.Corun = rep.Corun
		case "granularity":
			part.Granularity = rep.Granularity
		case "sim":
			part.Sim = rep.Sim
		}
		if perr := plotAll(c.Out, &part, &rep.Files); perr != nil {
			err = errors.Join(err, perr)
		}
	}
	step("htdg", func() (any, error) { r, err := c.runHTDG(ctx); rep.HTDG = r; return r, err })
	step("loop", func() (any, error) { r, err := c.runLoop(ctx); rep.Loop = r; return r, err })
	step("corun", func() (any, error) { r, err := c.runCorun(ctx); rep.Corun = r; return r, err })
	if len(c.Servers) == 0 {
		step("granularity", func() (any, error) { r, err := c.runGranularity(ctx); rep.Granularity = r; return r, err })
		step("sim", func() (any, error) {
			r, err := c.calibrate(ctx, rep.HTDG)
			if err == nil {
				err = c.project(ctx, r)
			}
			rep.Sim = r
			return r, err
		})
	}
	return rep, err
}

// Resim runs the simulation again on the HTDG results a Run wrote under
// dir (htdg.json; no cluster is started): calibration and projection with
// c's SimTasks and SimNodes, writing sim.json and its plots under c.Out.
// It is how a change to the model or the planner is projected without
// measuring again.
func Resim(ctx context.Context, c Config, dir string) (*SimReport, []string, error) {
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	var h HTDGReport
	p := filepath.Join(dir, "htdg.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrConfig, p, err)
	}
	c.Seed = h.Meta.Seed
	sr, err := c.calibrate(ctx, &h)
	if err == nil {
		err = c.project(ctx, sr)
	}
	if err != nil {
		return sr, nil, err
	}
	sr.Meta.Notes = append(sr.Meta.Notes, "calibrated on the HTDG runs of "+p+" ("+h.Meta.Date+"), not measured again")
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return sr, nil, fmt.Errorf("bench: %w", err)
	}
	out, err := json.MarshalIndent(sr, "", "  ")
	if err != nil {
		return sr, nil, err
	}
	files := []string{filepath.Join(c.Out, "sim.json")}
	if err := os.WriteFile(files[0], append(out, '\n'), 0o644); err != nil {
		return sr, nil, fmt.Errorf("bench: %w", err)
	}
	err = plotAll(c.Out, &Report{Sim: sr}, &files)
	return sr, files, err
}

// metaOf is the Meta of a report, nil for another value.
func metaOf(v any) *Meta {
	switch r := v.(type) {
	case *HTDGReport:
		if r != nil {
			return &r.Meta
		}
	case *LoopReport:
		if r != nil {
			return &r.Meta
		}
	case *CorunReport:
		if r != nil {
			return &r.Meta
		}
	}
	return nil
}

// Replot reads the JSON result files a Run wrote under dir (those that are
// there) and draws their plots again, returning the files written.
func Replot(dir string) ([]string, error) {
	rep := &Report{}
	for name, v := range map[string]any{"htdg.json": &rep.HTDG, "loop.json": &rep.Loop, "corun.json": &rep.Corun,
		"granularity.json": &rep.Granularity, "sim.json": &rep.Sim} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", filepath.Join(dir, name), err)
		}
	}
	if rep.HTDG == nil && rep.Loop == nil && rep.Corun == nil && rep.Granularity == nil && rep.Sim == nil {
		return nil, fmt.Errorf("%w: no result files under %s", ErrConfig, dir)
	}
	var files []string
	err := plotAll(dir, rep, &files)
	return files, err
}
