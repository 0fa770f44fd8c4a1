package node

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/maphash"

	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/wlru"
	"github.com/hetflow/hetflow/transport"
)

// ErrNoPlan: an Assignment without a plan of the node's part (a leader of
// an older build sends the flow instead).
var ErrNoPlan = errors.New("node: the assignment carries no plan of this node's part")

// A node builds its part of a run from the plan the leader compiled for it
// (transport.Plan in Assignment.Plan; runproto.Compile), never from the
// flow's text: it neither parses, validates nor expands a flow. What it
// checks of a plan is its own business: that each task it runs names a
// function of its registry, of the task's kind and domain, with arguments
// the function takes.

// maxCachedVertices bounds a node's cache of compiled plans (about 2 KB a
// vertex, so some hundreds of MB at most).
const maxCachedVertices = 400_000

// graphCache holds the compiled plans of recent Assignments by their
// plan's bytes: the runs of one flow placed alike (the same plan) share
// one, read-only. A node's registry is fixed for its life, so the bytes
// alone decide what compiling gives.
//
// An entry is found by a fast 64-bit hash of the bytes (hash/maphash, a
// seed of the process's: memory speed, where SHA-256 over a 100K-task
// plan was some milliseconds a run) and taken only when its bytes equal
// the plan's (a memory compare): a plan is never served another plan's
// Part, whatever the hash gives. Of two plans with one hash and length,
// the first cached keeps the slot and the other is compiled each time
// (wlru keeps a key's first value).
//
// An Assignment that carries its plan's digest (its SHA-256, as every
// leader of wire version 8 sends) is cached by that digest instead: the
// plan's bytes are hashed once, when it is first compiled, and must match
// the digest (a plan that does not is refused). A later Assignment that
// names the plan by digest alone (transport.Assignment.PlanRef) takes the
// entry of that digest (held); a node that has none asks for the plan.
type graphCache struct {
	c    *wlru.Cache[planKey, *cachedPlan]
	seed maphash.Seed
	sum  func(seed maphash.Seed, plan []byte) uint64 // maphash.Bytes; tests force collisions
}

// planKey is a plan's hash and length, or (digest set) its SHA-256.
type planKey struct {
	h      uint64
	n      int
	digest [sha256.Size]byte
	sha    bool // keyed by digest (h and n zero)
}

// ErrPlanDigest: an Assignment's plan does not have the digest it names.
var ErrPlanDigest = errors.New("node: the plan does not match its digest")

// cachedPlan is a compiled plan and a copy of the bytes it was compiled
// from (an Assignment's may share a buffer the transport reuses).
type cachedPlan struct {
	plan []byte
	pt   *runproto.Part
}

func newGraphCache(maxVertices int) graphCache {
	return graphCache{c: wlru.New[planKey, *cachedPlan](maxVertices), seed: maphash.MakeSeed(), sum: maphash.Bytes}
}

// decodePlan decodes the plan of a run of tasks vertices (the owner
// table's length) under the node's decoder limits (lim: a hostile plan is
// refused before it allocates more than its bytes, and one of another
// size before a graph of its size is made; no run is larger than a flow
// expands to, spec.MaxVertices) and checks it against reg.
func decodePlan(plan []byte, tasks int, lim transport.Limits, reg spec.Catalog) (*transport.Plan, error) {
	if plan == nil {
		return nil, ErrNoPlan
	}
	if tasks > spec.MaxVertices {
		return nil, fmt.Errorf("%w: a run of %d tasks, over the %d a flow may expand to", runproto.ErrPlan, tasks, spec.MaxVertices)
	}
	p, err := transport.DecodePlan(plan, lim)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", runproto.ErrPlan, err)
	}
	if int(p.Tasks) != tasks {
		return nil, fmt.Errorf("%w: the assignment places %d tasks, its plan has %d", runproto.ErrPlan, tasks, p.Tasks)
	}
	infos := map[string]funcInfo{} // by function: a plan's tasks share a few
	for i := range p.Vertices {
		if pv := &p.Vertices[i]; pv.Local {
			if err := checkTask(pv, reg, infos); err != nil {
				return nil, &assignError{pv.Path, err}
			}
		}
	}
	return p, nil
}

// compile returns the Part of a plan of a run of tasks vertices, from the
// cache when an earlier Assignment had the same plan. Errors are not
// cached: a plan that does not compile is refused each time.
//
// digest, when not nil, is the SHA-256 the Assignment gives the plan: the
// plan is cached by it, and a plan that does not match it is refused
// (ErrPlanDigest).
func (gc graphCache) compile(plan, digest []byte, tasks int, lim transport.Limits, reg spec.Catalog) (*runproto.Part, error) {
	var key planKey
	if digest != nil {
		if len(digest) != sha256.Size {
			return nil, fmt.Errorf("%w: %w: a digest of %d bytes", runproto.ErrPlan, ErrPlanDigest, len(digest))
		}
		key = planKey{digest: [sha256.Size]byte(digest), sha: true}
	} else {
		key = planKey{h: gc.sum(gc.seed, plan), n: len(plan)}
	}
	if cp, ok := gc.c.Get(key); ok && len(cp.pt.G.Vertices) == tasks && bytes.Equal(cp.plan, plan) {
		return cp.pt, nil
	}
	if key.sha {
		if err := checkDigest(plan, digest); err != nil {
			return nil, err
		}
	}
	p, err := decodePlan(plan, tasks, lim, reg)
	if err != nil {
		return nil, err
	}
	pt, err := runproto.OpenPlan(p, nil)
	if err != nil {
		return nil, err
	}
	gc.c.Put(key, &cachedPlan{plan: bytes.Clone(plan), pt: pt}, max(len(p.Vertices), 1))
	return pt, nil
}

// checkDigest refuses a plan whose SHA-256 is not digest (ErrPlanDigest).
func checkDigest(plan, digest []byte) error {
	if len(digest) != sha256.Size || sha256.Sum256(plan) != [sha256.Size]byte(digest) {
		return fmt.Errorf("%w: %w", runproto.ErrPlan, ErrPlanDigest)
	}
	return nil
}

// held is the cached plan whose SHA-256 is digest, compiled for a run of
// tasks vertices, if the cache holds it (an Assignment that names its plan
// by digest alone). Only a plan whose bytes were checked against the
// digest when it was compiled is cached under it.
func (gc graphCache) held(digest []byte, tasks int) (*cachedPlan, bool) {
	if len(digest) != sha256.Size {
		return nil, false
	}
	cp, ok := gc.c.Get(planKey{digest: [sha256.Size]byte(digest), sha: true})
	if !ok || len(cp.pt.G.Vertices) != tasks {
		return nil, false
	}
	return cp, true
}

// forget drops every cached plan (a test's node that lost its plans).
func (gc graphCache) forget() { gc.c.Clear() }

// funcInfo is what reg.Func answered for a function.
type funcInfo struct {
	info spec.FuncInfo
	ok   bool
}

// checkTask checks a task of the node's own against its registry, as
// spec.Validate checks a flow's against the functions it is given: the
// coordinator checked the flow against the union of the live nodes'
// catalogs, not against this node's. infos keeps reg's answers by
// function name for the plan's other tasks (a registry is fixed for the
// node's life; a lookup makes the argument check's closure each time).
func checkTask(pv *transport.PlanVertex, reg spec.Catalog, infos map[string]funcInfo) error {
	if pv.Kind == transport.KindModule || reg == nil {
		return nil
	}
	fi, seen := infos[pv.Func]
	if !seen {
		fi.info, fi.ok = reg.Func(pv.Func)
		infos[pv.Func] = fi
	}
	info, ok := fi.info, fi.ok
	kind := [...]spec.Kind{spec.KindStatic, spec.KindCondition, spec.KindMultiCondition, spec.KindSubflow, spec.KindModule}[pv.Kind]
	switch {
	case !ok:
		return fmt.Errorf("%w: unknown function %q on this node", spec.ErrUnknownFunc, pv.Func)
	case info.Kind != "" && info.Kind != kind:
		return fmt.Errorf("%w: function %q is for %s tasks, not %s ones", spec.ErrBadValue, pv.Func, info.Kind, kind)
	case pv.Domain == transport.DomainGPU && kind == spec.KindStatic && !info.GPU:
		return fmt.Errorf("%w: function %q has no GPU body (domain gpu)", spec.ErrBadValue, pv.Func)
	case pv.Domain == transport.DomainCPU && !info.CPU:
		return fmt.Errorf("%w: function %q runs only on a GPU (set domain: gpu)", spec.ErrBadValue, pv.Func)
	}
	if info.CheckArgs != nil {
		if err := info.CheckArgs(pv.Args); err != nil {
			return fmt.Errorf("%w: args: %w", spec.ErrBadValue, err)
		}
	}
	return nil
}

// stats returns how many plans the cache holds and how many compiles it saved.
func (gc graphCache) stats() (plans int, hits uint64) {
	n, _, hits := gc.c.Stats()
	return n, hits
}
