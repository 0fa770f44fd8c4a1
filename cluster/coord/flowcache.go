package coord

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/wlru"
	"github.com/hetflow/hetflow/transport"
)

// A coordinator parses a flow's text, and expands a run's canonical flow,
// once for all the runs of that flow: the submit of a flow submitted before
// (same file name, text and parameters) and the status of every run of a
// flow run before do not parse it again (issue "run a flow at the speed of
// its graph"). What is cached is read-only: a submit compiles and pins its
// own graph from the cached file, and a reassign expands its own.
//
// Both caches are bounded by the tasks they hold (maxCachedTasks each).
type flowCaches struct {
	bound  *wlru.Cache[[32]byte, *boundFlow]  // by submitKey
	graphs *wlru.Cache[[32]byte, *spec.Graph] // by the SHA-256 of Run.Flow
	loops  *wlru.Cache[[32]byte, *runLoops]   // by the SHA-256 of Run.Flow
}

// runLoops is what the run protocol derives from a run's whole graph
// (runproto.NewLoops, FreeJoins), which the nodes' plans carry.
type runLoops struct {
	loops *runproto.Loops
	free  []bool
}

// maxCachedTasks bounds each of a coordinator's flow caches. An expanded
// graph is about 1.1 KB a task (111 MB at 100K tasks), so the graphs cache
// holds two 100K-task flows at most; a finished run's status cache lets its
// own reference go (statusCache.body), so what stays is this bound.
const maxCachedTasks = 200_000

func newFlowCaches() flowCaches {
	return flowCaches{wlru.New[[32]byte, *boundFlow](maxCachedTasks), wlru.New[[32]byte, *spec.Graph](maxCachedTasks),
		wlru.New[[32]byte, *runLoops](maxCachedTasks)}
}

// boundFlow is a submitted file parsed, its parameters bound
// (spec.File.Bind), and the canonical JSON of the result (spec.Marshal).
type boundFlow struct {
	f      *spec.File
	values map[string]any
	canon  []byte
	tasks  int // f.ExpandedSize(): the cache's weight
}

// submitKey names a submit's file by what decides its parse: the name it
// was read under (errors carry it), its text and the parameters given.
func submitKey(path string, text []byte, params map[string]any) ([32]byte, error) {
	p, err := json.Marshal(params) // map keys sorted: one encoding per set of values
	if err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s%d:", len(path), path, len(text))
	h.Write(text)
	h.Write(p)
	var k [32]byte
	h.Sum(k[:0])
	return k, nil
}

// bind parses and binds a submitted file, or finds it done by an earlier
// submit. The error is the spec's (the caller words it as invalid input);
// failures are not cached.
func (fc flowCaches) bind(path string, text []byte, params map[string]any) (*boundFlow, error) {
	key, kerr := submitKey(path, text, params)
	if kerr == nil {
		if b, ok := fc.bound.Get(key); ok {
			return b, nil
		}
	}
	f, err := spec.Parse(path, text)
	if err != nil {
		return nil, err
	}
	b, err := bindParsed(f, params)
	if err != nil {
		return nil, err
	}
	if kerr == nil {
		fc.bound.Put(key, b, max(b.tasks, 1))
	}
	return b, nil
}

// adopt keeps f, text already parsed by the caller, as bind would keep it
// for a submit of (path, text, params): that submit does not parse it
// again. The error is the spec's.
func (fc flowCaches) adopt(path string, text []byte, params map[string]any, f *spec.File) error {
	key, err := submitKey(path, text, params)
	if err != nil {
		return err
	}
	if _, ok := fc.bound.Get(key); ok {
		return nil
	}
	b, err := bindParsed(f, params)
	if err != nil {
		return err
	}
	fc.bound.Put(key, b, max(b.tasks, 1))
	return nil
}

func bindParsed(f *spec.File, params map[string]any) (*boundFlow, error) {
	f, values, err := f.Bind(params)
	if err != nil {
		return nil, err
	}
	canon, err := spec.Marshal(f, spec.FormatJSON)
	if err != nil {
		return nil, fmt.Errorf("coord: marshal flow: %w", err)
	}
	return &boundFlow{f: f, values: values, canon: canon, tasks: f.ExpandedSize()}, nil
}

// graph is run r's flow expanded (spec.File.Expand), shared by every run of
// the same canonical flow.
func (fc flowCaches) graph(r Run) (*spec.Graph, error) {
	key := sha256.Sum256(r.Flow)
	if g, ok := fc.graphs.Get(key); ok {
		return g, nil
	}
	f, err := spec.ParseJSON(r.ID+".json", r.Flow)
	if err != nil {
		return nil, err
	}
	g, err := f.Expand()
	if err != nil {
		return nil, err
	}
	fc.graphs.Put(key, g, max(len(g.Vertices), 1))
	return g, nil
}

// putGraph keeps g, a submit's graph of the canonical flow canon (compiled
// from the file canon was marshalled from, which parses back to the same
// flows: spec's fuzz tests hold Marshal to that), for the run's plans and
// status: the leader does not parse and expand it again. The submit's
// function pins (placeByFunction) are in g; neither reads them.
func (fc flowCaches) putGraph(canon []byte, g *spec.Graph) {
	fc.graphs.Put(sha256.Sum256(canon), g, max(len(g.Vertices), 1))
}

// plans compiles the plan of each node's part of run r's generation
// (LeaderConfig.Plans): its graph and loops from the caches, then
// runproto.Compile over its assignment.
func (fc flowCaches) plans(r Run) (map[string][]byte, error) {
	g, err := fc.graph(r)
	if err != nil {
		return nil, fmt.Errorf("run %s: its flow: %w", r.ID, err)
	}
	key := sha256.Sum256(r.Flow)
	rl, ok := fc.loops.Get(key)
	if !ok {
		l := runproto.NewLoops(g)
		rl = &runLoops{l, runproto.FreeJoinsOf(g, l)}
		fc.loops.Put(key, rl, max(len(g.Vertices), 1))
	}
	idx := make(map[string]uint32, len(r.Nodes))
	for i, n := range r.Nodes {
		idx[n] = uint32(i)
	}
	owner := make([]uint32, len(r.Assignment))
	for v, n := range r.Assignment {
		i, ok := idx[n]
		if !ok {
			return nil, fmt.Errorf("run %s: task %d is assigned to %s, not a node of the run", r.ID, v, n)
		}
		owner[v] = i
	}
	ps, err := runproto.Compile(g, rl.loops, rl.free, r.Nodes, owner)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", r.ID, err)
	}
	out := make(map[string][]byte, len(ps))
	for i, p := range ps {
		out[r.Nodes[i]] = transport.Encode(p)
	}
	return out, nil
}
