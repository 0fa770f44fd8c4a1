package node

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// A panic while a change is recorded under the event publisher's lock
// (recordSlow: every run's first change takes it) fails the task, and so
// the run, under localexec's recover: the failure is recorded after it
// (run.fail records again, through the same path), so the lock must be
// free by then. Were it released by hand rather than by a defer, the
// failure's record would wait for it forever: no fail envelope, the run
// never ends, and the next run's records wait too. Here the run fails
// naming the panic, and the node runs the next flow.
func TestPanicRecordingAChangeFailsTheRun(t *testing.T) {
	c := newCluster(t, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	text := chainFlow(`{name: t, func: hash, succeed: [init]}`)
	file, g := parseFlow(t, text)
	own := make([]uint32, len(g.Vertices))
	var panicked atomic.Bool
	hook := func() {
		if panicked.CompareAndSwap(false, true) {
			panic("recording a change: injected")
		}
	}
	recordTestHook.Store(&hook)
	t.Cleanup(func() { recordTestHook.Store(nil) })
	out := c.runFlow(ctx, file, own, runOpts{})
	recordTestHook.Store(nil)
	if !panicked.Load() {
		t.Fatal("the hook never ran: no change was recorded through recordSlow")
	}
	if out.failed == nil || !strings.Contains(out.failed.Error, "injected") || !strings.Contains(out.failed.Error, "panic recording a task's change") {
		t.Fatalf("the run did not fail with the panic: %+v\n%s", out.failed, summary(out.tasks))
	}
	nextRunWhole(ctx, t, c, file, own, "init", "t", "after")
}

// A panic in the node's own code around an activation, outside callFunc's
// and recordSlow's recovers (staticTestHook, in runStatic), is recovered
// by localexec, which cancels the open run. The run must fail loudly,
// naming the task and the panic: the open run ends (a cancelled open run
// is closed), and the node fails the run with its error (run.openEnded).
// Before, the open run stayed open and idle, so the node reported itself
// idle with c's successor e never run, and the stand-in leader ended the
// run as a success (the real leader's record check refuses it: the run
// then hung). The run after it runs whole.
func TestPanicInNodeCodeFailsTheRun(t *testing.T) {
	c := newCluster(t, nodeSpec{})
	ctx := testCtx(t, 60*time.Second)
	file, g := parseFlow(t, plainFlow)
	own := make([]uint32, len(g.Vertices))
	victim := byName(g, "c")
	var panicked atomic.Bool
	hook := func(_ string, v int) {
		if v == victim && panicked.CompareAndSwap(false, true) {
			panic("node code: injected")
		}
	}
	staticTestHook.Store(&hook)
	t.Cleanup(func() { staticTestHook.Store(nil) })
	out := c.runFlow(ctx, file, own, runOpts{})
	staticTestHook.Store(nil)
	if !panicked.Load() {
		t.Fatal("the hook never ran for c")
	}
	if out.failed == nil || out.failed.Task != "c" || !strings.Contains(out.failed.Error, "injected") {
		t.Fatalf("the run did not fail naming c and the panic: %+v\n%s", out.failed, summary(out.tasks))
	}
	if f := out.tasks["e"]; f != nil && f.state == transport.TaskDone {
		t.Fatalf("e ran after its predecessor c panicked\n%s", summary(out.tasks))
	}
	nextRunWhole(ctx, t, c, file, own, "a", "b", "c", "d", "e")
}

// nextRunWhole runs the flow again after a run a panic failed: it must
// succeed with each of the tasks named done.
func nextRunWhole(ctx context.Context, t *testing.T, c *cluster, file *spec.File, own []uint32, names ...string) {
	t.Helper()
	out := c.runFlow(ctx, file, own, runOpts{})
	if out.failed != nil {
		t.Fatalf("the next run failed: %+v", out.failed)
	}
	for _, name := range names {
		if f := out.tasks[name]; f == nil || f.state != transport.TaskDone {
			t.Fatalf("the next run's %s: %v\n%s", name, f, summary(out.tasks))
		}
	}
}
