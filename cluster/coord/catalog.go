package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
)

// Function catalogs come from the nodes: each advertises the hash of its
// catalog in its ring metadata (proto.Meta.Funcs) and answers for the
// catalog itself on proto.CatalogSubject. The leader validates a flow
// against the union of the live nodes' catalogs and places each task on a
// node that has its function. A node that advertises no catalog (an older
// node, a test's fake) is taken to have Config.Catalog's functions.

// catalogFetchTimeout bounds one catalog request to a node.
const catalogFetchTimeout = 2 * time.Second

// catalogCache keeps each node's catalog under the hash it advertised, so
// a catalog is fetched again only when it changes.
type catalogCache struct {
	mu sync.Mutex
	m  map[string]cachedCatalog // node id → catalog; made on first use
}

type cachedCatalog struct {
	hash  string
	funcs []proto.FuncInfo
}

// nodeFuncs returns what each of the nodes offers, fetching (all at once)
// the catalogs it has not seen under their current hash: a node that does
// not answer costs one catalogFetchTimeout, whatever their number.
func (s *Server) nodeFuncs(ctx context.Context, nodes []Node) []proto.NodeFuncs {
	cache := &s.catalogs
	cache.mu.Lock()
	if cache.m == nil {
		cache.m = map[string]cachedCatalog{}
	}
	cache.mu.Unlock()
	out := make([]proto.NodeFuncs, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = s.nodeCatalog(ctx, cache, n.ID)
		}()
	}
	wg.Wait()
	return out
}

// nodeCatalog is what node id offers, from the cache or fetched.
func (s *Server) nodeCatalog(ctx context.Context, cache *catalogCache, id string) proto.NodeFuncs {
	nf := proto.NodeFuncs{Node: id}
	hash := ""
	if s.members != nil {
		if m, ok := s.members.Member(id); ok {
			hash = m.Meta.Funcs
		}
	}
	if hash == "" || s.nc == nil {
		nf.Builtin = true
		if r, ok := s.cfg.Catalog.(*funcs.Registry); ok {
			nf.Funcs = r.Catalog().Funcs
		}
		return nf
	}
	nf.Hash = hash
	cache.mu.Lock()
	c, ok := cache.m[id]
	cache.mu.Unlock()
	if !ok || c.hash != hash {
		fs, err := s.fetchCatalog(ctx, id)
		if err != nil {
			s.log.Warn("node catalog", "node", id, "err", err)
			nf.Error = err.Error()
			return nf
		}
		c = cachedCatalog{hash: hash, funcs: fs}
		cache.mu.Lock()
		cache.m[id] = c
		cache.mu.Unlock()
	}
	nf.Funcs = c.funcs
	return nf
}

func (s *Server) fetchCatalog(ctx context.Context, node string) ([]proto.FuncInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, catalogFetchTimeout)
	defer cancel()
	body, err := s.nc.Request(ctx, proto.CatalogSubject(node), nil)
	if err != nil {
		return nil, fmt.Errorf("fetching node %s's function catalog: %w", node, err)
	}
	var c proto.Catalog
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("node %s's function catalog: %w", node, err)
	}
	return c.Funcs, nil
}

// offered is the union of what the nodes offer, checked with the
// coordinator's own catalog where it has the code.
func (s *Server) offered(nodes []proto.NodeFuncs) *funcs.Offered {
	return funcs.NewOffered(nodes, s.cfg.Catalog)
}

// placeByFunction narrows the nodes a run is planned on so that every task
// lands on a node that has its function: the nodes that have every
// function of the flow when there are any (and they hold its pins);
// otherwise each task whose function only some nodes have is pinned in g
// to one of them (by seed and path, so that the answer is deterministic).
// A task pinned to a node without its function is an *InvalidError.
func placeByFunction(g *spec.Graph, alive []Node, o *funcs.Offered, seed uint64) ([]Node, error) {
	used := map[string]bool{}
	for _, vx := range g.Vertices {
		if vx.Task.Kind != spec.KindModule && vx.Task.Func != "" {
			used[vx.Task.Func] = true
		}
	}
	holders := map[string]map[string]bool{}
	partial := false
	for f := range used {
		h := map[string]bool{}
		for _, n := range o.Holders(f) {
			h[n] = true
		}
		holders[f] = h
		for _, n := range alive {
			if !h[n.ID] {
				partial = true
			}
		}
	}
	if !partial {
		return alive, nil
	}
	var problems []string
	pins := map[string]bool{}
	for _, vx := range g.Vertices {
		if p := vx.Task.Node; p != "" && vx.Task.Func != "" {
			pins[p] = true
			if !holders[vx.Task.Func][p] {
				problems = append(problems, fmt.Sprintf("task %q is pinned to node %s, which does not have function %q (nodes with it: %s)", vx.Path, p, vx.Task.Func, strings.Join(o.Holders(vx.Task.Func), ", ")))
			}
		}
	}
	if len(problems) > 0 {
		return nil, &InvalidError{Problems: problems}
	}
	var eligible []Node
	for _, n := range alive {
		all := true
		for f := range used {
			all = all && holders[f][n.ID]
		}
		if all {
			eligible = append(eligible, n)
		}
	}
	inEligible := func(id string) bool {
		for _, n := range eligible {
			if n.ID == id {
				return true
			}
		}
		return false
	}
	allPins := len(eligible) > 0
	for p := range pins {
		allPins = allPins && inEligible(p)
	}
	if allPins {
		return eligible, nil
	}
	for v := range g.Vertices {
		t := &g.Vertices[v].Task
		if t.Node != "" || t.Func == "" || t.Kind == spec.KindModule || len(holders[t.Func]) == len(alive) {
			continue
		}
		h := o.Holders(t.Func)
		sort.Strings(h)
		x := fnv.New64a()
		fmt.Fprintf(x, "%d/%s", seed, g.Vertices[v].Path)
		t.Node = h[x.Sum64()%uint64(len(h))]
	}
	return alive, nil
}

// handleFuncs is GET /v1/funcs: what each live node offers.
func (s *Server) handleFuncs(w http.ResponseWriter, r *http.Request) {
	var alive []Node
	s.fsm.read(func(fsm *FSM) {
		for _, n := range fsm.Nodes() {
			if n.State == proto.NodeAlive {
				alive = append(alive, n)
			}
		}
	})
	sort.Slice(alive, func(i, j int) bool { return alive[i].ID < alive[j].ID })
	out := s.nodeFuncs(r.Context(), alive)
	if out == nil {
		out = []proto.NodeFuncs{}
	}
	writeJSON(w, http.StatusOK, out)
}

// cachedOffered is what the nodes offer by the catalogs already fetched,
// for the leader loop, which must not wait on the network: a node that
// advertises no catalog has Config.Catalog's functions, one whose catalog
// is not cached under its current hash offers none.
func (s *Server) cachedOffered(nodes []Node) *funcs.Offered {
	cache := &s.catalogs
	out := make([]proto.NodeFuncs, 0, len(nodes))
	cache.mu.Lock()
	defer cache.mu.Unlock()
	for _, n := range nodes {
		nf := proto.NodeFuncs{Node: n.ID}
		hash := ""
		if s.members != nil {
			if m, ok := s.members.Member(n.ID); ok {
				hash = m.Meta.Funcs
			}
		}
		switch c, ok := cache.m[n.ID]; {
		case hash == "" || s.nc == nil:
			nf.Builtin = true
		case ok && c.hash == hash:
			nf.Funcs = c.funcs
		}
		out = append(out, nf)
	}
	return s.offered(out)
}

// pinMoved pins, in g, each task a reassignment moves (its node in prev is
// not among takers) whose function not every taker has to a taker that
// has it, so that PlanReassign places it there. A moved task whose
// function no taker has is left to PlanReassign (its node will refuse the
// part and the run fails, naming the function).
func pinMoved(g *spec.Graph, prev []string, takers []Node, o *funcs.Offered, seed uint64) {
	if o == nil {
		return
	}
	taker := map[string]bool{}
	for _, n := range takers {
		taker[n.ID] = true
	}
	for v := range g.Vertices {
		t := &g.Vertices[v].Task
		if v >= len(prev) || taker[prev[v]] || t.Node != "" || t.Func == "" || t.Kind == spec.KindModule {
			continue
		}
		var h []string
		for _, n := range o.Holders(t.Func) {
			if taker[n] {
				h = append(h, n)
			}
		}
		if len(h) == 0 || len(h) == len(takers) {
			continue
		}
		x := fnv.New64a()
		fmt.Fprintf(x, "%d/%s", seed, g.Vertices[v].Path)
		t.Node = h[x.Sum64()%uint64(len(h))]
	}
}
