package localexec

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestNoLostWakeupBurstInLoop is the shape, from Taskflow's
// unittests/test_work_stealing.cpp, that found the lost wake-up of issue 13:
// a condition loop whose body is a chain of 100 tasks followed by a fan-out
// of 1,024 tasks, each of which waits until three of them run at once, all
// joining a merge task before the condition. The burst is released inside
// the run by the worker that finished the chain, so a worker that was the
// domain's spinner while it was being pushed, and then took a task in its
// last re-check before parking, had to wake another (rule 3 of the essay in
// scheduler.go); it did not, a worker stayed parked, and with three workers
// the fan-out could never have three tasks running at once. With more
// workers than three the same lost wake-up leaves parallelism unused
// (and hangs when every awake worker is waiting).
//
// A hang fails the test after a deadline, naming the round and the stats;
// the tasks then stop waiting so that Close can return.
func TestNoLostWakeupBurstInLoop(t *testing.T) {
	for _, workers := range []int{3, 4, 8} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			burstInLoop(t, workers)
		})
	}
}

func burstInLoop(t *testing.T, workers int) {
	const (
		chainLen = 100
		fanOut   = 1024
		need     = 3 // tasks of the fan-out running at once
	)
	rounds := 50
	if testing.Short() {
		rounds = 10
	}
	ex := newEx(t, WithWorkers(workers))

	var (
		round   atomic.Int32 // rounds started
		running atomic.Int32 // fan-out tasks running now
		reached atomic.Bool  // need tasks ran at once in this round
		abort   atomic.Bool  // the test gave up: stop waiting
		ran     atomic.Int64 // fan-out tasks run
	)
	tf := NewTaskflow("burst-in-loop")
	init := tf.Emplace(func() {}).Name("init")
	first := tf.Emplace(func() {
		round.Add(1)
		reached.Store(false)
	}).Name("chain0")
	prev := first
	for i := 1; i < chainLen; i++ {
		c := tf.Emplace(func() {}).Name(fmt.Sprint("chain", i))
		prev.Precede(c)
		prev = c
	}
	merge := tf.Emplace(func() {}).Name("merge")
	for i := 0; i < fanOut; i++ {
		f := tf.Emplace(func() {
			if running.Add(1) >= need {
				reached.Store(true)
			}
			for !reached.Load() && !abort.Load() {
				runtime.Gosched()
			}
			running.Add(-1)
			ran.Add(1)
		})
		prev.Precede(f)
		f.Precede(merge)
	}
	n := 0
	cond := tf.EmplaceCondition(func() int {
		n++
		if n < rounds {
			return 0
		}
		return 1
	}).Name("cond")
	done := tf.Emplace(func() {}).Name("done")
	init.Precede(first)
	merge.Precede(cond)
	cond.Precede(first, done)

	fut := ex.Run(tf)
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	select {
	case <-fut.Done():
	case <-deadline.C:
		msg := fmt.Sprintf("%d workers: round %d of %d hung with %d of the fan-out's tasks running and %d tasks queued: "+
			"a worker stayed parked while ready tasks waited (lost wake-up); stats %+v",
			workers, round.Load(), rounds, running.Load(), ex.queued(), ex.Stats().Domain("cpu"))
		abort.Store(true)
		_ = fut.Wait()
		t.Fatal(msg)
	}
	if err := fut.Wait(); err != nil {
		t.Fatal(err)
	}
	if got, want := ran.Load(), int64(rounds*fanOut); got != want {
		t.Fatalf("fan-out tasks ran %d times, want %d", got, want)
	}
}

// queued counts the CPU domain's visible tasks (a diagnostic for tests).
func (ex *Executor) queued() int64 {
	d := ex.domains[0]
	n := d.shared.n.Load()
	for _, w := range d.workers {
		n += w.q.size()
	}
	return n
}
