package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotNote is the short form of EqualWorkersNote under every title.
const plotNote = "(in-process nodes share the machine's cores: equal total workers)"

// save writes p as name.svg and name.png under dir.
func save(p *plot.Plot, dir, name string, files *[]string) error {
	for _, ext := range []string{".svg", ".png"} {
		path := filepath.Join(dir, name+ext)
		if err := p.Save(18*vg.Centimeter, 12*vg.Centimeter, path); err != nil {
			return fmt.Errorf("bench: plot %s: %w", path, err)
		}
		*files = append(*files, path)
	}
	return nil
}

// newPlot is a plot of the results m heads: its title says when their
// times are modeled (m.TimedSim), also when drawn again by Replot.
func newPlot(m *Meta, title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title + "\n" + plotNote
	if name := m.TimedSim(); name != "" {
		p.Title.Text += "\ntimed sim (" + name + "): times MODELED"
	}
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Add(plotter.NewGrid())
	return p
}

func logXY(p *plot.Plot, x, y bool) {
	if x {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = ticks125{}
	}
	if y {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = ticks125{}
	}
}

// ticks125 marks a log axis at 1, 2 and 5 × 10^k, each labelled (plot's
// LogTicks labels powers of ten only, too few for a range of one or two
// decades).
type ticks125 struct{}

func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	var out []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		}
	}
	return out
}

// line adds a line with points; dashed for baselines.
func line(p *plot.Plot, i int, name string, xys plotter.XYs, dashed bool) error {
	if len(xys) == 0 {
		return nil
	}
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(i)
	s.Color = plotutil.Color(i)
	s.Shape = plotutil.Shape(i)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	}
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

func plotAll(dir string, r *Report, files *[]string) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if r.HTDG != nil {
		add(plotHTDG(dir, r.HTDG, files))
	}
	if r.Loop != nil {
		add(plotLoop(dir, r.Loop, files))
	}
	if r.Corun != nil {
		add(plotCorun(dir, r.Corun, files))
	}
	if r.Granularity != nil {
		add(plotGranularity(dir, r.Granularity, files))
	}
	if r.Sim != nil {
		add(plotSim(dir, r.Sim, files))
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench: plots: %v", errs)
	}
	return nil
}

func plotHTDG(dir string, h *HTDGReport, files *[]string) error {
	if len(h.Configs) == 0 {
		return nil
	}
	p := newPlot(&h.Meta, "HTDG runtime against size (median per point)", "tasks", "runtime (s)")
	logXY(p, true, true)
	i := 0
	for _, cr := range h.Configs {
		var xys plotter.XYs
		for _, pt := range cr.Points {
			xys = append(xys, plotter.XY{X: float64(pt.Tasks), Y: pt.MedianS})
		}
		if err := line(p, i, "cluster "+cr.Label, xys, false); err != nil {
			return err
		}
		i++
	}
	// the localexec baselines at the largest total workers, with the
	// fewest GPUs measured there (those of the 1-GPU-per-node cluster)
	maxW, minG := 0, math.MaxInt
	for _, b := range h.Baselines {
		maxW = max(maxW, b.Workers)
	}
	for _, b := range h.Baselines {
		if b.Workers == maxW {
			minG = min(minG, b.GPUs)
		}
	}
	byMode := map[string]plotter.XYs{}
	for _, b := range h.Baselines {
		if b.Workers == maxW && b.GPUs == minG {
			byMode[b.Mode] = append(byMode[b.Mode], plotter.XY{X: float64(b.Tasks), Y: b.MedianS})
		}
	}
	for _, m := range []string{"hetflow", "baseline"} {
		name := fmt.Sprintf("localexec, %d workers, %d GPUs, GPU domain", maxW, minG)
		if m == "baseline" {
			name = fmt.Sprintf("localexec, %d workers, %d GPUs, GPU work inside CPU tasks", maxW, minG)
		}
		if err := line(p, i, name, byMode[m], true); err != nil {
			return err
		}
		i++
	}
	if err := save(p, dir, "htdg_runtime", files); err != nil {
		return err
	}

	// throughput
	p = newPlot(&h.Meta, "HTDG throughput against size", "tasks", "tasks per second")
	logXY(p, true, true)
	for j, cr := range h.Configs {
		var xys plotter.XYs
		for _, pt := range cr.Points {
			xys = append(xys, plotter.XY{X: float64(pt.Tasks), Y: float64(pt.Tasks) / pt.MedianS})
		}
		if err := line(p, j, "cluster "+cr.Label, xys, false); err != nil {
			return err
		}
	}
	if err := save(p, dir, "htdg_throughput", files); err != nil {
		return err
	}

	// box plots, one figure per size
	sizes := map[int][]Box{}
	for _, b := range h.Boxes {
		sizes[b.Tasks] = append(sizes[b.Tasks], b)
	}
	var keys []int
	for k := range sizes {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, n := range keys {
		bs := sizes[n]
		p := newPlot(&h.Meta, fmt.Sprintf("HTDG of %s tasks: runtime over %d runs", sizeLabel(n), len(bs[0].RunsS)), "", "runtime (s)")
		p.Legend.Top = false
		var names []string
		for j, b := range bs {
			bp, err := plotter.NewBoxPlot(vg.Points(30), float64(j), plotter.Values(b.RunsS))
			if err != nil {
				return err
			}
			bp.FillColor = plotutil.Color(j)
			p.Add(bp)
			names = append(names, fmt.Sprintf("%s\n(%d runs)", b.System, len(b.RunsS)))
		}
		p.NominalX(names...)
		p.X.Tick.Label.Font.Size = vg.Points(7)
		if err := save(p, dir, fmt.Sprintf("htdg_box_%s", sizeLabel(n)), files); err != nil {
			return err
		}
	}
	return nil
}

func plotLoop(dir string, l *LoopReport, files *[]string) error {
	if len(l.Rows) == 0 {
		return nil
	}
	p := newPlot(&l.Meta, fmt.Sprintf("condition loop of %d iterations against the same work unrolled", l.Iterations), "", "runtime (s, median)")
	p.Legend.Top = false
	var names []string
	vals := make(plotter.Values, len(l.Rows))
	for i, r := range l.Rows {
		vals[i] = r.MedianS
		names = append(names, fmt.Sprintf("%s, %d node%s\n%d tasks, %d activations", r.Flow, r.Nodes, plural(r.Nodes), r.Tasks, r.Activations))
	}
	b, err := plotter.NewBarChart(vals, vg.Points(30))
	if err != nil {
		return err
	}
	b.Color = plotutil.Color(0)
	p.Add(b)
	p.NominalX(names...)
	p.X.Tick.Label.Font.Size = vg.Points(7)
	p.Y.Min = 0
	return save(p, dir, "loop", files)
}

func plotCorun(dir string, c *CorunReport, files *[]string) error {
	if len(c.Rows) == 0 {
		return nil
	}
	p := newPlot(&c.Meta, fmt.Sprintf("co-run: k HTDG flows of %s tasks at once on %s", sizeLabel(c.Tasks), c.Label), "k (flows at once)", "")
	var th, ws, cu plotter.XYs
	for _, r := range c.Rows {
		th = append(th, plotter.XY{X: float64(r.K), Y: r.ThroughputTPS})
		ws = append(ws, plotter.XY{X: float64(r.K), Y: r.WeightedSpeedup})
		cu = append(cu, plotter.XY{X: float64(r.K), Y: 100 * r.CPUUtil})
	}
	p.Y.Label.Text = "tasks per second (all flows)"
	p.Y.Min = 0
	if err := line(p, 0, "throughput", th, false); err != nil {
		return err
	}
	if err := save(p, dir, "corun_throughput", files); err != nil {
		return err
	}
	p = newPlot(&c.Meta, fmt.Sprintf("co-run: weighted speedup and CPU utilisation, %s tasks per flow", sizeLabel(c.Tasks)), "k (flows at once)", "")
	p.Y.Label.Text = "weighted speedup Σ solo/co-run  |  CPU utilisation (% / 100)"
	for i := range cu {
		cu[i].Y /= 100
	}
	p.Y.Min = 0
	if err := line(p, 0, "weighted speedup", ws, false); err != nil {
		return err
	}
	if err := line(p, 1, "CPU utilisation of the process (all cores = 1)", cu, true); err != nil {
		return err
	}
	return save(p, dir, "corun_speedup", files)
}

func plotGranularity(dir string, g *GranReport, files *[]string) error {
	if len(g.Rows) == 0 {
		return nil
	}
	title := fmt.Sprintf("granularity: %d nodes against 1, stencil of width %d", g.Nodes, g.Width)
	switch {
	case g.METGUS > 0:
		title += fmt.Sprintf(", METG(50%%) ≈ %.0f µs", g.METGUS)
	case g.METGUS < 0:
		title += ", METG(50%) below the smallest grain"
	default:
		title += ", 50% not reached"
	}
	p := newPlot(&g.Meta, title, "task grain (µs of spin)", "efficiency (1-node time / multi-node time)")
	logXY(p, true, false)
	var xys plotter.XYs
	for _, r := range g.Rows {
		xys = append(xys, plotter.XY{X: float64(r.GrainUS), Y: r.Efficiency})
	}
	if err := line(p, 0, "efficiency", xys, false); err != nil {
		return err
	}
	half := plotter.NewFunction(func(float64) float64 { return 0.5 })
	half.Color = color.Gray{128}
	half.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(half)
	p.Legend.Add("50%", half)
	p.Y.Min = 0
	return save(p, dir, "granularity", files)
}

func plotSim(dir string, s *SimReport, files *[]string) error {
	if len(s.Calibration) > 0 {
		p := newPlot(&s.Meta, fmt.Sprintf("simulation calibration: mean |error| %.0f%%, max %.0f%%", 100*s.MeanAbsErr, 100*s.MaxAbsErr), "measured runtime (s)", "predicted runtime (s)")
		logXY(p, true, true)
		byNodes := map[int]plotter.XYs{}
		lo, hi := math.Inf(1), 0.0
		for _, c := range s.Calibration {
			byNodes[c.Nodes] = append(byNodes[c.Nodes], plotter.XY{X: c.MeasuredS, Y: c.PredictedS})
			lo, hi = min(lo, c.MeasuredS, c.PredictedS), max(hi, c.MeasuredS, c.PredictedS)
		}
		var ns []int
		for n := range byNodes {
			ns = append(ns, n)
		}
		sort.Ints(ns)
		for i, n := range ns {
			sc, err := plotter.NewScatter(byNodes[n])
			if err != nil {
				return err
			}
			sc.Color = plotutil.Color(i)
			sc.Shape = draw.CircleGlyph{}
			p.Add(sc)
			p.Legend.Add(fmt.Sprintf("%d node%s", n, plural(n)), sc)
		}
		id, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo}, {X: hi, Y: hi}})
		if err != nil {
			return err
		}
		id.Color = color.Gray{128}
		p.Add(id)
		p.Legend.Add("predicted = measured", id)
		if err := save(p, dir, "sim_calibration", files); err != nil {
			return err
		}
	}
	if len(s.Projections) == 0 {
		return nil
	}
	p := newPlot(&s.Meta, fmt.Sprintf("projected HTDG runtime, %s tasks (simulation)", sizeLabel(s.Projections[0].Tasks)), "nodes", "runtime (s)")
	p.Legend.Left = false
	logXY(p, true, true)
	var rt, mk, lrt, lmk plotter.XYs
	for _, pr := range s.Projections {
		rt = append(rt, plotter.XY{X: float64(pr.Nodes), Y: pr.RuntimeS})
		mk = append(mk, plotter.XY{X: float64(pr.Nodes), Y: math.Max(pr.MakespanS, 1e-6)})
		if l := pr.LeastCut; l != nil {
			lrt = append(lrt, plotter.XY{X: float64(pr.Nodes), Y: l.RuntimeS})
			lmk = append(lmk, plotter.XY{X: float64(pr.Nodes), Y: math.Max(l.MakespanS, 1e-6)})
		}
	}
	if err := line(p, 0, "runtime (level-balanced placement)", rt, false); err != nil {
		return err
	}
	if err := line(p, 1, "its distributed part (makespan)", mk, true); err != nil {
		return err
	}
	if len(lrt) > 0 {
		if err := line(p, 2, "runtime, least-cut placement", lrt, false); err != nil {
			return err
		}
		if err := line(p, 3, "makespan, least-cut placement", lmk, true); err != nil {
			return err
		}
	}
	if err := save(p, dir, "sim_projection", files); err != nil {
		return err
	}
	p = newPlot(&s.Meta, fmt.Sprintf("projected cross-node traffic, %s tasks (simulation)", sizeLabel(s.Projections[0].Tasks)), "nodes", "")
	logXY(p, true, true)
	var ed, by plotter.XYs
	for _, pr := range s.Projections {
		if pr.CrossNodeEdges > 0 {
			ed = append(ed, plotter.XY{X: float64(pr.Nodes), Y: float64(pr.CrossNodeEdges)})
			by = append(by, plotter.XY{X: float64(pr.Nodes), Y: float64(pr.TrafficBytes) / 1024})
		}
	}
	p.Y.Label.Text = "cross-node edges | KiB"
	if len(ed) == 0 {
		return nil
	}
	if err := line(p, 0, "cross-node edges", ed, false); err != nil {
		return err
	}
	if err := line(p, 1, "cross-node KiB", by, true); err != nil {
		return err
	}
	return save(p, dir, "sim_traffic", files)
}
