package dashboard

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
)

// runPageT is run.html as a template: the run page's first view is drawn
// on the server, so a loaded coordinator shows the run's state, counts,
// graph and timeline as soon as the page arrives, not after the event
// stream's first summary (which took 4–25 s under load). app.js then
// follows the run and redraws the same parts.
var runPageT = template.Must(template.ParseFS(static, "static/run.html"))

// runPage is what the template fills in.
type runPage struct {
	ID, Flow, State, Error string
	Progress, Counts, Age  string
	Gen                    string
	Cancellable            bool
	Graph, Timeline        template.HTML // our own SVG (names escaped by renderSVG and svg)
}

// tallyText names every state the run's tasks are in, as app.js's tally
// does: "3 done · 1 skipped".
func tallyText(c Counts) string {
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{c.Done, "done"}, {c.Running, "running"}, {c.Failed, "failed"}, {c.Pending, "pending"}, {c.Skipped, "skipped"}, {c.Cancelled, "cancelled"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%d tasks", c.Tasks)
	}
	return strings.Join(parts, " · ")
}

// ageText is app.js's fmtAge.
func ageText(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm %ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh %dm", s/3600, (s%3600)/60)
}

func (d *Dashboard) handleRunPage(w http.ResponseWriter, r *http.Request) {
	p := runPage{ID: r.PathValue("id"), Progress: "–", Counts: "–", Age: "–", Gen: "–"}
	code := http.StatusOK
	s, err := d.brief(r.Context(), p.ID, false)
	if err != nil {
		// The page still loads, saying what is wrong; the script retries.
		p.Error = err.Error()
		if errors.Is(err, ErrNotFound) || errors.Is(err, proto.ErrNotFound) {
			code = http.StatusNotFound
		}
	} else {
		p.Flow, p.State, p.Error = s.Flow, s.State, s.Error
		p.Progress = fmt.Sprintf("%d%%", int(100*s.Progress+0.5))
		p.Counts = tallyText(s.Counts)
		p.Age = ageText(time.Duration(s.AgeMS) * time.Millisecond)
		p.Gen = fmt.Sprint(s.Gen)
		p.Cancellable = s.State == proto.RunRunning || s.State == proto.RunPending
		if g, err := d.graphSVG(r); err == nil {
			p.Graph = template.HTML(g)
		}
		if tl, err := d.timelineSVG(r); err == nil {
			p.Timeline = template.HTML(tl)
		}
	}
	var b bytes.Buffer
	if err := runPageT.Execute(&b, p); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}
