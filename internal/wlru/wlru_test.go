package wlru

import (
	"fmt"
	"testing"
)

// Entries go least recently used first when the weight bound needs room; a
// value heavier than the bound is not kept; a key put twice keeps its first
// value.
func TestCache(t *testing.T) {
	c := New[string, int](5)
	c.Put("a", 1, 3)
	c.Put("b", 2, 2)
	if v, ok := c.Get("a"); !ok || v != 1 { // a is now the most recently used
		t.Fatalf("a: %d %v", v, ok)
	}
	c.Put("c", 3, 2) // 3+2+2 > 5: b goes
	if _, ok := c.Get("b"); ok {
		t.Fatal("b was kept, a should have been the one used since")
	}
	if n, w, hits := c.Stats(); n != 2 || w != 5 || hits != 1 {
		t.Fatalf("stats %d %d %d, want 2 entries, weight 5, 1 hit", n, w, hits)
	}
	c.Put("huge", 4, 6)
	if _, ok := c.Get("huge"); ok {
		t.Fatal("a value over the bound was kept")
	}
	c.Put("a", 9, 3)
	if v, _ := c.Get("a"); v != 1 {
		t.Fatalf("a put again: %d, want the first value", v)
	}
}

func ExampleCache() {
	c := New[string, []int](1000) // at most 1,000 ints held in all
	c.Put("primes", []int{2, 3, 5, 7}, 4)
	c.Put("squares", make([]int, 2000), 2000) // heavier than the bound: not kept
	v, ok := c.Get("primes")
	_, kept := c.Get("squares")
	fmt.Println(v, ok, kept)
	// Output: [2 3 5 7] true false
}
