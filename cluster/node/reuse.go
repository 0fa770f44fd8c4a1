package node

import (
	"bytes"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/internal/wlru"
	"github.com/hetflow/hetflow/localexec"
)

// A run of a plan run here before reuses the taskflow that run built, and
// the run's vertex table with it (vstate: each vertex's predecessors, its
// receive and send edges), rather than building them again: building was
// as costly as running a no-op task. localexec runs one taskflow again and
// again (each run resets its join counters), so what a build holds of a run
// is only in the vertex table, and that is reset before the build is kept:
// counters, outputs, states, loop contexts and the edges' last traversals
// and queues. The taskflow's closures run the run that holds the build now
// (built.run), so nothing of the earlier run is reached from the next one.
//
// A build is kept only when the run that made it ends cleanly: one part
// (no tasks taken over from lost nodes: a later part changes the vertex
// table), no GPU task (a GPU job holds its run's device memory), no
// failure, and every part idle when the run was released (nothing cut
// short). A run takes a kept build only for its first part, and only one
// for the same compiled plan (runproto.Part, from the graph cache) and the
// same vertices; a recovery's parts are built as before. Two runs of one
// plan at once: the second builds its own, and one of them is kept.

// built is a part's taskflow and what was built with it.
type built struct {
	cur    *part // the part that runs it (set before the part opens)
	tf     *localexec.Taskflow
	tfs    []*localexec.Taskflow // tf and its modules' taskflows, cleared when the run ends unless kept
	in     []bool                // the vertices it runs
	pt     *runproto.Part        // the compiled plan it was built from
	vs     []vstate              // the run's vertex table (a run's first part only)
	nLocal int                   // its vertices (a first part's)
	gpu    bool                  // it has GPU tasks: never kept
	// spare is the per-vertex arrays of the protocol state of the run that
	// left it (runproto.Run.Release), for the next run's (buildCache.spare)
	spare runproto.Spare
}

// run is the run the build runs for now (any worker of its open run).
func (b *built) run() *run { return b.cur.run }

// maxBuiltVertices bounds the vertices of the builds a node keeps (a few
// hundred bytes a vertex: about 60 MB). A kept build's taskflow also keeps
// its last run's event rows reachable, 64 bytes a vertex (up to 12.8 MB
// more): its hint tables (run.hint), and the copy in its last run's
// topology, which the taskflow holds until its next run. Clearing the
// taskflow's in put would leave the topology's; the rows are often the
// publisher's spare anyway (eventPub.spare), the table the next run of
// as many vertices writes.
const maxBuiltVertices = 200_000

// buildCache keeps at most one idle build per compiled plan, least
// recently used first out.
type buildCache struct {
	c *wlru.Cache[*runproto.Part, *buildSlot]
}

type buildSlot struct {
	mu sync.Mutex
	b  *built // nil: taken, or none yet
}

func newBuildCache(maxVertices int) buildCache {
	return buildCache{wlru.New[*runproto.Part, *buildSlot](maxVertices)}
}

// take hands the kept build of pt over the vertices in to the caller, who
// owns it from then on, or returns nil.
func (bc buildCache) take(pt *runproto.Part, in []bool) *built {
	s, ok := bc.c.Get(pt)
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b
	if b == nil || !sameMask(b.in, in) {
		return nil
	}
	s.b = nil
	return b
}

// mask is the vertex mask of the kept build of pt (nil: none), for a run of
// pt starting to compare its own with (planFits): read only.
func (bc buildCache) mask(pt *runproto.Part) []bool {
	s, ok := bc.c.Get(pt)
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b == nil {
		return nil
	}
	return s.b.in
}

// sameMask reports whether two vertex masks are equal, compared as bytes (a
// Go bool is one byte, 0 or 1, so equal bytes are equal bools): one memory
// compare instead of a loop a vertex, which for a run again's 100K-vertex
// mask was ~0.1 ms on its way to the first activation.
func sameMask(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	return bytes.Equal(unsafe.Slice((*byte)(unsafe.Pointer(&a[0])), len(a)), unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), len(b)))
}

// spare hands the kept build of pt's spare protocol arrays to a run of pt
// starting (runproto.Config.Spare), which owns them from then on, whether
// or not it takes the build itself; none when no build of pt is kept.
func (bc buildCache) spare(pt *runproto.Part) runproto.Spare {
	s, ok := bc.c.Get(pt)
	if !ok {
		return runproto.Spare{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b == nil {
		return runproto.Spare{}
	}
	sp := s.b.spare
	s.b.spare = runproto.Spare{}
	return sp
}

// put keeps b, reset, for the next run of its plan (replacing the one kept).
func (bc buildCache) put(b *built) {
	b.cur = nil
	for i := range b.vs {
		b.vs[i].reset()
	}
	bc.c.Put(b.pt, &buildSlot{}, max(len(b.vs), 1)) // a slot held already stays
	if s, ok := bc.c.Get(b.pt); ok {
		s.mu.Lock()
		s.b = b
		s.mu.Unlock()
	}
}

// adopt makes b, a build an earlier run left, the run's first part.
func (r *run) adopt(b *built) *part {
	r.vs, r.nLocal = b.vs, b.nLocal
	b.tf.SetName(r.id)
	p := &part{built: b, run: r}
	b.cur = p
	return p
}

// keepable is the run's build to keep once it has ended (see above), or
// nil; idle says whether every part was idle when the run was released.
func (r *run) keepable(idle bool) *built {
	ps := r.parts()
	if !idle || len(ps) != 1 || r.failed.Load() || len(r.jobs) > 0 {
		return nil
	}
	if b := ps[0].built; b.vs != nil && !b.gpu {
		return b
	}
	return nil
}

// reset clears what a run left in a vertex's state, keeping what its build
// made (predecessors, edges). Only put calls it, once the run has ended
// (its open runs done, no Signal delivered to it: it is no longer in
// n.runs), so nothing else touches s: no lock (a lock a vertex was most of
// a kept build's reset), and its counters are cleared by plain stores (an
// atomic store is a locked exchange on amd64: three a vertex were most of
// what was left of it).
//
// It writes only what is not clear already (a vertex's state is a hot
// line and its cold part beside it; a store to a clear field dirties one
// for nothing). A vQuiet vertex's cold part is not read at all: no run
// writes it (run.quiet), and reading it was a miss a vertex.
func (s *vstate) reset() {
	if s.acts.Load()|s.execs.Load()|s.done.Load() != 0 {
		s.acts, s.execs, s.done = atomic.Uint64{}, atomic.Uint64{}, atomic.Uint64{}
	}
	if s.flags&vQuiet != 0 {
		return
	}
	if s.ran || s.outAct != 0 || s.out != nil {
		s.ran, s.outAct, s.out = false, 0, nil
	}
	if s.state != nil || s.ctx != nil || s.childExecs != nil {
		s.state, s.ctx, s.childExecs = nil, nil, nil
	}
	for _, e := range s.ins {
		e.reset()
	}
	for _, se := range s.condSends {
		if se != nil {
			se.fifo.reset()
			se.picks.Store(0)
		}
	}
}

func (e *recvEdge) reset() {
	e.mu.Lock()
	e.has, e.last = false, item{}
	e.mu.Unlock()
	if e.fifo != nil {
		e.fifo.reset()
	}
}

func (q *fifo) reset() {
	q.mu.Lock()
	clear(q.items)
	q.items, q.head = q.items[:0], 0
	q.mu.Unlock()
}
