package partition

import (
	"math"
	"math/rand/v2"
)

// problem is the k-way problem shared by every level.
type problem struct {
	k      int
	ps     *parts
	cnt    [4][]int32 // cnt[m][i]: parts < i whose mask covers m
	cap    [][2]int64 // capacity per part and resource
	tol    float64
	total  [2]int64
	target []float64 // 2k: target load of part p on resource c at [2p+c]
	maxw   []int64   // 2k: most load allowed
	rng    *rand.Rand
	passes int
	tries  int
}

func (pr *problem) eligible(g *graph, v int32, p int32) bool {
	if pin := g.pin[v]; pin >= 0 && pin != p {
		return false
	}
	need := g.need[v]
	return pr.ps.mask[p]&need == need
}

// eligibleIn reports whether v may go to some part in [lo, hi).
func (pr *problem) eligibleIn(g *graph, v int32, lo, hi int) bool {
	if pin := int(g.pin[v]); pin >= 0 {
		return pin >= lo && pin < hi
	}
	c := pr.cnt[g.need[v]]
	return c[hi]-c[lo] > 0
}

// maxLoad returns the most load allowed on a part with the given target.
func maxLoad(target, tol float64) int64 {
	m := int64(math.Floor(target*tol + 1e-9))
	if c := int64(math.Ceil(target - 1e-9)); m < c {
		m = c
	}
	return m
}

// initial partitions the coarsest graph by recursive bisection over part
// ranges, each bisection multilevel.
func (pr *problem) initial(g *graph) []int32 {
	where := make([]int32, g.n)
	ids := make([]int32, g.n)
	for i := range ids {
		ids[i] = int32(i)
	}
	// Each bisection may use three times its even share of the tolerance (so
	// the imbalances along a path of the recursion may compound to tol³): a
	// looser initial partition cuts less, and the k-way balancing that
	// follows brings every part within tol, at little cost in cut (measured
	// on random geometric graphs; see docs/benchmarks/partition.md).
	depth := math.Ceil(math.Log2(float64(pr.k)))
	tolB := math.Pow(pr.tol, 3/math.Max(depth, 1))
	bestCut, bestOver := int64(-1), int64(0)
	var best []int32
	// Repeat the whole recursive bisection while the coarsest graph is
	// small enough for it to be cheap; on large ones one run, each of its
	// bisections already the best of several, does as well (measured).
	tries := max(1, min(pr.tries, 16384/max(g.n, 1)))
	for t := 0; t < tries; t++ {
		pr.rb(g, ids, 0, pr.k, where, tolB)
		over := pr.overload(g, where)
		cut := cutOf(g, where)
		if best == nil || over < bestOver || over == bestOver && cut < bestCut {
			best = append(best[:0], where...)
			bestCut, bestOver = cut, over
		}
	}
	return best
}

// overload is the total weight above the maxima of an assignment.
func (pr *problem) overload(g *graph, where []int32) int64 {
	load := make([]int64, 2*pr.k)
	for v := 0; v < g.n; v++ {
		load[2*where[v]] += g.cw[v]
		load[2*where[v]+1] += g.gw[v]
	}
	var over int64
	for i, l := range load {
		over += max(0, l-pr.maxw[i])
	}
	return over
}

func (pr *problem) rb(g *graph, ids []int32, lo, hi int, where []int32, tolB float64) {
	if hi-lo == 1 || g.n == 0 {
		for _, id := range ids {
			where[id] = int32(lo)
		}
		return
	}
	mid := lo + (hi-lo)/2
	var capL, capR [2]int64
	for p := lo; p < hi; p++ {
		for c := 0; c < 2; c++ {
			if p < mid {
				capL[c] += pr.cap[p][c]
			} else {
				capR[c] += pr.cap[p][c]
			}
		}
	}
	b := &bis{rng: pr.rng, runs: pr.tries, tries: growTries, passes: pr.passes}
	b.total[0], b.total[1] = g.totals()
	for c := 0; c < 2; c++ {
		f := 0.5
		if s := capL[c] + capR[c]; s > 0 {
			f = float64(capL[c]) / float64(s)
		}
		b.target[0][c] = float64(b.total[c]) * f
		b.target[1][c] = float64(b.total[c]) - b.target[0][c]
		b.maxw[0][c] = maxLoad(b.target[0][c], tolB)
		b.maxw[1][c] = maxLoad(b.target[1][c], tolB)
	}
	bg := &graph{n: g.n, xadj: g.xadj, adj: g.adj, ew: g.ew, cw: g.cw, gw: g.gw,
		pin: make([]int32, g.n), need: make([]uint8, g.n)}
	for v := int32(0); v < int32(g.n); v++ {
		l, r := pr.eligibleIn(g, v, lo, mid), pr.eligibleIn(g, v, mid, hi)
		switch {
		case l && !r:
			bg.pin[v] = 0
		case r && !l:
			bg.pin[v] = 1
		default:
			bg.pin[v] = -1
		}
	}
	side := mlBisect(bg, b)
	for s, r := range [2][2]int{{lo, mid}, {mid, hi}} {
		sg, orig := induced(g, side, int32(s))
		sub := make([]int32, len(orig))
		for i, o := range orig {
			sub[i] = ids[o]
		}
		pr.rb(sg, sub, r[0], r[1], where, tolB)
	}
}

// kref holds the state of greedy k-way refinement on one level.
type kref struct {
	pr     *problem
	g      *graph
	where  []int32
	load   []int64 // 2k
	id, ed []int64
	bnd    []int32
	bpos   []int32
	locked []bool
	conn   []int64
	seen   []int32 // per part: stamp of the last vertex that touched it
	stamp  int32
	parts  []int32
	order  []int32
	heap   *iheap
	lock   []int32 // per vertex: the fm pass that moved it
	pass   int32
	slack  [2]int64 // how far fm may overfill a part during a pass
}

func newKref(pr *problem, g *graph, where []int32, locked []bool) *kref {
	r := &kref{pr: pr, g: g, where: where, locked: locked,
		load: make([]int64, 2*pr.k), id: make([]int64, g.n), ed: make([]int64, g.n),
		bpos: make([]int32, g.n), conn: make([]int64, pr.k), seen: make([]int32, pr.k)}
	for p := range r.seen {
		r.seen[p] = -1
	}
	for v := 0; v < g.n; v++ {
		p := where[v]
		r.load[2*p] += g.cw[v]
		r.load[2*p+1] += g.gw[v]
		r.slack[0] = max(r.slack[0], g.cw[v])
		r.slack[1] = max(r.slack[1], g.gw[v])
		var i, x int64
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			if where[g.adj[e]] == p {
				i += g.ew[e]
			} else {
				x += g.ew[e]
			}
		}
		r.id[v], r.ed[v] = i, x
		r.bpos[v] = -1
		if x > 0 {
			r.bndAdd(int32(v))
		}
	}
	// The slack is needed only where the tolerance leaves less room than a
	// vertex weighs.
	for c := 0; c < 2; c++ {
		room := int64(math.MaxInt64)
		for p := 0; p < pr.k; p++ {
			if t := pr.target[2*p+c]; t > 0 {
				room = min(room, pr.maxw[2*p+c]-int64(math.Ceil(t)))
			}
		}
		if room >= r.slack[c] {
			r.slack[c] = 0
		}
	}
	return r
}

func (r *kref) movable(v int32) bool {
	return r.g.pin[v] < 0 && (r.locked == nil || !r.locked[v])
}

func (r *kref) bndAdd(v int32) {
	r.bpos[v] = int32(len(r.bnd))
	r.bnd = append(r.bnd, v)
}

func (r *kref) bndDel(v int32) {
	i := r.bpos[v]
	last := r.bnd[len(r.bnd)-1]
	r.bnd[i] = last
	r.bpos[last] = i
	r.bnd = r.bnd[:len(r.bnd)-1]
	r.bpos[v] = -1
}

// gather fills conn with v's edge weight to each adjacent part and parts with
// those parts (v's own part included when adjacent).
func (r *kref) gather(v int32) {
	g := r.g
	r.stamp++
	if r.stamp == math.MaxInt32 {
		for p := range r.seen {
			r.seen[p] = -1
		}
		r.stamp = 0
	}
	r.parts = r.parts[:0]
	for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
		p := r.where[g.adj[e]]
		if r.seen[p] != r.stamp {
			r.seen[p] = r.stamp
			r.conn[p] = 0
			r.parts = append(r.parts, p)
		}
		r.conn[p] += g.ew[e]
	}
}

func (r *kref) connTo(p int32) int64 {
	if r.seen[p] == r.stamp {
		return r.conn[p]
	}
	return 0
}

func (r *kref) fits(v int32, p int32) bool {
	cw, gw := r.g.cw[v], r.g.gw[v]
	return (cw == 0 || r.load[2*p]+cw <= r.pr.maxw[2*p]) &&
		(gw == 0 || r.load[2*p+1]+gw <= r.pr.maxw[2*p+1])
}

// rel is part p's load relative to its target, the larger of the resources.
func (r *kref) rel(p int32, dc, dg int64) float64 {
	x := 0.0
	if t := r.pr.target[2*p]; t > 0 {
		x = float64(r.load[2*p]+dc) / t
	}
	if t := r.pr.target[2*p+1]; t > 0 {
		x = max(x, float64(r.load[2*p+1]+dg)/t)
	}
	return x
}

func (r *kref) overloaded(p int32) bool {
	return r.load[2*p] > r.pr.maxw[2*p] || r.load[2*p+1] > r.pr.maxw[2*p+1]
}

func (r *kref) anyOverloaded() bool {
	for p := int32(0); p < int32(r.pr.k); p++ {
		if r.overloaded(p) {
			return true
		}
	}
	return false
}

func (r *kref) move(v int32, to int32) {
	g := r.g
	from := r.where[v]
	r.load[2*from] -= g.cw[v]
	r.load[2*from+1] -= g.gw[v]
	r.load[2*to] += g.cw[v]
	r.load[2*to+1] += g.gw[v]
	r.where[v] = to
	var i, x int64
	for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
		u := g.adj[e]
		w := g.ew[e]
		switch r.where[u] {
		case to:
			i += w
			r.id[u] += w
			r.ed[u] -= w
		case from:
			x += w
			r.id[u] -= w
			r.ed[u] += w
		default:
			x += w
			continue
		}
		if r.ed[u] > 0 && r.bpos[u] < 0 {
			r.bndAdd(u)
		} else if r.ed[u] == 0 && r.bpos[u] >= 0 {
			r.bndDel(u)
		}
	}
	r.id[v], r.ed[v] = i, x
	if x > 0 && r.bpos[v] < 0 {
		r.bndAdd(v)
	} else if x == 0 && r.bpos[v] >= 0 {
		r.bndDel(v)
	}
}

// refine runs greedy boundary passes: each boundary vertex, in random order,
// moves to the adjacent part that gains most in cut, if that part has room;
// a move that gains nothing is taken when it improves the balance.
func (r *kref) refine() {
	g := r.g
	for pass := 0; pass < r.pr.passes; pass++ {
		r.order = append(r.order[:0], r.bnd...)
		r.pr.rng.Shuffle(len(r.order), func(i, j int) { r.order[i], r.order[j] = r.order[j], r.order[i] })
		moved := 0
		for _, v := range r.order {
			if r.ed[v] == 0 || !r.movable(v) {
				continue
			}
			from := r.where[v]
			r.gather(v)
			own := r.connTo(from)
			best := int32(-1)
			var bestGain int64
			bestRel := 0.0
			for _, p := range r.parts {
				if p == from || !r.pr.eligible(g, v, p) || !r.fits(v, p) {
					continue
				}
				gain := r.conn[p] - own
				if best >= 0 && gain < bestGain {
					continue
				}
				rel := r.rel(p, g.cw[v], g.gw[v])
				if best < 0 || gain > bestGain || rel < bestRel {
					best, bestGain, bestRel = p, gain, rel
				}
			}
			if best < 0 {
				continue
			}
			if bestGain > 0 || bestGain == 0 && bestRel < r.rel(from, 0, 0) {
				r.move(v, best)
				moved++
			}
		}
		if moved == 0 {
			break
		}
	}
}

// balance moves vertices off overloaded parts, least cut increase first, to
// the adjacent part with room that they are most connected to, or else to the
// eligible part with the most room.
func (r *kref) balance() {
	if !r.anyOverloaded() {
		return
	}
	g := r.g
	pr := r.pr
	h := newIHeap(g.n)
	for v := int32(0); v < int32(g.n); v++ {
		p := r.where[v]
		if !r.movable(v) || !r.overloaded(p) {
			continue
		}
		if (g.cw[v] == 0 || r.load[2*p] <= pr.maxw[2*p]) && (g.gw[v] == 0 || r.load[2*p+1] <= pr.maxw[2*p+1]) {
			continue // moving v would not relieve what is overloaded
		}
		h.push(v, r.ed[v]-r.id[v])
	}
	for h.len() > 0 {
		v, key := h.pop()
		from := r.where[v]
		if !r.overloaded(from) {
			continue
		}
		r.gather(v)
		own := r.connTo(from)
		best := int32(-1)
		var bestGain int64
		for _, p := range r.parts {
			if p == from || !pr.eligible(g, v, p) || !r.fits(v, p) {
				continue
			}
			if gain := r.conn[p] - own; best < 0 || gain > bestGain {
				best, bestGain = p, gain
			}
		}
		if best < 0 {
			// No adjacent part has room: take the eligible part with most room,
			// if the move makes things better.
			bestRel := math.Inf(1)
			for p := int32(0); p < int32(pr.k); p++ {
				if p == from || !pr.eligible(g, v, p) {
					continue
				}
				if rel := r.rel(p, g.cw[v], g.gw[v]); rel < bestRel {
					best, bestRel = p, rel
				}
			}
			if best < 0 || !r.fits(v, best) && bestRel >= r.rel(from, 0, 0) {
				continue
			}
			bestGain = r.connTo(best) - own
		}
		if bestGain < key {
			h.push(v, bestGain) // stale key: try again in its proper place
			continue
		}
		r.move(v, best)
	}
}

// fitsSlack is fits with the FM slack added to the maxima.
func (r *kref) fitsSlack(v int32, p int32) bool {
	cw, gw := r.g.cw[v], r.g.gw[v]
	return (cw == 0 || r.load[2*p]+cw <= r.pr.maxw[2*p]+r.slack[0]) &&
		(gw == 0 || r.load[2*p+1]+gw <= r.pr.maxw[2*p+1]+r.slack[1])
}

// overDelta is the change in total overload (load above the maxima) that
// moving weights (cw, gw) from part from to part to makes.
func (r *kref) overDelta(from, to int32, cw, gw int64) int64 {
	var d int64
	over := func(i int, l int64) int64 { return max(0, l-r.pr.maxw[i]) }
	for c, w := range [2]int64{cw, gw} {
		if w == 0 {
			continue
		}
		i, j := 2*int(from)+c, 2*int(to)+c
		d += over(i, r.load[i]-w) - over(i, r.load[i]) + over(j, r.load[j]+w) - over(j, r.load[j])
	}
	return d
}

// bestMove returns the adjacent part with room (up to the FM slack) that v
// gains most by moving to, and that gain; ok is false when there is none.
func (r *kref) bestMove(v int32) (to int32, gain int64, ok bool) {
	g := r.g
	from := r.where[v]
	if r.pr.k == 2 {
		// The other side is the only move, ed-id its gain: no gathering.
		to = 1 - from
		if r.ed[v] == 0 || !r.pr.eligible(g, v, to) || !r.fitsSlack(v, to) {
			return -1, 0, false
		}
		return to, r.ed[v] - r.id[v], true
	}
	r.gather(v)
	own := r.connTo(from)
	to = -1
	bestRel := 0.0
	for _, p := range r.parts {
		if p == from || !r.pr.eligible(g, v, p) || !r.fitsSlack(v, p) {
			continue
		}
		gn := r.conn[p] - own
		if to >= 0 && gn < gain {
			continue
		}
		rel := r.rel(p, g.cw[v], g.gw[v])
		if to < 0 || gn > gain || rel < bestRel {
			to, gain, bestRel = p, gn, rel
		}
	}
	return to, gain, to >= 0
}

// fm is k-way Fiduccia–Mattheyses: boundary vertices move best gain first,
// negative gains included, each at most once per pass, to an adjacent part
// with room, where room includes a slack of one heaviest vertex (without it
// a partition at exact balance could not move at all: FM needs to swap);
// each pass is rolled back to its best prefix (least overload, then least
// cut, then most even loads). Greedy refinement stops at the first local minimum; this
// climbs out of shallow ones, which is what a mesh's staircase boundaries
// need. It returns whether the cut improved.
func (r *kref) fm(limit int) bool {
	g := r.g
	if r.heap == nil {
		r.heap = newIHeap(g.n)
		r.lock = make([]int32, g.n)
	}
	r.pass++
	h := r.heap
	h.clear()
	// Keys are ed-id, an upper bound of a vertex's best gain (exact for
	// k = 2), kept up to date in O(1) per neighbour move; the exact gain is
	// computed when a vertex comes to the top, and if it is lower the vertex
	// goes back with it. So the vertex moved always has the best exact gain,
	// at O(degree) per move instead of O(degree²), which matters on the
	// dense coarse levels of irregular graphs.
	for _, v := range r.bnd {
		if r.movable(v) {
			h.push(v, r.ed[v]-r.id[v])
		}
	}
	type mv struct {
		v    int32
		from int32
	}
	var moves []mv
	var delta, bestDelta int64
	spread := r.spread()
	bestSpread := spread
	var over int64
	for i, l := range r.load {
		over += max(0, l-r.pr.maxw[i])
	}
	bestOver, startOver := over, over
	bestLen := 0
	for h.len() > 0 {
		v, key := h.pop()
		to, gain, ok := r.bestMove(v)
		if !ok {
			continue
		}
		if gain < key {
			h.push(v, gain)
			continue
		}
		from := r.where[v]
		spread += r.spreadDelta(from, to, g.cw[v], g.gw[v])
		over += r.overDelta(from, to, g.cw[v], g.gw[v])
		r.move(v, to)
		r.lock[v] = r.pass
		delta -= gain
		moves = append(moves, mv{v, from})
		for e := g.xadj[v]; e < g.xadj[v+1]; e++ {
			u := g.adj[e]
			if r.lock[u] == r.pass || !r.movable(u) {
				continue
			}
			if r.ed[u] == 0 {
				h.remove(u)
				continue
			}
			h.set(u, r.ed[u]-r.id[u])
		}
		if over < bestOver || over == bestOver && (delta < bestDelta || delta == bestDelta && spread < bestSpread-1e-12) {
			bestOver, bestDelta, bestSpread, bestLen = over, delta, spread, len(moves)
		} else if len(moves)-bestLen > limit {
			break
		}
	}
	for i := len(moves) - 1; i >= bestLen; i-- {
		r.move(moves[i].v, moves[i].from)
	}
	return bestLen > 0 && (bestDelta < 0 || bestOver < startOver)
}

// spread is the sum of squared relative loads, a measure of unevenness.
func (r *kref) spread() float64 {
	s := 0.0
	for i, l := range r.load {
		if t := r.pr.target[i]; t > 0 {
			x := float64(l) / t
			s += x * x
		}
	}
	return s
}

func (r *kref) spreadDelta(from, to int32, cw, gw int64) float64 {
	d := 0.0
	sq := func(i int, l int64) float64 {
		if t := r.pr.target[i]; t > 0 {
			x := float64(l) / t
			return x * x
		}
		return 0
	}
	for c, w := range [2]int64{cw, gw} {
		if w == 0 {
			continue
		}
		i, j := 2*int(from)+c, 2*int(to)+c
		d += sq(i, r.load[i]-w) - sq(i, r.load[i]) + sq(j, r.load[j]+w) - sq(j, r.load[j])
	}
	return d
}

// improve is the refinement of one level: restore the balance, take the
// cheap greedy gains, then run FM passes while they improve the cut.
func (r *kref) improve() {
	r.balance()
	r.refine()
	limit := min(max(r.g.n/50, fmLimitMin), fmLimitMax)
	for pass := 0; pass < r.pr.passes && r.fm(limit); pass++ {
	}
}

var fmLimitMin, fmLimitMax = 200, 2000
