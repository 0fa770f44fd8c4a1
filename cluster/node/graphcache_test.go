package node

import (
	"strings"
	"testing"
)

// The graph cache shares one compiled flow between runs of the same text,
// evicts the least recently used flow to stay within its vertex bound
// (internal/wlru), and never caches a refusal.
func TestGraphCache(t *testing.T) {
	flow := func(name string, n int) []byte {
		var b strings.Builder
		b.WriteString("name: " + name + "\ntasks:\n")
		for i := range n {
			b.WriteString("  - {name: t" + string(rune('a'+i)) + ", func: noop}\n")
		}
		return []byte(b.String())
	}
	gc := newGraphCache(5)
	a, b, c := flow("a", 3), flow("b", 2), flow("c", 2)
	ca, err := gc.compile("a.yaml", a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gc.compile("b.yaml", b, nil); err != nil {
		t.Fatal(err)
	}
	again, err := gc.compile("a.yaml", a, nil) // a is now the most recently used
	if err != nil || again != ca {
		t.Fatalf("a second compile of a's text: %p %v, want the first (%p)", again, err, ca)
	}
	if _, err := gc.compile("c.yaml", c, nil); err != nil { // 3+2+2 > 5: b goes
		t.Fatal(err)
	}
	if flows, hits := gc.stats(); flows != 2 || hits != 1 {
		t.Fatalf("after a, b, a, c: %d flows, %d hits; want 2, 1", flows, hits)
	}
	if got, _ := gc.compile("a.yaml", a, nil); got != ca {
		t.Fatal("a was evicted, not b")
	}
	if _, err := gc.compile("big.yaml", flow("big", 6), nil); err != nil {
		t.Fatal(err)
	}
	if flows, _ := gc.stats(); flows != 2 {
		t.Fatalf("a flow over the bound was kept: %d flows", flows)
	}
	bad := []byte("name: bad\ntasks:\n  - {name: x, func: noop, precede: [nowhere]}\n")
	for range 2 {
		if _, err := gc.compile("bad.yaml", bad, nil); err == nil || !strings.Contains(err.Error(), "nowhere") {
			t.Fatalf("a bad flow: %v", err)
		}
	}
	if _, hits := gc.stats(); hits != 2 {
		t.Fatalf("hits %d: a refusal was cached", hits)
	}
}
