package bench

import (
	"fmt"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/htdg"
)

// workload is one flow to submit, with what the result files need to know
// about its shape.
type workload struct {
	name  string
	file  *spec.File
	text  []byte // the flow file (JSON)
	tasks int    // declared tasks
	// edges are the strong dependency edges by task name (from → to), for
	// counting cross-node edges from a run's placement.
	edges [][2]string
}

func newWorkload(name string, fl *spec.Flow, edges [][2]string) (*workload, error) {
	f, err := spec.NewFile(spec.Options{Funcs: funcs.Default()}, fl)
	if err != nil {
		return nil, fmt.Errorf("bench: workload %s: %w", name, err)
	}
	text, err := f.JSON()
	if err != nil {
		return nil, fmt.Errorf("bench: workload %s: %w", name, err)
	}
	return &workload{name: name, file: f, text: text, tasks: len(fl.Tasks), edges: edges}, nil
}

// htdgFlow is g as a flow: task "tI" is saxpy over htdg.Elems elements,
// domain cpu for a CPU task and domain gpu on device g.Device[I] mod gpus
// for a GPU task (on a node, a GPU graph of copy-in, kernel, copy-out),
// after its predecessors in g.
func htdgFlow(g *htdg.Graph, gpus int, timeout time.Duration) (*workload, error) {
	b := spec.NewFlow(fmt.Sprintf("htdg-%d", g.N)).Timeout(timeout)
	tasks := make([]*spec.TaskBuilder, g.N)
	var edges [][2]string
	for i := range g.N {
		t := b.Task(fmt.Sprintf("t%d", i)).Func(funcs.Saxpy).Arg("n", htdg.Elems).Arg("a", float64(htdg.Alpha))
		if g.GPU[i] {
			t.GPU(g.Device[i] % gpus)
		}
		for _, p := range g.Preds[i] {
			t.Succeed(tasks[p])
			edges = append(edges, [2]string{tasks[p].Name(), t.Name()})
		}
		tasks[i] = t
	}
	fl, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("bench: htdg flow: %w", err)
	}
	return newWorkload(fl.Name, fl, edges)
}

// loopFlow is the incremental-timing-style loop: a condition loop of iters
// iterations whose body is a seeded coin that sends each iteration down a
// CPU path (a fanout subflow of width small spin tasks) or a GPU path (a
// saxpy GPU graph), each path closed by an always-0 condition back to the
// loop test.
//
//	init → loop ─0→ branch ─0→ cpu ─→ cpuback ─0→ loop
//	         │               └1→ gpu ─→ gpuback ─0→ loop
//	         └1→ done
func loopFlow(iters, width, spinUS int, seed int64, timeout time.Duration) (*workload, error) {
	b := spec.NewFlow("loop").Timeout(timeout)
	init := b.Task("init").Func(funcs.Noop)
	loop := b.Condition("loop").Func(funcs.Loop).Arg("n", iters).Succeed(init)
	branch := b.Condition("branch").Func(funcs.Coin).Arg("p", 0.5).Arg("seed", seed)
	cpu := b.Subflow("cpu").Func(funcs.Fanout).Arg("n", width).Arg("us", spinUS)
	gpu := b.Task("gpu").Func(funcs.Saxpy).Arg("n", htdg.Elems).GPU(0)
	cpuBack := b.Condition("cpuback").Func(funcs.Coin).Arg("p", 1.0).Arg("seed", 0).Succeed(cpu)
	gpuBack := b.Condition("gpuback").Func(funcs.Coin).Arg("p", 1.0).Arg("seed", 0).Succeed(gpu)
	done := b.Task("done").Func(funcs.Noop)
	loop.Precede(branch, done)
	branch.Precede(cpu, gpu)
	cpuBack.Precede(loop)
	gpuBack.Precede(loop)
	fl, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("bench: loop flow: %w", err)
	}
	return newWorkload("loop", fl, nil)
}

// loopPaths is the path the loop flow's coin takes in each iteration
// (true: the GPU path), as coin draws it: activation i of task "branch".
func loopPaths(iters int, seed int64) []bool {
	gpu := make([]bool, iters)
	for i := range gpu {
		gpu[i] = funcs.CoinDraw(seed, "branch", uint64(i+1)) >= 0.5
	}
	return gpu
}

// unrolledFlow is the loop flow's work as a flat DAG: the same iterations,
// each the path the loop's coin takes there, in a chain.
func unrolledFlow(iters, width, spinUS int, seed int64, timeout time.Duration) (*workload, error) {
	b := spec.NewFlow("unrolled").Timeout(timeout)
	prev := b.Task("init").Func(funcs.Noop)
	var edges [][2]string
	for i, gpu := range loopPaths(iters, seed) {
		var t *spec.TaskBuilder
		if gpu {
			t = b.Task(fmt.Sprintf("gpu%d", i)).Func(funcs.Saxpy).Arg("n", htdg.Elems).GPU(0)
		} else {
			t = b.Subflow(fmt.Sprintf("cpu%d", i)).Func(funcs.Fanout).Arg("n", width).Arg("us", spinUS)
		}
		t.Succeed(prev)
		edges = append(edges, [2]string{prev.Name(), t.Name()})
		prev = t
	}
	b.Task("done").Func(funcs.Noop).Succeed(prev)
	fl, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("bench: unrolled flow: %w", err)
	}
	return newWorkload("unrolled", fl, edges)
}

// stencilFlow is Task Bench's stencil_1d pattern of spin tasks: steps rows
// of width tasks, task (s, i) after tasks (s-1, i-1…i+1) of the row before,
// each spinning grainUS microseconds.
func stencilFlow(width, steps, grainUS int, timeout time.Duration) (*workload, error) {
	b := spec.NewFlow(fmt.Sprintf("stencil-%dus", grainUS)).Timeout(timeout)
	prev := make([]*spec.TaskBuilder, width)
	var edges [][2]string
	for s := range steps {
		row := make([]*spec.TaskBuilder, width)
		for i := range width {
			t := b.Task(fmt.Sprintf("s%d_%d", s, i)).Func(funcs.Spin).Arg("us", grainUS)
			if s > 0 {
				for j := max(0, i-1); j <= min(width-1, i+1); j++ {
					t.Succeed(prev[j])
					edges = append(edges, [2]string{prev[j].Name(), t.Name()})
				}
			}
			row[i] = t
		}
		prev = row
	}
	fl, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("bench: stencil flow: %w", err)
	}
	return newWorkload(fl.Name, fl, edges)
}
