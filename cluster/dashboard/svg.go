package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Colours: fill by task state, outline by node (palette by the node's place
// in the run's assignment).
var stateFill = map[string]string{
	"pending": "#e5e7eb", "running": "#93c5fd", "done": "#86efac",
	"failed": "#fca5a5", "skipped": "#f5f5f4", "cancelled": "#fdba74",
}

var nodePalette = []string{"#7c3aed", "#0891b2", "#ca8a04", "#db2777", "#059669", "#2563eb", "#9a3412", "#4b5563"}

func nodeColour(nodes []string, n string) string {
	for i, x := range nodes {
		if x == n {
			return nodePalette[i%len(nodePalette)]
		}
	}
	return "#6b7280"
}

func xmlEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&#39;")
		default:
			if r < 0x20 && r != '\n' && r != '\t' {
				continue
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

const (
	boxH      = 40.0
	groupH    = 48.0
	charW     = 7.0
	maxLabel  = 26
	legendTop = 22.0
)

func boxSize(it *item) Box {
	n := max(utf8.RuneCountInString(clip(it.label, maxLabel)), utf8.RuneCountInString(clip(it.sub, maxLabel+4))*6/7)
	w := min(max(float64(n)*charW+24, 72), 220)
	if it.kind == "group" {
		return Box{W: max(w, 150), H: groupH}
	}
	return Box{W: w, H: boxH}
}

// renderSVG draws a view as a standalone SVG document. base is the page's
// path, for the drill-down links.
func renderSVG(vw *view, base string) []byte {
	boxes := make([]Box, len(vw.items))
	for i := range vw.items {
		boxes[i] = boxSize(&vw.items[i])
	}
	edges := make([]LEdge, len(vw.edges))
	for i, e := range vw.edges {
		edges[i] = LEdge{From: e.from, To: e.to, Weak: e.weak}
	}
	place := Place
	if vw.grid {
		place = GridPlace
	}
	L := place(boxes, edges)
	top := legendTop + 8
	W, H := max(L.Width, 360), L.Height+top
	var b bytes.Buffer
	b.Grow(512 + 400*len(vw.items) + 160*len(vw.edges))
	type crumbJSON struct {
		Label string `json:"label"`
		Query string `json:"query"`
	}
	cj := make([]crumbJSON, len(vw.crumbs))
	for i, c := range vw.crumbs {
		cj[i] = crumbJSON{c.label, c.q.values().Encode()}
	}
	crumbs, _ := json.Marshal(cj)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" data-tasks="%d" data-boxes="%d" data-crumbs="%s">`, W, H, W, H, vw.total, len(vw.items), xmlEscape(string(crumbs)))
	b.WriteString(`<defs><marker id="arr" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#475569"/></marker></defs>`)
	b.WriteString(`<style>text{font:12px system-ui,sans-serif;fill:#111827}.sub{font-size:10px;fill:#4b5563}.e{fill:none;stroke:#475569;stroke-width:1.3}.weak{stroke-dasharray:5 4}.back{stroke:#b45309}.cnt{font-size:10px;fill:#475569}.badge{font-size:10px;fill:#fff;font-weight:600}.lg{font-size:11px}</style>`)
	// Legend: nodes.
	x := margin
	for _, n := range vw.nodes {
		fmt.Fprintf(&b, `<rect x="%.0f" y="8" width="14" height="12" rx="3" fill="#fff" stroke="%s" stroke-width="2.5"/><text class="lg" x="%.0f" y="18">%s</text>`, x, nodeColour(vw.nodes, n), x+18, xmlEscape(n))
		x += 30 + float64(utf8.RuneCountInString(n))*charW
	}
	fmt.Fprintf(&b, `<g transform="translate(0,%.0f)">`, top)
	for i, e := range vw.edges {
		f, t := boxes[e.from], boxes[e.to]
		fx, fy := L.X[e.from], L.Y[e.from]
		tx, ty := L.X[e.to], L.Y[e.to]
		cls := "e"
		if e.weak {
			cls += " weak"
		}
		var d string
		if L.Back[i] {
			cls += " back"
			// Out of the source's right side, around, into the target's right side.
			x1, y1 := fx+f.W, fy+f.H/2
			x2, y2 := tx+t.W, ty+t.H/2
			bulge := max(x1, x2) + 30 + 4*float64(L.Layer[e.from]-L.Layer[e.to])
			if e.from == e.to {
				d = fmt.Sprintf("M%.1f,%.1fC%.1f,%.1f %.1f,%.1f %.1f,%.1f", x1, y1-8, x1+34, y1-26, x1+34, y1+26, x1, y1+8)
			} else {
				d = fmt.Sprintf("M%.1f,%.1fC%.1f,%.1f %.1f,%.1f %.1f,%.1f", x1, y1, bulge, y1, bulge, y2, x2, y2)
			}
		} else if vw.grid && fy == ty {
			// Along a row of the grid: side to side.
			x1, x2 := fx+f.W, tx
			if tx < fx {
				x1, x2 = fx, tx+t.W
			}
			y := fy + f.H/2
			d = fmt.Sprintf("M%.1f,%.1fL%.1f,%.1f", x1, y, x2, y)
		} else {
			x1, y1 := fx+f.W/2, fy+f.H
			x2, y2 := tx+t.W/2, ty
			my := (y1 + y2) / 2
			d = fmt.Sprintf("M%.1f,%.1fC%.1f,%.1f %.1f,%.1f %.1f,%.1f", x1, y1, x1, my, x2, my, x2, y2)
		}
		fmt.Fprintf(&b, `<path class="%s" d="%s" marker-end="url(#arr)"/>`, cls, d)
		if e.count > 1 {
			if vw.grid && fy == ty {
				fmt.Fprintf(&b, `<text class="cnt" x="%.1f" y="%.1f" text-anchor="middle">%d</text>`, (fx+f.W/2+tx+t.W/2)/2, fy+f.H/2-5, e.count)
			} else {
				fmt.Fprintf(&b, `<text class="cnt" x="%.1f" y="%.1f">%d</text>`, (fx+f.W/2+tx+t.W/2)/2+4, (fy+f.H+ty)/2, e.count)
			}
		}
	}
	for i := range vw.items {
		it := &vw.items[i]
		bx := boxes[i]
		x, y := L.X[i], L.Y[i]
		fill := stateFill[it.state]
		if fill == "" {
			fill = stateFill["pending"]
		}
		stroke := nodeColour(vw.nodes, it.node)
		if it.kind == "group" || (it.kind == "module" && it.link != "") {
			stroke = "#334155"
		}
		fmt.Fprintf(&b, `<g class="task s-%s k-%s" data-state="%s"`, it.state, it.kind, it.state)
		if it.task != "" {
			fmt.Fprintf(&b, ` data-task="%s" data-node="%s"`, xmlEscape(it.task), xmlEscape(it.node))
		}
		b.WriteString(">")
		fmt.Fprintf(&b, `<title>%s</title>`, xmlEscape(it.title))
		if it.link != "" {
			fmt.Fprintf(&b, `<a href="%s?%s" target="_top">`, xmlEscape(base), xmlEscape(it.link))
		}
		switch it.kind {
		case "group":
			// A stack of cards with a progress bar.
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="6" fill="#f8fafc" stroke="#94a3b8"/>`, x+4, y-4, bx.W, bx.H)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="6" fill="#fff" stroke="%s" stroke-width="1.5"/>`, x, y, bx.W, bx.H, stroke)
			p := progress(it.c)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="6" rx="3" fill="#e5e7eb"/><rect x="%.1f" y="%.1f" width="%.1f" height="6" rx="3" fill="%s"/>`,
				x+8, y+bx.H-12, bx.W-16, x+8, y+bx.H-12, (bx.W-16)*p, map[bool]string{true: "#ef4444", false: "#22c55e"}[it.c.Failed > 0])
		case "module":
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="4" fill="%s" stroke="%s" stroke-width="2.5"/>`, x, y, bx.W, bx.H, fill, stroke)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="2" fill="none" stroke="%s" stroke-width="1"/>`, x+4, y+4, bx.W-8, bx.H-8, stroke)
		case "condition", "multicondition":
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="%.0f" fill="%s" stroke="%s" stroke-width="2.5"/>`, x, y, bx.W, bx.H, bx.H/2, fill, stroke)
		default:
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="5" fill="%s" stroke="%s" stroke-width="2.5"/>`, x, y, bx.W, bx.H, fill, stroke)
		}
		cx := x + bx.W/2
		ty := y + 17
		if it.kind == "group" {
			ty = y + 16
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, cx, ty, xmlEscape(clip(it.label, maxLabel)))
		if it.sub != "" {
			fmt.Fprintf(&b, `<text class="sub" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, cx, ty+14, xmlEscape(clip(it.sub, maxLabel+4)))
		}
		if it.loop && it.acts > 0 {
			// Activations of a loop task, as a badge on its top-right corner.
			lbl := fmt.Sprintf("×%d", it.acts)
			bw := float64(utf8.RuneCountInString(lbl))*6.5 + 8
			fmt.Fprintf(&b, `<g class="acts"><rect x="%.1f" y="%.1f" width="%.1f" height="16" rx="8" fill="#b45309"/><text class="badge" x="%.1f" y="%.1f" text-anchor="middle">%s</text></g>`, x+bx.W-bw/2-4, y-8, bw, x+bx.W-4, y+4, lbl)
		}
		if it.link != "" {
			b.WriteString(`</a>`)
		}
		b.WriteString(`</g>`)
	}
	b.WriteString(`</g></svg>`)
	return b.Bytes()
}

func (d *Dashboard) handleGraph(w http.ResponseWriter, r *http.Request) {
	out, err := d.graphSVG(r)
	if err != nil {
		var bq badQuery
		if errors.As(err, &bq) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(out)
}

// badQuery is a graph query the dashboard cannot read (400, not 500).
type badQuery struct{ error }

// graphSVG draws the graph of run {id} in the scope r's query asks for.
func (d *Dashboard) graphSVG(r *http.Request) ([]byte, error) {
	q, err := ParseQuery(r.URL.Query())
	if err != nil {
		return nil, badQuery{err}
	}
	id := r.PathValue("id")
	_, rd, st, err := d.summary(r.Context(), id, false)
	if err != nil {
		return nil, err
	}
	rd.mu.Lock()
	vw, err := buildView(rd, vertexStatus(rd.g, st), q)
	rd.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return renderSVG(vw, "/ui/runs/"+id), nil
}
