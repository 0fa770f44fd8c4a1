package transport

import (
	"cmp"
	"slices"
	"sort"
	"sync"
)

// SignalKey is the dedup identity of a Signal within its run: the edge (Src, Dst)
// and the source's activation number. Gen is deliberately not part of it: a task
// re-run under a newer generation after a failure sends the same logical edge
// traversal again, and the receiver must see it once.
type SignalKey struct {
	Src, Dst uint32
	Act      uint64
}

// Verdict is what a Deduper decided about one Signal.
type Verdict uint8

const (
	// Accept: first sight of this key under a current generation; deliver it.
	Accept Verdict = iota
	// Duplicate: this key was accepted before; drop it.
	Duplicate
	// Fenced: the Signal's generation is older than the receiver's current
	// generation for the run; drop it.
	Fenced
	// Ended: the run was ended on this receiver (EndRun); drop it.
	Ended
)

func (v Verdict) String() string {
	switch v {
	case Accept:
		return "accept"
	case Duplicate:
		return "duplicate"
	case Fenced:
		return "fenced"
	case Ended:
		return "ended"
	}
	return "verdict?"
}

// DedupStats counts a Deduper's verdicts.
type DedupStats struct {
	Accepted  uint64
	Duplicate uint64
	Fenced    uint64
	Ended     uint64
	Runs      int // runs with live state
}

// Deduper is the receiver-side filter for Signals: fencing by generation, then
// exactly-once by SignalKey. It is safe for concurrent use.
//
// Fencing: each run has a current generation, raised by SetGen (when the node learns
// a new Assignment) and by any accepted Signal of a newer generation (only the
// coordinator mints generations, so a newer one is real news). Signals older than
// it are Fenced, which keeps a node that was cut off and came back from corrupting
// the run.
//
// Memory: per run and edge, the accepted activations are kept as a sorted list of
// closed intervals (the first inline), under the edge's source (a source's
// state in a chunk of 16 sources made on first sight: dense sources cost no
// allocation or map entry of their own; a far one costs a map entry), by destination. Every activation of a strong edge is sent, so a strong edge
// costs one interval however many times a loop runs it; a condition edge costs one
// interval per stretch of consecutive activations that chose it. EndRun drops the
// run's state and leaves a tombstone (the last maxEndedRuns ended runs) so late
// Signals of the run are dropped as Ended instead of starting a fresh set.
type Deduper struct {
	mu     sync.Mutex
	runs   map[string]*dedupRun
	ended  map[string]struct{}
	ring   []string // ended runs, oldest first once full
	ringAt int
	stats  DedupStats
}

const maxEndedRuns = 1 << 16

type edgeID struct{ src, dst uint32 }

type interval struct{ lo, hi uint64 }

type dedupRun struct {
	gen uint64
	// By source: a source near the others in chunks of srcChunk made on
	// first sight (a source costs no allocation of its own and no map
	// entry: a fan-in's Signals each come from a source of their own), a
	// far one in srcs (source).
	chunks []*[srcChunk]srcActs
	srcs   map[uint32]*srcActs
	last   *srcActs     // the source looked up last (a fan's Signals come together)
	spills [][]interval // the lists of edges whose activations are not one stretch
	// bound: sources below it are the run's own vertices (Bound), kept
	// in chunks whatever their number and order of arrival.
	bound uint32
}

// srcChunk is how many sources' states a chunk of dedupRun.chunks holds;
// maxChunked bounds the sources kept in chunks (a source number is a vertex
// index: a larger one is a graph of over 16M tasks or a bogus Signal, kept
// in the map so that it does not grow the chunk index).
const (
	srcChunk   = 16
	maxChunked = 1 << 24
)

// srcActs is the accepted activations of one source's edges, by
// destination: a source activation's edges arrive together and mostly in
// ascending order, so a new edge is appended and found by binary search,
// and no edge costs a map entry. The first destination out of order (a
// flow that lists its successors descending, a peer's own order) turns the
// source to an index by destination (at), built once, so no order of
// arrival costs more than a map insert an edge (a sorted insert would move
// every edge after it: O(n²) for a descending fan).
type srcActs struct {
	src  uint32
	dsts []dstActs        // ascending while at is nil; in arrival order after
	at   map[uint32]int32 // dst → its place in dsts, once out of order
	// one is dsts' first storage: most sources that reach a node have
	// one edge to it. A srcActs is never copied once used (chunks and the
	// map hold it in place), so dsts may point into it.
	one [1]dstActs
}

// dstActs is one destination's edgeActs (its dst set).
type dstActs = edgeActs

// edgeActs is the accepted activations of one edge: one interval inline
// (a strong edge's, however long a loop runs it), an index into its run's
// spilled lists once they are not one stretch. It holds no pointer: a run's
// edges cost the GC nothing to scan. With its destination, 24 bytes.
type edgeActs struct {
	dst   uint32   // in a source's list (dstActs)
	spill int32    // 1 + index in dedupRun.spills; 0: none yet; oneAct: one
	one   interval // while spill is oneAct
}

// oneAct is edgeActs.spill for activations that are one interval, inline.
const oneAct = -1

// insert adds act, reporting false when it was there.
func (r *dedupRun) insert(a *edgeActs, act uint64) bool {
	if a.spill <= 0 {
		switch {
		case a.spill == 0:
			a.spill, a.one = oneAct, interval{act, act}
			return true
		case act >= a.one.lo && act <= a.one.hi:
			return false
		case act == a.one.hi+1:
			a.one.hi = act
			return true
		case act+1 == a.one.lo:
			a.one.lo = act
			return true
		}
		r.spills = append(r.spills, []interval{a.one})
		a.spill = int32(len(r.spills))
	}
	var fresh bool
	r.spills[a.spill-1], fresh = insertAct(r.spills[a.spill-1], act)
	return fresh
}

// edge is e's state, made on first sight.
func (r *dedupRun) edge(e edgeID) *edgeActs {
	sa := r.last
	if sa == nil || sa.src != e.src {
		sa = r.source(e.src)
		r.last = sa
	}
	ds := sa.dsts
	if ds == nil {
		ds = sa.one[:0]
	}
	if sa.at != nil {
		i, ok := sa.at[e.dst]
		if !ok {
			i = int32(len(ds))
			sa.at[e.dst] = i
			sa.dsts = append(ds, dstActs{dst: e.dst})
		}
		return &sa.dsts[i]
	}
	if n := len(ds); n == 0 || ds[n-1].dst < e.dst { // in order: append
		sa.dsts = append(ds, dstActs{dst: e.dst})
		return &sa.dsts[n]
	}
	i, ok := slices.BinarySearchFunc(ds, e.dst, func(d dstActs, dst uint32) int { return cmp.Compare(d.dst, dst) })
	if ok {
		return &sa.dsts[i]
	}
	sa.at = make(map[uint32]int32, len(ds)+1)
	for j := range ds {
		sa.at[ds[j].dst] = int32(j)
	}
	sa.at[e.dst] = int32(len(ds))
	sa.dsts = append(ds, dstActs{dst: e.dst})
	return &sa.dsts[len(ds)]
}

// source is src's state, made on first sight. A source is kept in a chunk
// when it is below the run's bound (Bound) or its chunk is within reach of
// the index's growth (at most twice the index and 64 chunks more), in the
// map otherwise: a far source number (a
// huge graph, or a bogus Signal on the public Deduper) costs a map entry, not
// an index of up to 2²⁰ chunk pointers. A source once in the map stays
// there (its state never moves: dsts may point into it), so the map, when
// it holds anything, is asked first.
func (r *dedupRun) source(src uint32) *srcActs {
	if len(r.srcs) > 0 {
		if sa := r.srcs[src]; sa != nil {
			return sa
		}
	}
	c := int(src / srcChunk)
	if src >= maxChunked || (src >= r.bound && c >= 2*len(r.chunks)+64) {
		if r.srcs == nil {
			r.srcs = make(map[uint32]*srcActs)
		}
		sa := &srcActs{src: src}
		r.srcs[src] = sa
		return sa
	}
	if c >= len(r.chunks) {
		r.chunks = append(r.chunks, make([]*[srcChunk]srcActs, c+1-len(r.chunks))...)
	}
	if r.chunks[c] == nil {
		r.chunks[c] = new([srcChunk]srcActs)
	}
	sa := &r.chunks[c][src%srcChunk]
	sa.src = src
	return sa
}

// NewDeduper returns an empty Deduper.
func NewDeduper() *Deduper {
	return &Deduper{runs: make(map[string]*dedupRun), ended: make(map[string]struct{})}
}

func (d *Deduper) run(run string) *dedupRun {
	r := d.runs[run]
	if r == nil {
		r = &dedupRun{}
		d.runs[run] = r
	}
	return r
}

// Bound says that run's Signals come from sources below n (the run's
// vertices: a receiver refuses the others before it admits them), so that
// their state is kept in chunks, an index of n/16 pointers at most,
// whatever order they come in: without it a source far above those seen
// so far (a fan-in's first Signal from its last source) costs a map entry,
// and so does every source after it in its chunk. It does nothing for an
// ended run.
func (d *Deduper) Bound(run string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, gone := d.ended[run]; gone {
		return
	}
	d.run(run).bound = uint32(min(max(n, 0), maxChunked))
}

// SetGen raises run's current generation to gen (a lower gen is ignored) and
// reports the generation now in force. It does nothing for an ended run.
func (d *Deduper) SetGen(run string, gen uint64) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, gone := d.ended[run]; gone {
		return 0
	}
	r := d.run(run)
	if gen > r.gen {
		r.gen = gen
	}
	return r.gen
}

// Gen reports run's current generation (0 when unknown).
func (d *Deduper) Gen(run string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.runs[run]; r != nil {
		return r.gen
	}
	return 0
}

// Admit decides about one Signal and records it when accepted.
func (d *Deduper) Admit(s *Signal) Verdict {
	d.mu.Lock()
	v := d.admit(s)
	d.mu.Unlock()
	return v
}

// Filter admits each Signal of sigs in order and compacts the accepted ones to the
// front, returning them (sharing sigs' storage). It takes the lock once.
func (d *Deduper) Filter(sigs []Signal) []Signal {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := sigs[:0]
	for i := range sigs {
		if d.admit(&sigs[i]) == Accept {
			out = append(out, sigs[i])
		}
	}
	return out
}

// AdmitReplayed is Admit without the generation fence, for Signals read back from
// the durable record (ReplaySignals) when a node takes over tasks: that history was
// sent under older generations and is still true. Duplicates and ended runs are
// dropped as usual, and the run's generation is not raised.
func (d *Deduper) AdmitReplayed(s *Signal) Verdict {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, gone := d.ended[s.Run]; gone {
		d.stats.Ended++
		return Ended
	}
	return d.record(d.run(s.Run), s)
}

// AdmitReplayedAll is AdmitReplayed for every Signal of sigs in order, under
// one lock and with one look-up of the run for each stretch of Signals of the
// same run (a batch's Signals all belong to one): a receiver decides a whole
// batch at once. It returns the verdicts, sigs[i]'s at i, in verdicts[:0]'s
// storage when it has room.
func (d *Deduper) AdmitReplayedAll(sigs []*Signal, verdicts []Verdict) []Verdict {
	verdicts = verdicts[:0]
	d.mu.Lock()
	defer d.mu.Unlock()
	var r *dedupRun // the current stretch's run; nil when it ended
	for i, s := range sigs {
		if i == 0 || s.Run != sigs[i-1].Run {
			r = nil
			if _, gone := d.ended[s.Run]; !gone {
				r = d.run(s.Run)
			}
		}
		if r == nil {
			d.stats.Ended++
			verdicts = append(verdicts, Ended)
			continue
		}
		verdicts = append(verdicts, d.record(r, s))
	}
	return verdicts
}

func (d *Deduper) admit(s *Signal) Verdict {
	if _, gone := d.ended[s.Run]; gone {
		d.stats.Ended++
		return Ended
	}
	r := d.run(s.Run)
	if s.Gen < r.gen {
		d.stats.Fenced++
		return Fenced
	}
	if v := d.record(r, s); v != Accept {
		return v
	}
	if s.Gen > r.gen {
		r.gen = s.Gen
	}
	return Accept
}

// record enters s's key in r, reporting Duplicate when it was there.
func (d *Deduper) record(r *dedupRun, s *Signal) Verdict {
	if !r.insert(r.edge(edgeID{s.Src, s.Dst}), s.Act) {
		d.stats.Duplicate++
		return Duplicate
	}
	d.stats.Accepted++
	return Accept
}

// insertAct adds act to the sorted, disjoint, non-adjacent interval list iv. It
// reports false when act was already present.
func insertAct(iv []interval, act uint64) ([]interval, bool) {
	n := len(iv)
	// Fast path: in-order arrival extends or follows the last interval.
	if n == 0 || act > iv[n-1].hi {
		if n > 0 && act == iv[n-1].hi+1 {
			iv[n-1].hi = act
			return iv, true
		}
		return append(iv, interval{act, act}), true
	}
	// i: first interval whose hi >= act.
	i := sort.Search(n, func(k int) bool { return iv[k].hi >= act })
	if iv[i].lo <= act {
		return iv, false
	}
	joinLeft := i > 0 && iv[i-1].hi+1 == act
	joinRight := iv[i].lo == act+1
	switch {
	case joinLeft && joinRight:
		iv[i-1].hi = iv[i].hi
		return append(iv[:i], iv[i+1:]...), true
	case joinLeft:
		iv[i-1].hi = act
	case joinRight:
		iv[i].lo = act
	default:
		iv = append(iv, interval{})
		copy(iv[i+1:], iv[i:])
		iv[i] = interval{act, act}
	}
	return iv, true
}

// EndRun drops run's state; later Signals of run are dropped as Ended.
func (d *Deduper) EndRun(run string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.runs, run)
	if _, ok := d.ended[run]; ok {
		return
	}
	if len(d.ring) < maxEndedRuns {
		d.ring = append(d.ring, run)
	} else {
		delete(d.ended, d.ring[d.ringAt])
		d.ring[d.ringAt] = run
		d.ringAt = (d.ringAt + 1) % maxEndedRuns
	}
	d.ended[run] = struct{}{}
}

// Stats reports the verdicts so far.
func (d *Deduper) Stats() DedupStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Runs = len(d.runs)
	return s
}
