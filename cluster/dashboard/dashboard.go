package dashboard

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
)

//go:embed static
var static embed.FS

// CookieName is the cookie that carries the API token for the pages.
const CookieName = "hetflow_token"

// minRefresh is how often at most a run's events are read again.
const minRefresh = 250 * time.Millisecond

// Options configure a Dashboard.
type Options struct {
	// Token is the API token; "" when the cluster has no secret (every page
	// is open then, as the API is).
	Token string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Tick is how often the event streams look for changes (default 500ms).
	Tick time.Duration
}

// Dashboard is the web view of one coordinator. It is an http.Handler for
// "/" and "/ui/..." (SelfAuth tells a server which paths it authorises
// itself). It starts no goroutine of its own: each event stream runs on its
// request's goroutine and ends with the request or with Close.
type Dashboard struct {
	src   Source
	token string
	now   func() time.Time
	tick  time.Duration
	mux   *http.ServeMux

	mu     sync.Mutex
	runs   map[string]*runData
	final  map[string]*finalCounts
	msgs   []sample // Signals() over time, for messages per second
	closed chan struct{}
	once   sync.Once
}

type sample struct {
	at time.Time
	n  uint64
}

// New returns the dashboard of src.
func New(src Source, opts Options) *Dashboard {
	d := &Dashboard{src: src, token: opts.Token, now: opts.Now, tick: opts.Tick,
		runs: map[string]*runData{}, final: map[string]*finalCounts{}, closed: make(chan struct{})}
	if d.now == nil {
		d.now = time.Now
	}
	if d.tick <= 0 {
		d.tick = 500 * time.Millisecond
	}
	sub, _ := fs.Sub(static, "static")
	files := http.FileServerFS(sub)
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", d.page("index.html"))
	m.HandleFunc("GET /ui/runs/{id}", d.handleRunPage)
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", files))
	m.HandleFunc("GET /ui/overview.json", d.handleOverview)
	m.HandleFunc("GET /ui/events", d.handleOverviewEvents)
	m.HandleFunc("GET /ui/runs/{id}/summary.json", d.handleSummary)
	m.HandleFunc("GET /ui/runs/{id}/events", d.handleRunEvents)
	m.HandleFunc("GET /ui/runs/{id}/graph.svg", d.handleGraph)
	m.HandleFunc("GET /ui/runs/{id}/timeline.svg", d.handleTimeline)
	m.HandleFunc("GET /ui/runs/{id}/trace.json", d.handleTrace)
	m.HandleFunc("POST /ui/runs/{id}/cancel", d.handleCancel)
	m.HandleFunc("POST /ui/login", d.handleLogin)
	d.mux = m
	return d
}

// SelfAuth reports whether the dashboard authorises requests for path
// itself (with the API token as a Bearer header or as its cookie): "/" and
// everything under "/ui/".
func SelfAuth(path string) bool { return path == "/" || strings.HasPrefix(path, "/ui/") }

// Close ends every open event stream; pages still load afterwards.
func (d *Dashboard) Close() { d.once.Do(func() { close(d.closed) }) }

// ServeHTTP implements http.Handler.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.token != "" {
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet {
			d.acceptToken(w, r, t)
			return
		}
		if !d.authorised(r) && r.URL.Path != "/ui/login" && !strings.HasPrefix(r.URL.Path, "/ui/static/") {
			d.refuse(w, r)
			return
		}
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	d.mux.ServeHTTP(w, r)
}

func (d *Dashboard) authorised(r *http.Request) bool {
	if d.token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		c, err := r.Cookie(CookieName)
		if err != nil {
			return false
		}
		got = c.Value
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(d.token)) == 1
}

// acceptToken checks a ?token= and, when right, stores it in an HttpOnly
// cookie and redirects to the same URL without it (so it leaves the address
// bar and the history).
func (d *Dashboard) acceptToken(w http.ResponseWriter, r *http.Request, tok string) {
	if subtle.ConstantTimeCompare([]byte(tok), []byte(d.token)) != 1 {
		d.refuse(w, r)
		return
	}
	d.setCookie(w, r, tok)
	q := r.URL.Query()
	q.Del("token")
	u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

func (d *Dashboard) setCookie(w http.ResponseWriter, r *http.Request, tok string) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: tok, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

func (d *Dashboard) handleLogin(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "login: "+err.Error(), http.StatusBadRequest)
		return
	}
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	if subtle.ConstantTimeCompare([]byte(tok), []byte(d.token)) != 1 {
		d.refuse(w, r)
		return
	}
	d.setCookie(w, r, tok)
	next := r.PostForm.Get("next")
	if !SelfAuth(next) || strings.HasPrefix(next, "//") {
		next = "/"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// refuse answers 401: the login page for a page, a JSON error otherwise.
func (d *Dashboard) refuse(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && (r.URL.Path == "/" || (strings.HasPrefix(r.URL.Path, "/ui/runs/") && strings.Count(r.URL.Path, "/") == 3)) {
		b, _ := static.ReadFile("static/login.html")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(strings.ReplaceAll(string(b), "{{next}}", htmlEscape(r.URL.Path))))
		return
	}
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": proto.ErrUnauthorized.Error()})
}

func (d *Dashboard) page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := static.ReadFile("static/" + name)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, proto.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, proto.ErrNotLeader), errors.Is(err, proto.ErrNoLeader):
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// Overview is the cluster page's data (GET /ui/overview.json and the
// "overview" events of /ui/events).
type Overview struct {
	Term         uint64        `json:"term"`
	Coordinators []Coordinator `json:"coordinators"`
	Nodes        []NodeLoad    `json:"nodes"`
	TasksSec     float64       `json:"tasks_per_sec"`
	MsgsSec      float64       `json:"messages_per_sec"`
	Runs         []RunRow      `json:"runs"`
}

// RunRow is one run of the overview.
type RunRow struct {
	proto.RunSummary
	AgeMS    int64   `json:"age_ms"`
	Tasks    int     `json:"tasks"`
	Done     int     `json:"done"`
	Failed   int     `json:"failed"`
	Running  int     `json:"running"`
	Skipped  int     `json:"skipped"`
	Pending  int     `json:"pending"`
	Progress float64 `json:"progress"` // 0…1, done (and skipped) tasks of all
}

func (d *Dashboard) overview(ctx context.Context) Overview {
	var o Overview
	o.Coordinators, o.Term = d.src.Coordinators()
	nodes := d.src.Nodes()
	runs := d.src.Runs()
	sort.Slice(runs, func(i, j int) bool { return runs[i].Submitted.After(runs[j].Submitted) })
	d.forget(runs)
	o.Nodes, o.TasksSec = d.loads(ctx, nodes, runs)
	o.MsgsSec = d.msgRate()
	now := d.now()
	o.Runs = make([]RunRow, 0, len(runs))
	for i, r := range runs {
		// The age is the time since the submit, finished or not.
		row := RunRow{RunSummary: r, AgeMS: now.Sub(r.Submitted).Milliseconds()}
		if i < 200 { // progress of the newest runs; the list itself is complete
			if c, err := d.counts(ctx, r.ID); err == nil {
				row.Tasks, row.Done, row.Failed, row.Running, row.Progress = c.Tasks, c.Done, c.Failed, c.Running, progress(c)
				row.Skipped, row.Pending = c.Skipped, c.Pending
			}
		}
		o.Runs = append(o.Runs, row)
	}
	return o
}

// forget drops what the dashboard keeps of runs the source no longer lists
// (pruned after the retention).
func (d *Dashboard) forget(runs []proto.RunSummary) {
	keep := make(map[string]bool, len(runs))
	for _, r := range runs {
		keep[r.ID] = true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.runs {
		if !keep[id] {
			delete(d.runs, id)
		}
	}
	for id := range d.final {
		if !keep[id] {
			delete(d.final, id)
		}
	}
}

// msgRate is cross-node Signals per second over the last few seconds.
func (d *Dashboard) msgRate() float64 {
	now := d.now()
	n := d.src.Signals()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.msgs = append(d.msgs, sample{now, n})
	for len(d.msgs) > 2 && now.Sub(d.msgs[1].at) > loadWindow {
		d.msgs = d.msgs[1:]
	}
	first := d.msgs[0]
	if dt := now.Sub(first.at).Seconds(); dt > 0.2 && n >= first.n {
		return float64(n-first.n) / dt
	}
	return 0
}

func (d *Dashboard) handleOverview(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, d.overview(r.Context()))
}

func (d *Dashboard) handleCancel(w http.ResponseWriter, r *http.Request) {
	// A cross-site form cannot set this header; the cookie is SameSite too.
	if r.Header.Get("X-Hetflow-UI") == "" {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "dashboard: cancel needs the X-Hetflow-UI header"})
		return
	}
	id := r.PathValue("id")
	if _, ok := d.src.Run(id); !ok {
		writeErr(w, ErrNotFound)
		return
	}
	if err := d.src.Cancel(r.Context(), id); err != nil {
		writeErr(w, err)
		return
	}
	d.handleSummary(w, r)
}

func htmlEscape(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")
	return r.Replace(s)
}
