package localexec

import (
	"errors"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetflow/hetflow/internal/testsupport"
)

// TestOwedCountPaidBeforeAnotherRun: a worker that finished a task of one
// run owes that run's pending count (worker.giveBack) and must pay it before
// it runs a task of another run, which may wait for the first. One worker,
// so that both runs' starters are taken from the shared queue at once
// (takeShared) and the second's lies in the worker's own deque when the
// first's only task completes: without the payment at the frame switch
// (runGuarded), the second run's task waits forever for the first run.
func TestOwedCountPaidBeforeAnotherRun(t *testing.T) {
	for round := 0; round < 20; round++ {
		ex := NewExecutor(WithWorkers(1), WithGPUs(0))
		gate := make(chan struct{})
		release := make(chan struct{})
		tf0 := NewTaskflow("busy")
		tf0.Emplace(func() { <-gate })
		tf1 := NewTaskflow("first")
		tf1.Emplace(func() {})
		var f1 atomic.Pointer[Future]
		tf2 := NewTaskflow("second")
		tf2.Emplace(func() {
			select {
			case <-f1.Load().Done():
			case <-release:
			}
		})
		f0 := ex.Run(tf0)
		f1.Store(ex.Run(tf1))
		f2 := ex.Run(tf2)
		close(gate)
		select {
		case <-f2.Done():
		case <-time.After(20 * time.Second):
			close(release)
			t.Fatalf("round %d: the second run waits for the first, whose count the worker still owes", round)
		}
		for _, f := range []*Future{f0, f1.Load(), f2} {
			if err := waitOrFail(t, f, "run"); err != nil {
				t.Fatal(err)
			}
		}
		if got := ex.Stats().Domain("cpu").Executed; got != 3 {
			t.Fatalf("round %d: Stats after Wait counts %d tasks executed, want 3", round, got)
		}
		ex.Close()
	}
}

// TestSilentAsync: every call runs and WaitForAll waits for them; a panic in
// one is recovered (the worker lives on, the others run) and not reported;
// after Close a call does nothing.
func TestSilentAsync(t *testing.T) {
	ex := NewExecutor(WithWorkers(2), WithGPUs(0))
	var ran atomic.Int64
	const calls = 10_000
	for i := 0; i < calls; i++ {
		if i == calls/2 {
			ex.SilentAsync(func() { panic("boom") })
		}
		ex.SilentAsync(func() { ran.Add(1) })
	}
	ex.WaitForAll()
	if got := ran.Load(); got != calls {
		t.Fatalf("after WaitForAll %d of %d calls ran", got, calls)
	}
	if got, want := ex.Stats().Domain("cpu").Executed, uint64(calls+1); got != want {
		t.Fatalf("Stats counts %d executed, want %d (the panicking call included)", got, want)
	}
	// Async still works beside it, on the same workers.
	if err := waitOrFail(t, ex.Async(func() {}), "Async"); err != nil {
		t.Fatal(err)
	}
	ex.Close()
	ex.SilentAsync(func() { t.Error("SilentAsync ran after Close") })
}

// TestSilentCallWaitsForALaterOne: SilentAsync calls taken from the shared
// queue at once become one batch (silentBatch), and a call of it that blocks
// must not hold back the calls after it: here the first waits for the
// second, queued right behind it, while both workers are held, so whoever
// takes the queue's share takes both in one batch. Without the batch pushed
// back for the other worker to steal, the run hangs: the other worker takes
// what is left of the queue and parks while the second call waits behind
// the first.
func TestSilentCallWaitsForALaterOne(t *testing.T) {
	for round := 0; round < 20; round++ {
		ex := NewExecutor(WithWorkers(2), WithGPUs(0))
		gate, in := make(chan struct{}), make(chan struct{}, 2)
		for i := 0; i < 2; i++ {
			ex.SilentAsync(func() { in <- struct{}{}; <-gate })
		}
		<-in
		<-in // both workers are held: what follows queues up
		second := make(chan struct{})
		var ran atomic.Int64
		ex.SilentAsync(func() { <-second; ran.Add(1) })
		ex.SilentAsync(func() { close(second); ran.Add(1) })
		for i := 0; i < 100; i++ {
			ex.SilentAsync(func() { ran.Add(1) })
		}
		close(gate)
		finished := make(chan struct{}) // joined by the Eventually below
		go func() { defer close(finished); ex.WaitForAll() }()
		testsupport.Eventually(t, 20*time.Second, "the calls of round "+strconv.Itoa(round)+" ran", func() bool {
			select {
			case <-finished:
				return true
			default:
				return false
			}
		})
		if got := ran.Load(); got != 102 {
			t.Fatalf("round %d: %d of 102 calls ran", round, got)
		}
		ex.Close()
	}
}

// TestSilentBatchPanics: calls that panic inside a batch (silentBatch,
// one recover for the batch) are recovered and counted, and the calls after
// them in the batch still run. Both workers are held while the calls queue
// up, so that they are taken as batches.
func TestSilentBatchPanics(t *testing.T) {
	ex := NewExecutor(WithWorkers(2), WithGPUs(0))
	defer ex.Close()
	gate, in := make(chan struct{}), make(chan struct{}, 2)
	for i := 0; i < 2; i++ {
		ex.SilentAsync(func() { in <- struct{}{}; <-gate })
	}
	<-in
	<-in
	var ran atomic.Int64
	const calls = 300
	for i := 0; i < calls; i++ {
		if i%10 == 3 {
			ex.SilentAsync(func() { panic(i) })
			continue
		}
		ex.SilentAsync(func() { ran.Add(1) })
	}
	ex.SilentAsync(nil) // nothing to run: counted, no panic
	close(gate)
	ex.WaitForAll()
	if got, want := ran.Load(), int64(calls-calls/10); got != want {
		t.Fatalf("%d calls ran, want %d", got, want)
	}
	if got, want := ex.Stats().Domain("cpu").Executed, uint64(2+calls+1); got != want {
		t.Fatalf("Stats counts %d executed, want %d (the panicking calls included)", got, want)
	}
}

// TestIndependentRunsStatsExact: many sources, run repeatedly: each run's
// Wait returns only after every task ran, and the counts the workers owed
// are paid before it (Stats read after Wait is exact).
func TestIndependentRunsStatsExact(t *testing.T) {
	ex := NewExecutor(WithWorkers(3), WithGPUs(0))
	defer ex.Close()
	var ran atomic.Int64
	tf := NewTaskflow("independent")
	const n = 5000
	for i := 0; i < n; i++ {
		tf.Emplace(func() { ran.Add(1) })
	}
	for r := 1; r <= 5; r++ {
		if err := waitOrFail(t, ex.Run(tf), "run"); err != nil {
			t.Fatal(err)
		}
		if got := ran.Load(); got != int64(r*n) {
			t.Fatalf("run %d: %d tasks ran by Wait, want %d", r, got, r*n)
		}
		if got := ex.Stats().Domain("cpu").Executed; got != uint64(r*n) {
			t.Fatalf("run %d: Stats counts %d, want %d", r, got, r*n)
		}
	}
}

// TestEdgesSurviveCollection: successor rows are carved from per-graph
// slabs (graph.carve) and a subflow's are dropped with its children. Build
// a wavefront and a subflow's grid while collecting and churning the heap
// (so a row freed by mistake would be reused and overwritten; under -race
// checkptr also checks every row access), then run them: every task runs
// once, after its predecessors.
func TestEdgesSurviveCollection(t *testing.T) {
	const k = 60
	var sink [][]byte
	churn := func() {
		runtime.GC()
		for i := 0; i < 64; i++ {
			sink = append(sink, make([]byte, 8<<10))
		}
		if len(sink) > 1024 {
			sink = sink[:0]
		}
	}
	grid := func(emplace func(func()) Task, done []atomic.Int32, bad *atomic.Int32) {
		ts := make([]Task, k*k)
		for i := range ts {
			i := i
			ts[i] = emplace(func() {
				r, c := i/k, i%k
				if (r > 0 && done[i-k].Load() == 0) || (c > 0 && done[i-1].Load() == 0) {
					bad.Add(1)
				}
				done[i].Add(1)
			})
		}
		for i := range ts {
			if i%500 == 0 {
				churn()
			}
			if i+k < k*k {
				ts[i].Precede(ts[i+k])
			}
			if (i+1)%k != 0 {
				ts[i].Precede(ts[i+1])
			}
		}
	}
	ex := NewExecutor(WithWorkers(3), WithGPUs(0))
	defer ex.Close()
	var bad atomic.Int32
	done := make([]atomic.Int32, k*k)
	tf := NewTaskflow("wavefront")
	grid(tf.Emplace, done, &bad)
	sub := make([]atomic.Int32, k*k)
	tf2 := NewTaskflow("subflow")
	tf2.EmplaceSubflow(func(sf *Subflow) { grid(sf.Emplace, sub, &bad) })
	for run := 1; run <= 3; run++ {
		churn()
		for _, f := range []*Taskflow{tf, tf2} {
			if err := waitOrFail(t, ex.Run(f), f.Name()); err != nil {
				t.Fatal(err)
			}
		}
		for i := range done {
			if done[i].Load() != int32(run) || sub[i].Load() != int32(run) {
				t.Fatalf("run %d: task %d ran %d times (subflow's %d)", run, i, done[i].Load(), sub[i].Load())
			}
		}
		if n := bad.Load(); n != 0 {
			t.Fatalf("run %d: %d tasks ran before a predecessor", run, n)
		}
	}
}

// TestSourceRangeCancelled: a graph's many sources go out as a range that
// the workers split (rangeTask). A panic in one source fails the run, the
// run still ends (each source gives its count back, run or not), and the
// next run runs every source once.
func TestSourceRangeCancelled(t *testing.T) {
	ex := NewExecutor(WithWorkers(3), WithGPUs(0))
	defer ex.Close()
	const n = 10_000
	var ran atomic.Int64
	var fail atomic.Bool
	fail.Store(true)
	tf := NewTaskflow("sources")
	for i := 0; i < n; i++ {
		if i == n/3 {
			tf.Emplace(func() {
				if fail.Load() {
					panic("boom")
				}
				ran.Add(1)
			}).Name("bad")
			continue
		}
		tf.Emplace(func() { ran.Add(1) })
	}
	err := waitOrFail(t, ex.Run(tf), "failing run")
	var pe *PanicError
	if !errors.As(err, &pe) || pe.Task != "bad" {
		t.Fatalf("run with a panicking source: %v, want a *PanicError of task bad", err)
	}
	fail.Store(false)
	ran.Store(0)
	if err := waitOrFail(t, ex.Run(tf), "second run"); err != nil {
		t.Fatal(err)
	}
	if got := ran.Load(); got != n {
		t.Fatalf("second run ran %d of %d sources", got, n)
	}
}
