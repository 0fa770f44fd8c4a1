package dashboard

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// benchRun is a run of levels×width tasks (wideDeep) with the first half of
// its levels done, each task with one event.
func benchRun(b *testing.B, levels, width int) (*Dashboard, string) {
	f := newFake()
	t0 := time.Now().Add(-time.Minute)
	f.addRun(b, "big", wideDeep(levels, width), t0)
	for l := 0; l < levels/2; l++ {
		for c := 0; c < width; c++ {
			s := t0.Add(time.Duration(l*width+c) * time.Millisecond)
			f.event("big", fmt.Sprintf("t%d_%d", l, c), []string{"n1", "n2"}[c%2], transport.TaskDone, 1, s, s.Add(800*time.Microsecond))
		}
	}
	// A clock a second further on every reading: no request reuses the
	// status of an earlier one (the worst case; a page's graph request
	// usually reuses its summary's).
	var mu sync.Mutex
	clock := time.Now()
	d := New(f, Options{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); clock = clock.Add(time.Second); return clock }})
	// Warm: the flow is parsed and expanded, the events read, once per run.
	if rec := get(b, d, "/ui/runs/big/graph.svg"); rec.Code != http.StatusOK {
		b.Fatalf("graph: %d", rec.Code)
	}
	return d, "big"
}

var firstLink = regexp.MustCompile(`href="/ui/runs/big\?([^"]+)"`)

// BenchmarkGraphSVG renders the graph view of a run as the page fetches it
// (status, view, layout, SVG), for the top (aggregated) view and a leaf view
// of single tasks; svg-B is the response size.
func BenchmarkGraphSVG(b *testing.B) {
	for _, size := range []struct{ levels, width int }{{10, 100}, {1000, 100}} {
		d, id := benchRun(b, size.levels, size.width)
		n := size.levels * size.width
		top := get(b, d, "/ui/runs/"+id+"/graph.svg").Body.String()
		q := ""
		for page := top; ; {
			m := firstLink.FindStringSubmatch(page)
			if m == nil {
				break
			}
			q = strings.ReplaceAll(m[1], "&amp;", "&")
			page = get(b, d, "/ui/runs/"+id+"/graph.svg?"+q).Body.String()
		}
		for _, v := range []struct{ name, q string }{{"top", ""}, {"leaf", q}} {
			if n <= MaxBoxes*4 && v.name == "leaf" {
				continue
			}
			b.Run(fmt.Sprintf("tasks=%d/%s", n, v.name), func(b *testing.B) {
				size := 0
				for b.Loop() {
					rec := get(b, d, "/ui/runs/"+id+"/graph.svg?"+v.q)
					size = rec.Body.Len()
				}
				b.ReportMetric(float64(size), "svg-B")
			})
		}
		d.Close()
	}
}

// BenchmarkTimelineSVG draws the timeline of a run with one span per task.
func BenchmarkTimelineSVG(b *testing.B) {
	for _, size := range []struct{ levels, width int }{{10, 100}, {1000, 100}} {
		d, id := benchRun(b, size.levels, size.width)
		b.Run(fmt.Sprintf("tasks=%d", size.levels*size.width), func(b *testing.B) {
			n := 0
			for b.Loop() {
				n = get(b, d, "/ui/runs/"+id+"/timeline.svg").Body.Len()
			}
			b.ReportMetric(float64(n), "svg-B")
		})
		d.Close()
	}
}

// BenchmarkSummary is one tick of a run page's event stream.
func BenchmarkSummary(b *testing.B) {
	for _, size := range []struct{ levels, width int }{{10, 100}, {1000, 100}} {
		d, id := benchRun(b, size.levels, size.width)
		b.Run(fmt.Sprintf("tasks=%d", size.levels*size.width), func(b *testing.B) {
			for b.Loop() {
				get(b, d, "/ui/runs/"+id+"/summary.json")
			}
		})
		d.Close()
	}
}

// TestPagePayload logs what a run page loads besides its SVGs.
func TestPagePayload(t *testing.T) {
	total := 0
	for _, f := range []string{"static/run.html", "static/app.js", "static/app.css"} {
		b, err := static.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		total += len(b)
	}
	if total > 64<<10 {
		t.Errorf("the run page's HTML, JS and CSS are %d bytes; keep them small", total)
	}
	t.Logf("run page HTML+JS+CSS: %d bytes", total)
}

// BenchmarkRenderView is the dashboard's own part of a graph request: the
// view (grouping, counts) and its layout and SVG, from a status already
// fetched. GraphSVG adds the source's status (here the fake's, O(tasks)).
func BenchmarkRenderView(b *testing.B) {
	for _, size := range []struct{ levels, width int }{{10, 100}, {1000, 100}} {
		d, id := benchRun(b, size.levels, size.width)
		_, rd, st, err := d.summary(b.Context(), id, true)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("tasks=%d/top", size.levels*size.width), func(b *testing.B) {
			n := 0
			for b.Loop() {
				rd.mu.Lock()
				vw, err := buildView(rd, vertexStatus(rd.g, st), Query{})
				rd.mu.Unlock()
				if err != nil {
					b.Fatal(err)
				}
				n = len(renderSVG(vw, "/ui/runs/"+id))
			}
			b.ReportMetric(float64(n), "svg-B")
		})
		d.Close()
	}
}
