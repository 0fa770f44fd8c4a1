package localexec

// Benchmarks of the executor against two plain-Go baselines measured in the
// same run (see BENCHMARKS.md):
//
//   - chan: a goroutine per task that waits on a channel per predecessor
//     (what a newcomer to Go writes);
//   - gofast: the best plain Go does — a goroutine started per ready task,
//     atomic join counters, one ready successor run inline on the finishing
//     goroutine.
//
// Each shape is built once; an iteration runs it once; ns/task is the
// iteration time over the number of tasks.

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// shape is an abstract DAG: succs[i] are the successors of task i.
type shape struct {
	name  string
	succs [][]int32
}

func (s *shape) n() int { return len(s.succs) }

func chainShape(n int) *shape {
	s := &shape{name: "chain", succs: make([][]int32, n)}
	for i := 0; i < n-1; i++ {
		s.succs[i] = []int32{int32(i + 1)}
	}
	return s
}

func independentShape(n int) *shape {
	return &shape{name: "independent", succs: make([][]int32, n)}
}

func treeShape(depth int) *shape {
	n := 1<<depth - 1
	s := &shape{name: "tree", succs: make([][]int32, n)}
	for i := 0; i < n; i++ {
		if l := 2*i + 1; l < n {
			s.succs[i] = []int32{int32(l), int32(l + 1)}
		}
	}
	return s
}

func wavefrontShape(k int) *shape {
	s := &shape{name: "wavefront", succs: make([][]int32, k*k)}
	for i := 0; i < k; i++ {
		for j := 0; j < k; j++ {
			id := i*k + j
			if i+1 < k {
				s.succs[id] = append(s.succs[id], int32((i+1)*k+j))
			}
			if j+1 < k {
				s.succs[id] = append(s.succs[id], int32(i*k+j+1))
			}
		}
	}
	return s
}

func (s *shape) taskflow() *Taskflow {
	tf := NewTaskflow(s.name)
	ts := make([]Task, s.n())
	for i := range ts {
		ts[i] = tf.Emplace(func() {})
	}
	for i, ss := range s.succs {
		for _, j := range ss {
			ts[i].Precede(ts[j])
		}
	}
	return tf
}

func (s *shape) preds() [][]int32 {
	p := make([][]int32, s.n())
	for i, ss := range s.succs {
		for _, j := range ss {
			p[j] = append(p[j], int32(i))
		}
	}
	return p
}

// runChan is the first baseline: one goroutine per task, a channel per task
// closed when it finishes, each goroutine waiting on its predecessors'.
func (s *shape) runChan(preds [][]int32) {
	chans := make([]chan struct{}, s.n())
	for i := range chans {
		chans[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	wg.Add(s.n())
	for i := range chans {
		go func(i int) {
			for _, p := range preds[i] {
				<-chans[p]
			}
			close(chans[i])
			wg.Done()
		}(i)
	}
	wg.Wait()
}

// runFast is the second baseline: atomic join counters, a goroutine per
// ready task beyond the one that runs inline: the first ready successor, or
// with last the last one (the executor's choice, which walks a row-major
// grid along its rows). Both are measured; the better is the baseline.
func (s *shape) runFast(preds [][]int32, last bool) {
	join := make([]atomic.Int32, s.n())
	for i := range join {
		join[i].Store(int32(len(preds[i])))
	}
	var wg sync.WaitGroup
	var run func(i int32)
	run = func(i int32) {
		for {
			// the task's (empty) work
			next := int32(-1)
			for _, j := range s.succs[i] {
				if join[j].Add(-1) == 0 {
					spawn := j
					if next < 0 || last {
						next, spawn = j, next
					}
					if spawn >= 0 {
						wg.Add(1)
						go func(j int32) { run(j); wg.Done() }(spawn)
					}
				}
			}
			if next < 0 {
				return
			}
			i = next
		}
	}
	for i := range preds {
		if len(preds[i]) == 0 {
			wg.Add(1)
			go func(i int32) { run(i); wg.Done() }(int32(i))
		}
	}
	wg.Wait()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchShape(b *testing.B, s *shape) {
	n := s.n()
	report := func(b *testing.B, wall time.Duration, cpu time.Duration) {
		b.ReportMetric(float64(wall.Nanoseconds())/float64(b.N)/float64(n), "ns/task")
		b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cpu/wall")
	}
	b.Run("hetflow", func(b *testing.B) {
		ex := NewExecutor(WithWorkers(2), WithGPUs(0))
		defer ex.Close()
		tf := s.taskflow()
		_ = ex.Run(tf).Wait() // warm: deques grown, pages touched
		st0 := ex.Stats().Domain("cpu")
		b.ReportAllocs()
		b.ResetTimer()
		c0, t0 := cpuTime(), time.Now()
		for i := 0; i < b.N; i++ {
			if err := ex.Run(tf).Wait(); err != nil {
				b.Fatal(err)
			}
		}
		wall, cpu := time.Since(t0), cpuTime()-c0
		b.StopTimer()
		report(b, wall, cpu)
		st := ex.Stats().Domain("cpu")
		b.ReportMetric(float64(st.FailedSteals-st0.FailedSteals)/float64(b.N)/float64(n), "failedsteals/task")
	})
	preds := s.preds()
	for _, last := range []bool{false, true} {
		name := "gofast"
		if last {
			name = "gofastlast"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			c0, t0 := cpuTime(), time.Now()
			for i := 0; i < b.N; i++ {
				s.runFast(preds, last)
			}
			report(b, time.Since(t0), cpuTime()-c0)
		})
	}
	b.Run("chan", func(b *testing.B) {
		b.ReportAllocs()
		c0, t0 := cpuTime(), time.Now()
		for i := 0; i < b.N; i++ {
			s.runChan(preds)
		}
		report(b, time.Since(t0), cpuTime()-c0)
	})
}

func BenchmarkChain1M(b *testing.B)       { benchShape(b, chainShape(1_000_000)) }
func BenchmarkIndependent1M(b *testing.B) { benchShape(b, independentShape(1_000_000)) }
func BenchmarkTree20(b *testing.B)        { benchShape(b, treeShape(20)) }
func BenchmarkWavefront1000(b *testing.B) { benchShape(b, wavefrontShape(1000)) }

// BenchmarkChainWorkers reports CPU seconds over wall seconds for a chain
// with 2 and 8 workers: the target is ≤ 1.1 (one core for one task at a
// time).
func BenchmarkChainWorkers(b *testing.B) {
	s := chainShape(1_000_000)
	for _, w := range []int{2, 8} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			ex := NewExecutor(WithWorkers(w), WithGPUs(0))
			defer ex.Close()
			tf := s.taskflow()
			_ = ex.Run(tf).Wait()
			st0 := ex.Stats().Domain("cpu")
			b.ResetTimer()
			c0, t0 := cpuTime(), time.Now()
			for i := 0; i < b.N; i++ {
				_ = ex.Run(tf).Wait()
			}
			wall, cpu := time.Since(t0), cpuTime()-c0
			st := ex.Stats().Domain("cpu")
			b.ReportMetric(float64(wall.Nanoseconds())/float64(b.N)/float64(s.n()), "ns/task")
			b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cpu/wall")
			b.ReportMetric(float64(st.FailedSteals-st0.FailedSteals)/float64(b.N)/float64(s.n()), "failedsteals/task")
		})
	}
}

// BenchmarkCreateTask: ns and bytes to emplace one static task.
func BenchmarkCreateTask(b *testing.B) {
	b.ReportAllocs()
	fn := func() {}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	tf := NewTaskflow("create")
	for i := 0; i < b.N; i++ {
		tf.Emplace(fn)
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N), "bytes/task")
	runtime.KeepAlive(tf)
}

// BenchmarkAddEdge: ns to add one edge (tasks built beforehand).
func BenchmarkAddEdge(b *testing.B) {
	tf := NewTaskflow("edges")
	const k = 1024
	ts := make([]Task, k)
	for i := range ts {
		ts[i] = tf.Emplace(func() {})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ts[i%k].Precede(ts[(i*7+1)%k])
	}
}

// BenchmarkAsync: ns per Executor.Async call, 1M calls then WaitForAll,
// against a goroutine per call.
func BenchmarkAsync(b *testing.B) {
	const calls = 1_000_000
	b.Run("hetflow", func(b *testing.B) {
		ex := NewExecutor(WithWorkers(2), WithGPUs(0))
		defer ex.Close()
		fn := func() {}
		b.ReportAllocs()
		t0 := time.Now()
		for i := 0; i < b.N; i++ {
			for j := 0; j < calls; j++ {
				ex.Async(fn)
			}
			ex.WaitForAll()
		}
		b.ReportMetric(float64(time.Since(t0).Nanoseconds())/float64(b.N)/calls, "ns/task")
	})
	b.Run("goroutine", func(b *testing.B) {
		b.ReportAllocs()
		t0 := time.Now()
		for i := 0; i < b.N; i++ {
			var wg sync.WaitGroup
			wg.Add(calls)
			for j := 0; j < calls; j++ {
				go wg.Done()
			}
			wg.Wait()
		}
		b.ReportMetric(float64(time.Since(t0).Nanoseconds())/float64(b.N)/calls, "ns/task")
	})
}

// BenchmarkAddEdgeSparse: ns to add one edge where each task has two
// successors (a 1000x1000 wavefront's edges, tasks built beforehand): the
// fan-out of most graphs, where BenchmarkAddEdge gives 1,024 tasks ~1,000
// successors each and measures mostly the growth of long successor arrays.
func BenchmarkAddEdgeSparse(b *testing.B) {
	s := wavefrontShape(1000)
	edges := 0
	for _, ss := range s.succs {
		edges += len(ss)
	}
	b.ReportAllocs()
	var d time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		tf := NewTaskflow("edges")
		ts := make([]Task, s.n())
		for j := range ts {
			ts[j] = tf.Emplace(nil)
		}
		b.StartTimer()
		t0 := time.Now()
		for j, ss := range s.succs {
			for _, k := range ss {
				ts[j].Precede(ts[k])
			}
		}
		d += time.Since(t0)
	}
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N*edges), "ns/edge")
}

// BenchmarkSubflowFib: ns per spawned task of fib(22) built as nested
// subflows (the seed's dynamic-tasking example: 28,656 subflows, each
// spawning two children and a join task), on 2 workers.
func BenchmarkSubflowFib(b *testing.B) {
	const n = 22
	ex := NewExecutor(WithWorkers(2), WithGPUs(0))
	defer ex.Close()
	var res int
	tf := NewTaskflow("fib")
	tf.EmplaceSubflow(func(sf *Subflow) { fib(n, &res, sf) })
	_ = ex.Run(tf).Wait()
	// calls[k]: fib calls with an argument >= 2 made by fib(k); each
	// spawns 3 tasks
	calls := make([]int, n+1)
	for k := 2; k <= n; k++ {
		calls[k] = 1 + calls[k-1] + calls[k-2]
	}
	tasks := calls[n]
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; i++ {
		if err := ex.Run(tf).Wait(); err != nil || res != 17711 {
			b.Fatalf("fib(%d) = %d, %v", n, res, err)
		}
	}
	b.ReportMetric(float64(time.Since(t0).Nanoseconds())/float64(b.N*3*tasks), "ns/task")
}

// The rows of issue 17, side by side with C++ Taskflow (see
// docs/benchmarks/localexec.md): CPU time (user+sys of the whole process,
// the collector's workers included) beside wall time, per task, of building
// a 1M-task graph from task handles (as Taskflow's emplace and precede),
// of its first run on a fresh executor, and of its second run.

// buildShape emplaces s's tasks and edges as the C++ program does: task
// handles in a slice, edges from loops (not from s.succs, whose million
// slices the collector would scan as part of the build).
func buildShape(name string, n int) *Taskflow {
	tf := NewTaskflow(name)
	ts := make([]Task, n)
	for i := range ts {
		ts[i] = tf.Emplace(func() {})
	}
	switch name {
	case "chain":
		for i := 0; i+1 < n; i++ {
			ts[i].Precede(ts[i+1])
		}
	case "wavefront":
		k := 1
		for k*k < n {
			k++
		}
		for i := 0; i < k; i++ {
			for j := 0; j < k; j++ {
				if i+1 < k {
					ts[i*k+j].Precede(ts[(i+1)*k+j])
				}
				if j+1 < k {
					ts[i*k+j].Precede(ts[i*k+j+1])
				}
			}
		}
	}
	return tf
}

func reportCPU(b *testing.B, wall, cpu time.Duration, n int) {
	b.ReportMetric(float64(wall.Nanoseconds())/float64(b.N)/float64(n), "ns/task")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(n), "cpu-ns/task")
}

func benchPhases(b *testing.B, name string, n int) {
	b.Run("build", func(b *testing.B) {
		var wall, cpu time.Duration
		for i := 0; i < b.N; i++ {
			runtime.GC() // the last round's graph is garbage: not this round's cost
			c0, t0 := cpuTime(), time.Now()
			tf := buildShape(name, n)
			wall, cpu = wall+time.Since(t0), cpu+cpuTime()-c0
			runtime.KeepAlive(tf)
		}
		reportCPU(b, wall, cpu, n)
	})
	for _, phase := range []string{"firstrun", "secondrun"} {
		b.Run(phase, func(b *testing.B) {
			var wall, cpu time.Duration
			for i := 0; i < b.N; i++ {
				ex := NewExecutor(WithWorkers(2), WithGPUs(0))
				tf := buildShape(name, n)
				runtime.GC()
				if phase == "secondrun" {
					_ = ex.Run(tf).Wait()
				}
				c0, t0 := cpuTime(), time.Now()
				if err := ex.Run(tf).Wait(); err != nil {
					b.Fatal(err)
				}
				wall, cpu = wall+time.Since(t0), cpu+cpuTime()-c0
				ex.Close()
			}
			reportCPU(b, wall, cpu, n)
		})
	}
}

func BenchmarkPhasesChain1M(b *testing.B)       { benchPhases(b, "chain", 1_000_000) }
func BenchmarkPhasesIndependent1M(b *testing.B) { benchPhases(b, "independent", 1_000_000) }
func BenchmarkPhasesWavefront1000(b *testing.B) { benchPhases(b, "wavefront", 1000*1000) }

// BenchmarkAsyncCPU: CPU and wall ns per call of 1M Async (or SilentAsync)
// calls then WaitForAll, on a fresh executor: Taskflow's silent_async row.
func BenchmarkAsyncCPU(b *testing.B) {
	const calls = 1_000_000
	for _, silent := range []bool{false, true} {
		name := "async"
		if silent {
			name = "silent"
		}
		b.Run(name, func(b *testing.B) {
			fn := func() {}
			var wall, cpu time.Duration
			for i := 0; i < b.N; i++ {
				ex := NewExecutor(WithWorkers(2), WithGPUs(0))
				runtime.GC()
				c0, t0 := cpuTime(), time.Now()
				for j := 0; j < calls; j++ {
					if silent {
						ex.SilentAsync(fn)
					} else {
						ex.Async(fn)
					}
				}
				ex.WaitForAll()
				wall, cpu = wall+time.Since(t0), cpu+cpuTime()-c0
				ex.Close()
			}
			reportCPU(b, wall, cpu, calls)
		})
	}
}
