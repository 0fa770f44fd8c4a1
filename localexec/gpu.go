package localexec

import (
	"fmt"

	"github.com/hetflow/hetflow/gpu"
)

// runGPU runs a GPU task on w, a GPU worker of the task's device: the first
// run builds the task's GPU graph with the user's function; every run
// launches it (the gpu package instantiates once and replays).
func (w *worker) runGPU(n *node) (err error) {
	x := n.ext
	if w.info.BindErr != nil {
		return &TaskError{Task: n.taskName(), Err: fmt.Errorf("binding device %d: %w", w.info.Device, w.info.BindErr)}
	}
	dev := w.ex.devices[w.dom.index-1]
	if x.gpuGraph == nil || x.gpuGraph.Device() != dev {
		g := gpu.NewGraph(dev)
		if p := callGPUBuild(n, x.gpuFn, g); p != nil {
			return p
		}
		x.gpuGraph = g
	}
	if err := x.gpuGraph.LaunchFrom(w.host); err != nil {
		return &TaskError{Task: n.taskName(), Err: err}
	}
	return nil
}

func callGPUBuild(n *node, fn func(*gpu.Graph), g *gpu.Graph) (p *PanicError) {
	defer func() {
		if r := recover(); r != nil {
			p = newPanic(n, r)
		}
	}()
	if fn != nil {
		fn(g)
	}
	return nil
}
