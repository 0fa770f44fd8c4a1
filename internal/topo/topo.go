// Package topo orders the vertices of a directed graph topologically
// (Kahn's algorithm), for the coordinator's planner and the function
// registry's check of dynamic subflows.
package topo

// Order returns the vertices 0..len(succ)-1 in a topological order of the
// edges v -> succ[v][i], sources first in index order, and whether every
// vertex is in it (false: the vertices left out lie on or after a cycle).
// Repeated edges are fine.
func Order(succ [][]int) ([]int, bool) {
	indeg := make([]int, len(succ))
	for _, ws := range succ {
		for _, w := range ws {
			indeg[w]++
		}
	}
	order := make([]int, 0, len(succ))
	for v, d := range indeg {
		if d == 0 {
			order = append(order, v)
		}
	}
	for i := 0; i < len(order); i++ {
		for _, w := range succ[order[i]] {
			if indeg[w]--; indeg[w] == 0 {
				order = append(order, w)
			}
		}
	}
	return order, len(order) == len(succ)
}
