package localexec

import (
	"sync/atomic"
	"testing"
	"time"
)

// A worker co-running (Runtime.Corun) that steals a carried task hands it
// 0, as EmplaceCarried documents after a steal, not the word an earlier
// carried task on that worker left (42). Found by the nodewrap review: it
// failed in every try before step reset the word.
func TestCorunStealResetsCarried(t *testing.T) {
	ex := newEx(t, WithWorkers(2))
	bad := 0
	for it := 0; it < 100 && bad == 0; it++ {
		var zSaw atomic.Int64
		var zRan atomic.Bool
		inner := NewTaskflow("inner")
		x := inner.EmplaceCarried(func(c *int64) { time.Sleep(2 * time.Millisecond); *c = 42 }).Name("x")
		lng := inner.EmplaceCarried(func(c *int64) { *c = 0 }).Name("lng")
		z := inner.EmplaceCarried(func(c *int64) { zSaw.Store(*c); zRan.Store(true); *c = 0 }).Name("z")
		q := inner.EmplaceCarried(func(c *int64) {
			*c = 0
			for d := time.Now().Add(20 * time.Millisecond); !zRan.Load() && time.Now().Before(d); {
			}
		}).Name("q")
		_ = x
		lng.Precede(z, q)
		tf := NewTaskflow("outer")
		tf.EmplaceRuntime(func(rt *Runtime) {
			if err := rt.Corun(inner); err != nil {
				t.Error(err)
			}
		})
		if err := ex.Run(tf).Wait(); err != nil {
			t.Fatal(err)
		}
		if zSaw.Load() != 0 {
			bad++
			t.Errorf("iteration %d: z saw %d, a word left by x on the worker that stole z while co-running", it, zSaw.Load())
		}
	}
}
