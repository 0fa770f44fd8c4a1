package localexec

import (
	"sync"
	"sync/atomic"
	"testing"
)

// A task with two strong predecessors and a condition predecessor runs
// once per pick of the condition and once per round of its strong
// predecessors, whatever their order (docs/design.md, The local runtime:
// the pick runs it at once, whatever its join counter, and leaves the
// counter alone). Issue 14: the
// counter started again when the task completed, so a strong predecessor
// that completed before the pick was forgotten and the task ran once.
func TestConditionPickLeavesTheJoinCounterAlone(t *testing.T) {
	ex := newEx(t, WithWorkers(4))
	for _, order := range []string{"a, then the pick, then b", "the pick, then a and b"} {
		var runs atomic.Int32
		var ran chan struct{} // closed by t's first run
		var once *sync.Once
		tf := NewTaskflow("mixed")
		tt := tf.Emplace(func() { runs.Add(1); once.Do(func() { close(ran) }) }).Name("t")
		wait := func() { <-ran }
		b := tf.Emplace(wait).Name("b") // completes after the pick has run t
		c := tf.EmplaceCondition(func() int { return 0 }).Name("c")
		var a Task
		if order == "a, then the pick, then b" {
			a = tf.Emplace(func() {}).Name("a")
			a.Precede(c) // a's completion counts into t's counter before c picks t
		} else {
			a = tf.Emplace(wait).Name("a")
		}
		a.Precede(tt)
		b.Precede(tt)
		c.Precede(tt)
		for rerun := range 3 { // the counters start each run afresh
			runs.Store(0)
			ran, once = make(chan struct{}), &sync.Once{}
			if err := ex.Run(tf).Wait(); err != nil {
				t.Fatal(err)
			}
			if got := runs.Load(); got != 2 {
				t.Fatalf("%s (run %d): t ran %d times, want 2 (the pick, and the round of a and b)", order, rerun, got)
			}
		}
	}
}
