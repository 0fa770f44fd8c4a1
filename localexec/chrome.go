package localexec

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"
)

// ChromeTracer is an Observer that records every task's start and end per
// worker and writes them as a Chrome trace (JSON array of complete events),
// which chrome://tracing and Perfetto (ui.perfetto.dev) open. It is the
// equivalent of Taskflow's tfprof.
//
// Each worker appends to its own slice, so recording takes no lock. Write
// after the runs have finished (after Future.Wait).
type ChromeTracer struct {
	mu      sync.Mutex
	origin  time.Time
	workers []WorkerInfo
	lanes   [][]traceEvent
	open    [][]traceEvent // stack of started tasks per worker
}

type traceEvent struct {
	name  string
	kind  string
	start time.Duration
	end   time.Duration
}

// NewChromeTracer returns a tracer; attach it with WithObserver or
// Executor.AddObserver.
func NewChromeTracer() *ChromeTracer { return &ChromeTracer{origin: time.Now()} }

// SetUp sizes the per-worker lanes (called by the executor when attached).
func (c *ChromeTracer) SetUp(workers []WorkerInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.workers = workers
	if len(c.lanes) < len(workers) {
		c.lanes = append(c.lanes, make([][]traceEvent, len(workers)-len(c.lanes))...)
		c.open = append(c.open, make([][]traceEvent, len(workers)-len(c.open))...)
	}
}

// TaskStart records the start of t on w.
func (c *ChromeTracer) TaskStart(w WorkerInfo, t TaskInfo) {
	c.open[w.ID] = append(c.open[w.ID], traceEvent{name: t.Name, kind: t.Kind, start: time.Since(c.origin)})
}

// TaskEnd records the end of t on w.
func (c *ChromeTracer) TaskEnd(w WorkerInfo, t TaskInfo) {
	st := c.open[w.ID]
	if len(st) == 0 {
		return
	}
	e := st[len(st)-1]
	c.open[w.ID] = st[:len(st)-1]
	e.end = time.Since(c.origin)
	c.lanes[w.ID] = append(c.lanes[w.ID], e)
}

// NumEvents returns the number of recorded (finished) task executions.
func (c *ChromeTracer) NumEvents() int {
	n := 0
	for _, l := range c.lanes {
		n += len(l)
	}
	return n
}

type chromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// WriteTo writes the trace as JSON.
func (c *ChromeTracer) WriteTo(w io.Writer) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var evs []chromeEvent
	for _, wi := range c.workers {
		evs = append(evs, chromeEvent{Name: "thread_name", Ph: "M", Pid: 1, Tid: wi.ID,
			Args: map[string]any{"name": wi.Domain + " worker " + itoa(wi.ID)}})
	}
	for id, lane := range c.lanes {
		for _, e := range lane {
			evs = append(evs, chromeEvent{Name: e.name, Cat: e.kind, Ph: "X", Pid: 1, Tid: id,
				Ts: float64(e.start.Nanoseconds()) / 1e3, Dur: float64((e.end - e.start).Nanoseconds()) / 1e3})
		}
	}
	if evs == nil {
		evs = []chromeEvent{}
	}
	cw := &countWriter{w: w}
	bw := bufio.NewWriter(cw)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(evs); err != nil {
		return cw.n, err
	}
	err := bw.Flush()
	return cw.n, err
}

// WriteFile writes the trace to path.
func (c *ChromeTracer) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
