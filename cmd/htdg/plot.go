package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// foldedPoint is one size of one line, as --plot writes it to NAME.json.
type foldedPoint struct {
	GPUs       int       `json:"gpus"`
	GPUWorkers int       `json:"gpu_workers_per_device"` // hetflow's; 1 for the baseline
	Mode       string    `json:"mode"`
	Tasks      int       `json:"tasks"`
	MediansS   []float64 `json:"medians_s"` // each invocation's median run
	MedianS    float64   `json:"median_s"`  // their median
	MinS       float64   `json:"min_s"`     // the least of them
	// the model's counters per run, summed over the invocations' devices
	// (timed sim only): host sleeps and how far they overshot the model
	SleepsPerRun float64 `json:"sleeps_per_run,omitempty"`
	LatePerRunS  float64 `json:"late_per_run_s,omitempty"`
	BodyShare    float64 `json:"body_share,omitempty"` // Go bodies' wall time / modelled device time
}

// folded is what --plot writes to NAME.json.
type folded struct {
	Modeled bool          `json:"modeled"`
	Note    string        `json:"note"`
	Files   []string      `json:"files"`
	Points  []foldedPoint `json:"points"`
}

// plotKey is one line of a plot: a configuration and a mode.
type plotKey struct {
	gpus, gpuWorkers int
	mode             string
}

func (k plotKey) label(modeled bool) string {
	s := fmt.Sprintf("%s, %d GPU", k.mode, k.gpus)
	if k.gpus > 1 {
		s += "s"
	}
	if k.mode == string(modeHetflow) && k.gpuWorkers > 1 {
		s += fmt.Sprintf(" (%d GPU workers each)", k.gpuWorkers)
	}
	return s
}

// plotReports reads htdg --json reports (several invocations of one
// configuration are folded: the median of their medians) and writes
// htdg_modeled_runtime.svg, htdg_modeled_ratio.svg and the folded figures,
// htdg_modeled.json (htdg_plain_sim_* for reports of the plain sim), under
// dir. It prints the table it plots.
func plotReports(dir string, files []string, stdout io.Writer) error {
	if len(files) == 0 {
		return fmt.Errorf("--plot: no report files given")
	}
	med := map[plotKey]map[int][]float64{} // → tasks → medians
	type simSum struct {
		runs                 int
		sleeps               int64
		late, body, modelled float64
	}
	sims := map[plotKey]map[int]*simSum{}
	modeled := false
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("--plot: %s: %w", f, err)
		}
		if i > 0 && r.Modeled != modeled {
			return fmt.Errorf("--plot: %s: mixes timed (modeled) and plain sim reports", f)
		}
		modeled = r.Modeled
		for _, s := range r.Sizes {
			for _, m := range s.Modes {
				k := plotKey{r.GPUs, max(r.GPUWorkers, 1), m.Mode}
				if k.mode == string(modeBaseline) {
					k.gpuWorkers = 1
				}
				if med[k] == nil {
					med[k] = map[int][]float64{}
				}
				med[k][s.Tasks] = append(med[k][s.Tasks], m.MedianS)
				if m.Sim != nil {
					if sims[k] == nil {
						sims[k] = map[int]*simSum{}
					}
					ss := sims[k][s.Tasks]
					if ss == nil {
						ss = &simSum{}
						sims[k][s.Tasks] = ss
					}
					ss.runs += m.Runs
					ss.sleeps += m.Sim.Sleeps
					ss.late += m.Sim.Late.Seconds()
					ss.body += m.Sim.Body.Seconds()
					ss.modelled += m.Sim.Modeled.Seconds()
				}
			}
		}
	}
	tag, name := "", "htdg_plain_sim"
	if modeled {
		tag, name = " (modeled)", "htdg_modeled"
	}
	keys := make([]plotKey, 0, len(med))
	for k := range med {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b plotKey) int {
		if a.gpus != b.gpus {
			return a.gpus - b.gpus
		}
		if a.gpuWorkers != b.gpuWorkers {
			return a.gpuWorkers - b.gpuWorkers
		}
		return strings.Compare(a.mode, b.mode)
	})
	fold := func(k plotKey) (plotter.XYs, map[int]float64, map[int]float64) {
		var xy plotter.XYs
		by, least := map[int]float64{}, map[int]float64{}
		var ns []int
		for n := range med[k] {
			ns = append(ns, n)
		}
		slices.Sort(ns)
		for _, n := range ns {
			v := medianF(med[k][n])
			by[n], least[n] = v, slices.Min(med[k][n])
			xy = append(xy, plotter.XY{X: float64(n), Y: v * 1000})
		}
		return xy, by, least
	}

	rt := plot.New()
	rt.Title.Text = "HTDG runtime" + tag + ", median of medians\ntimed sim, profile not calibrated against hardware"
	rt.X.Label.Text = "tasks"
	rt.Y.Label.Text = "runtime ms" + tag
	rt.X.Scale, rt.Y.Scale = plot.LogScale{}, plot.LogScale{}
	rt.X.Tick.Marker, rt.Y.Tick.Marker = plot.LogTicks{}, plot.LogTicks{}
	rt.Legend.Top, rt.Legend.Left = true, true
	rt.Add(plotter.NewGrid())
	ra := plot.New()
	ra.Title.Text = "HTDG baseline / hetflow runtime" + tag + ", least of the invocations' medians\n> 1: the GPU domain is faster"
	ra.X.Label.Text = "tasks"
	ra.Y.Label.Text = "baseline / hetflow" + tag
	ra.X.Scale, ra.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
	ra.Legend.Top, ra.Legend.Left = true, true
	ra.Add(plotter.NewGrid())
	one, _ := plotter.NewLine(plotter.XYs{{X: 1000, Y: 1}, {X: 100000, Y: 1}})
	one.Color = plotutil.Color(7)
	ra.Add(one)

	fo := folded{Modeled: modeled, Files: files, Note: "per configuration, mode and size: the median run of each invocation (medians_s), their median and least"}
	if modeled {
		fo.Note += "; every time is MODELED (timed sim, profile not calibrated against hardware)"
	}
	for _, k := range keys {
		var ns []int
		for n := range med[k] {
			ns = append(ns, n)
		}
		slices.Sort(ns)
		for _, n := range ns {
			v := med[k][n]
			pt := foldedPoint{GPUs: k.gpus, GPUWorkers: k.gpuWorkers, Mode: k.mode, Tasks: n, MediansS: v, MedianS: medianF(v), MinS: slices.Min(v)}
			if ss := sims[k][n]; ss != nil && ss.runs > 0 {
				pt.SleepsPerRun = float64(ss.sleeps) / float64(ss.runs)
				pt.LatePerRunS = ss.late / float64(ss.runs)
				if ss.modelled > 0 {
					pt.BodyShare = ss.body / ss.modelled
				}
			}
			fo.Points = append(fo.Points, pt)
		}
	}
	if b, err := json.MarshalIndent(fo, "", " "); err != nil {
		return err
	} else if err := os.WriteFile(filepath.Join(dir, name+".json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}

	fmt.Fprintf(stdout, "%-40s %s\n", "line", "tasks: median of medians ms"+tag)
	for i, k := range keys {
		xy, _, least := fold(k)
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.Color, l.Dashes = plotutil.Color(i), plotutil.Dashes(i)
		rt.Add(l)
		rt.Legend.Add(k.label(modeled), l)
		var cells []string
		for _, p := range xy {
			cells = append(cells, fmt.Sprintf("%d: %.1f", int(p.X), p.Y))
		}
		fmt.Fprintf(stdout, "%-40s %s\n", k.label(modeled), strings.Join(cells, ", "))
		if k.mode != string(modeHetflow) {
			continue
		}
		_, _, base := fold(plotKey{k.gpus, 1, string(modeBaseline)})
		var rxy plotter.XYs
		for _, p := range xy {
			if b, ok := base[int(p.X)]; ok && least[int(p.X)] > 0 {
				rxy = append(rxy, plotter.XY{X: p.X, Y: b / least[int(p.X)]})
			}
		}
		if len(rxy) == 0 {
			continue
		}
		rl, err := plotter.NewLine(rxy)
		if err != nil {
			return err
		}
		rl.Color, rl.Dashes = plotutil.Color(i), plotutil.Dashes(i)
		ra.Add(rl)
		ra.Legend.Add(strings.TrimPrefix(k.label(modeled), "hetflow, "), rl)
		cells = cells[:0]
		for _, p := range rxy {
			cells = append(cells, fmt.Sprintf("%d: %.2fx", int(p.X), p.Y))
		}
		fmt.Fprintf(stdout, "%-40s %s\n", "  baseline/hetflow (least)", strings.Join(cells, ", "))
	}
	for _, p := range []struct {
		p    *plot.Plot
		file string
	}{{rt, name + "_runtime.svg"}, {ra, name + "_ratio.svg"}} {
		if err := p.p.Save(18*vg.Centimeter, 12*vg.Centimeter, filepath.Join(dir, p.file)); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	return nil
}

func medianF(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
