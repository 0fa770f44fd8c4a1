package partition

import (
	"math"
	"math/rand/v2"
)

// bis is one two-way problem: a graph whose pin[v] is -1 (either side), 0 or
// 1, with per-side, per-resource targets and maxima.
type bis struct {
	maxw   [2][2]int64
	total  [2]int64
	target [2][2]float64
	rng    *rand.Rand
	runs   int // independent multilevel bisections, best kept
	tries  int // grown bisections of the coarsest graph, best kept
	passes int
}

func (b *bis) viol(load *[2][2]int64) float64 {
	var v float64
	for s := 0; s < 2; s++ {
		for c := 0; c < 2; c++ {
			if d := load[s][c] - b.maxw[s][c]; d > 0 {
				v += float64(d) / float64(max(b.total[c], 1))
			}
		}
	}
	return v
}

func loads2(g *graph, where []int32) (load [2][2]int64) {
	for v := 0; v < g.n; v++ {
		s := where[v]
		load[s][0] += g.cw[v]
		load[s][1] += g.gw[v]
	}
	return
}

func cutOf(g *graph, where []int32) int64 {
	var cut int64
	for v := 0; v < g.n; v++ {
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			if where[g.adj[e]] != where[v] {
				cut += g.ew[e]
			}
		}
	}
	return cut / 2
}

// growTries is how many bisections of the coarsest graph mlBisect1 grows.
const growTries = 4

// mlBisect splits g in two, the best of b.runs multilevel bisections. One
// run's outcome depends much on which way the coarsest graph happened to be
// cut (across a region's short or its long side); a few runs on the small
// graphs it is used on remove most of that variance.
func mlBisect(g *graph, b *bis) []int32 {
	var best []int32
	var bestOver, bestCut int64
	for t := 0; t < max(b.runs, 1); t++ {
		gc := *g
		w := mlBisect1(&gc, b)
		load := loads2(g, w)
		var over int64
		for s := 0; s < 2; s++ {
			for c := 0; c < 2; c++ {
				over += max(0, load[s][c]-b.maxw[s][c])
			}
		}
		cut := cutOf(g, w)
		if best == nil || over < bestOver || over == bestOver && cut < bestCut {
			best, bestOver, bestCut = w, over, cut
		}
	}
	return best
}

// mlBisect1 is one multilevel bisection: coarsen, grow b.tries bisections of
// the coarsest graph keeping the best after refinement, then refine at every
// finer level (the k-way refinement with k = 2).
func mlBisect1(g *graph, b *bis) []int32 {
	ps := newParts([]uint8{3, 3})
	levels := coarsen(g, ps, 80, b.rng)
	cg := levels[len(levels)-1]
	var best []int32
	bestViol, bestCut := math.Inf(1), int64(math.MaxInt64)
	pr2 := b.asProblem()
	refine := func(g *graph, w []int32) { newKref(pr2, g, w, nil).improve() }
	for t := 0; t < b.tries; t++ {
		w := gggp(cg, b)
		refine(cg, w)
		load := loads2(cg, w)
		vi, cut := b.viol(&load), cutOf(cg, w)
		if vi < bestViol-1e-12 || (vi <= bestViol+1e-12 && cut < bestCut) {
			best, bestViol, bestCut = w, vi, cut
		}
	}
	for l := len(levels) - 2; l >= 0; l-- {
		best = project(levels[l], best)
		refine(levels[l], best)
	}
	return best
}

// gggp grows side 0 from a random vertex, always taking the side-1 vertex
// whose move gains most, until side 0 holds its share of the weight.
func gggp(g *graph, b *bis) []int32 {
	n := g.n
	where := make([]int32, n)
	var norm [2]float64
	for c := 0; c < 2; c++ {
		if b.total[c] > 0 {
			norm[c] = 1 / float64(b.total[c])
		}
	}
	goal := b.target[0][0]*norm[0] + b.target[0][1]*norm[1]
	have := 0.0
	var load [2][2]int64
	gain := make([]int64, n) // weight to side 0 minus weight to side 1, for side-1 vertices
	for v := int32(0); v < int32(n); v++ {
		if g.pin[v] == 0 {
			where[v] = 0
		} else {
			where[v] = 1
		}
	}
	h := newIHeap(n)
	for v := int32(0); v < int32(n); v++ {
		s := where[v]
		load[s][0] += g.cw[v]
		load[s][1] += g.gw[v]
		if s == 0 {
			have += float64(g.cw[v])*norm[0] + float64(g.gw[v])*norm[1]
		}
		touches0 := false
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			if where[g.adj[e]] == 0 {
				gain[v] += g.ew[e]
				touches0 = true
			} else {
				gain[v] -= g.ew[e]
			}
		}
		if s == 1 && g.pin[v] < 0 && touches0 {
			h.push(v, gain[v])
		}
	}
	perm := b.rng.Perm(n)
	next := 0
	for have < goal {
		var v int32 = -1
		if h.len() > 0 {
			v, _ = h.pop()
		} else {
			for next < n {
				u := int32(perm[next])
				next++
				if where[u] == 1 && g.pin[u] < 0 {
					v = u
					break
				}
			}
			if v < 0 {
				break
			}
		}
		if load[0][0]+g.cw[v] > b.maxw[0][0] && g.cw[v] > 0 ||
			load[0][1]+g.gw[v] > b.maxw[0][1] && g.gw[v] > 0 {
			continue // would overfill side 0; leave it on side 1
		}
		where[v] = 0
		load[0][0] += g.cw[v]
		load[0][1] += g.gw[v]
		load[1][0] -= g.cw[v]
		load[1][1] -= g.gw[v]
		have += float64(g.cw[v])*norm[0] + float64(g.gw[v])*norm[1]
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			u := g.adj[e]
			if where[u] != 1 || g.pin[u] >= 0 {
				continue
			}
			gain[u] += 2 * g.ew[e]
			h.set(u, gain[u])
		}
	}
	return where
}

// induced returns the subgraph of g on the vertices with side[v] == s, and
// for each of its vertices the matching vertex of g.
func induced(g *graph, side []int32, s int32) (*graph, []int32) {
	idx := make([]int32, g.n)
	var orig []int32
	for v := 0; v < g.n; v++ {
		if side[v] == s {
			idx[v] = int32(len(orig))
			orig = append(orig, int32(v))
		} else {
			idx[v] = -1
		}
	}
	n := len(orig)
	sg := &graph{
		n: n, xadj: make([]int, n+1),
		cw: make([]int64, n), gw: make([]int64, n), pin: make([]int32, n), need: make([]uint8, n),
	}
	m := 0
	for _, v := range orig {
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			if side[g.adj[e]] == s {
				m++
			}
		}
	}
	sg.adj = make([]int32, 0, m)
	sg.ew = make([]int64, 0, m)
	for i, v := range orig {
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			if u := g.adj[e]; side[u] == s {
				sg.adj = append(sg.adj, idx[u])
				sg.ew = append(sg.ew, g.ew[e])
			}
		}
		sg.xadj[i+1] = len(sg.adj)
		sg.cw[i], sg.gw[i], sg.pin[i], sg.need[i] = g.cw[v], g.gw[v], g.pin[v], g.need[v]
	}
	return sg, orig
}

// asProblem expresses the two-way problem as a k-way one with k = 2, for the
// k-way refinement.
func (b *bis) asProblem() *problem {
	pr := &problem{k: 2, ps: newParts([]uint8{3, 3}), rng: b.rng, passes: b.passes, tries: b.tries,
		total: b.total, target: make([]float64, 4), maxw: make([]int64, 4)}
	for s := 0; s < 2; s++ {
		for c := 0; c < 2; c++ {
			pr.target[2*s+c] = b.target[s][c]
			pr.maxw[2*s+c] = b.maxw[s][c]
		}
	}
	return pr
}
