// Command partbench compares partition.Partition with METIS's gpmetis on
// generated graphs: 2D and 3D grid meshes, random geometric graphs and a
// layered task-graph DAG. For each graph it writes the METIS file, runs
// gpmetis with the same k and ufactor, reads its partition back, measures its
// cut and balance with partition.Evaluate, runs our partitioner, and prints a
// Markdown table. It is used by scripts/partition-bench.sh, never by tests.
//
//	go run ./partition/internal/cmd/partbench -set full -seeds 3 -gpmetis gpmetis
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hetflow/hetflow/partition"
)

type spec struct {
	name string
	k    int
	make func() *partition.Graph
}

func main() {
	set := flag.String("set", "full", "graph set: small | full")
	gpmetis := flag.String("gpmetis", "gpmetis", "gpmetis binary; empty skips METIS")
	dir := flag.String("dir", "", "work directory for METIS files (default: a temp dir)")
	ufactor := flag.Int("ufactor", 30, "METIS ufactor; our tolerance is 1+ufactor/1000")
	only := flag.String("only", "", "run only graphs whose name contains this")
	seeds := flag.Int("seeds", 3, "seeds per graph and partitioner (medians are reported)")
	flag.Parse()

	work := *dir
	if work == "" {
		d, err := os.MkdirTemp("", "partbench")
		if err != nil {
			fatal(err)
		}
		defer os.RemoveAll(d)
		work = d
	}
	tol := 1 + float64(*ufactor)/1000

	var specs []spec
	switch *set {
	case "small":
		specs = []spec{
			{"grid2d-100x100", 4, func() *partition.Graph { return grid2d(100, 100) }},
			{"grid3d-22^3", 8, func() *partition.Graph { return grid3d(22, 22, 22) }},
			{"rgg-10K", 8, func() *partition.Graph { return rgg(10_000, 10, 7) }},
			{"dag-100x100", 4, func() *partition.Graph { return dag(100, 100, 3, 11) }},
		}
	case "full":
		specs = []spec{
			{"grid2d-100x100", 4, func() *partition.Graph { return grid2d(100, 100) }},
			{"grid2d-316x316", 8, func() *partition.Graph { return grid2d(316, 316) }},
			{"grid2d-1000x1000", 16, func() *partition.Graph { return grid2d(1000, 1000) }},
			{"grid3d-46^3", 8, func() *partition.Graph { return grid3d(46, 46, 46) }},
			{"grid3d-100^3", 8, func() *partition.Graph { return grid3d(100, 100, 100) }},
			{"rgg-100K", 8, func() *partition.Graph { return rgg(100_000, 10, 7) }},
			{"rgg-1M", 32, func() *partition.Graph { return rgg(1_000_000, 10, 7) }},
			{"dag-500x200", 4, func() *partition.Graph { return dag(500, 200, 3, 11) }},
			{"dag-1000x1000", 8, func() *partition.Graph { return dag(1000, 1000, 3, 11) }},
			{"grid2d-316x316", 100, func() *partition.Graph { return grid2d(316, 316) }},
			{"rgg-100K", 1000, func() *partition.Graph { return rgg(100_000, 10, 7) }},
			{"grid2d-1000x1000", 1000, func() *partition.Graph { return grid2d(1000, 1000) }},
		}
	default:
		fatal(fmt.Errorf("unknown -set %q", *set))
	}

	fmt.Printf("Medians over seeds 1..%d of each partitioner; imbalance: the worst of those runs; times: median.\n\n", *seeds)
	fmt.Println("| graph | V | E | k | cut ours | cut METIS | ratio | imbal ours | imbal METIS | time ours | time METIS |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range specs {
		if *only != "" && !strings.Contains(s.name, *only) {
			continue
		}
		g := s.make()
		nodes := make([]partition.Node, s.k)
		for i := range nodes {
			nodes[i] = partition.Node{CPU: 1}
		}
		var oc, ot, mc, mt []float64
		var oi, mi float64
		for sd := uint64(1); sd <= uint64(*seeds); sd++ {
			t0 := time.Now()
			ours, err := partition.Partition(g, nodes, partition.Options{Tolerance: tol, Seed: sd})
			if err != nil {
				fatal(err)
			}
			ot = append(ot, time.Since(t0).Seconds())
			oc = append(oc, float64(ours.Cut))
			oi = max(oi, ours.Imbalance.CPU)
			if err := partition.Check(g, nodes, ours.Assign); err != nil {
				fatal(fmt.Errorf("%s: %w", s.name, err))
			}
			if *gpmetis == "" {
				continue
			}
			assign, secs, err := runMetis(*gpmetis, work, s.name, g, s.k, *ufactor, sd)
			if err != nil {
				fatal(fmt.Errorf("%s: %w", s.name, err))
			}
			m, err := partition.Evaluate(g, nodes, assign, tol)
			if err != nil {
				fatal(fmt.Errorf("%s: metis partition: %w", s.name, err))
			}
			mc = append(mc, float64(m.Cut))
			mt = append(mt, secs)
			mi = max(mi, m.Imbalance.CPU)
		}
		mCut, mImb, mTime, ratio := "-", "-", "-", "-"
		if len(mc) > 0 {
			mCut = fmt.Sprintf("%.0f", median(mc))
			mImb = fmt.Sprintf("%.3f", mi)
			mTime = fmt.Sprintf("%.2fs", median(mt))
			if median(mc) > 0 {
				ratio = fmt.Sprintf("%.3f", median(oc)/median(mc))
			}
		}
		fmt.Printf("| %s | %d | %d | %d | %.0f | %s | %s | %.3f | %s | %.2fs | %s |\n",
			s.name, g.NumVertices(), g.NumEdges(), s.k, median(oc), mCut, ratio,
			oi, mImb, median(ot), mTime)
	}
}

func median(x []float64) float64 {
	y := append([]float64(nil), x...)
	sort.Float64s(y)
	n := len(y)
	if n%2 == 1 {
		return y[n/2]
	}
	return (y[n/2-1] + y[n/2]) / 2
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "partbench:", err)
	os.Exit(1)
}

var partTime = regexp.MustCompile(`Partitioning:\s+([0-9.]+)\s+sec`)

// runMetis writes g in METIS format, runs gpmetis and reads the partition.
// The time returned is the one gpmetis reports for partitioning (I/O not
// included), the same span we time for ours.
func runMetis(bin, dir, name string, g *partition.Graph, k, ufactor int, seed uint64) ([]int, float64, error) {
	file := filepath.Join(dir, name+".graph")
	if err := writeMetis(file, g); err != nil {
		return nil, 0, err
	}
	defer os.Remove(file)
	cmd := exec.Command(bin, fmt.Sprintf("-ufactor=%d", ufactor), fmt.Sprintf("-seed=%d", seed), file, strconv.Itoa(k))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, 0, fmt.Errorf("gpmetis: %w\n%s", err, out)
	}
	secs := math.NaN()
	if m := partTime.FindSubmatch(out); m != nil {
		secs, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	pfile := fmt.Sprintf("%s.part.%d", file, k)
	defer os.Remove(pfile)
	f, err := os.Open(pfile)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	assign := make([]int, 0, g.NumVertices())
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			return nil, 0, fmt.Errorf("%s line %d: %w", pfile, len(assign)+1, err)
		}
		assign = append(assign, p)
	}
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	return assign, secs, nil
}

// writeMetis writes the METIS graph format (1-based neighbours), with
// vertex and edge weights when any is not 1.
func writeMetis(path string, g *partition.Graph) error {
	n := g.NumVertices()
	vw, ewt := false, false
	for v := 0; v < n; v++ {
		if g.Vertex(v).CPU != 1 {
			vw = true
		}
		g.Neighbors(v, func(_ int, w int64) {
			if w != 1 {
				ewt = true
			}
		})
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	format := ""
	if vw || ewt {
		format = " 0" + b2s(vw) + b2s(ewt)
	}
	fmt.Fprintf(w, "%d %d%s\n", n, g.NumEdges(), format)
	var buf []byte
	for v := 0; v < n; v++ {
		buf = buf[:0]
		if vw {
			buf = strconv.AppendInt(buf, g.Vertex(v).CPU, 10)
		}
		g.Neighbors(v, func(u int, wt int64) {
			if len(buf) > 0 {
				buf = append(buf, ' ')
			}
			buf = strconv.AppendInt(buf, int64(u+1), 10)
			if ewt {
				buf = append(buf, ' ')
				buf = strconv.AppendInt(buf, wt, 10)
			}
		})
		buf = append(buf, '\n')
		w.Write(buf)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func b2s(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func mustBuild(b *partition.Builder) *partition.Graph {
	g, err := b.Build()
	if err != nil {
		fatal(err)
	}
	return g
}

func grid2d(w, h int) *partition.Graph {
	b := partition.NewBuilder(w * h)
	for i := 0; i < w*h; i++ {
		b.AddVertex(partition.Vertex{CPU: 1})
	}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			v := y*w + x
			if x+1 < w {
				b.AddEdge(v, v+1, 1)
			}
			if y+1 < h {
				b.AddEdge(v, v+w, 1)
			}
		}
	}
	return mustBuild(b)
}

func grid3d(a, bb, c int) *partition.Graph {
	b := partition.NewBuilder(a * bb * c)
	for i := 0; i < a*bb*c; i++ {
		b.AddVertex(partition.Vertex{CPU: 1})
	}
	id := func(x, y, z int) int { return (z*bb+y)*a + x }
	for z := 0; z < c; z++ {
		for y := 0; y < bb; y++ {
			for x := 0; x < a; x++ {
				v := id(x, y, z)
				if x+1 < a {
					b.AddEdge(v, id(x+1, y, z), 1)
				}
				if y+1 < bb {
					b.AddEdge(v, id(x, y+1, z), 1)
				}
				if z+1 < c {
					b.AddEdge(v, id(x, y, z+1), 1)
				}
			}
		}
	}
	return mustBuild(b)
}

// rgg is a random geometric graph: n points in the unit square, joined when
// closer than the radius that gives about deg neighbours each.
func rgg(n int, deg float64, seed uint64) *partition.Graph {
	rng := rand.New(rand.NewPCG(seed, 1))
	xs, ys := make([]float64, n), make([]float64, n)
	for i := range xs {
		xs[i], ys[i] = rng.Float64(), rng.Float64()
	}
	r := math.Sqrt(deg / (math.Pi * float64(n)))
	cells := int(1 / r)
	cell := make([][]int32, cells*cells)
	at := func(x float64) int { return min(int(x*float64(cells)), cells-1) }
	for i := range xs {
		c := at(ys[i])*cells + at(xs[i])
		cell[c] = append(cell[c], int32(i))
	}
	b := partition.NewBuilder(n)
	for i := 0; i < n; i++ {
		b.AddVertex(partition.Vertex{CPU: 1})
	}
	r2 := r * r
	for i := range xs {
		cx, cy := at(xs[i]), at(ys[i])
		for dy := -1; dy <= 1; dy++ {
			for dx := -1; dx <= 1; dx++ {
				x, y := cx+dx, cy+dy
				if x < 0 || y < 0 || x >= cells || y >= cells {
					continue
				}
				for _, j := range cell[y*cells+x] {
					if int(j) <= i {
						continue
					}
					ddx, ddy := xs[i]-xs[j], ys[i]-ys[j]
					if ddx*ddx+ddy*ddy < r2 {
						b.AddEdge(i, int(j), 1)
					}
				}
			}
		}
	}
	return mustBuild(b)
}

// dag is a layered task graph: layers of width tasks, each task depending on
// fanin tasks of the layer before, mostly near its own position (a
// wavefront), sometimes anywhere (a reduction or shuffle). Task weights are
// 1..10 and edge weights (data sizes) 1..8, directed edges.
func dag(layers, width, fanin int, seed uint64) *partition.Graph {
	rng := rand.New(rand.NewPCG(seed, 2))
	n := layers * width
	b := partition.NewBuilder(n)
	for i := 0; i < n; i++ {
		b.AddVertex(partition.Vertex{CPU: 1 + rng.Int64N(10)})
	}
	for l := 1; l < layers; l++ {
		for i := 0; i < width; i++ {
			v := l*width + i
			for f := 0; f < fanin; f++ {
				var j int
				if rng.IntN(20) == 0 {
					j = rng.IntN(width)
				} else {
					j = min(max(i+rng.IntN(7)-3, 0), width-1)
				}
				b.AddEdge((l-1)*width+j, v, 1+rng.Int64N(8))
			}
		}
	}
	return mustBuild(b)
}
