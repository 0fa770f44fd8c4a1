package gpu

// The graphs a Device keeps, on either backend (both Device types have mu,
// closed and graphs).

// track records a graph made on d for Close to release; Graph.Release
// forgets it (untrack), so a device keeps no graph its user has let go.
func (d *Device) track(g *Graph) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		if d.graphs == nil {
			d.graphs = map[*Graph]struct{}{}
		}
		d.graphs[g] = struct{}{}
	}
}

// Graphs is the number of graphs the device keeps: those made on it
// (NewGraph) and not released yet (Graph.Release, Device.Close).
func (d *Device) Graphs() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.graphs)
}

func (d *Device) untrack(g *Graph) {
	d.mu.Lock()
	delete(d.graphs, g)
	d.mu.Unlock()
}
