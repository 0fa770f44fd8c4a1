package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/htdg"
)

// tiny is a Config that runs every experiment in seconds.
func tiny(out string) Config {
	return Config{Out: out, Seed: 3, Workers: 2, Timeout: time.Minute,
		Sizes: []int{60, 150}, NodeSet: []int{1, 2}, GPUSet: []int{1}, Reps: 1,
		BoxSizes: []int{60}, BoxRuns: 2,
		LoopIters: 12, LoopWidth: 2, LoopSpinUS: 5,
		CorunK: 2, CorunTasks: 60,
		GrainsUS: []int{50, 2000}, GrainWorkS: 0.01, GrainMinSteps: 2, GrainMaxSteps: 4, GranNodes: 2,
		SimTasks: 300, SimNodes: []int{1, 10}}
}

// The whole command on a tiny configuration: every result file has its
// fields with values that fit the workloads, and every plot is a valid
// SVG and PNG.
func TestRunTiny(t *testing.T) {
	out := t.TempDir()
	var progress bytes.Buffer
	c := tiny(out)
	c.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, c)
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}

	var h HTDGReport
	readJSON(t, filepath.Join(out, "htdg.json"), &h)
	if len(h.Configs) != 2 || h.Meta.Date == "" || len(h.Meta.Notes) == 0 || h.Meta.Notes[0] != EqualWorkersNote {
		t.Fatalf("htdg.json: configs %d, meta %+v", len(h.Configs), h.Meta)
	}
	for _, cr := range h.Configs {
		if len(cr.Points) != 2 || cr.TotalWorkers != cr.Nodes*2 {
			t.Fatalf("config %s: %d points, %d total workers", cr.Label, len(cr.Points), cr.TotalWorkers)
		}
		for _, p := range cr.Points {
			r := p.Runs[0]
			sum := 0
			for _, k := range r.TasksPerNode {
				sum += k
			}
			g, _ := htdg.Generate(p.Tasks, 3, 1)
			switch {
			case r.State != "succeeded" || r.Tasks != p.Tasks || sum != p.Tasks || len(r.TasksPerNode) != cr.Nodes:
				t.Fatalf("%s %d tasks: %+v", cr.Label, p.Tasks, r)
			case r.Activations != uint64(p.Tasks) || r.Reexecutions != 0 || r.Edges != g.Edges:
				t.Fatalf("%s %d tasks: %d activations, %d re-executions, %d edges (graph %d)", cr.Label, p.Tasks, r.Activations, r.Reexecutions, r.Edges, g.Edges)
			case cr.Nodes == 1 && r.CrossNodeEdges != 0, r.CrossNodeEdges > r.Edges:
				t.Fatalf("%s: %d cross-node edges of %d", cr.Label, r.CrossNodeEdges, r.Edges)
			case r.RuntimeS <= 0 || r.TasksPerS <= 0 || r.PeakHeapBytes == 0 || len(r.Nodes) != cr.Nodes:
				t.Fatalf("%s: runtime %v, %v tasks/s, heap %d, %d node counters", cr.Label, r.RuntimeS, r.TasksPerS, r.PeakHeapBytes, len(r.Nodes))
			}
			var executed uint64
			for _, n := range r.Nodes {
				executed += n.TasksExecuted
			}
			if executed != uint64(p.Tasks) {
				t.Fatalf("%s: nodes executed %d tasks, want %d", cr.Label, executed, p.Tasks)
			}
		}
	}
	// baselines: both modes at 2 and 4 total workers; boxes: 2 clusters + 2 localexec
	if len(h.Baselines) != 2*2*2 || len(h.Boxes) != 4 {
		t.Fatalf("%d baselines, %d boxes", len(h.Baselines), len(h.Boxes))
	}

	var l LoopReport
	readJSON(t, filepath.Join(out, "loop.json"), &l)
	if len(l.Rows) != 4 || l.Iterations != 12 {
		t.Fatalf("loop.json: %+v", l)
	}
	for _, r := range l.Rows {
		run := r.Runs[0]
		if r.Flow == "loop" && r.Tasks != 8 || r.Flow == "unrolled" && r.Tasks != 12+2 {
			t.Fatalf("loop row %s: %d declared tasks", r.Flow, r.Tasks)
		}
		// the two flows do the same work: 12 iterations of fanouts of 2 or saxpys
		if run.State != "succeeded" || run.Reexecutions != 0 {
			t.Fatalf("loop row %+v", r)
		}
	}

	var co CorunReport
	readJSON(t, filepath.Join(out, "corun.json"), &co)
	if len(co.Rows) != 2 || len(co.Rows[1].Runs) != 2 || co.Rows[0].WeightedSpeedup != 1 || co.Rows[1].WeightedSpeedup <= 0 || co.Rows[1].CPUUtil <= 0 {
		t.Fatalf("corun.json: %+v", co.Rows)
	}

	var gr GranReport
	readJSON(t, filepath.Join(out, "granularity.json"), &gr)
	if len(gr.Rows) != 2 || gr.Rows[0].Efficiency <= 0 || gr.Rows[1].Tasks != 2*2*2 {
		t.Fatalf("granularity.json: %+v", gr.Rows)
	}

	var sr SimReport
	readJSON(t, filepath.Join(out, "sim.json"), &sr)
	if len(sr.Calibration) != 4 || len(sr.Projections) != 2 || len(sr.Assumptions) == 0 || sr.Params.TaskS <= 0 {
		t.Fatalf("sim.json: %+v", sr)
	}
	if p := sr.Projections; p[0].CrossNodeEdges != 0 || p[1].CrossNodeEdges == 0 || p[1].TrafficBytes <= 0 ||
		p[0].LeastCut != nil || p[1].LeastCut == nil || len(p[1].Latency) != len(sensitivityLatencies) {
		t.Fatalf("projections: %+v", p)
	}

	// the simulation again from htdg.json, without a cluster
	again := t.TempDir()
	rc := tiny(again)
	rc.SimNodes = []int{1, 3}
	rs, files, err := Resim(ctx, rc, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Projections) != 2 || rs.Projections[1].Nodes != 3 || rs.Params != sr.Params || len(files) != 7 {
		t.Fatalf("resim: %+v, files %v", rs, files)
	}
	if _, _, err := Resim(ctx, rc, again+"/none"); !errors.Is(err, ErrConfig) {
		t.Fatalf("resim of a directory without htdg.json: %v", err)
	}

	var svgs, pngs int
	for _, f := range rep.Files {
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(f) {
		case ".svg":
			checkSVG(t, f)
			svgs++
		case ".png":
			checkPNG(t, f)
			pngs++
		}
	}
	// htdg runtime, throughput, one box; loop; corun ×2; granularity; sim ×3
	if svgs != 10 || pngs != 10 {
		t.Fatalf("%d SVG and %d PNG plots: %v", svgs, pngs, rep.Files)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func checkSVG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := d.Token()
		if err != nil {
			if root == "" || !errors.Is(err, io.EOF) {
				t.Fatalf("%s: not an SVG document: %v (root %q)", path, err, root)
			}
			return
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
			if root != "svg" {
				t.Fatalf("%s: root element %q", path, root)
			}
		}
	}
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
		t.Fatalf("%s: %v", path, b)
	}
}

// The loop flow's coin takes the path loopPaths predicts in every
// iteration, so the unrolled flow does the same work: checked on a run.
func TestLoopPathsMatchTheRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tg, err := startDev(ctx, 1, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.close()
	const iters = 30
	lw, err := loopFlow(iters, 2, 1, 9, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tg.run(ctx, lw); err != nil {
		t.Fatal(err)
	}
	runs, err := tg.client.Runs(ctx)
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v %v", runs, err)
	}
	st, err := tg.client.Status(ctx, runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, g := range loopPaths(iters, 9) {
		if g {
			want++
		}
	}
	acts := map[string]uint64{}
	for _, ts := range st.Tasks {
		acts[ts.Name] = ts.Activations
	}
	if acts["gpu"] != uint64(want) || acts["cpu"] != uint64(iters-want) || acts["loop"] != iters+1 || acts["done"] != 1 {
		t.Fatalf("activations %v, want gpu %d cpu %d", acts, want, iters-want)
	}
	if want == 0 || want == iters {
		t.Fatalf("seed 9 takes one path only (%d of %d GPU): pick another", want, iters)
	}
}

// makespan on a chain a→b→c with b on another node: three task costs and
// two cross-node hops.
func TestMakespanChain(t *testing.T) {
	w, err := stencilFlow(1, 3, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	sg, err := newSimGraph(w.file)
	if err != nil {
		t.Fatal(err)
	}
	p := SimParams{TaskS: 1, EdgeLatS: 0.5, BandwidthBps: 64, SignalBytes: 64} // a hop: 0.5 + 1 s
	if got := sg.makespan([]int{0, 1, 0}, 2, 1, 1, p, 1); math.Abs(got-6) > 1e-9 {
		t.Fatalf("makespan %v, want 6", got)
	}
	if got := sg.makespan([]int{0, 0, 0}, 2, 1, 1, p, 2); math.Abs(got-6) > 1e-9 {
		t.Fatalf("one node, shared ×2: makespan %v, want 6", got)
	}
	// a wide row on one node of 2 workers: 6 tasks take 3 rounds
	w, _ = stencilFlow(6, 1, 10, time.Minute)
	sg, _ = newSimGraph(w.file)
	if got := sg.makespan(make([]int, 6), 1, 2, 1, p, 1); got != 3 {
		t.Fatalf("6 independent tasks on 2 workers: %v, want 3", got)
	}
}

func TestMETG(t *testing.T) {
	rows := []GrainRow{{GrainUS: 10, Efficiency: 0.1}, {GrainUS: 100, Efficiency: 0.3}, {GrainUS: 1000, Efficiency: 0.7}, {GrainUS: 10000, Efficiency: 0.9}}
	if got := metg(rows); math.Abs(got-math.Pow(10, 2.5)) > 1e-6 {
		t.Fatalf("metg %v, want 10^2.5", got)
	}
	rows[0].Efficiency, rows[1].Efficiency = 0.6, 0.6
	if got := metg(rows); got != -1 {
		t.Fatalf("every grain at 50%%: %v, want -1", got)
	}
	if got := metg([]GrainRow{{GrainUS: 10, Efficiency: 0.2}}); got != 0 {
		t.Fatalf("none at 50%%: %v, want 0", got)
	}
}

func TestFitLinear(t *testing.T) {
	// y = 0.2 + 1e-4·n + makespan, exactly
	in := []calInput{{tasks: 1000}, {tasks: 5000}, {tasks: 20000}}
	ms := []float64{0.1, 0.3, 0.9}
	for i := range in {
		in[i].measured = 0.2 + 1e-4*float64(in[i].tasks) + ms[i]
	}
	a, b := fitLinear(in, ms)
	if math.Abs(a-0.2) > 1e-9 || math.Abs(b-1e-4) > 1e-12 {
		t.Fatalf("fit %v %v", a, b)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Out = "" }, "output directory"},
		{func(c *Config) { c.Sizes = nil }, "no HTDG sizes"},
		{func(c *Config) { c.Sizes = []int{0} }, "0 tasks"},
		{func(c *Config) { c.GrainsUS = []int{0} }, "grain 0"},
		{func(c *Config) { c.CorunK = 0 }, "0 co-runs"},
		{func(c *Config) { c.NodeSet = []int{40} }, "40 nodes"},
	} {
		c := Quick()
		tc.edit(&c)
		err := c.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("want %q, got %v", tc.want, err)
		}
		if _, err := Run(context.Background(), c); !errors.Is(err, ErrConfig) {
			t.Fatalf("Run accepted a bad config: %v", err)
		}
	}
	for _, c := range []Config{Quick(), Full()} {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
}

// Against a running cluster (--server): one configuration, the cluster's
// own size; no in-process figures; no granularity or simulation.
func TestRunRemote(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := startDev(ctx, 2, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	out := t.TempDir()
	c := tiny(out)
	c.Servers = []string{d.dev.URL()}
	c.Sizes, c.BoxSizes, c.CorunK = []int{80}, []int{80}, 1
	rep, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Granularity != nil || rep.Sim != nil {
		t.Fatal("granularity or sim ran against a remote cluster")
	}
	var h HTDGReport
	readJSON(t, filepath.Join(out, "htdg.json"), &h)
	if len(h.Configs) != 1 || h.Configs[0].Nodes != 2 || !strings.HasSuffix(h.Configs[0].Label, "(remote)") {
		t.Fatalf("configs %+v", h.Configs)
	}
	r := h.Configs[0].Points[0].Runs[0]
	if r.State != "succeeded" || r.PeakHeapBytes != 0 || len(r.Nodes) != 2 || len(r.TasksPerNode) != 2 {
		t.Fatalf("remote run %+v", r)
	}
	// a dev cluster's nodes serve no HTTP: each says so, in the run and in
	// the notes (e2e/TestLoopbackBenchReadsNodeMetrics reads real ones)
	for _, n := range r.Nodes {
		if n.Note != noHTTPNote || n.TasksExecuted != 0 {
			t.Fatalf("node without --http: %+v", n)
		}
	}
	if notes := strings.Join(h.Meta.Notes, "\n"); !strings.Contains(notes, "node n1: "+noHTTPNote) {
		t.Fatalf("notes %q do not name n1", notes)
	}
	if h.Meta.Cluster != d.dev.URL() {
		t.Fatalf("meta cluster %q", h.Meta.Cluster)
	}
	if _, err := os.Stat(filepath.Join(out, "corun_speedup.svg")); err != nil {
		t.Fatal(err)
	}
}

// restart gives a fresh in-process cluster of the same shape that runs
// the next box run.
func TestTargetRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := startDev(ctx, 2, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	c := tiny(t.TempDir())
	w, _, err := htdgWorkload(&c, 40, 1)
	if err != nil {
		t.Fatal(err)
	}
	old := d.dev
	if err := d.restart(ctx); err != nil {
		t.Fatal(err)
	}
	if d.dev == old || len(d.dev.Nodes()) != 2 {
		t.Fatalf("restart kept the old cluster or changed its shape")
	}
	if rt, hung, err := d.runtime(ctx, w); err != nil || rt <= 0 || hung != 0 {
		t.Fatalf("after restart: runtime %v, %d hung, %v", rt, hung, err)
	}
}

// A run that does not finish in time is cancelled and tried again on a
// fresh cluster, and after maxHangRetries it is an ErrHung.
func TestHungRunRetried(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := startDev(ctx, 1, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	b := spec.NewFlow("slow")
	b.Task("s").Func("sleep").Arg("ms", 20000)
	fl, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWorkload("slow", fl, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.hangFor = 300 * time.Millisecond
	_, hung, err := d.runtime(ctx, w)
	if !errors.Is(err, ErrHung) || hung != maxHangRetries || d.hangs != maxHangRetries {
		t.Fatalf("runtime: %v, %d hung attempts, %d hangs", err, hung, d.hangs)
	}
}
