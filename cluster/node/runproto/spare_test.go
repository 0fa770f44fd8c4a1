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
	r1.Stop()
	sp := r1.Release()
	if len(sp.waits) != 3 || len(sp.moved) != 3 || sp.waits[1].Load() {
		t.Fatalf("spare: %d waits (v1 waits: %v), %d moved; want 3 cleared", len(sp.waits), len(sp.waits) > 1 && sp.waits[1].Load(), len(sp.moved))
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
	// a spare of another size is not taken
	r3, err := New(Config{Self: "n0", Run: "r3", Gen: 1, Nodes: []string{"n0"}, Owner: []uint32{0, 0}, Done: func(int) uint64 { return 0 }, Spare: sp})
	if err != nil {
		t.Fatal(err)
	}
	if len(r3.waits) != 2 || &r3.waits[0] == &sp.waits[0] {
		t.Fatal("a run of two vertices took a spare of three")
	}
}
