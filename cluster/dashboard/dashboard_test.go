package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/transport"
)

const doWhile = `name: dowhile
tasks:
  - name: init
    func: noop
  - name: body
    func: spin
    args: {us: 10}
    succeed: [init]
  - name: cond
    kind: condition
    func: loop
    args: {n: 3}
    succeed: [body]
    precede: [body, done]
  - name: done
    func: hash
`

const modules = `flows:
  - name: taskflow2
    tasks:
      - name: C
        func: hash
      - name: E
        kind: module
        flow: taskflow1
        succeed: [C]
  - name: taskflow1
    tasks:
      - name: A
        func: hash
      - name: B
        func: hash
        succeed: [A]
`

func get(t testing.TB, h http.Handler, target string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestAuthTokenCookieAndLogin(t *testing.T) {
	f := newFake()
	f.addRun(t, "r1", doWhile, time.Now())
	d := New(f, Options{Token: "s3cret"})
	defer d.Close()

	if rec := get(t, d, "/"); rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), `name="token"`) {
		t.Fatalf("GET / without a token: %d %q, want 401 and the login form", rec.Code, rec.Body.String())
	}
	if rec := get(t, d, "/ui/overview.json"); rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "not authorised") {
		t.Fatalf("GET overview without a token: %d %s", rec.Code, rec.Body)
	}
	if rec := get(t, d, "/?token=wrong"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("wrong ?token=: %d", rec.Code)
	}
	rec := get(t, d, "/ui/runs/r1?token=s3cret&scope=x")
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/runs/r1?scope=x" {
		t.Fatalf("right ?token=: %d, Location %q; want 303 to the page without the token", rec.Code, rec.Header().Get("Location"))
	}
	ck := rec.Result().Cookies()
	if len(ck) != 1 || ck[0].Name != CookieName || ck[0].Value != "s3cret" || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie = %+v, want one HttpOnly SameSite=Strict %s", ck, CookieName)
	}
	cookie := CookieName + "=s3cret"
	if rec := get(t, d, "/", "Cookie", cookie); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `id="runs"`) {
		t.Fatalf("GET / with the cookie: %d", rec.Code)
	}
	if rec := get(t, d, "/ui/overview.json", "Authorization", "Bearer s3cret"); rec.Code != http.StatusOK {
		t.Fatalf("GET overview with the Bearer token: %d", rec.Code)
	}
	if rec := get(t, d, "/ui/overview.json", "Cookie", CookieName+"=nope"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a wrong cookie: %d", rec.Code)
	}

	// Login form.
	form := url.Values{"token": {"s3cret"}, "next": {"/ui/runs/r1"}}
	req := httptest.NewRequest(http.MethodPost, "/ui/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	lrec := httptest.NewRecorder()
	d.ServeHTTP(lrec, req)
	if lrec.Code != http.StatusSeeOther || lrec.Header().Get("Location") != "/ui/runs/r1" || len(lrec.Result().Cookies()) != 1 {
		t.Fatalf("login: %d %q %v", lrec.Code, lrec.Header().Get("Location"), lrec.Result().Cookies())
	}
	form.Set("next", "https://elsewhere.example/")
	req = httptest.NewRequest(http.MethodPost, "/ui/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	lrec = httptest.NewRecorder()
	d.ServeHTTP(lrec, req)
	if lrec.Header().Get("Location") != "/" {
		t.Fatalf("login with an outside next redirects to %q, want /", lrec.Header().Get("Location"))
	}

	// Cancel: the cookie alone is not enough (a cross-site form could send it).
	post := func(hdr ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/ui/runs/r1/cancel", nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, req)
		return rec
	}
	if rec := post("X-Hetflow-UI", "1"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("cancel without a token: %d", rec.Code)
	}
	if rec := post("Cookie", cookie); rec.Code != http.StatusForbidden {
		t.Fatalf("cancel without X-Hetflow-UI: %d", rec.Code)
	}
	if len(f.cancelled) != 0 {
		t.Fatalf("refused cancels reached the source: %v", f.cancelled)
	}
	if rec := post("Cookie", cookie, "X-Hetflow-UI", "1"); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"state":"cancelled"`) {
		t.Fatalf("cancel: %d %s", rec.Code, rec.Body)
	}
	if len(f.cancelled) != 1 || f.cancelled[0] != "r1" {
		t.Fatalf("cancelled = %v", f.cancelled)
	}
	if rec := get(t, d, "/ui/runs/nope/summary.json", "Cookie", cookie); rec.Code != http.StatusNotFound {
		t.Fatalf("unknown run: %d", rec.Code)
	}
}

func TestNoTokenMeansOpen(t *testing.T) {
	f := newFake()
	d := New(f, Options{})
	defer d.Close()
	if rec := get(t, d, "/"); rec.Code != http.StatusOK {
		t.Fatalf("GET /: %d", rec.Code)
	}
	if rec := get(t, d, "/ui/static/app.js"); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "EventSource") {
		t.Fatalf("app.js: %d", rec.Code)
	}
}

func TestOverviewLoadsAndRates(t *testing.T) {
	f := newFake()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.addRun(t, "r1", doWhile, now.Add(-10*time.Second))
	// n1: init and body, 1 s each, inside the window; n2: cond running for 2 s.
	f.event("r1", "init", "n1", transport.TaskDone, 1, now.Add(-4*time.Second), now.Add(-3*time.Second))
	f.event("r1", "body", "n1", transport.TaskDone, 1, now.Add(-3*time.Second), now.Add(-2*time.Second))
	f.event("r1", "cond", "n2", transport.TaskRunning, 1, now.Add(-2*time.Second), time.Time{})
	clock := now
	d := New(f, Options{Now: func() time.Time { return clock }})
	defer d.Close()
	o := d.overview(context.Background())
	if o.Term != 3 || len(o.Coordinators) != 2 || !o.Coordinators[0].Leader {
		t.Fatalf("coordinators: term %d %+v", o.Term, o.Coordinators)
	}
	n1, n2 := o.Nodes[0], o.Nodes[1]
	if got, want := n1.CPUBusy, 2.0/(5*2); fmt.Sprintf("%.3f", got) != fmt.Sprintf("%.3f", want) {
		t.Errorf("n1 CPU busy = %v, want %v", got, want)
	}
	if got, want := n1.TasksSec, 2.0/5; fmt.Sprintf("%.3f", got) != fmt.Sprintf("%.3f", want) {
		t.Errorf("n1 tasks/s = %v, want %v", got, want)
	}
	if n2.Running != 1 || fmt.Sprintf("%.3f", n2.CPUBusy) != "0.200" {
		t.Errorf("n2: running %d, CPU busy %v; want 1 and 0.2", n2.Running, n2.CPUBusy)
	}
	if len(o.Runs) != 1 || o.Runs[0].Tasks != 4 || o.Runs[0].Done != 2 || o.Runs[0].Running != 1 || o.Runs[0].AgeMS != 10000 {
		t.Errorf("run row = %+v", o.Runs)
	}

	// Cross-node messages per second from the Signals counter.
	f.signals = 100
	clock = clock.Add(2 * time.Second)
	if r := d.msgRate(); fmt.Sprintf("%.1f", r) != "50.0" {
		t.Errorf("msgRate = %v, want 50 (100 Signals in the 2 s since the overview's sample)", r)
	}
	f.signals = 300
	clock = clock.Add(2 * time.Second)
	if r := d.msgRate(); fmt.Sprintf("%.1f", r) != "75.0" {
		t.Errorf("msgRate = %v, want 75 (300 Signals over 4 s)", r)
	}
	// A loop task's coalesced event counts every activation it stands for.
	f.event("r1", "body", "n1", transport.TaskDone, 4, clock.Add(-time.Second), clock.Add(-time.Second+time.Millisecond))
	o = d.overview(context.Background())
	if got := o.Nodes[0].TasksSec; fmt.Sprintf("%.2f", got) != fmt.Sprintf("%.2f", 3.0/5) {
		t.Errorf("n1 tasks/s after a coalesced event (acts 2-4) = %v, want 0.6", got)
	}
	// A cancelled run's running task sends no done event: it stops counting.
	f.finish("r1", proto.RunCancelled, clock)
	clock = clock.Add(time.Second)
	if o := d.overview(context.Background()); o.Nodes[1].Running != 0 || o.Nodes[1].CPUBusy != 0 {
		t.Errorf("n2 after its run ended: running %d, busy %v; want 0, 0", o.Nodes[1].Running, o.Nodes[1].CPUBusy)
	}
}

var taskRE = regexp.MustCompile(`<g class="task s-(\w+) k-(\w+)" data-state="\w+" data-task="([^"]+)"`)

func TestGraphSVGDoWhile(t *testing.T) {
	f := newFake()
	now := time.Now()
	f.addRun(t, "r1", doWhile, now)
	f.event("r1", "init", "n1", transport.TaskDone, 1, now, now)
	f.event("r1", "body", "n2", transport.TaskDone, 3, now, now)
	f.event("r1", "cond", "n2", transport.TaskRunning, 3, now, time.Time{})
	d := New(f, Options{})
	defer d.Close()
	rec := get(t, d, "/ui/runs/r1/graph.svg")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "image/svg+xml" {
		t.Fatalf("graph.svg: %d %s", rec.Code, rec.Body)
	}
	svg := rec.Body.String()
	got := map[string]string{}
	for _, m := range taskRE.FindAllStringSubmatch(svg, -1) {
		got[m[3]] = m[1] + "/" + m[2]
	}
	want := map[string]string{"init": "done/static", "body": "done/static", "cond": "running/condition", "done": "pending/static"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tasks drawn = %v, want %v", got, want)
	}
	if n := strings.Count(svg, `class="e weak back"`); n != 1 {
		t.Errorf("%d dashed loop-back edges, want 1 (cond→body)", n)
	}
	if n := strings.Count(svg, `class="e weak"`); n != 1 {
		t.Errorf("%d dashed forward edges, want 1 (cond→done)", n)
	}
	if !strings.Contains(svg, ">×3<") {
		t.Errorf("no ×3 activations badge on the loop's tasks")
	}
	if strings.Contains(svg, "×1<") {
		t.Errorf("a badge on init, which is no loop task")
	}
	// Outlined by node: body ran on n2, the palette's second colour.
	if !regexp.MustCompile(`data-task="body" data-node="n2"><title>[^<]*</title><rect [^>]*stroke="` + nodePalette[1]).MatchString(svg) {
		t.Errorf("body is not outlined in n2's colour")
	}
	if rec := get(t, d, "/ui/runs/r1/graph.svg?lo=x"); rec.Code != http.StatusBadRequest {
		t.Errorf("bad lo: %d", rec.Code)
	}
	if rec := get(t, d, "/ui/runs/r1/graph.svg?scope=init"); rec.Code != http.StatusNotFound {
		t.Errorf("scope of a non-module: %d", rec.Code)
	}
}

func TestGraphModulesDrillDown(t *testing.T) {
	f := newFake()
	now := time.Now()
	f.addRun(t, "r1", modules, now)
	f.event("r1", "E/A", "n1", transport.TaskDone, 1, now, now)
	d := New(f, Options{})
	defer d.Close()
	svg := get(t, d, "/ui/runs/r1/graph.svg").Body.String()
	if !strings.Contains(svg, `k-module" data-state="pending" data-task="E"`) || !strings.Contains(svg, `href="/ui/runs/r1?scope=E"`) {
		t.Fatalf("top level: no module box E linking into its scope:\n%s", svg)
	}
	if !strings.Contains(svg, "module taskflow1 · 1/2") {
		t.Errorf("module box does not show its instance's progress (1 of 2 done)")
	}
	if strings.Contains(svg, `data-task="E/A"`) {
		t.Errorf("the top level draws the module's members")
	}
	inner := get(t, d, "/ui/runs/r1/graph.svg?scope=E").Body.String()
	if !strings.Contains(inner, `data-task="E/A"`) || !strings.Contains(inner, `data-task="E/B"`) || strings.Contains(inner, `data-task="C"`) {
		t.Errorf("scope E draws the wrong tasks:\n%s", inner)
	}
	if !strings.Contains(inner, `&quot;label&quot;:&quot;E&quot;`) {
		t.Errorf("scope E has no breadcrumb for E")
	}
}

// wideDeep is a flow of levels×width tasks: task (l, c) follows (l-1, c)
// and, every 7th column, (l-1, c+1). JSON, for parsing speed.
func wideDeep(levels, width int) string {
	var b strings.Builder
	b.WriteString(`{"name":"big","tasks":[`)
	for l := 0; l < levels; l++ {
		for c := 0; c < width; c++ {
			if l+c > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"name":"t%d_%d","func":"noop"`, l, c)
			if l > 0 {
				fmt.Fprintf(&b, `,"succeed":["t%d_%d"`, l-1, c)
				if c%7 == 0 && c+1 < width {
					fmt.Fprintf(&b, `,"t%d_%d"`, l-1, c+1)
				}
				b.WriteByte(']')
			}
			b.WriteByte('}')
		}
	}
	b.WriteString(`]}`)
	return b.String()
}

var boxesRE = regexp.MustCompile(`data-tasks="(\d+)" data-boxes="(\d+)"`)
var linkRE = regexp.MustCompile(`href="/ui/runs/big\?([^"]+)"`)

func TestGraphAggregatesALargeFlowWithDrillDown(t *testing.T) {
	f := newFake()
	now := time.Now()
	f.addRun(t, "big", wideDeep(200, 100), now)
	for c := 0; c < 100; c++ { // level 0 done
		f.event("big", fmt.Sprintf("t0_%d", c), "n1", transport.TaskDone, 1, now, now)
	}
	d := New(f, Options{})
	defer d.Close()
	q := ""
	for depth := 0; ; depth++ {
		rec := get(t, d, "/ui/runs/big/graph.svg?"+q)
		if rec.Code != http.StatusOK {
			t.Fatalf("graph.svg?%s: %d %s", q, rec.Code, rec.Body)
		}
		svg := rec.Body.String()
		m := boxesRE.FindStringSubmatch(svg)
		tasks, _ := strconv.Atoi(m[1])
		boxes, _ := strconv.Atoi(m[2])
		if tasks != 20000 {
			t.Fatalf("data-tasks = %d", tasks)
		}
		if boxes > max(maxGroups, MaxBoxes) {
			t.Fatalf("view ?%s draws %d boxes", q, boxes)
		}
		links := linkRE.FindAllStringSubmatch(svg, -1)
		if len(links) == 0 {
			// Drilled down to tasks.
			if n := len(taskRE.FindAllString(svg, -1)); n == 0 || n > MaxBoxes {
				t.Fatalf("leaf view ?%s: %d tasks", q, n)
			}
			if depth < 2 {
				t.Fatalf("reached single tasks after %d drill-downs; the top view should be groups", depth)
			}
			if depth == 0 || !strings.Contains(svg, `data-task="t0_0"`) {
				t.Fatalf("the first leaf holds no t0_0 (level 0 comes first)")
			}
			if !strings.Contains(svg, `s-done k-static" data-state="done" data-task="t0_0"`) {
				t.Errorf("t0_0 not drawn done")
			}
			break
		}
		if depth == 0 {
			if n := strings.Count(svg, `k-group`); n != boxes || n > maxGroups {
				t.Fatalf("top view: %d groups of %d boxes", n, boxes)
			}
			if !strings.Contains(svg, "levels 0–") || !regexp.MustCompile(`levels 0–\d+</text><text class="sub"[^>]*>\d+ tasks · [1-9]\d*% done`).MatchString(svg) {
				t.Errorf("the first group is not labelled by its levels and progress")
			}
		}
		if depth > 10 {
			t.Fatal("drill-down does not end")
		}
		q = strings.ReplaceAll(links[0][1], "&amp;", "&")
	}
}

func TestTimelineLanesAndChromeTrace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	spans := []Span{
		{Vertex: 0, Name: "a", Node: "n1", Act: 1, N: 1, Start: ms(0), End: ms(10), State: transport.TaskDone},
		{Vertex: 1, Name: "b", Node: "n1", Act: 1, N: 1, Start: ms(2), End: ms(8), State: transport.TaskDone},
		{Vertex: 2, Name: "c", Node: "n1", Act: 1, N: 1, Start: ms(10), End: ms(20), State: transport.TaskDone},
		{Vertex: 3, Name: "g", Node: "n2", Act: 1, N: 1, Start: ms(5), End: ms(15), State: transport.TaskDone, GPU: 1},
		{Vertex: 4, Name: "l", Node: "n2", Act: 9, N: 4, Start: ms(0), End: ms(3), State: transport.TaskDone},
	}
	running := []Span{{Vertex: 5, Name: "r", Node: "n2", Act: 1, N: 1, Start: ms(18), State: transport.TaskRunning}}
	workers := map[string]proto.NodeInfo{"n1": {ID: "n1", CPUs: 3}, "n2": {ID: "n2", CPUs: 1, GPUs: 1}}
	tl := buildTimeline(spans, running, ms(25), []string{"n1", "n2"}, workers)
	var lanes []string
	for _, l := range tl.lanes {
		lanes = append(lanes, fmt.Sprintf("%s/%s·%d:%d", l.node, l.kind, l.index, len(l.bars)))
	}
	// One lane per worker: n1 runs a and b at once, c after a on the first
	// lane, its third worker idle; n2's CPU tasks do not overlap (its one
	// CPU lane), its GPU task is on its GPU's lane.
	if got, want := strings.Join(lanes, " "), "n1/cpu·0:2 n1/cpu·1:1 n1/cpu·2:0 n2/cpu·0:2 n2/gpu0·0:1"; got != want {
		t.Errorf("lanes = %s, want %s", got, want)
	}
	svg := string(tl.svg([]string{"n1", "n2"}))
	if !strings.Contains(svg, `data-lanes="5" data-bars="6"`) || strings.Count(svg, `class="tl-bar"`) != 6 {
		t.Errorf("timeline svg: %s", svg)
	}
	if !strings.Contains(svg, "latest of 4 activations") {
		t.Errorf("a coalesced bar does not say how many activations it stands for")
	}
	b, err := tl.chromeTrace("r1")
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name     string  `json:"name"`
			Ph       string  `json:"ph"`
			Ts       float64 `json:"ts"`
			Dur      float64 `json:"dur"`
			Pid, Tid int
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	x, meta := 0, 0
	for _, e := range tr.TraceEvents {
		switch e.Ph {
		case "X":
			x++
		case "M":
			meta++
		}
	}
	if x != 6 || meta != 2+5 {
		t.Errorf("trace: %d complete events, %d metadata; want 6 and 7", x, meta)
	}
}

// sseEvent reads one server-sent event.
func sseEvent(t *testing.T, r *bufio.Reader) (string, string) {
	t.Helper()
	var name, data string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("event stream: %v (after %q %q)", err, name, data)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && name != "":
			return name, data
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data += line[len("data: "):]
		}
	}
}

func TestRunEventStreamFollowsTheRunToItsEnd(t *testing.T) {
	f := newFake()
	now := time.Now()
	f.addRun(t, "r1", doWhile, now)
	d := New(f, Options{Tick: 5 * time.Millisecond})
	defer d.Close()
	srv := httptest.NewServer(d)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/ui/runs/r1/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	rd := bufio.NewReader(resp.Body)
	var s Summary
	next := func() string {
		name, data := sseEvent(t, rd)
		if name == "summary" {
			if err := json.Unmarshal([]byte(data), &s); err != nil {
				t.Fatal(err)
			}
		}
		return name
	}
	if next() != "summary" || s.State != proto.RunRunning || s.Done != 0 || s.Tasks != 4 {
		t.Fatalf("first event: %+v", s)
	}
	// Nothing changes: no event, until a task finishes.
	f.event("r1", "init", "n1", transport.TaskDone, 1, now, now)
	if next() != "summary" || s.Done != 1 {
		t.Fatalf("after init: %+v", s)
	}
	for _, p := range []string{"body", "cond", "done"} {
		f.event("r1", p, "n2", transport.TaskDone, 1, now, now)
	}
	f.finish("r1", proto.RunSucceeded, time.Now().Add(-2*time.Second))
	for next() == "summary" && s.State != proto.RunSucceeded {
	}
	if s.State != proto.RunSucceeded || s.Done != 4 {
		t.Fatalf("final summary: %+v", s)
	}
	if name := next(); name != "end" {
		t.Fatalf("after the final summary: %q, want end", name)
	}
	if _, err := rd.ReadString('\n'); err != io.EOF {
		t.Fatalf("stream still open after end: %v", err)
	}
}

func TestOverviewStreamEndsOnClose(t *testing.T) {
	f := newFake()
	f.addRun(t, "r1", doWhile, time.Now())
	d := New(f, Options{Tick: 5 * time.Millisecond})
	srv := httptest.NewServer(d)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/ui/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	name, data := sseEvent(t, rd)
	var o Overview
	if name != "overview" || json.Unmarshal([]byte(data), &o) != nil || len(o.Runs) != 1 || len(o.Nodes) != 2 {
		t.Fatalf("first overview event: %s %s", name, data)
	}
	f.addRun(t, "r2", doWhile, time.Now())
	name, data = sseEvent(t, rd)
	if name != "overview" || json.Unmarshal([]byte(data), &o) != nil || len(o.Runs) != 2 {
		t.Fatalf("after a new run: %s %s", name, data)
	}
	d.Close()
	if _, err := io.ReadAll(rd); err != nil {
		t.Fatalf("stream after Close: %v", err)
	}
}

func TestForgetsPrunedRuns(t *testing.T) {
	f := newFake()
	now := time.Now()
	f.addRun(t, "r1", doWhile, now)
	f.addRun(t, "r2", doWhile, now)
	d := New(f, Options{})
	defer d.Close()
	d.overview(context.Background())
	if len(d.runs) != 2 {
		t.Fatalf("kept %d runs, want 2", len(d.runs))
	}
	f.mu.Lock()
	delete(f.runs, "r1")
	f.order = f.order[1:]
	f.mu.Unlock()
	d.overview(context.Background())
	if _, ok := d.runs["r1"]; ok || len(d.runs) != 1 {
		t.Fatalf("runs kept after r1 was pruned: %v", d.runs)
	}
}

// deepModules is a chain of depth modules: flow f<i> has a task t and a
// module task m running f<i+1>, so the task paths are m/m/…/t and the
// length of their names grows with the depth.
func deepModules(depth int) string {
	var b strings.Builder
	b.WriteString("flows:\n")
	for i := range depth {
		fmt.Fprintf(&b, "  - name: f%d\n    tasks:\n      - {name: t, func: hash}\n", i)
		if i+1 < depth {
			fmt.Fprintf(&b, "      - {name: m, kind: module, flow: f%d, succeed: [t]}\n", i+1)
		}
	}
	return b.String()
}

// TestDeepModuleRunPagesAreBounded: the timeline and the trace of a run
// whose tasks sit in a deep chain of modules grow with its tasks, not with
// the sum of their path lengths (the square of the depth); the trace is
// still valid JSON with one complete event per task.
func TestDeepModuleRunPagesAreBounded(t *testing.T) {
	const depth = 1500
	f := newFake()
	t0 := time.Now().Add(-time.Minute)
	f.addRun(t, "deep", deepModules(depth), t0)
	path := "t"
	for i := range depth {
		s := t0.Add(time.Duration(i) * time.Millisecond)
		f.event("deep", path, []string{"n1", "n2"}[i%2], transport.TaskDone, 1, s, s.Add(500*time.Microsecond))
		path = "m/" + path
	}
	d := New(f, Options{})
	defer d.Close()
	for _, page := range []string{"/ui/runs/deep/timeline.svg", "/ui/runs/deep/trace.json"} {
		rec := get(t, d, page)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d", page, rec.Code)
		}
		if n := rec.Body.Len(); n > depth*600 {
			t.Errorf("%s is %d bytes for %d tasks", page, n, depth)
		}
		if strings.HasSuffix(page, ".json") {
			var tr struct {
				TraceEvents []struct{ Name, Ph string } `json:"traceEvents"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &tr); err != nil {
				t.Fatal(err)
			}
			x := 0
			for _, e := range tr.TraceEvents {
				if e.Ph == "X" {
					x++
					if !strings.HasSuffix(e.Name, "m/t") && e.Name != "t" && e.Name != "m/t" {
						t.Fatalf("a trace name lost its tail: %q", e.Name)
					}
				}
			}
			if x != depth {
				t.Errorf("trace: %d complete events, want %d", x, depth)
			}
		}
	}
}

// A run's age in the runs list is the time since it was submitted, not its
// duration: one that finished 1 s after its submit, 10 s ago, is 10 s old
// (every finished run showed 0s).
func TestRunAgeIsSinceSubmit(t *testing.T) {
	f := newFake()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.addRun(t, "r1", doWhile, now.Add(-10*time.Second))
	f.finish("r1", proto.RunSucceeded, now.Add(-9*time.Second))
	d := New(f, Options{Now: func() time.Time { return now }})
	defer d.Close()
	if o := d.overview(context.Background()); len(o.Runs) != 1 || o.Runs[0].AgeMS != 10000 {
		t.Errorf("a finished run's age: %+v, want 10000 ms", o.Runs)
	}
}

// A run page's summary carries the values of the run's parameters (the
// page shows them under its title).
func TestRunSummaryShowsParams(t *testing.T) {
	f := newFake()
	r := f.addRun(t, "r1", doWhile, time.Now())
	r.params = map[string]any{"n": 3.0, "who": "ann"}
	d := New(f, Options{})
	defer d.Close()
	s, _, _, err := d.summary(context.Background(), "r1", true)
	if err != nil || s.Params["who"] != "ann" || s.Params["n"] != 3.0 {
		t.Errorf("summary %+v %v", s.Params, err)
	}
	page, err := static.ReadFile("static/app.js")
	if err != nil || !strings.Contains(string(page), `$("#params")`) {
		t.Errorf("the run page does not show params: %v", err)
	}
}

// The run page's first view is drawn on the server: state, counts that add
// up to the progress, the graph and the timeline are in the HTML itself,
// before any script runs (under load the event stream's first summary took
// 4–25 s, and the page stood empty). An unknown run is a 404 page that
// says so.
func TestRunPageIsRenderedOnTheServer(t *testing.T) {
	f := newFake()
	now := time.Now()
	f.addRun(t, "r1", ifElse, now.Add(-5*time.Second))
	f.event("r1", "init", "n1", transport.TaskDone, 1, now.Add(-4*time.Second), now.Add(-4*time.Second))
	f.event("r1", "cond", "n1", transport.TaskDone, 1, now.Add(-3*time.Second), now.Add(-3*time.Second))
	f.event("r1", "yes", "n2", transport.TaskFailed, 1, now.Add(-2*time.Second), now.Add(-time.Second))
	f.finish("r1", proto.RunFailed, now)
	d := New(f, Options{})
	defer d.Close()
	rec := get(t, d, "/ui/runs/r1")
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("run page: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	page := rec.Body.String()
	for _, want := range []string{
		`<span id="flow">ifelse</span>`,
		`class="state st-failed">failed</span>`,
		`data-state="failed"`,
		// init and cond done, yes failed, no skipped: 3 of 4 done or skipped.
		`<b id="progress">75%</b>`,
		`<b id="counts">2 done · 1 failed · 1 skipped</b>`,
		`<b id="gen">1</b>`,
		`<svg xmlns="http://www.w3.org/2000/svg" class="graph"`,
		`data-task="yes"`,
		`class="timeline"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the server-rendered run page lacks %s", want)
		}
	}
	if !regexp.MustCompile(`<button id="cancel" class="cancel" hidden>`).MatchString(page) {
		t.Errorf("an ended run's page offers to cancel it")
	}
	if rec := get(t, d, "/ui/runs/nosuchrun"); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "nosuchrun") {
		t.Errorf("the page of no such run: %d, want 404 naming it", rec.Code)
	}
}

const ifElse = `name: ifelse
tasks:
  - name: init
    func: hash
  - name: cond
    kind: condition
    func: coin
    args: {p: 1, seed: 7}
    succeed: [init]
    precede: [yes, no]
  - name: yes
    func: hash
  - name: no
    func: hash
`
