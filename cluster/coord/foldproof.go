package coord

import (
	mathbits "math/bits"
	"weak"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// foldProof is what a fold keeps, as it folds, for the leader's record
// check (verdictPlan.checkFold): the vertices proved to add nothing to the
// check's findings, so that the check at a run's end examines only the
// others. For a run where every task is done once that is none, where a
// pass over every row (100K rows of 48 bytes, ~1 ms) lay on the way from
// the node's last report to the verdict; the proof of a row is taken as
// it is folded, while it is in the cache.
//
// A vertex is proved (verdictPlan.proved) when the check would find
// nothing there, by the rows it reads: its own, and for a vertex of one
// strong predecessor that ran, on one node, once an activation, that
// predecessor's. The check reads other rows only for a vertex that never
// ran (a strong vertex's predecessors, a module source's module), and such
// a vertex is never proved. So the proof of a vertex is taken again
// whenever its row may change (Fold.fold: Fold.prove; Fold.foldRun, once
// its span's rows are set: Fold.proveSpan), and with it the proof of each
// proved vertex of which it is the one strong predecessor
// (verdictPlan.only); a vertex not proved stays so until its own row
// changes: the check examines it. Nothing else changes a row (pack and
// unpack keep them as they are).
//
// Only a fold whose record check can run keeps one (Fold.KeepProof: the
// leader's status caches): a follower's would cost a plan built (O(N+E))
// and ~2 MB held per graph for a check it never makes. A fold that keeps
// one from a later fold on (a follower that became leader mid-run) holds
// no mark for the rows folded before: the check examines them.
type foldProof struct {
	keep bool                     // the fold keeps a proof (KeepProof)
	plan *verdictPlan             // the kept plan of the graph folded against (nil: none yet, or off)
	g    weak.Pointer[spec.Graph] // that graph
	bits []uint64                 // vertex v is proved: bit v%64 of bits[v/64]
	n    int                      // the vertices proved
	off  bool                     // folded against another graph too, or the run ended (drop): no proof, the check reads every row
}

// KeepProof makes f keep, from its next fold on, the proof the record
// check reads (foldProof): the leader's status caches keep one, so that
// the check at a run's end examines only the rows not proved. A fold that
// keeps none is checked whole; CheckSuccess's findings are the same.
func (f *Fold) KeepProof() { f.proof.keep = true }

// track readies the proof for a fold against graph g, of a fold that keeps
// one (KeepProof). The first graph a fold is folded against is its
// proof's; one folded against another (the run's flow expanded again
// after the first graph was let go) keeps no proof: what was proved was
// proved of the other graph's plan.
func (pr *foldProof) track(g *spec.Graph) {
	switch {
	case !pr.keep || pr.off || g == nil:
	case pr.plan == nil:
		pr.plan, pr.g = verdictPlanOf(g), weak.Make(g)
		pr.bits = make([]uint64, (len(g.Vertices)+63)/64)
	case pr.g.Value() != g:
		pr.drop()
	}
}

// drop ends the proof: a fold folded after keeps none (its check reads
// every row).
func (pr *foldProof) drop() { *pr = foldProof{off: true} }

func (pr *foldProof) has(v int) bool { return pr.bits[v>>6]&(1<<(v&63)) != 0 }

// set marks vertex v proved or not.
func (pr *foldProof) set(v int, ok bool) {
	w, m := v>>6, uint64(1)<<(v&63)
	switch was := pr.bits[w]&m != 0; {
	case ok && !was:
		pr.bits[w] |= m
		pr.n++
	case !ok && was:
		pr.bits[w] &^= m
		pr.n--
	}
}

// prove takes again the proof of vertex v, whose row may have changed, and
// of the proved vertices of which it is the one strong predecessor. The
// fold is not packed. A vertex past the proof's graph (which its caller's
// graph, track's, rules out) drops the proof rather than leave marks
// that no longer say what the check would find.
func (f *Fold) prove(v int) {
	pr := &f.proof
	p := pr.plan
	if p == nil {
		return
	}
	if v >= len(p.kind) {
		pr.drop() // a row past the plan's graph: what is proved is of another graph
		return
	}
	pr.set(v, p.proved(f, v))
	for _, s := range p.only[p.onlyAt[v]:p.onlyAt[v+1]] {
		if pr.has(int(s)) {
			pr.set(int(s), p.proved(f, int(s)))
		}
	}
}

// proveSpan takes again the proof of vertices lo up to hi (excluded),
// whose rows foldRun has just set, and of the proved vertices outside them
// whose one strong predecessor is one of them. same says every row of the
// span is the one foldRun set in place: (st, act, execs) on one node. Such
// a row that ran and neither runs nor failed is proved (proved's rules),
// but at a vertex of one strong predecessor when it ran once an
// activation (execs == act: clean), whose proof reads that predecessor:
// the span is marked a word at a time, and only those vertices taken one
// by one. The fold is not packed. A span past the proof's graph drops the
// proof, as prove does.
func (f *Fold) proveSpan(lo, hi int, same bool, st transport.TaskState, act, execs uint64) {
	pr := &f.proof
	p := pr.plan
	if p == nil || lo >= hi {
		return
	}
	if hi > len(p.kind) {
		pr.drop() // rows past the plan's graph: what is proved is of another graph
		return
	}
	if same && act > 0 && st != transport.TaskRunning && st != transport.TaskFailed {
		pr.setSpan(lo, hi)
		if execs == act {
			for w := lo / 64; w <= (hi-1)/64; w++ {
				for b := p.single[w] & spanMask(w, lo, hi); b != 0; b &= b - 1 {
					v := w*64 + mathbits.TrailingZeros64(b)
					pr.set(v, p.proved(f, v))
				}
			}
		}
	} else {
		for v := lo; v < hi; v++ {
			pr.set(v, p.proved(f, v))
		}
	}
	for _, s := range p.only[p.onlyAt[lo]:p.onlyAt[hi]] {
		if s := int(s); (s < lo || s >= hi) && pr.has(s) {
			pr.set(s, p.proved(f, s))
		}
	}
}

// spanMask is the bits of word w of a bit set that stand for lo up to hi
// (excluded).
func spanMask(w, lo, hi int) uint64 {
	m := ^uint64(0)
	if w == lo/64 {
		m &= ^uint64(0) << (lo % 64)
	}
	if w == (hi-1)/64 {
		m &= ^uint64(0) >> (63 - (hi-1)%64)
	}
	return m
}

// setSpan marks vertices lo up to hi (excluded, lo < hi) proved.
func (pr *foldProof) setSpan(lo, hi int) {
	for w := lo / 64; w <= (hi-1)/64; w++ {
		m := spanMask(w, lo, hi)
		pr.n += mathbits.OnesCount64(m &^ pr.bits[w])
		pr.bits[w] |= m
	}
}

// proved reports whether the record check (examine) finds nothing at
// vertex v of unpacked fold f, and reads no row for it but v's and, for a
// vertex of one strong predecessor, that predecessor's.
func (p *verdictPlan) proved(f *Fold, v int) bool {
	a := &f.vert[v]
	if !a.seen || a.state == transport.TaskRunning || a.state == transport.TaskFailed {
		return false
	}
	switch p.kind[v] {
	case planCondOnly:
		return true
	case planSource:
		return a.act > 0
	}
	if a.act == 0 {
		return false // examine reads its strong predecessors (allRan)
	}
	lo := p.strongAt[v]
	if p.strongAt[v+1]-lo != 1 || !f.clean(a) {
		return true
	}
	pa := &f.vert[p.strong[lo]]
	return !pa.seen || a.act >= pa.act || !f.clean(pa)
}
