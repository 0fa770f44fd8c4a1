package coord

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// foldReportByEvents is what addReport stands for: each task of each
// delta made a TaskEvent, let in by EventFromOwner and folded by Add, the
// report's node named first and its graph's proof readied (addReport does
// both whatever it lets in).
func foldReportByEvents(f *Fold, g *spec.Graph, tr *transport.TaskReport, runs []uint32, r *Run) {
	if r != nil && tr.Gen > r.Gen {
		return
	}
	f.node(tr.Node)
	f.proof.track(g)
	f.grow(len(g.Vertices))
	for i, d := range tr.Tasks {
		n := uint32(1)
		if runs != nil {
			n = runs[i]
		}
		for k := range n {
			e := transport.TaskEvent{Run: tr.Run, Gen: tr.Gen, Node: tr.Node, Task: d.Task + k, Name: d.Name,
				State: d.State, Act: d.Act, Executions: d.Executions, Output: d.Output}
			if r == nil || EventFromOwner(*r, &e) {
				f.Add(g, &e)
			}
		}
	}
}

// addReport (its owner spans, foldRun's fast way for a vertex with no
// event yet) leaves a fold as folding its tasks' events one by one does:
// random reports of ranges and single deltas, from owners and not, of
// lost nodes, of past and coming generations, with outputs, with names
// (a vertex's path, a subflow child's), of tasks past the graph and past
// the assignment, on random assignments of three nodes, each run's its
// own array of the same length (the owner runs kept by the array); and
// after a Touch, the last report again.
func TestFoldRunIsFold(t *testing.T) {
	g := layeredGraph(t, 4, 50)
	nv := len(g.Vertices)
	nodes := []string{"n1", "n2", "n3"}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 11))
		r := &Run{ID: "r1", Gen: 2, Lost: []string{"n3"}, Assignment: make([]string, nv-rng.IntN(2)*rng.IntN(20))}
		for lo := 0; lo < len(r.Assignment); {
			n, hi := nodes[rng.IntN(3)], min(lo+1+rng.IntN(60), len(r.Assignment))
			for ; lo < hi; lo++ {
				r.Assignment[lo] = n
			}
		}
		if seed%7 == 0 {
			r = nil // a fold of every delta
		}
		got, want := NewFold(), NewFold()
		var tr *transport.TaskReport
		var runs []uint32
		for rep := range 1 + rng.IntN(6) {
			tr = &transport.TaskReport{Run: "r1", Gen: uint64(1 + rng.IntN(3)), Node: nodes[rng.IntN(3)]}
			runs = nil
			for range 1 + rng.IntN(30) {
				d := transport.TaskDelta{Task: uint32(rng.IntN(nv + 10)), State: transport.TaskState(rng.IntN(5)),
					Act: uint64(1 + rng.IntN(3)), Executions: uint64(rng.IntN(3))}
				n := uint32(1 + rng.IntN(80))
				switch rng.IntN(8) {
				case 0:
					d.Output, n = []byte{byte(rng.IntN(3))}, 1+uint32(rng.IntN(2))
				case 1:
					d.Name, n = g.Vertices[rng.IntN(nv)].Path, 1
				case 2:
					d.Name, n = fmt.Sprintf("%s/c%d", g.Vertices[rng.IntN(nv)].Path, rng.IntN(3)), 1
				}
				tr.Tasks, runs = append(tr.Tasks, d), append(runs, n)
			}
			if rng.IntN(4) == 0 { // a report decoded by Decode: a delta a task
				runs = nil
			}
			got.addReport(g, tr, runs, r)
			foldReportByEvents(want, g, tr, runs, r)
			if !sameFold(got, want) {
				t.Fatalf("seed %d, report %d: the fold of the report is not the fold of its events:\n got %+v\nwant %+v", seed, rep, got.n, want.n)
			}
		}
		// the run's state changed (Touch drops the journal), then the
		// last report read again: a row it does not change takes no journal
		got.Touch()
		want.Touch()
		got.addReport(g, tr, runs, r)
		foldReportByEvents(want, g, tr, runs, r)
		if !sameFold(got, want) {
			t.Fatalf("seed %d, the last report again after Touch: the fold of the report is not the fold of its events:\n got %+v\nwant %+v (journals %d, %d)", seed, got.n, want.n, len(got.journal), len(want.journal))
		}
		if got.ntasks == 0 && r != nil && seed < 10 {
			t.Logf("seed %d: no task let in", seed)
		}
	}
}

// sameFold reports whether folds a and b are the same but for their
// proofs: foldRun proves a span once its rows are set, where Add proves
// each row as it comes (a vertex whose one strong predecessor comes later
// in the span can be proved by the one and not by the other; both are
// sound, TestCheckFoldIsCheck checks it of addReport and Add).
func sameFold(a, b *Fold) bool {
	ac, bc := *a, *b
	ac.proof, bc.proof = foldProof{}, foldProof{}
	return reflect.DeepEqual(&ac, &bc)
}

// A report of a few tasks is let in a task at a time, without the owner
// runs of the whole assignment made (ownerRunsOf keeps one assignment's:
// two runs read in turn would make them again for each report); one of
// an eighth of the assignment's tasks is let in by the owner runs.
func TestSmallReportMakesNoOwnerRuns(t *testing.T) {
	g := layeredGraph(t, 4, 50)
	nv := len(g.Vertices)
	r := &Run{ID: "r1", Gen: 1, Assignment: make([]string, nv)}
	for v := range r.Assignment {
		r.Assignment[v] = []string{"n1", "n2"}[v/10%2]
	}
	small := &transport.TaskReport{Run: "r1", Gen: 1, Node: "n1", Tasks: []transport.TaskDelta{{Task: 5, State: transport.TaskDone, Act: 1, Executions: 1}}}
	made := ownerRunsMade.Load()
	got, want := NewFold(), NewFold()
	got.addReport(g, small, []uint32{10}, r)
	foldReportByEvents(want, g, small, []uint32{10}, r)
	if n := ownerRunsMade.Load() - made; n != 0 {
		t.Fatalf("a report of 10 of %d tasks made the owner runs %d times", nv, n)
	}
	if !reflect.DeepEqual(got, want) || got.ntasks != 5 {
		t.Fatalf("the fold of the small report (%d tasks) is not the fold of its events", got.ntasks)
	}
	large := &transport.TaskReport{Run: "r1", Gen: 1, Node: "n1", Tasks: []transport.TaskDelta{{Task: 0, State: transport.TaskDone, Act: 1, Executions: 1}}}
	got.addReport(g, large, []uint32{uint32(nv / 8)}, r)
	if n := ownerRunsMade.Load() - made; n != 1 {
		t.Fatalf("a report of %d of %d tasks made the owner runs %d times, want once", nv/8, nv, n)
	}
}
