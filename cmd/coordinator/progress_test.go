package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// gatedLoop is a loop whose body is two parallel gate tasks, p and q: cond
// loops back to a twice, so p and q run three times each.
const gatedLoop = `name: gated
tasks:
  - {name: init, func: noop}
  - {name: a, func: noop, succeed: [init]}
  - {name: p, func: gate, succeed: [a]}
  - {name: q, func: gate, succeed: [a]}
  - {name: cond, kind: condition, func: loop, args: {n: 2}, succeed: [p, q], precede: [a, done]}
  - {name: done, func: noop}
`

// barRE reads the done/total count off one drawing of progress().
var barRE = regexp.MustCompile(`\] (\d+)/(\d+) tasks`)

// submit --wait's progress bar never goes back while a loop runs again, and
// ends at every task (issue 18: "3/4 … 2/4" on a loop).
//
// The body tasks p and q block on gates the test opens one at a time, so
// the run stops in known states, and the test waits for each to be drawn
// before going on. Two of them are, in the second and third iteration:
//
//	p done, q running       done: init a cond p  (4)   finished: 5
//	p and q running again   done: init a cond    (3)   finished: 5
//
// A bar of the tasks done now (Counts.Done, the old count) goes from 4/6
// back to 3/6 there, so this test fails on it; the bar of the tasks that
// finished an activation (RunProgress.Finished) stays at 5/6. The test
// checks that those states came (the done count fell) and were drawn, so
// it cannot pass without seeing a loop run again.
func TestSubmitWaitProgressNeverGoesBack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	gates := map[string]chan struct{}{"p": make(chan struct{}), "q": make(chan struct{})}
	reg := funcs.Default()
	reg.MustRegister(funcs.Entry{Name: "gate", CPU: func(ctx context.Context, c *funcs.Call) (funcs.Result, error) {
		select {
		case <-gates[c.Task]:
			return funcs.Result{}, nil
		case <-ctx.Done():
			return funcs.Result{}, ctx.Err()
		}
	}})
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	// Two CPU workers: p and q run side by side.
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 1, CPUs: 2, SimGPUs: -1, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	flow := filepath.Join(t.TempDir(), "gated.yaml")
	if err := os.WriteFile(flow, []byte(gatedLoop), 0o644); err != nil {
		t.Fatal(err)
	}

	var stdout, stderr syncBuf
	type result struct {
		code int
		err  error
	}
	ended := make(chan result, 1)
	go func() {
		root := newRoot()
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		root.SetArgs([]string{"submit", "--wait", flow, "--server", d.URL()})
		err := root.Execute()
		code := exitOK
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.Code
		} else if err != nil {
			code = -1
		}
		ended <- result{code, err}
	}()
	joined := false
	defer func() {
		d.Close() // a command still following gives up once the cluster is gone
		if !joined {
			<-ended
		}
	}()

	var id string
	testsupport.Eventually(t, 30*time.Second, "submit --wait saying the run id", func() bool {
		m := regexp.MustCompile(`run (\S+) submitted`).FindStringSubmatch(stderr.String())
		if m != nil {
			id = m[1]
		}
		return m != nil
	})
	c := d.Client()
	task := func(st proto.RunStatus, name string) proto.TaskStatus {
		for _, ts := range st.Tasks {
			if ts.Name == name {
				return ts
			}
		}
		return proto.TaskStatus{}
	}
	// reach waits for the run to be in the state ok accepts (it stays there
	// until a gate opens), then for the bar to draw that state.
	var seen []proto.RunProgress
	reach := func(what string, ok func(st proto.RunStatus) bool) {
		t.Helper()
		var st proto.RunStatus
		testsupport.Eventually(t, 30*time.Second, what, func() bool {
			var err error
			st, err = c.Status(ctx, id)
			return err == nil && ok(st)
		})
		want := st.Progress()
		seen = append(seen, want)
		var line strings.Builder
		progress(&line)(want)
		testsupport.Eventually(t, 30*time.Second, what+" drawn as "+strconv.Quote(line.String()), func() bool {
			s := stderr.String()
			i := strings.LastIndex(s, "\r") // the bar's latest drawing; none yet: -1
			return i >= 0 && s[i:] == line.String()
		})
	}
	running := func(name string, act uint64) func(proto.RunStatus) bool {
		return func(st proto.RunStatus) bool {
			ts := task(st, name)
			return ts.State == proto.TaskRunning && ts.Activations == act
		}
	}
	doneAt := func(name string, act uint64) func(proto.RunStatus) bool {
		return func(st proto.RunStatus) bool {
			ts := task(st, name)
			return ts.State == proto.TaskDone && ts.Activations == act
		}
	}
	both := func(x, y func(proto.RunStatus) bool) func(proto.RunStatus) bool {
		return func(st proto.RunStatus) bool { return x(st) && y(st) }
	}
	for it := uint64(1); it <= 3; it++ {
		reach(fmt.Sprintf("p and q running, iteration %d", it), both(running("p", it), running("q", it)))
		gates["p"] <- struct{}{}
		reach(fmt.Sprintf("p done, q running, iteration %d", it), both(doneAt("p", it), running("q", it)))
		gates["q"] <- struct{}{}
	}
	r := <-ended
	joined = true
	if r.code != exitOK {
		t.Fatalf("submit --wait: exit %d (%v)\nstderr:\n%s", r.code, r.err, stderr.String())
	}

	// The states the bar drew include a fall of the tasks done now: without
	// it this test would not tell the two counts apart.
	fell := false
	for i := 1; i < len(seen); i++ {
		fell = fell || seen[i].Counts.Done < seen[i-1].Counts.Done
	}
	if !fell {
		t.Fatalf("no state seen where the tasks done now fell (the test proves nothing): %+v", seen)
	}

	// Every drawing of the bar, in order: the count never falls, and the
	// last reads every task.
	var draws []string
	prev, total, last := -1, 0, 0
	for _, m := range barRE.FindAllStringSubmatch(stderr.String(), -1) {
		draws = append(draws, m[1]+"/"+m[2])
		n, _ := strconv.Atoi(m[1])
		total, _ = strconv.Atoi(m[2])
		if n < prev {
			t.Errorf("the bar went back from %d to %d/%d (drawings: %v)", prev, n, total, draws)
		}
		prev, last = n, n
	}
	if len(draws) == 0 || last != total || total != 6 {
		t.Errorf("the last drawing is not 6/6 tasks: %v\nstderr:\n%s", draws, stderr.String())
	}
}
