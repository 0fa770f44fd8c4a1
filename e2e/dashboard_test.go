package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/internal/testsupport"
)

// The dashboard in a real browser: headless Chromium, driven through
// chromedriver's WebDriver HTTP API, opens the pages of a `coordinator dev
// --serve` while runs go on, checks what they show, and saves screenshots
// into build/dashboard/ (HETFLOW_UPDATE_SCREENSHOTS=1: docs/dashboard/,
// which the README embeds). scripts/test.sh installs
// Debian's chromium and chromium-driver when they are missing; the test skips
// only when they are not there.

// liveFlow runs for several seconds: a do-while loop of sleeps (so the page
// sees it running, and the loop's activations climb), a GPU task, a side
// chain, and a subflow at the end.
const liveFlow = `name: live
tasks:
  - {name: init, func: noop}
  - {name: work, func: sleep, args: {ms: 250}, succeed: [init]}
  - {name: again, kind: condition, func: loop, args: {n: 24}, succeed: [work], precede: [work, fan]}
  - {name: fan, kind: subflow, func: fanout, args: {n: 6, us: 3000}}
  - {name: gpu, func: saxpy, domain: gpu, args: {n: 200000, a: 2}, succeed: [init]}
  - {name: side1, func: sleep, args: {ms: 600}, succeed: [init]}
  - {name: side2, func: spin, args: {us: 300000}, succeed: [side1]}
  - {name: done, func: hash, succeed: [side2, gpu]}
`

// stuckFlow would run a minute: the test cancels it from the page.
const stuckFlow = `name: stuck
tasks:
  - {name: a, func: sleep, args: {ms: 60000}}
  - {name: b, func: noop, succeed: [a]}
`

// wideFlow has levels×width tasks, more than a graph view draws one by one.
func wideFlowJSON(levels, width int) string {
	var b strings.Builder
	b.WriteString(`{"name":"wide","tasks":[`)
	for l := 0; l < levels; l++ {
		for c := 0; c < width; c++ {
			if l+c > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"name":"t%d_%d","func":"noop"`, l, c)
			if l > 0 {
				fmt.Fprintf(&b, `,"succeed":["t%d_%d","t%d_%d"]`, l-1, c, l-1, (c+1)%width)
			}
			b.WriteByte('}')
		}
	}
	b.WriteString(`]}`)
	return b.String()
}

// wd is a WebDriver session.
type wd struct {
	t    *testing.T
	base string // http://127.0.0.1:port/session/id
}

func wdCall(method, url string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("webdriver %s %s: %d %s", method, url, resp.StatusCode, b)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("webdriver %s %s: %d %s", method, url, resp.StatusCode, env.Value)
	}
	if out != nil {
		return json.Unmarshal(env.Value, out)
	}
	return nil
}

func (w *wd) open(url string) {
	w.t.Helper()
	if err := wdCall("POST", w.base+"/url", map[string]string{"url": url}, nil); err != nil {
		w.t.Fatal(err)
	}
}

// js runs script in the page and decodes its result into out.
func (w *wd) js(out any, script string, args ...any) {
	w.t.Helper()
	if args == nil {
		args = []any{}
	}
	if err := wdCall("POST", w.base+"/execute/sync", map[string]any{"script": script, "args": args}, out); err != nil {
		w.t.Fatal(err)
	}
}

// until polls script (returning a boolean) in the page.
func (w *wd) until(d time.Duration, what, script string, args ...any) {
	w.t.Helper()
	var last string
	testsupport.Eventually(w.t, d, what, func() bool {
		var ok bool
		w.js(&ok, script, args...)
		if !ok {
			w.js(&last, "return document.body ? document.body.innerText.slice(0, 600) : ''")
		}
		return ok
	})
	_ = last
}

func (w *wd) screenshot(path string) {
	w.t.Helper()
	var b64 string
	if err := wdCall("GET", w.base+"/screenshot", nil, &b64); err != nil {
		w.t.Fatal(err)
	}
	png, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		w.t.Fatal(err)
	}
	w.t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// browser starts chromedriver and a headless Chromium session.
func browser(t *testing.T) *wd {
	t.Helper()
	driver, err := exec.LookPath("chromedriver")
	var chrome string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, e := exec.LookPath(name); e == nil {
			chrome = p
			break
		}
	}
	if err != nil || chrome == "" {
		t.Skip("dashboard browser test skipped: chromium and chromedriver are not installed " +
			"(Debian: apt-get install chromium chromium-driver; scripts/test.sh installs them when it can)")
	}
	port := freePort(t)
	cmd := exec.Command(driver, fmt.Sprintf("--port=%d", port))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("chromedriver: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	root := fmt.Sprintf("http://127.0.0.1:%d", port)
	testsupport.Eventually(t, 30*time.Second, "chromedriver ready", func() bool {
		var st struct {
			Ready bool `json:"ready"`
		}
		return wdCall("GET", root+"/status", nil, &st) == nil && st.Ready
	})
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"binary": chrome, "args": []string{
			"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1280,1000"}},
	}}}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	if err := wdCall("POST", root+"/session", caps, &sess); err != nil {
		t.Fatalf("new browser session: %v\n%s", err, log.String())
	}
	w := &wd{t: t, base: root + "/session/" + sess.SessionID}
	t.Cleanup(func() { _ = wdCall("DELETE", w.base, nil, nil) })
	return w
}

func TestDashboardInHeadlessChromium(t *testing.T) {
	w := browser(t)
	port := freePort(t)
	url := "http://" + addr(port)
	start(t, "dev", "coordinator", "dev", "--serve", "--http", addr(port))
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The bundled examples run first; wait for all seven.
	testsupport.Eventually(t, 2*time.Minute, "the bundled examples ran", func() bool {
		out, code := poll(t, "runs", "--json", "--server", url)
		return code == 0 && strings.Count(out, `"state":"succeeded"`) == 7
	})
	submit := func(path string) string {
		out, code := cli(t, "submit", "--json", "--server", url, path)
		var sub struct{ ID string }
		if code != 0 || json.Unmarshal([]byte(out), &sub) != nil || sub.ID == "" {
			t.Fatalf("submit %s: exit %d %q", path, code, out)
		}
		return sub.ID
	}
	wide := submit(write("wide.json", wideFlowJSON(40, 40)))
	stuck := submit(write("stuck.yaml", stuckFlow))
	livePath := write("live.yaml", liveFlow)
	submit(livePath) // activity for the overview
	// Screenshots go to build/dashboard/; with HETFLOW_UPDATE_SCREENSHOTS=1
	// they replace the README's in docs/dashboard/ (a test run does not
	// rewrite tracked files by itself).
	shots := filepath.Join("..", "build", "dashboard")
	if os.Getenv("HETFLOW_UPDATE_SCREENSHOTS") == "1" {
		shots = filepath.Join("..", "docs", "dashboard")
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	// The cluster and the runs, while live runs.
	w.open(url + "/")
	w.until(time.Minute, "the overview lists ten runs, three nodes and the leader", `
		return document.querySelectorAll('#runs tr.run').length === 10 &&
			document.querySelectorAll('#nodes tbody tr[data-state=alive]').length === 3 &&
			!!document.querySelector('#coordinators tbody tr') &&
			document.querySelector('#coordinators tbody tr').innerText.includes('leader') &&
			document.querySelector('#runs tr.run[data-id="'+arguments[0]+'"]').dataset.state === 'running'`, stuck)
	var flows []string
	w.js(&flows, `return [...document.querySelectorAll('#runs tr.run td:nth-child(2)')].map(td => td.innerText)`)
	for _, want := range []string{"static", "subflow", "taskflow2", "ifelse", "dowhile", "nested-loops", "saxpy", "wide", "stuck", "live"} {
		if !strings.Contains(strings.Join(flows, " "), want) {
			t.Errorf("the runs table lacks flow %s: %v", want, flows)
		}
	}
	w.until(30*time.Second, "the overview shows live activity (tasks/s > 0 or a busy worker)", `
		return parseFloat(document.querySelector('#tasks-sec').innerText) > 0 || !!document.querySelector('#nodes .workers i.busy')`)
	w.screenshot(filepath.Join(shots, "overview.png"))
	var opens int
	w.js(&opens, `return window.hetflowStreamOpens || 0`)
	if opens != 1 {
		t.Errorf("the overview opened its event stream %d times, want 1 (a stream that does not flush reconnects)", opens)
	}

	// Cancel from the page.
	w.js(nil, `window.confirm = () => true; document.querySelector('#runs button.cancel[data-run="'+arguments[0]+'"]').click(); return null`, stuck)
	w.until(30*time.Second, "the cancelled run shows cancelled", `
		const r = document.querySelector('#runs tr.run[data-id="'+arguments[0]+'"]'); return !!r && r.dataset.state === 'cancelled'`, stuck)
	if out, _ := cli(t, "status", "--json", "--server", url, stuck); !strings.Contains(out, `"state":"cancelled"`) {
		t.Errorf("the API does not see the page's cancel: %s", out)
	}

	// A run's graph and timeline, live: it is running when the page opens
	// (submitted just before) and ends without a reload.
	live := submit(livePath)
	w.open(url + "/ui/runs/" + live)
	w.until(30*time.Second, "the run page draws the graph of the running run", `
		return document.body.dataset.state === 'running' && document.querySelectorAll('#graph svg.graph g.task[data-task]').length === 8`)
	var nDashed int
	w.js(&nDashed, `return document.querySelectorAll('#graph path.weak').length`)
	if nDashed != 2 {
		t.Errorf("%d dashed condition edges, want 2 (again→work, again→fan)", nDashed)
	}
	w.until(30*time.Second, "the loop's activations climb on the page", `
		const b = document.querySelector('#graph g.task[data-task=work] .acts'); return !!b && parseInt(b.textContent.slice(1)) >= 2`)
	w.screenshot(filepath.Join(shots, "run-live.png"))
	w.until(2*time.Minute, "the page follows the run to succeeded (server-sent events, no reload)", `
		return document.body.dataset.state === 'succeeded' &&
			[...document.querySelectorAll('#graph g.task[data-task]')].every(g => g.dataset.state === 'done') &&
			document.querySelector('#graph g.task[data-task=work] .acts').textContent === '×25'`)
	w.js(&opens, `return window.hetflowStreamOpens || 0`)
	if opens != 1 {
		t.Errorf("the run page opened its event stream %d times, want 1", opens)
	}
	var tl struct {
		Lanes int      `json:"lanes"`
		Kinds []string `json:"kinds"`
	}
	w.until(30*time.Second, "the timeline has lanes", `return !!document.querySelector('#timeline svg.timeline g.lane')`)
	w.js(&tl, `const s = document.querySelector('#timeline svg.timeline'); return {lanes: +s.dataset.lanes, kinds: [...s.querySelectorAll('g.lane')].map(g => g.dataset.kind)}`)
	if tl.Lanes < 2 || !strings.Contains(strings.Join(tl.Kinds, " "), "gpu0") {
		t.Errorf("timeline lanes = %+v, want CPU lanes and a gpu0 lane", tl)
	}
	w.screenshot(filepath.Join(shots, "run.png"))
	resp, err := http.Get(url + "/ui/runs/" + live + "/trace.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Disposition"), "attachment") || strings.Count(string(b), `"ph":"X"`) < 25 {
		t.Errorf("trace.json: %d %q, %d complete events", resp.StatusCode, resp.Header.Get("Content-Disposition"), strings.Count(string(b), `"ph":"X"`))
	}

	// A large flow: groups by level, and a group opens its tasks.
	w.open(url + "/ui/runs/" + wide)
	w.until(time.Minute, "the wide run is drawn aggregated", `
		const s = document.querySelector('#graph svg.graph'); return !!s && +s.dataset.tasks === 1600 && document.querySelectorAll('#graph g.k-group').length >= 2 &&
			document.body.dataset.state === 'succeeded'`)
	w.screenshot(filepath.Join(shots, "aggregated.png"))
	w.js(nil, `document.querySelector('#graph g.k-group a').dispatchEvent(new MouseEvent('click', {bubbles: true})); return null`)
	w.until(30*time.Second, "a group opens its tasks", `
		return location.search.includes('lo=') && document.querySelectorAll('#graph g.task[data-task]').length > 0 &&
			!document.querySelector('#graph g.k-group') && document.querySelector('#crumbs').innerText.includes('level')`)

	// The counts add up to the progress: the if-else example skips the
	// branch its condition did not pick, and the page says so beside 100%.
	out, _ := cli(t, "runs", "--json", "--server", url)
	var runs []struct{ ID, Flow string }
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatalf("runs --json: %v: %s", err, out)
	}
	ifelse := ""
	for _, r := range runs {
		if r.Flow == "ifelse" {
			ifelse = r.ID
		}
	}
	if ifelse == "" {
		t.Fatalf("no ifelse run in %s", out)
	}
	w.open(url + "/ui/runs/" + ifelse)
	w.until(30*time.Second, "the if-else run's counts name its skipped task beside 100%", `
		return document.body.dataset.state === 'succeeded' && document.querySelector('#progress').innerText === '100%' &&
			/\bdone\b/.test(document.querySelector('#counts').innerText) && document.querySelector('#counts').innerText.includes('1 skipped')`)

	// A deep flow reads at a glance: 600 tasks in 100 levels of 6 (or, with
	// HETFLOW_DASHBOARD_BIG=1, 100,000 in 1,000 levels of 100: `make
	// dashboard-big`) are groups of whole levels in rows, labels that
	// neither repeat nor overlap, not one narrow column.
	levels, width, wantGroups := 100, 6, 34
	if os.Getenv("HETFLOW_DASHBOARD_BIG") == "1" {
		levels, width, wantGroups = 1000, 100, 48
	}
	deep := submit(write("deep.json", wideFlowJSON(levels, width)))
	w.open(url + "/ui/runs/" + deep)
	w.until(5*time.Minute, "the deep run is drawn as groups", `
		const s = document.querySelector('#graph svg.graph');
		return !!s && +s.dataset.tasks === arguments[0] && document.querySelectorAll('#graph g.k-group').length === arguments[1]`, levels*width, wantGroups)
	var layout struct {
		W, H     float64
		Labels   []string
		Overlaps []string
	}
	w.js(&layout, `
		const s = document.querySelector('#graph svg.graph'), r = s.getBoundingClientRect();
		const texts = [...s.querySelectorAll('text')].filter(t => t.textContent.trim() !== '');
		const boxes = texts.map(t => [t.textContent, t.getBoundingClientRect()]);
		const over = [];
		for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
			const [ta, a] = boxes[i], [tb, b] = boxes[j];
			if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1) over.push(ta + ' × ' + tb);
		}
		return {w: r.width, h: r.height, labels: [...s.querySelectorAll('g.k-group text:not(.sub)')].map(t => t.textContent), overlaps: over.slice(0, 10)}`)
	if layout.W < layout.H {
		t.Errorf("the deep run's graph is %.0f×%.0f: a column, not a page", layout.W, layout.H)
	}
	seen := map[string]bool{}
	for _, l := range layout.Labels {
		if seen[l] {
			t.Errorf("two groups labelled %q", l)
		}
		seen[l] = true
	}
	if len(layout.Overlaps) > 0 {
		t.Errorf("texts overlap in the deep run's graph: %v", layout.Overlaps)
	}
	w.screenshot(filepath.Join(shots, "deep.png"))
}
