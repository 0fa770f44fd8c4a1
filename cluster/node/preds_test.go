package node

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// hasPred finds a vertex's strong predecessors as a set would, by a scan
// of a few and through the map past 8, whatever the map held before it
// was cleared: build keeps each distinct predecessor once, in order.
func TestHasPredKeepsEachOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	seen := map[int]bool{}
	for range 500 {
		n := rng.IntN(30)
		in := make([]int, n)
		for i := range in {
			in[i] = rng.IntN(12)
		}
		if len(seen) > 0 {
			clear(seen)
		}
		var got, want []int
		set := map[int]bool{}
		for _, p := range in {
			if !hasPred(got, p, seen) {
				got = append(got, p)
			}
			if !set[p] {
				set[p] = true
				want = append(want, p)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%v: kept %v, want %v", in, got, want)
		}
	}
}
