package dashboard

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/hetflow/hetflow/cluster/proto"
)

// The timeline draws one lane per node worker (CPU, and GPU per device) and
// a bar per task activation the event stream holds. Events name the node
// but not the worker, so a node's bars are packed onto its workers' lanes
// greedily (each bar on the lowest lane free at its start): a node never
// runs more tasks at once than it has workers, so its bars fit its lanes (a
// lane is added only if they do not, e.g. for a node no longer listed). A node reports a task's activations between two of its task
// reports (at most 500 ms apart) as its latest one; such a bar stands for N
// activations and says so.

// lane is one worker row of the timeline.
type lane struct {
	node  string
	kind  string // "cpu" or "gpu<device>"
	index int
	bars  []int // span indices
	free  time.Time
}

type timeline struct {
	spans      []Span
	lanes      []*lane
	start, end time.Time
}

// buildTimeline packs the spans (already copied) onto lanes: first one
// lane per worker of each of the run's nodes (CPUs, then one per GPU device,
// from workers), then more only where the spans overlap beyond that.
func buildTimeline(spans []Span, running []Span, now time.Time, nodes []string, workers map[string]proto.NodeInfo) *timeline {
	tl := &timeline{spans: spans}
	for _, sp := range running {
		sp.End = now
		tl.spans = append(tl.spans, sp)
	}
	idx := make([]int, len(tl.spans))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return tl.spans[idx[a]].Start.Before(tl.spans[idx[b]].Start) })
	byKey := map[string][]*lane{}
	order := map[string]int{}
	addLane := func(node, kind string) *lane {
		key := node + "/" + kind
		ln := &lane{node: node, kind: kind, index: len(byKey[key])}
		byKey[key] = append(byKey[key], ln)
		tl.lanes = append(tl.lanes, ln)
		return ln
	}
	for i, n := range nodes {
		order[n] = i
		w := workers[n]
		for k := 0; k < w.CPUs; k++ {
			addLane(n, "cpu")
		}
		for g := 0; g < w.GPUs; g++ {
			addLane(n, fmt.Sprintf("gpu%d", g))
		}
	}
	for _, i := range idx {
		sp := &tl.spans[i]
		if tl.start.IsZero() || sp.Start.Before(tl.start) {
			tl.start = sp.Start
		}
		if sp.End.After(tl.end) {
			tl.end = sp.End
		}
		kind := "cpu"
		if sp.GPU > 0 {
			kind = fmt.Sprintf("gpu%d", sp.GPU-1)
		}
		var ln *lane
		for _, l := range byKey[sp.Node+"/"+kind] {
			if !l.free.After(sp.Start) {
				ln = l
				break
			}
		}
		if ln == nil {
			ln = addLane(sp.Node, kind)
		}
		ln.bars = append(ln.bars, i)
		ln.free = sp.End
	}
	sort.SliceStable(tl.lanes, func(a, b int) bool {
		x, y := tl.lanes[a], tl.lanes[b]
		if x.node != y.node {
			ox, okx := order[x.node]
			oy, oky := order[y.node]
			if okx && oky {
				return ox < oy
			}
			return x.node < y.node
		}
		if x.kind != y.kind {
			return x.kind < y.kind
		}
		return x.index < y.index
	})
	return tl
}

const (
	laneH     = 20.0
	labelW    = 110.0
	timelineW = 1000.0
)

// svg draws the timeline. Bars narrower than a pixel next to each other are
// merged into one block, so the drawing stays small for huge runs.
func (tl *timeline) svg(nodes []string) []byte {
	var b bytes.Buffer
	H := 30 + laneH*float64(len(tl.lanes)) + 10
	W := labelW + timelineW + 20
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" data-lanes="%d" data-bars="%d">`, W, H, W, H, len(tl.lanes), len(tl.spans))
	b.WriteString(`<style>text{font:11px system-ui,sans-serif;fill:#111827}.ax{fill:#6b7280;font-size:10px}</style>`)
	if len(tl.spans) == 0 {
		b.WriteString(`<text x="10" y="20">no task has finished yet</text></svg>`)
		return b.Bytes()
	}
	span := tl.end.Sub(tl.start)
	if span <= 0 {
		span = time.Millisecond
	}
	scale := timelineW / float64(span)
	xOf := func(t time.Time) float64 { return labelW + float64(t.Sub(tl.start))*scale }
	// Axis: five ticks.
	for k := 0; k <= 5; k++ {
		t := time.Duration(int64(span) * int64(k) / 5)
		x := labelW + timelineW*float64(k)/5
		fmt.Fprintf(&b, `<line x1="%.1f" y1="22" x2="%.1f" y2="%.0f" stroke="#e5e7eb"/><text class="ax" x="%.1f" y="14" text-anchor="middle">%s</text>`, x, x, H-10, x, xmlEscape(fmtDur(t)))
	}
	for li, ln := range tl.lanes {
		y := 28 + laneH*float64(li)
		fmt.Fprintf(&b, `<g class="lane" data-node="%s" data-kind="%s"><text x="6" y="%.1f">%s %s·%d</text>`, xmlEscape(ln.node), ln.kind, y+13, xmlEscape(ln.node), ln.kind, ln.index)
		col := nodeColour(nodes, ln.node)
		var bx0, bx1 float64
		merged := 0
		flush := func() {
			if merged == 0 {
				return
			}
			fmt.Fprintf(&b, `<rect class="tl-busy" x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="%s" opacity="0.55"><title>%d activations</title></rect>`, bx0, y+2, max(bx1-bx0, 1), laneH-4, col, merged)
			merged = 0
		}
		for _, i := range ln.bars {
			sp := &tl.spans[i]
			x0, x1 := xOf(sp.Start), xOf(sp.End)
			if x1-x0 < 1.5 {
				if merged > 0 && x0 <= bx1+1 {
					bx1 = max(bx1, x1)
				} else {
					flush()
					bx0, bx1 = x0, x1
				}
				merged++
				continue
			}
			flush()
			fill := stateFill[sp.State.String()]
			name := tailName(sp.Name)
			title := fmt.Sprintf("%s #%d on %s: %s", name, sp.Act, sp.Node, fmtDur(sp.End.Sub(sp.Start)))
			if sp.N > 1 {
				title += fmt.Sprintf(" (latest of %d activations)", sp.N)
			}
			fmt.Fprintf(&b, `<rect class="tl-bar" data-task="%s" x="%.1f" y="%.1f" width="%.1f" height="%.0f" rx="2" fill="%s" stroke="%s"><title>%s</title></rect>`,
				xmlEscape(name), x0, y+2, x1-x0, laneH-4, fill, col, xmlEscape(title))
		}
		flush()
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return b.Bytes()
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%dµs", d.Microseconds())
}

// maxTaskName bounds a task name in the timeline and the trace. A task's name
// is its path through the modules it sits in, so the names of a deep module
// chain grow with its depth and their sum with its square (a 5,000-deep
// run's trace was 25 MB): past maxTaskName bytes only the tail is kept, after
// an ellipsis.
const maxTaskName = 120

func tailName(name string) string {
	if len(name) <= maxTaskName {
		return name
	}
	i := len(name) - maxTaskName
	for i < len(name) && !utf8.RuneStart(name[i]) {
		i++
	}
	return "…" + name[i:]
}

// chromeTrace returns the timeline as Chrome trace JSON (writeTrace).
func (tl *timeline) chromeTrace(run string) ([]byte, error) {
	var b bytes.Buffer
	err := tl.writeTrace(&b, run)
	return b.Bytes(), err
}

// writeTrace writes the timeline as Chrome trace JSON (Perfetto,
// chrome://tracing): one process per node, one thread per lane, a complete
// event per bar. It streams, an event at a time: a page never holds the
// whole trace.
func (tl *timeline) writeTrace(w io.Writer, run string) error {
	type ev struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat,omitempty"`
		Ph   string         `json:"ph"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur,omitempty"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Args map[string]any `json:"args,omitempty"`
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	enc := json.NewEncoder(bw)
	first := true
	put := func(e ev) error {
		if !first {
			bw.WriteByte(',')
		}
		first = false
		return enc.Encode(e) // its newline is JSON whitespace
	}
	bw.WriteString(`{"displayTimeUnit":"ms","otherData":`)
	if err := enc.Encode(map[string]string{"run": run}); err != nil {
		return err
	}
	bw.WriteString(`,"traceEvents":[`)
	pids := map[string]int{}
	for ti, ln := range tl.lanes {
		pid, ok := pids[ln.node]
		if !ok {
			pid = len(pids) + 1
			pids[ln.node] = pid
			if err := put(ev{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": "node " + ln.node}}); err != nil {
				return err
			}
		}
		if err := put(ev{Name: "thread_name", Ph: "M", Pid: pid, Tid: ti + 1, Args: map[string]any{"name": fmt.Sprintf("%s·%d", ln.kind, ln.index)}}); err != nil {
			return err
		}
		for _, i := range ln.bars {
			sp := &tl.spans[i]
			args := map[string]any{"activation": sp.Act, "state": sp.State.String()}
			if sp.N > 1 {
				args["coalesced"] = sp.N
			}
			if err := put(ev{Name: tailName(sp.Name), Cat: ln.kind, Ph: "X", Pid: pid, Tid: ti + 1,
				Ts:  float64(sp.Start.Sub(tl.start).Nanoseconds()) / 1e3,
				Dur: float64(sp.End.Sub(sp.Start).Nanoseconds()) / 1e3, Args: args}); err != nil {
				return err
			}
		}
	}
	bw.WriteString("]}")
	return bw.Flush()
}

func (d *Dashboard) timeline(r *http.Request) (*timeline, *runData, error) {
	rd, err := d.run(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, nil, err
	}
	rd.mu.Lock()
	spans := append([]Span(nil), rd.spans...)
	running := make([]Span, 0, len(rd.running))
	for _, sp := range rd.running {
		running = append(running, sp)
	}
	nodes := runNodes(rd.info.Assignment)
	fin := rd.info.Finished
	rd.mu.Unlock()
	sort.Slice(running, func(a, b int) bool { return running[a].Name < running[b].Name })
	workers := map[string]proto.NodeInfo{}
	for _, n := range d.src.Nodes() {
		workers[n.ID] = n
	}
	end := d.now()
	if fin != nil && fin.Before(end) {
		end = *fin // running bars of an ended run stop where it ended
	}
	return buildTimeline(spans, running, end, nodes, workers), rd, nil
}

func (d *Dashboard) handleTimeline(w http.ResponseWriter, r *http.Request) {
	out, err := d.timelineSVG(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(out)
}

// timelineSVG draws run {id}'s timeline.
func (d *Dashboard) timelineSVG(r *http.Request) ([]byte, error) {
	tl, rd, err := d.timeline(r)
	if err != nil {
		return nil, err
	}
	rd.mu.Lock()
	nodes := runNodes(rd.info.Assignment)
	rd.mu.Unlock()
	return tl.svg(nodes), nil
}

func (d *Dashboard) handleTrace(w http.ResponseWriter, r *http.Request) {
	tl, _, err := d.timeline(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.trace.json"`, r.PathValue("id")))
	_ = tl.writeTrace(w, r.PathValue("id")) // a write error: the client went
}
