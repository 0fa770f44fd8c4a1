package spec_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/spec"
)

func mustParse(t *testing.T, name, src string) *spec.File {
	t.Helper()
	f, err := spec.Parse(name, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustExpand(t *testing.T, f *spec.File) *spec.Graph {
	t.Helper()
	g, err := f.Expand()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func id(t *testing.T, g *spec.Graph, path string) int {
	t.Helper()
	i, ok := g.Lookup(path)
	if !ok {
		t.Fatalf("no vertex %q", path)
	}
	return i
}

func TestGraphDoWhile(t *testing.T) {
	g := mustExpand(t, mustParse(t, "dowhile.yaml", `
name: dowhile
tasks:
  - {name: init, func: noop}
  - {name: body, func: spin, succeed: [init]}
  - {name: cond, kind: condition, func: loop, args: {n: 99}, succeed: [body], precede: [body, done]}
  - {name: done, func: hash}
`))
	init, body, cond, done := id(t, g, "init"), id(t, g, "body"), id(t, g, "cond"), id(t, g, "done")
	if got := g.Sources(); !reflect.DeepEqual(got, []int{init}) {
		t.Errorf("sources %v", g.Paths(got))
	}
	if got := g.Successors(cond); !reflect.DeepEqual(got, []int{body, done}) {
		t.Errorf("cond successors %v, want [body done] in order", g.Paths(got))
	}
	for _, e := range g.Vertices[cond].Succ {
		if !e.Weak {
			t.Errorf("edge out of a condition is strong: %+v", e)
		}
	}
	if g.Vertices[cond].Succ[1].Index != 1 {
		t.Errorf("done's index %d", g.Vertices[cond].Succ[1].Index)
	}
	if n := g.StrongPredCount(body); n != 1 {
		t.Errorf("body's join counter %d, want 1 (init; the edge from cond is weak)", n)
	}
	if got := g.WeakPreds(body); !reflect.DeepEqual(got, []int{cond}) {
		t.Errorf("body's weak preds %v", got)
	}
	if n := g.StrongPredCount(done); n != 0 {
		t.Errorf("done's join counter %d", n)
	}
	if got := g.StrongPreds(cond); !reflect.DeepEqual(got, []int{body}) {
		t.Errorf("cond's strong preds %v", got)
	}
	if got := g.Sinks(-1); !reflect.DeepEqual(got, []int{done}) {
		t.Errorf("sinks %v", g.Paths(got))
	}
	if got := g.LoopGroups(); !reflect.DeepEqual(got, [][]int{{body, cond}}) {
		t.Errorf("loop groups %v", got)
	}
	if g.Vertices[init].Task.Kind != spec.KindStatic || g.Vertices[init].Task.Domain != spec.DomainCPU {
		t.Errorf("defaults not filled in: %+v", g.Vertices[init].Task)
	}
}

func TestGraphFigure6LoopGroups(t *testing.T) {
	f, err := spec.ReadFile("testdata/valid/figure6.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := mustExpand(t, f)
	var got [][]string
	for _, grp := range g.LoopGroups() {
		got = append(got, g.Paths(grp))
	}
	want := [][]string{{"a", "ca"}, {"b", "cb"}, {"c", "cc"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("loop groups %v, want %v", got, want)
	}
}

func TestGraphSelfLoopGroup(t *testing.T) {
	f, err := spec.ReadFile("examples/listing6-nested-loops.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := mustExpand(t, f)
	grp := g.LoopGroups()
	if len(grp) != 1 || !reflect.DeepEqual(g.Paths(grp[0]), []string{"F1", "F2", "F3"}) {
		t.Fatalf("groups %v", grp)
	}
	// A lone condition looping on itself is a group too.
	g = mustExpand(t, mustParse(t, "self.yaml", `
name: self
tasks:
  - {name: s, func: noop, precede: [c]}
  - {name: c, kind: condition, func: coin, precede: [c, out]}
  - {name: out, func: noop}
`))
	if got := g.LoopGroups(); !reflect.DeepEqual(got, [][]int{{id(t, g, "c")}}) {
		t.Errorf("self loop groups %v", got)
	}
}

func TestExpandModules(t *testing.T) {
	f, err := spec.ReadFile("testdata/valid/multi.json")
	if err != nil {
		t.Fatal(err)
	}
	g := mustExpand(t, f)
	var paths []string
	for _, v := range g.Vertices {
		paths = append(paths, v.Path)
	}
	want := []string{"start", "inner", "again", "end", "inner/x", "inner/y", "inner/deeper", "inner/deeper/l"}
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("paths %v, want %v", paths, want)
	}
	inner, deeper := id(t, g, "inner"), id(t, g, "inner/deeper")
	if got := g.Paths(g.Vertices[inner].Members); !reflect.DeepEqual(got, []string{"inner/x", "inner/y", "inner/deeper"}) {
		t.Errorf("members %v", got)
	}
	if got := g.Paths(g.ScopeSources(inner)); !reflect.DeepEqual(got, []string{"inner/x"}) {
		t.Errorf("scope sources %v", got)
	}
	if got := g.Paths(g.Descendants(inner)); !reflect.DeepEqual(got, []string{"inner/x", "inner/y", "inner/deeper", "inner/deeper/l"}) {
		t.Errorf("descendants %v", got)
	}
	if g.Vertices[id(t, g, "inner/deeper/l")].Parent != deeper || g.Vertices[deeper].Parent != inner || g.Vertices[inner].Parent != -1 {
		t.Error("parents wrong")
	}
	if v := g.Vertices[id(t, g, "inner/y")]; v.Name() != "y" || v.Flow != "inner" {
		t.Errorf("declared name %q flow %q", v.Name(), v.Flow)
	}
	// Edges stay inside their scope.
	for _, e := range g.Edges() {
		if g.Vertices[e.From].Parent != g.Vertices[e.To].Parent {
			t.Errorf("edge %s -> %s crosses scopes", g.Vertices[e.From].Path, g.Vertices[e.To].Path)
		}
	}
	// The loop around the module task brings the module's tasks into its group.
	groups := g.LoopGroups()
	if len(groups) != 1 {
		t.Fatalf("groups %v", groups)
	}
	if got := g.Paths(groups[0]); !reflect.DeepEqual(got, []string{"inner", "again", "inner/x", "inner/y", "inner/deeper", "inner/deeper/l"}) {
		t.Errorf("group %v", got)
	}
	// Without expansion the module is one vertex.
	g2, err := f.Graph("outer")
	if err != nil {
		t.Fatal(err)
	}
	if g2.Len() != 4 || g2.Vertices[1].Members != nil {
		t.Errorf("unexpanded graph has %d vertices", g2.Len())
	}
}

func TestExpandTwoInstances(t *testing.T) {
	g := mustExpand(t, mustParse(t, "two.yaml", `
flows:
  - name: main
    tasks:
      - {name: m1, kind: module, flow: lib}
      - {name: m2, kind: module, flow: lib}
  - name: lib
    tasks:
      - {name: a, func: hash}
`))
	if g.Len() != 4 {
		t.Fatalf("%d vertices", g.Len())
	}
	if _, ok := g.Lookup("m1/a"); !ok {
		t.Error("no m1/a")
	}
	if _, ok := g.Lookup("m2/a"); !ok {
		t.Error("no m2/a")
	}
}

func TestEdgeDeclaredTwiceCountsOnce(t *testing.T) {
	f, err := spec.ReadFile("testdata/valid/precede-both-ways.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := mustExpand(t, f)
	if n := g.StrongPredCount(id(t, g, "b")); n != 1 {
		t.Errorf("join counter %d", n)
	}
}

func TestSuccessorOrder(t *testing.T) {
	g := mustExpand(t, mustParse(t, "order.yaml", `
name: order
tasks:
  - {name: a, func: noop, precede: [c, b]}
  - {name: b, func: noop}
  - {name: c, func: noop}
  - {name: d, func: noop, succeed: [a]}
  - {name: m, kind: multicondition, func: pick, args: {choices: [0, 1]}, succeed: [d], precede: [b, b, c]}
`))
	if got := g.Paths(g.Successors(id(t, g, "a"))); !reflect.DeepEqual(got, []string{"c", "b", "d"}) {
		t.Errorf("a's successors %v: precede order, then succeed-declared", got)
	}
	if got := g.Paths(g.Successors(id(t, g, "m"))); !reflect.DeepEqual(got, []string{"b", "b", "c"}) {
		t.Errorf("m's successors %v", got)
	}
	if got := g.WeakPreds(id(t, g, "b")); len(got) != 1 {
		t.Errorf("b's weak preds %v", got)
	}
}

func TestFlowSources(t *testing.T) {
	f, err := spec.ReadFile("examples/listing6-nested-loops.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Root().Sources(); !reflect.DeepEqual(got, []string{"init"}) {
		t.Errorf("sources %v", got)
	}
}

// TestBigFlow checks that validation and expansion of a long chain and a wide
// fan work without deep recursion.
func TestBigFlow(t *testing.T) {
	b := spec.NewFlow("big")
	prev := b.Task("t0").Func("noop")
	for i := 1; i < 20000; i++ {
		prev = b.Task("t" + itoa(i)).Func("noop").Succeed(prev)
	}
	fl, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	g, err := fl.Graph()
	if err != nil {
		t.Fatal(err)
	}
	if g.Len() != 20000 || len(g.Sources()) != 1 || len(g.LoopGroups()) != 0 {
		t.Fatalf("len %d", g.Len())
	}
	// Close the chain into one big strong cycle: reported once.
	fl.Tasks[0].Succeed = []string{"t19999"}
	err = fl.Validate(spec.Options{})
	want := `flow "big" task "t1" field "succeed": cycle with no condition task on it: t0 -> t1 -> t2 -> t3 -> t4 -> ... (19991 more) -> t19996 -> t19997 -> t19998 -> t19999 -> t0`
	var es spec.Errors
	if !errors.As(err, &es) || es[0].Error() != want || !errors.Is(err, spec.ErrCycle) || !errors.Is(err, spec.ErrNoSource) {
		t.Fatalf("got %v\nwant %s\nand no source", err, want)
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{digits[i%10]}, b...)
	}
	return string(b)
}

// ExpandedSize counts what Expand makes without making it, saturates on a
// module bomb and on a module cycle (which Validate refuses anyway).
func TestExpandedSize(t *testing.T) {
	f, err := spec.ReadFile("testdata/valid/multi.json")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.ExpandedSize(), mustExpand(t, f).Len(); got != want {
		t.Fatalf("ExpandedSize %d, Expand made %d", got, want)
	}
	// Eight levels of ten module tasks: 10^8 leaves on paper.
	var b strings.Builder
	b.WriteString("flows:\n")
	for lvl := 0; lvl < 8; lvl++ {
		b.WriteString("  - name: f" + itoa(lvl) + "\n    tasks:\n")
		for i := 0; i < 10; i++ {
			b.WriteString("      - {name: m" + itoa(i) + ", kind: module, flow: f" + itoa(lvl+1) + "}\n")
		}
	}
	b.WriteString("  - name: f8\n    tasks:\n      - {name: leaf, func: noop}\n")
	bomb := mustParse(t, "bomb.yaml", b.String())
	if n := bomb.ExpandedSize(); n != spec.MaxVertices+1 {
		t.Fatalf("module bomb: ExpandedSize %d", n)
	}
	if _, err := bomb.Expand(); !errors.Is(err, spec.ErrTooLarge) {
		t.Fatalf("module bomb: Expand %v", err)
	}
	cyc := mustParse(t, "cycle.yaml", "flows:\n  - name: a\n    tasks:\n      - {name: x, kind: module, flow: b}\n  - name: b\n    tasks:\n      - {name: y, kind: module, flow: a}\n")
	if n := cyc.ExpandedSize(); n != spec.MaxVertices+1 {
		t.Fatalf("module cycle: ExpandedSize %d", n)
	}
	if n := (&spec.File{}).ExpandedSize(); n != 0 {
		t.Fatalf("empty file: %d", n)
	}
}

// TestWideEdgeLookup: a task with more successors than are scanned keeps
// the rules (a successor listed twice is an error; an edge declared on both
// ends is one edge), whichever way its edges are looked up.
func TestWideEdgeLookup(t *testing.T) {
	for _, width := range []int{3, 40} {
		var b strings.Builder
		b.WriteString("name: wide\ntasks:\n  - {name: src, func: noop, precede: [")
		for i := range width {
			fmt.Fprintf(&b, "w%d, ", i)
		}
		b.WriteString("sink]}\n")
		for i := range width {
			fmt.Fprintf(&b, "  - {name: w%d, func: noop, succeed: [src]}\n", i) // declared on both ends
		}
		b.WriteString("  - {name: sink, func: noop}\n")
		g, err := mustParse(t, "wide.yaml", b.String()).Expand()
		if err != nil {
			t.Fatalf("width %d: %v", width, err)
		}
		if n := len(g.Vertices[0].Succ); n != width+1 {
			t.Fatalf("width %d: src has %d out-edges, want %d", width, n, width+1)
		}
		dup := strings.Replace(b.String(), "sink]}", "w1, sink]}", 1)
		if err := mustParse(t, "dup.yaml", dup).Validate(spec.Options{}); !errors.Is(err, spec.ErrDuplicate) || !strings.Contains(err.Error(), `"w1" listed twice`) {
			t.Fatalf("width %d: a successor listed twice: %v", width, err)
		}
	}
}
