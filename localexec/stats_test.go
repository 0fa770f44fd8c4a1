package localexec

import (
	"testing"
)

func chain(tf *Taskflow, n int) {
	prev := tf.Emplace(func() {})
	for i := 1; i < n; i++ {
		t := tf.Emplace(func() {})
		prev.Precede(t)
		prev = t
	}
}

func wavefront(tf *Taskflow, n int, fn func()) {
	grid := make([]Task, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			grid[i*n+j] = tf.Emplace(fn)
			if i > 0 {
				grid[(i-1)*n+j].Precede(grid[i*n+j])
			}
			if j > 0 {
				grid[i*n+j-1].Precede(grid[i*n+j])
			}
		}
	}
}

// The bound half of the invariant: on a chain, the spare workers give up
// after one bounded spin and sleep, so failed steals per task are ~0.
func TestWastedStealsOnChainAreBounded(t *testing.T) {
	ex := newEx(t, WithWorkers(4))
	tf := NewTaskflow("chain")
	const n = 100000
	chain(tf, n)
	before := ex.Stats().Domain("cpu")
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	after := ex.Stats().Domain("cpu")
	exec := after.Executed - before.Executed
	failed := after.FailedSteals - before.FailedSteals
	if exec != n {
		t.Fatalf("executed %d", exec)
	}
	perTask := float64(failed) / float64(exec)
	t.Logf("chain: %d tasks, %d failed steals (%.5f/task), %d parks, %d wake-ups", exec, failed, perTask, after.Parks-before.Parks, after.Wakeups-before.Wakeups)
	// one bounded spin per worker per wake-up; a chain pushes nothing, so
	// there are only the wake-ups of the run's start
	limit := uint64(4 * 2 * (4 + 1) * 4)
	if failed > limit {
		t.Fatalf("chain of %d tasks wasted %d steals, bound %d", n, failed, limit)
	}
}

func TestWastedStealsOnWavefrontAreBounded(t *testing.T) {
	ex := newEx(t, WithWorkers(4))
	tf := NewTaskflow("wave")
	wavefront(tf, 200, func() {})
	before := ex.Stats().Domain("cpu")
	if err := ex.Run(tf).Wait(); err != nil {
		t.Fatal(err)
	}
	after := ex.Stats().Domain("cpu")
	exec := after.Executed - before.Executed
	failed := after.FailedSteals - before.FailedSteals
	wakes := after.Wakeups - before.Wakeups
	parks := after.Parks - before.Parks
	t.Logf("wavefront: %d tasks, %d failed steals (%.3f/task), %d parks, %d wake-ups", exec, failed, float64(failed)/float64(exec), parks, wakes)
	// Each spin episode begins at a wake-up or when a worker runs dry after
	// executing something; each wastes at most maxSteals attempts, and each
	// re-check at most one per queue.
	maxSteals := uint64(2 * (4 + 1))
	bound := maxSteals*(wakes+parks+4) + 5*(parks+wakes+4)
	if failed > bound {
		t.Fatalf("failed steals %d exceed the bound %d", failed, bound)
	}
	if float64(failed)/float64(exec) > 2 {
		t.Fatalf("%.2f failed steals per task", float64(failed)/float64(exec))
	}
}
