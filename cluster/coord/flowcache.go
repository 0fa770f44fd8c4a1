package coord

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/wlru"
	"github.com/hetflow/hetflow/transport"
)

// A coordinator parses a flow's text, and expands a run's canonical flow,
// once for all the runs of that flow: the submit of a flow submitted before
// (same file name, text and parameters) and the status of every run of a
// flow run before do not parse it again (issue "run a flow at the speed of
// its graph"). A run of a flow again, with the same parameters, on the
// same live nodes offering the same catalogs (placedKey), takes the
// compiled graph and the placement of the run before, and the nodes'
// plans compiled for it: it is neither validated, expanded, placed nor
// compiled into plans again. What is cached is read-only: a submit that
// misses compiles and pins its own graph from the cached file, and a
// reassign expands its own.
//
// Every cache is bounded by the tasks it holds (maxCachedTasks each).
type flowCaches struct {
	bound    *wlru.Cache[[32]byte, *boundFlow]  // by submitKey, and by runKey
	graphs   *wlru.Cache[[32]byte, *spec.Graph] // by runKey(Run.FlowID, Run.Params)
	loops    *wlru.Cache[[32]byte, *runLoops]   // by runKey(Run.FlowID, Run.Params)
	placed   *wlru.Cache[[32]byte, *placedRun]  // by placedKey
	compiled *wlru.Cache[[32]byte, *runPlans]   // by plansKey
}

// placedRun is a flow bound to parameters, compiled (validated against
// the live nodes' catalogs and resources, expanded) and placed on those
// nodes: what a run of it again on the same nodes, with the same catalogs,
// takes as it is (Server.start) instead of validating, expanding and
// placing the flow again. g is read-only (placeByFunction's pins are in
// it); assign is the first such run's placement.
type placedRun struct {
	g      *spec.Graph
	assign []string
}

// runPlans are the encoded plans of each node's part of a run (plans).
type runPlans struct {
	byNode map[string]NodePlan
}

// NodePlan is the encoded plan of a node's part of a run (a transport.Plan)
// and its SHA-256, which names it in an Assignment that does not carry it
// (transport.Assignment.PlanDigest).
type NodePlan struct {
	Plan   []byte
	Digest [32]byte
}

// NewNodePlan is plan with its digest.
func NewNodePlan(plan []byte) NodePlan { return NodePlan{plan, sha256.Sum256(plan)} }

// runLoops is what the run protocol derives from a run's whole graph
// (runproto.NewLoops, FreeJoins), which the nodes' plans carry.
type runLoops struct {
	loops *runproto.Loops
	free  []bool
}

// maxCachedTasks bounds each of a coordinator's flow caches. An expanded
// graph is about 1.1 KB a task (111 MB at 100K tasks), so the graphs cache
// holds two 100K-task flows at most; a finished run's status cache lets its
// own reference go (statusCache.done), so what stays is this bound.
const maxCachedTasks = 200_000

func newFlowCaches() flowCaches {
	return flowCaches{wlru.New[[32]byte, *boundFlow](maxCachedTasks), wlru.New[[32]byte, *spec.Graph](maxCachedTasks),
		wlru.New[[32]byte, *runLoops](maxCachedTasks), wlru.New[[32]byte, *placedRun](maxCachedTasks),
		wlru.New[[32]byte, *runPlans](maxCachedTasks)}
}

// placedKey names what a run's compile and placement depend on: the flow
// and its parameter values (runKey), and each live node (alive, as the
// FSM lists them, by id) with its capacity and the catalog it offers
// (catalogs[i] is alive[i]'s: its hash, or the coordinator's own for a
// node that advertises none). ok is false when the answer must not be
// cached: a catalog that could not be read, or no node alive.
func placedKey(flow [32]byte, alive []Node, catalogs []proto.NodeFuncs) (key [32]byte, ok bool) {
	if len(alive) == 0 || len(catalogs) != len(alive) {
		return key, false
	}
	h := sha256.New()
	h.Write(flow[:])
	for i, n := range alive {
		nf := catalogs[i]
		if nf.Error != "" || nf.Node != n.ID {
			return key, false
		}
		fmt.Fprintf(h, "%d:%s %d %d %d:%s %t;", len(n.ID), n.ID, n.CPUs, n.GPUs, len(nf.Hash), nf.Hash, nf.Builtin)
	}
	h.Sum(key[:0])
	return key, true
}

// boundFlow is a flow file parsed, its parameters bound (spec.File.Bind),
// and the canonical JSON of the result (spec.Canonical): what a run of it
// executes. stored is the flow as the registry holds it: its canonical
// JSON with the parameters not substituted, and its id (the caller sets
// Registered and Stored).
type boundFlow struct {
	f      *spec.File
	values map[string]any
	canon  []byte
	tasks  int // f.ExpandedSize(): the cache's weight
	stored StoredFlow
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

// runKey names a registered flow bound to parameters (a run of it by id,
// and the flow a run executes).
func runKey(id string, params map[string]any) ([32]byte, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "run:%s:", id)
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
	b, err := bindFile(path, text, f, params)
	if err != nil {
		return nil, err
	}
	if kerr == nil {
		fc.bound.Put(key, b, max(b.tasks, 1))
	}
	fc.keep(b)
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
	b, err := bindFile(path, text, f, params)
	if err != nil {
		return err
	}
	fc.bound.Put(key, b, max(b.tasks, 1))
	fc.keep(b)
	return nil
}

// bindFile binds params into f, parsed from text under path, and names the
// flow it stores (its canonical JSON, unbound, and that text's id).
func bindFile(path string, text []byte, f *spec.File, params map[string]any) (*boundFlow, error) {
	src, err := spec.Canonical(f)
	if err != nil {
		return nil, fmt.Errorf("coord: marshal flow: %w", err)
	}
	b, err := bound(f, src, params)
	if err != nil {
		return nil, err
	}
	name := ""
	if r := f.Root(); r != nil {
		name = r.Name
	}
	b.stored = StoredFlow{ID: FlowID(src), Name: name, Path: path, Text: src, HasParams: len(f.Params()) > 0,
		Tasks: b.tasks, Bytes: len(text)}
	return b, nil
}

// keep files b as the flow's binding to its values, given or default:
// what a run of it by id with them (RunFlow) and the flow of such a run
// (Server.runFlow) look up.
func (fc flowCaches) keep(b *boundFlow) {
	if k, err := runKey(b.stored.ID, b.values); err == nil {
		fc.bound.Put(k, b, max(b.tasks, 1))
	}
}

// bound binds params into f, whose canonical JSON is src.
func bound(f *spec.File, src []byte, params map[string]any) (*boundFlow, error) {
	bf, values, err := f.Bind(params)
	if err != nil {
		return nil, err
	}
	canon := src
	if bf != f { // it declares parameters: they are substituted now
		if canon, err = spec.Canonical(bf); err != nil {
			return nil, fmt.Errorf("coord: marshal flow: %w", err)
		}
	}
	return &boundFlow{f: bf, values: values, canon: canon, tasks: bf.ExpandedSize()}, nil
}

// bindStored parses a registered flow and binds params into it. Errors
// name the file it was given under, without lines (noLines: they would be
// the canonical JSON's).
func bindStored(sf StoredFlow, params map[string]any) (*boundFlow, error) {
	f, err := spec.ParseJSON(sf.Path, sf.Text)
	if err != nil {
		return nil, fmt.Errorf("coord: flow %s does not parse: %w", sf.ID, err)
	}
	b, err := bound(f, sf.Text, params)
	if err != nil {
		return nil, noLines(err)
	}
	b.stored = sf
	return b, nil
}

// stored is bindStored, done once for each set of parameters.
func (fc flowCaches) stored(sf StoredFlow, params map[string]any) (*boundFlow, error) {
	key, kerr := runKey(sf.ID, params)
	if kerr == nil {
		if b, ok := fc.bound.Get(key); ok {
			return b, nil
		}
	}
	b, err := bindStored(sf, params)
	if err != nil {
		return nil, err
	}
	if kerr == nil {
		fc.bound.Put(key, b, max(b.tasks, 1))
	}
	return b, nil
}

// noLines drops the line numbers of a spec error about a registered flow:
// they are its canonical JSON's, which the user never wrote.
func noLines(err error) error {
	var es spec.Errors
	if errors.As(err, &es) {
		for _, e := range es {
			e.Line = 0
		}
	}
	return err
}

// graph is run r's flow (text, what View.RunFlow gives) expanded
// (spec.File.Expand), shared by every run of the same flow and parameters.
func (fc flowCaches) graph(r Run, text func(Run) ([]byte, error)) (*spec.Graph, error) {
	key, kerr := runKey(r.FlowID, r.Params)
	if kerr == nil {
		if g, ok := fc.graphs.Get(key); ok {
			return g, nil
		}
	}
	b, err := text(r)
	if err != nil {
		return nil, err
	}
	f, err := spec.ParseJSON(r.ID+".json", b)
	if err != nil {
		return nil, err
	}
	g, err := f.Expand()
	if err != nil {
		return nil, err
	}
	if kerr == nil {
		fc.graphs.Put(key, g, max(len(g.Vertices), 1))
	}
	return g, nil
}

// putGraph keeps g, a submit's graph of the run it makes of a flow with
// parameter values, under their runKey (compiled from the file the flow's canonical
// JSON was marshalled from, which parses back to the same flows: spec's
// fuzz tests hold Marshal to that), for the run's plans and status: the
// leader does not parse and expand it again. The submit's function pins
// (placeByFunction) are in g; neither reads them.
func (fc flowCaches) putGraph(key [32]byte, g *spec.Graph) {
	fc.graphs.Put(key, g, max(len(g.Vertices), 1))
}

// plans compiles the plan of each node's part of run r's generation
// (LeaderConfig.Plans): its graph (from text, Server.runFlow, unless
// cached) and loops from the caches, then runproto.Compile over its
// assignment.
//
// The plans depend on the flow, its parameters, the run's nodes and its
// assignment alone (not on the run's id or generation): a run of a flow
// again on the same placement (a placedRun) takes the plans compiled for
// the one before.
func (fc flowCaches) plans(r Run, text func(Run) ([]byte, error)) (map[string]NodePlan, error) {
	key, kerr := runKey(r.FlowID, r.Params)
	var pkey [32]byte
	if kerr == nil {
		pkey = plansKey(key, r)
		if p, ok := fc.compiled.Get(pkey); ok {
			return p.byNode, nil
		}
	}
	g, err := fc.graph(r, text)
	if err != nil {
		return nil, fmt.Errorf("run %s: its flow: %w", r.ID, err)
	}
	var rl *runLoops
	ok := false
	if kerr == nil {
		rl, ok = fc.loops.Get(key)
	}
	if !ok {
		l := runproto.NewLoops(g)
		rl = &runLoops{l, runproto.FreeJoinsOf(g, l)}
		if kerr == nil {
			fc.loops.Put(key, rl, max(len(g.Vertices), 1))
		}
	}
	owner, bad := owners(r.Nodes, r.Assignment)
	if bad >= 0 {
		return nil, fmt.Errorf("run %s: task %d is assigned to %s, not a node of the run", r.ID, bad, r.Assignment[bad])
	}
	ps, err := runproto.Compile(g, rl.loops, rl.free, r.Nodes, owner)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", r.ID, err)
	}
	out := make(map[string]NodePlan, len(ps))
	for i, p := range ps {
		out[r.Nodes[i]] = NewNodePlan(transport.Encode(p))
	}
	if kerr == nil {
		fc.compiled.Put(pkey, &runPlans{out}, max(len(r.Assignment), 1))
	}
	return out, nil
}

// plansKey names run r's plans: its flow bound (flow, runKey), its nodes
// and its assignment.
func plansKey(flow [32]byte, r Run) [32]byte {
	h := sha256.New()
	h.Write(flow[:])
	fmt.Fprintf(h, "%d;", len(r.Nodes))
	for _, n := range r.Nodes {
		fmt.Fprintf(h, "%d:%s;", len(n), n)
	}
	h.Write(rangesOf(r.Assignment)) // its runs of tasks on one node: a few bytes where a byte a task was 100 KB to hash; packed once for its array (the entry's)
	var k [32]byte
	h.Sum(k[:0])
	return k
}
