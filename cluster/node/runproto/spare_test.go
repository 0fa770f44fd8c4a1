package runproto

import (
	"testing"

	"github.com/hetflow/hetflow/transport"
)

// A stopped Run hands its per-vertex arrays, cleared, to the next Run of
// its size (Release, Config.Spare); a Signal of the old run that comes
// late touches neither its arrays, now the new run's, nor anything else,
// and the old run reads no waiting Signal of the new one.
func TestSpareGoesToTheNextRunOnly(t *testing.T) {
	owner := []uint32{1, 0, 0} // v0 on n1, v1 and v2 here
	cfg := func(run string, sp Spare) Config {
		return Config{Self: "n0", Run: run, Gen: 1, Nodes: []string{"n0", "n1"}, Owner: owner,
			Done: func(int) uint64 { return 0 }, Spare: sp}
	}
	// activation 2 of v1 needs its first: it waits (Run.gate)
	sig := func(run string) []transport.Signal {
		return []transport.Signal{{Run: run, Gen: 1, Src: 0, Dst: 1, Act: 2, DstAct: 2, Kind: transport.SignalEdge}}
	}
	r1, err := New(cfg("r1", Spare{}))
	if err != nil {
		t.Fatal(err)
	}
	r1.Batch("n1", 1, 0, sig("r1"))
	if !r1.Waits(1) {
		t.Fatal("r1: v1 waits for nothing; the test needs a waiting Signal")
	}
	if sp := r1.Release(); sp.waits != nil || sp.moved != nil {
		t.Fatal("a running Run handed its arrays on")
	}
	// generation 2: v0 moves here from n1 (a moved entry set)
	if _, _, err := r1.Assign(&transport.Assignment{Run: "r1", Gen: 2, Nodes: []string{"n0", "n1"}, Owner: []uint32{0, 0, 0}}); err != nil {
		t.Fatal(err)
	}
	if !r1.moved[0] || !r1.Waits(1) {
		t.Fatalf("r1 at generation 2: v0 moved %v, v1 waits %v; the test needs both", r1.moved[0], r1.Waits(1))
	}
	r1.Stop()
	sp := r1.Release()
	if len(sp.waits) != 3 || len(sp.moved) != 3 {
		t.Fatalf("spare: %d waits, %d moved; want 3 each", len(sp.waits), len(sp.moved))
	}
	for v := range 3 {
		if sp.waits[v].Load() || sp.moved[v] {
			t.Fatalf("spare not cleared: v%d waits %v, moved %v", v, sp.waits[v].Load(), sp.moved[v])
		}
	}
	r2, err := New(cfg("r2", sp))
	if err != nil {
		t.Fatal(err)
	}
	if &r2.waits[0] != &sp.waits[0] || &r2.moved[0] != &sp.moved[0] {
		t.Fatal("the next run made its own arrays")
	}
	r2.Batch("n1", 1, 0, sig("r2"))
	if !r2.Waits(1) || r1.Waits(1) {
		t.Fatalf("r2 waits %v, r1 waits %v: want r2's alone", r2.Waits(1), r1.Waits(1))
	}
	// late: a copy of r1's, and r1's Signal of another activation
	if acts := r1.Batch("n1", 2, 0, append(sig("r1"), transport.Signal{Run: "r1", Gen: 1, Src: 0, Dst: 2, Act: 1, Kind: transport.SignalEdge})); len(acts) != 0 {
		t.Fatalf("the stopped run acted on a late Signal: %v", show(acts))
	}
	if !r2.Waits(1) || r2.Waits(2) || r2.moved[0] || r2.moved[1] || r2.moved[2] {
		t.Fatal("a late Signal of r1 changed r2's arrays")
	}
	// every other input the released r1 may still get (its node's paths
	// that reach it after Release: an Assignment, a follow's batch or
	// caught-up, a completed activation, a probe, a report) acts on
	// nothing and leaves r2's arrays as they were
	late := []struct {
		name string
		call func() []Action
	}{
		{"Assign", func() []Action {
			acts, _, err := r1.Assign(&transport.Assignment{Run: "r1", Gen: 3, Nodes: []string{"n0", "n1"}, Owner: []uint32{1, 1, 0}})
			if err != nil {
				t.Fatal(err)
			}
			return acts
		}},
		{"FollowBatch", func() []Action {
			// addressed to a node gone from generation 2, for v1, which r1
			// owns: a running r1 would take it
			return r1.FollowBatch(1, "n9", &transport.Batch{From: "n0", Seq: 3, Signals: []transport.Signal{{Run: "r1", Gen: 2, Src: 2, Dst: 1, Act: 1, DstAct: 1, Kind: transport.SignalEdge}}})
		}},
		{"StartFollow", r1.StartFollow},
		{"CaughtUp", func() []Action { return r1.CaughtUp(r1.FollowID()) }},
		{"Completed", func() []Action { return r1.Completed(1) }},
		{"BatchAll", func() []Action { acts, _ := r1.BatchAll("n1", 4, sig("r1")); return acts }},
		{"Probe", func() []Action { r1.Probe(7); return nil }},
		{"Report", func() []Action { r1.Report(true); return nil }},
	}
	for _, l := range late {
		if acts := l.call(); len(acts) != 0 {
			t.Fatalf("the released run acted on %s: %v", l.name, show(acts))
		}
		if !r2.Waits(1) || r2.Waits(0) || r2.Waits(2) || r2.moved[0] || r2.moved[1] || r2.moved[2] {
			t.Fatalf("%s of the released r1 changed r2's arrays", l.name)
		}
	}
	// a spare of another size is not taken
	r3, err := New(Config{Self: "n0", Run: "r3", Gen: 1, Nodes: []string{"n0"}, Owner: []uint32{0, 0}, Done: func(int) uint64 { return 0 }, Spare: sp})
	if err != nil {
		t.Fatal(err)
	}
	if len(r3.waits) != 2 || &r3.waits[0] == &sp.waits[0] {
		t.Fatal("a run of two vertices took a spare of three")
	}
}
