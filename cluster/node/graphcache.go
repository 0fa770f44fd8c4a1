package node

import (
	"crypto/sha256"

	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/wlru"
)

// compiled is an Assignment's flow parsed, validated and expanded against
// the node's registry (spec.File.Compile), with what the run protocol
// derives from the graph alone. It is read-only once made, so runs of one
// flow share it: the second run of a flow does not parse it again (issue
// "run a flow at the speed of its graph": compiled graphs cached by flow
// hash on the nodes).
type compiled struct {
	g     *spec.Graph
	loops *runproto.Loops
	free  []bool // runproto.FreeJoins
}

// maxCachedVertices bounds a node's cache of compiled flows (about 2 KB a
// vertex, so some hundreds of MB at most).
const maxCachedVertices = 400_000

// graphCache holds the compiled flows of recent Assignments by the SHA-256
// of the flow text. A node's registry is fixed for its life, so the text
// alone decides what compiling gives.
type graphCache struct {
	c *wlru.Cache[[32]byte, *compiled]
}

func newGraphCache(maxVertices int) graphCache {
	return graphCache{wlru.New[[32]byte, *compiled](maxVertices)}
}

// compile returns the compiled form of flow (named name in errors), from
// the cache when an earlier Assignment had the same flow text. Errors are
// not cached: a flow that does not compile is refused each time.
func (gc graphCache) compile(name string, flow []byte, reg spec.Catalog) (*compiled, error) {
	key := sha256.Sum256(flow)
	if c, ok := gc.c.Get(key); ok {
		return c, nil
	}
	f, err := spec.Parse(name, flow)
	if err != nil {
		return nil, err
	}
	g, err := f.Compile(spec.Options{Funcs: reg}) // validated and resolved once
	if err != nil {
		return nil, err
	}
	c := &compiled{g: g, loops: runproto.NewLoops(g), free: runproto.FreeJoins(g)}
	gc.c.Put(key, c, len(g.Vertices))
	return c, nil
}

// stats returns how many flows the cache holds and how many compiles it saved.
func (gc graphCache) stats() (flows int, hits uint64) {
	n, _, hits := gc.c.Stats()
	return n, hits
}
