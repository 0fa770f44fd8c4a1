package dashboard

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// layersOf lists the level of each of n tasks sorted by level, from the
// sizes of the levels.
func layersOf(sizes ...int) []int {
	var out []int
	for l, n := range sizes {
		for range n {
			out = append(out, l)
		}
	}
	return out
}

func repeat(n, size int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = size
	}
	return out
}

// Groups of a view never share a level (so their labels never overlap, as
// "levels 0–2" and "levels 2–4" did), there are at most maxGroups of them,
// and each is smaller than the range, so drilling down ends at tasks.
func TestGroupsAreWholeLevels(t *testing.T) {
	for _, c := range []struct {
		name  string
		sizes []int
	}{
		{"100 levels of 6 (a deep, narrow flow)", repeat(100, 6)},
		{"6 levels of 100", repeat(6, 100)},
		{"200 levels of 100", repeat(200, 100)},
		{"one level of 20,000", []int{20000}},
		{"uneven levels", append(append(repeat(30, 1), 10000), repeat(70, 3)...)},
		{"48 levels", repeat(48, 10)},
		{"49 levels", repeat(49, 10)},
	} {
		layer := layersOf(c.sizes...)
		var drill func(lo, hi, depth int)
		drill = func(lo, hi, depth int) {
			if hi-lo <= MaxBoxes {
				return
			}
			if depth > 12 {
				t.Fatalf("%s: drill-down does not end", c.name)
			}
			cuts := groupCuts(layer, lo, hi)
			if cuts[0] != lo || cuts[len(cuts)-1] != hi || len(cuts)-1 > maxGroups || len(cuts) < 3 {
				t.Fatalf("%s: range %d–%d cut into %v", c.name, lo, hi, cuts)
			}
			single := layer[lo] == layer[hi-1]
			seen := map[string]bool{}
			for i := 0; i+1 < len(cuts); i++ {
				a, b := cuts[i], cuts[i+1]
				if a >= b {
					t.Fatalf("%s: empty group %d–%d", c.name, a, b)
				}
				if !single && a > lo && layer[a] == layer[a-1] {
					t.Errorf("%s: a cut at %d splits level %d", c.name, a, layer[a])
				}
				lbl := levelsLabel(layer[a], layer[b-1])
				if seen[lbl] && !single {
					t.Errorf("%s: two groups labelled %q", c.name, lbl)
				}
				seen[lbl] = true
				drill(a, b, depth+1)
			}
		}
		drill(0, len(layer), 0)
	}
}

var svgSizeRE = regexp.MustCompile(`class="graph" width="(\d+)" height="(\d+)"`)

// A deep flow of groups fills the page in reading order, not one narrow
// column: 600 tasks in 100 levels of 6 are 34 groups in rows of six.
func TestGroupViewIsAGridNotAColumn(t *testing.T) {
	f := newFake()
	now := time.Now()
	f.addRun(t, "deep", wideDeep(100, 6), now)
	d := New(f, Options{})
	defer d.Close()
	rec := get(t, d, "/ui/runs/deep/graph.svg")
	if rec.Code != http.StatusOK {
		t.Fatalf("graph.svg: %d %s", rec.Code, rec.Body)
	}
	svg := rec.Body.String()
	m := svgSizeRE.FindStringSubmatch(svg)
	w, _ := strconv.Atoi(m[1])
	h, _ := strconv.Atoi(m[2])
	if w < h {
		t.Errorf("the group view is %d×%d, a column; want it wider than tall", w, h)
	}
	if n := strings.Count(svg, "k-group"); n != 34 {
		t.Errorf("%d groups, want 34 (3 levels each)", n)
	}
	for _, want := range []string{">levels 0–2<", ">levels 3–5<", ">level 99<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("no group labelled %s", want)
		}
	}
	if strings.Contains(svg, ">levels 2–4<") {
		t.Errorf("groups share a level")
	}
}

// A task last run by a node the assignment does not name (it took the task
// over) is outlined in a colour the legend names, not an unexplained grey.
func TestLegendNamesEveryNodeDrawn(t *testing.T) {
	f := newFake()
	now := time.Now()
	f.addRun(t, "r1", doWhile, now)
	f.event("r1", "init", "n9", transport.TaskDone, 1, now, now)
	d := New(f, Options{})
	defer d.Close()
	svg := get(t, d, "/ui/runs/r1/graph.svg").Body.String()
	if !strings.Contains(svg, `class="lg"`) || !strings.Contains(svg, ">n9</text>") {
		t.Errorf("the legend lacks n9, which ran init")
	}
	if regexp.MustCompile(`data-task="init" data-node="n9"><title>[^<]*</title><rect [^>]*stroke="#6b7280"`).MatchString(svg) {
		t.Errorf("init, run by n9, is outlined grey")
	}
}
