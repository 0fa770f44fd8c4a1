package localexec

// WorkerInfo describes a worker to observers.
type WorkerInfo struct {
	ID      int    // executor-wide worker id, 0…NumWorkers-1
	Domain  string // "cpu", or "gpu0", "gpu1", … for the workers of a device
	Device  int    // the GPU device, or -1 for CPU workers
	BindErr error  // set when a GPU worker could not bind its device
}

// TaskInfo describes a task to observers.
type TaskInfo struct {
	Name string
	Kind string // "static", "condition", "subflow", "module", "runtime", "gpu", "async", …
}

// Observer sees every task start and end on every worker. Calls for one
// worker come from that worker's goroutine, in order; calls for different
// workers are concurrent. An observer that also has
// SetUp(workers []WorkerInfo) gets it once, when attached.
type Observer interface {
	TaskStart(w WorkerInfo, t TaskInfo)
	TaskEnd(w WorkerInfo, t TaskInfo)
}

func (w *worker) observe(obs []Observer, n *node, start bool) {
	ti := TaskInfo{Name: n.taskName(), Kind: n.kind.String()}
	for _, o := range obs {
		if start {
			o.TaskStart(w.info, ti)
		} else {
			o.TaskEnd(w.info, ti)
		}
	}
}
