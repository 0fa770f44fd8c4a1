package localexec

import "testing"

// TestEmplaceCarried: a carried task sees the word the carried task its
// worker ran just before left, when it came straight from it (handed over
// inline, or popped next from the worker's own deque), and 0 after
// anything else: the run's start (the source is taken from the shared
// queue), a condition; a plain static task leaves it as it is.
func TestEmplaceCarried(t *testing.T) {
	ex := newEx(t, WithWorkers(1))
	seen := map[string]int64{}
	tf := NewTaskflow("carry")
	carried := func(name string, leave int64) Task {
		return tf.EmplaceCarried(func(c *int64) {
			seen[name] = *c
			*c = leave
		}).Name(name)
	}
	a := carried("a", 1)
	b := carried("b", 2) // after a alone: inline
	plain := tf.Emplace(func() {}).Name("plain")
	c := carried("c", 3) // after plain, which carries b's word across
	cond := tf.EmplaceCondition(func() int { return 0 }).Name("cond")
	d := carried("d", 4) // after cond
	e1 := carried("e1", 5)
	e2 := carried("e2", 6) // e1 and e2 after d: one inline, the other popped next
	a.Precede(b)
	b.Precede(plain)
	plain.Precede(c)
	c.Precede(cond)
	cond.Precede(d)
	d.Precede(e1, e2)
	for range 3 {
		clear(seen)
		if err := ex.Run(tf).Wait(); err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{"a": 0, "b": 1, "c": 2, "d": 0}
		for k, v := range want {
			if seen[k] != v {
				t.Fatalf("%s saw %d, want %d (all: %v)", k, seen[k], v, seen)
			}
		}
		// one of e1, e2 ran after d (saw 4), the other straight after it
		if !(seen["e1"] == 4 && seen["e2"] == 5) && !(seen["e2"] == 4 && seen["e1"] == 6) {
			t.Fatalf("e1 saw %d, e2 saw %d: want 4 and 5, or 6 and 4", seen["e1"], seen["e2"])
		}
	}
}
