package runproto

import (
	"testing"

	"github.com/hetflow/hetflow/transport"
)

// SeenBatch says which batches BatchAll took whole, and their size: a node
// skips them undecoded when it reads its record back.
func TestSeenBatch(t *testing.T) {
	r, err := New(Config{Self: "n1", Run: "r1", Gen: 1, Nodes: []string{"n1", "n2"}, Owner: []uint32{0, 1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	sigs := []transport.Signal{
		{Run: "r1", Gen: 1, Src: 1, Dst: 0, Act: 1, Kind: transport.SignalEdge},
		{Run: "r1", Gen: 1, Src: 2, Dst: 0, Act: 1, Kind: transport.SignalEdge},
	}
	if _, ok := r.SeenBatch("n2", 1, 4); ok {
		t.Fatal("a batch not taken is seen")
	}
	if _, seen := r.BatchAll("n2", 4, sigs); seen {
		t.Fatal("a new batch skipped")
	}
	if k, ok := r.SeenBatch("n2", 1, 4); !ok || k != 2 {
		t.Fatalf("SeenBatch = %d, %v; want 2, true", k, ok)
	}
	for _, c := range []struct {
		from     string
		gen, seq uint64
	}{{"n2", 1, 5}, {"n2", 2, 4}, {"n3", 1, 4}} {
		if _, ok := r.SeenBatch(c.from, c.gen, c.seq); ok {
			t.Fatalf("batch %v seen", c)
		}
	}
	if acts, seen := r.BatchAll("n2", 4, sigs); !seen || len(acts) != 0 {
		t.Fatalf("the batch again: seen %v, %d actions", seen, len(acts))
	}
}
