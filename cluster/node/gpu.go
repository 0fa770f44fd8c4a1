package node

import (
	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/gpu"
)

// gpuJob is one GPU task of a run: the registry function's device work
// (funcs.GPUGraph). build adds it to the task's GPU graph (once, on a GPU
// worker of its device; every activation launches the graph again), output
// reads the result after a launch, on the hidden CPU task that follows, and
// free releases the device memory when the run ends.
type gpuJob struct{ w *funcs.GPUWork }

// gpuGraph is the device implementation of the function of a gpu-domain
// task, nil when it has none (the task then runs its registry body on a CPU
// worker).
func (n *Node) gpuGraph(fn string) funcs.GPUGraph {
	e, ok := n.reg.Lookup(fn)
	if !ok {
		return nil
	}
	return e.Graph
}

func (j *gpuJob) build(g *gpu.Graph) {
	if err := j.w.Build(g); err != nil {
		panic(err) // the executor fails the task with it
	}
}

func (j *gpuJob) output() []byte { return j.w.Output() }

func (j *gpuJob) free() {
	if j.w.Free != nil {
		j.w.Free()
	}
}
