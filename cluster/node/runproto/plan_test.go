package runproto

import (
	"reflect"
	"testing"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// planFlows are the bundled examples (modules, subflows, conditions,
// loops, GPU tasks) and a flow with args of every kind.
func planFlows(t *testing.T) map[string]*spec.Graph {
	t.Helper()
	out := map[string]*spec.Graph{}
	texts := map[string][]byte{}
	for _, e := range spec.Examples() {
		texts[e.Path] = e.Data
	}
	texts["args.yaml"] = []byte(`name: args
tasks:
  - {name: a, func: spin, args: {us: 3, f: 1.5, s: str, b: true, l: [1, two, {k: v}], neg: -4}, retries: 2, timeout: 3s}
  - {name: b, func: hash, succeed: [a]}
`)
	for path, text := range texts {
		f, err := spec.Parse(path, text)
		if err != nil {
			t.Fatal(err)
		}
		g, err := f.Expand()
		if err != nil {
			t.Fatal(err)
		}
		out[path] = g
	}
	return out
}

// A plan made back into a Part holds each vertex the node owns as the
// graph has it (what a node runs a task by), its neighbours' names and
// kinds, and the loop contexts and free joins of the whole graph; the
// parts of every node, merged, hold the whole graph.
func TestPlanRoundTrip(t *testing.T) {
	for path, g := range planFlows(t) {
		loops, free := NewLoops(g), FreeJoins(g)
		for _, k := range []int{1, 2, 3} {
			nodes := []string{"n0", "n1", "n2"}[:k]
			owner := make([]uint32, len(g.Vertices))
			for v := range owner {
				owner[v] = uint32(v % k)
			}
			plans, err := Compile(g, loops, free, nodes, owner)
			if err != nil {
				t.Fatal(err)
			}
			var all *Part
			for ni, p := range plans {
				dec, err := transport.DecodePlan(transport.Encode(p), transport.Limits{})
				if err != nil {
					t.Fatalf("%s: node %d: %v", path, ni, err)
				}
				pt, err := OpenPlan(dec, nil)
				if err != nil {
					t.Fatal(err)
				}
				for v := range g.Vertices {
					own := int(owner[v]) == ni
					if pt.Holds(v) != own {
						t.Fatalf("%s: node %d: holds %d = %v", path, ni, v, !own)
					}
					got, want := &pt.G.Vertices[v], &g.Vertices[v]
					if own {
						checkVertex(t, path, got, want)
						if pt.Free[v] != free[v] {
							t.Errorf("%s: %s free %v, want %v", path, want.Path, pt.Free[v], free[v])
						}
						for _, e := range want.Pred {
							checkNeighbour(t, path, pt, loops, g, e.From)
						}
						for _, e := range want.Succ {
							checkNeighbour(t, path, pt, loops, g, e.To)
						}
					} else if got.Parent != Placeholder && (got.Path != want.Path || got.Name() != want.Name()) {
						t.Errorf("%s: neighbour %d is %q/%q, want %q/%q", path, v, got.Path, got.Name(), want.Path, want.Name())
					}
				}
				if all, err = OpenPlan(dec, all); err != nil {
					t.Fatal(err)
				}
			}
			for v := range g.Vertices {
				checkVertex(t, path, &all.G.Vertices[v], &g.Vertices[v])
				checkNeighbour(t, path, all, loops, g, v)
			}
		}
	}
}

func checkVertex(t *testing.T, path string, got, want *spec.Vertex) {
	t.Helper()
	w := *want
	w.Flow, w.Task.Succeed, w.Task.Precede, w.Task.Flow, w.Task.Node = "", nil, nil, "", ""
	w.Task = spec.Task{Name: w.Task.Name, Kind: w.Task.Kind, Func: w.Task.Func, Args: w.Task.Args, Domain: w.Task.Domain,
		Device: w.Task.Device, Retries: w.Task.Retries, Timeout: w.Task.Timeout}
	if !reflect.DeepEqual(*got, w) {
		t.Errorf("%s: vertex %d\n got %+v\nwant %+v", path, want.ID, *got, w)
	}
}

func checkNeighbour(t *testing.T, path string, pt *Part, loops *Loops, g *spec.Graph, v int) {
	t.Helper()
	got := &pt.G.Vertices[v]
	if got.Path != g.Vertices[v].Path || got.Name() != g.Vertices[v].Name() || got.Task.Kind != g.Vertices[v].Task.Kind {
		t.Errorf("%s: vertex %d is %q/%q/%s, want %q/%q/%s", path, v, got.Path, got.Name(), got.Task.Kind,
			g.Vertices[v].Path, g.Vertices[v].Name(), g.Vertices[v].Task.Kind)
	}
	if pt.Loops.comp[v] != loops.comp[v] || pt.Loops.slot[v] != loops.slot[v] || pt.Loops.HasCtx(v) != loops.HasCtx(v) {
		t.Errorf("%s: %s loop %d/%d, want %d/%d", path, got.Path, pt.Loops.comp[v], pt.Loops.slot[v], loops.comp[v], loops.slot[v])
	}
	for j := range 4 {
		if pt.Loops.Head(v, j) != loops.Head(v, j) {
			t.Errorf("%s: %s head %d = %d, want %d", path, got.Path, j, pt.Loops.Head(v, j), loops.Head(v, j))
		}
	}
}

// A plan whose vertices are not in ascending order (none that Decode
// passes, but OpenPlan takes any Plan) opens to the Part its sorted self
// opens to: each vertex the plan lacks a placeholder, each it has as
// given, a neighbour listed after a vertex of the same index skipped.
func TestOpenPlanAnyOrder(t *testing.T) {
	for path, g := range planFlows(t) {
		loops, free := NewLoops(g), FreeJoins(g)
		owner := make([]uint32, len(g.Vertices))
		for v := range owner {
			owner[v] = uint32(v % 2)
		}
		plans, err := Compile(g, loops, free, []string{"n0", "n1"}, owner)
		if err != nil {
			t.Fatal(err)
		}
		for ni, p := range plans {
			want, err := OpenPlan(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			holes := 0
			for v := range want.G.Vertices {
				if want.G.Vertices[v].Parent == Placeholder {
					holes++
				}
			}
			if len(plans) > 1 && len(p.Vertices) < len(g.Vertices) && holes == 0 {
				t.Fatalf("%s: node %d: a plan of %d of %d vertices opened without placeholders", path, ni, len(p.Vertices), len(g.Vertices))
			}
			rev := *p
			rev.Vertices = make([]transport.PlanVertex, 0, len(p.Vertices)+1)
			for i := len(p.Vertices) - 1; i >= 0; i-- {
				rev.Vertices = append(rev.Vertices, p.Vertices[i])
			}
			for i := range p.Vertices { // a vertex again, as a neighbour: skipped
				if p.Vertices[i].Local {
					dup := p.Vertices[i]
					dup.Local, dup.Name, dup.Path = false, "other", "other"
					rev.Vertices = append(rev.Vertices, dup)
					break
				}
			}
			got, err := OpenPlan(&rev, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: node %d: the plan reversed opens to another part", path, ni)
			}
		}
	}
}
