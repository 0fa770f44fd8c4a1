package coord

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/flowgen"
	"github.com/hetflow/hetflow/transport"
)

// packGraph is a layered graph large enough for a fold to pack.
func packGraph(t *testing.T) *spec.Graph {
	t.Helper()
	g := layeredGraph(t, 10, 500)
	if len(g.Vertices) < minPooledAgg {
		t.Fatalf("%d vertices: too few to pack", len(g.Vertices))
	}
	return g
}

// sameShown fails unless folds a and b show the same: the full status,
// the tallies, the record check and the deltas since each version in vers,
// for each run state.
func sameShown(t *testing.T, what string, g *spec.Graph, r Run, a, b *Fold, vers []uint64) {
	t.Helper()
	if a.Version() != b.Version() {
		t.Fatalf("%s: version %d, want %d", what, a.Version(), b.Version())
	}
	for _, state := range []string{r.State, proto.RunFailed, proto.RunCancelled} {
		r := r
		r.State = state
		if got, want := a.AppendJSON(nil, r, g), b.AppendJSON(nil, r, g); !bytes.Equal(got, want) {
			t.Fatalf("%s (%s): status differs", what, state)
		}
		if got, want := a.Progress(r, g), b.Progress(r, g); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s (%s): progress %+v, want %+v", what, state, got, want)
		}
		for _, v := range vers {
			if got, want := a.Delta(r, g, v), b.Delta(r, g, v); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s (%s): delta since %d: full %v %d rows, want full %v %d rows", what, state, v, got.Full, len(got.Tasks), want.Full, len(want.Tasks))
			}
		}
	}
	ao, af := CheckSuccess(g, a)
	bo, bf := CheckSuccess(g, b)
	if !reflect.DeepEqual(ao, bo) || !reflect.DeepEqual(af, bf) {
		t.Fatalf("%s: record check %v %v, want %v %v", what, ao, af, bo, bf)
	}
}

// A finished run's fold packed (Fold.pack: its aggregates run-length, its
// array handed to the next fold) shows what it showed, and goes on folding
// late events as a fold never packed does; a fold made after it, from the
// array it handed on, folds as a new one. Runs of one node, of nodes by
// ranges, with tasks never run, failed, run again or reported by two nodes.
func TestFoldPackChangesNothingShown(t *testing.T) {
	g := packGraph(t)
	nv := len(g.Vertices)
	nodes := []string{"n1", "n2", "n3"}
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 3))
		r := Run{ID: "r", FlowName: "layered", State: proto.RunRunning, Gen: 1}
		var events []*transport.TaskEvent
		cut := nv
		if seed%2 == 1 {
			cut = rng.IntN(nv) // the tasks from cut on are another node's
		}
		for v := range nv {
			node := nodes[0]
			if v >= cut {
				node = nodes[1]
			}
			events = append(events,
				&transport.TaskEvent{Run: "r", Gen: 1, Task: uint32(v), Node: node, State: transport.TaskRunning, Act: 1},
				&transport.TaskEvent{Run: "r", Gen: 1, Task: uint32(v), Node: node, State: transport.TaskDone, Act: 1, Executions: 1})
		}
		for range rng.IntN(20) { // odd tasks: failed, again, unrun, two nodes, an output
			e := *events[2*rng.IntN(nv)+1]
			switch rng.IntN(5) {
			case 0:
				e.State = transport.TaskFailed
			case 1:
				e.Act, e.Executions = 2, 2
			case 2:
				e.State = transport.TaskRunning
			case 3:
				e.Node = nodes[2]
			case 4:
				e.Output = []byte{byte(rng.IntN(3))}
			}
			events = append(events, &e)
		}
		unrun := map[uint32]bool{}
		for range rng.IntN(10) {
			unrun[uint32(rng.IntN(nv))] = true
		}
		packed, plain := NewFold(), NewFold()
		for _, e := range events {
			if !unrun[e.Task] {
				packed.Add(g, e)
				plain.Add(g, e)
			}
		}
		vers := []uint64{0, packed.Version() / 2}
		r.State = proto.RunSucceeded
		packed.Touch()
		plain.Touch()
		vers = append(vers, packed.Version())
		packed.pack()
		if packed.packed == nil || packed.vert != nil {
			t.Fatalf("seed %d: a run of %d tasks on two nodes at most, a few odd ones, did not pack", seed, nv)
		}
		sameShown(t, "packed", g, r, packed, plain, vers)

		// The next run's fold, from the array handed on, folds as a new one.
		next, fresh := NewFold(), NewFold()
		fresh.vert = make([]taskAgg, nv)
		for _, e := range events[:nv] {
			next.Add(g, e)
			fresh.Add(g, e)
		}
		sameShown(t, "next run", g, Run{ID: "r2", FlowName: "layered", State: proto.RunRunning, Gen: 1}, next, fresh, []uint64{0, 3})

		// Late events unpack it; it goes on as the plain one.
		for range 1 + rng.IntN(5) {
			e := *events[rng.IntN(len(events))]
			e.Executions++
			packed.Add(g, &e)
			plain.Add(g, &e)
		}
		if packed.packed != nil {
			t.Fatalf("seed %d: a late event left the fold packed", seed)
		}
		sameShown(t, "late events", g, r, packed, plain, vers)
		packed.pack() // the journal holds changes: no pack
		if packed.packed != nil {
			t.Fatalf("seed %d: packed with changes in its journal", seed)
		}
		sameShown(t, "late events, pack refused", g, r, packed, plain, vers)
	}
}

// A fold whose aggregates are many runs (every task its own) is not packed.
func TestFoldPackLeavesAMixedFold(t *testing.T) {
	g := packGraph(t)
	f := NewFold()
	for v := range g.Vertices {
		f.Add(g, &transport.TaskEvent{Run: "r", Gen: 1, Task: uint32(v), Node: "n1", State: transport.TaskDone, Act: uint64(1 + v%2), Executions: 1})
	}
	f.Touch()
	f.pack()
	if f.packed != nil || len(f.vert) != len(g.Vertices) {
		t.Fatalf("a fold of %d alternating aggregates was packed", len(g.Vertices))
	}
}

// BenchmarkFoldRunAgain100K is the fold of one run again of the 100,000-
// task layered flow as the leader reads it: the node's reports of ranges
// of 50 tasks done (a TaskReport decoded by runs), let in by the run's
// assignment, then the run's end (Touch, pack): the arrays a run's fold
// takes are the ones the run before handed on.
func BenchmarkFoldRunAgain100K(b *testing.B) {
	f, err := spec.ParseJSON("layered.json", flowgen.Layered(100, 1000, 1, true))
	if err != nil {
		b.Fatal(err)
	}
	g, err := f.Expand()
	if err != nil {
		b.Fatal(err)
	}
	nv := len(g.Vertices)
	r, tr, runs := runAgainReport(nv)
	verdictPlanOf(g) // made for the graph's first run, kept for its runs again
	for b.Loop() {
		fo := NewFold()
		fo.addReport(g, &tr, runs, &r)
		if fo.n.state[transport.TaskDone] != nv {
			b.Fatalf("%d done", fo.n.state[transport.TaskDone])
		}
		fo.Touch()
		fo.pack()
	}
}

// BenchmarkFoldCheckRunAgain100K is BenchmarkFoldRunAgain100K with the
// leader's record check after the fold (checkRecordAside's: checkFold, the
// rows not proved as they were folded), before the run's end: the
// coordinator's work from a run again's reports to its verdict.
func BenchmarkFoldCheckRunAgain100K(b *testing.B) {
	g := layeredGraph(b, 100, 1000)
	nv := len(g.Vertices)
	r, tr, runs := runAgainReport(nv)
	p := verdictPlanOf(g)
	for b.Loop() {
		fo := NewFold()
		fo.KeepProof() // the leader's
		fo.addReport(g, &tr, runs, &r)
		if owed, failed := p.checkFold(g, fo); len(owed) > 0 || len(failed) > 0 {
			b.Fatalf("owed %v, failed %v", owed, failed)
		}
		fo.Touch()
		fo.pack()
	}
}

// runAgainReport is the run of the run-again benchmarks, nv tasks all
// placed on n1, and n1's report of them done: a delta a range of 50 tasks
// (runs: each range's length, the report decoded by runs).
func runAgainReport(nv int) (r Run, tr transport.TaskReport, runs []uint32) {
	r = Run{ID: "r", FlowName: "layered", State: proto.RunRunning, Gen: 1, Assignment: make([]string, nv)}
	for i := range r.Assignment {
		r.Assignment[i] = "n1"
	}
	tr = transport.TaskReport{Run: "r", Gen: 1, Node: "n1"}
	for lo := 0; lo < nv; lo += 50 {
		tr.Tasks = append(tr.Tasks, transport.TaskDelta{Task: uint32(lo), State: transport.TaskDone, Act: 1, Executions: 1})
		runs = append(runs, uint32(min(50, nv-lo)))
	}
	return r, tr, runs
}

// layeredGraph is flowgen's layered DAG of layers × width no-op tasks
// (seed 1), expanded.
func layeredGraph(tb testing.TB, layers, width int) *spec.Graph {
	tb.Helper()
	return expand(tb, string(flowgen.Layered(layers, width, 1, false)))
}
