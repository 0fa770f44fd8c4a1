package localexec

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
)

type countingObserver struct {
	starts, ends atomic.Int64
	workers      int
}

func (c *countingObserver) SetUp(ws []WorkerInfo)              { c.workers = len(ws) }
func (c *countingObserver) TaskStart(w WorkerInfo, t TaskInfo) { c.starts.Add(1) }
func (c *countingObserver) TaskEnd(w WorkerInfo, t TaskInfo)   { c.ends.Add(1) }

func TestObserversSeeEveryTask(t *testing.T) {
	ex := newEx(t, WithWorkers(3))
	obs := &countingObserver{}
	ex.AddObserver(obs)
	tf := NewTaskflow("obs")
	wavefront(tf, 20, func() {})
	if err := ex.RunN(tf, 3).Wait(); err != nil {
		t.Fatal(err)
	}
	if obs.workers != 3 || obs.starts.Load() != 1200 || obs.ends.Load() != 1200 {
		t.Fatalf("workers %d starts %d ends %d", obs.workers, obs.starts.Load(), obs.ends.Load())
	}
	ex.RemoveObserver(obs)
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	if obs.starts.Load() != 1200 {
		t.Fatal("removed observer still called")
	}
}

func TestChromeTracerWritesPerfettoJSON(t *testing.T) {
	tr := NewChromeTracer()
	ex := newEx(t, WithWorkers(2), WithObserver(tr))
	tf := NewTaskflow("traced")
	a := tf.Emplace(func() {}).Name("a")
	b := tf.EmplaceSubflow(func(sf *Subflow) { sf.Emplace(func() {}).Name("child") }).Name("b")
	a.Precede(b)
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := tr.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	var evs []struct {
		Name string  `json:"name"`
		Ph   string  `json:"ph"`
		Ts   float64 `json:"ts"`
		Dur  float64 `json:"dur"`
		Tid  int     `json:"tid"`
	}
	if err := json.Unmarshal(buf.Bytes(), &evs); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.String())
	}
	names := map[string]bool{}
	threads := 0
	for _, e := range evs {
		switch e.Ph {
		case "X":
			names[e.Name] = true
			if e.Dur < 0 || e.Tid < 0 || e.Tid >= 2 {
				t.Fatalf("bad event %+v", e)
			}
		case "M":
			threads++
		}
	}
	if !names["a"] || !names["b"] || !names["child"] || threads != 2 || tr.NumEvents() != 3 {
		t.Fatalf("events %v threads %d n %d", names, threads, tr.NumEvents())
	}
}

func TestDumpDrawsSubflowsAndModulesAsClusters(t *testing.T) {
	ex := newEx(t)
	inner := NewTaskflow("inner")
	inner.Emplace(func() {}).Name("i1")
	tf := NewTaskflow("outer")
	a := tf.Emplace(func() {}).Name("a")
	s := tf.EmplaceSubflow(func(sf *Subflow) {
		x := sf.Emplace(func() {}).Name("x")
		y := sf.Emplace(func() {}).Name("y")
		x.Precede(y)
		sf.Retain(true)
	}).Name("sub")
	m := tf.ComposedOf(inner).Name("mod")
	c := tf.EmplaceCondition(func() int { return 1 }).Name("c")
	a.Precede(s)
	s.Precede(m)
	m.Precede(c)
	c.Precede(s, tf.Placeholder().Name("end"))
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tf.Dump(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{`subgraph "cluster_`, `label="Subflow: sub"`, `label="Taskflow: inner"`, `"x"`, `"i1"`, `style=dashed`, `mod [m:inner]`} {
		if !strings.Contains(out, want) {
			t.Fatalf("dump lacks %q:\n%s", want, out)
		}
	}
}
