package node

import "testing"

// vstate.in finds the receive edge of each source, none for another,
// whether the sources are consecutive (found at their place) or not
// (binary search), and with a gap that puts a source where another's
// place would be.
func TestVstateIn(t *testing.T) {
	for _, srcs := range [][]int{nil, {4}, {3, 4, 5, 6}, {1, 2, 5, 9, 10}, {0, 2, 3}} {
		res := make([]recvEdge, len(srcs))
		s := &newVstates(1)[0]
		for i, src := range srcs {
			res[i].src = src
			s.ins = append(s.ins, &res[i])
		}
		for v := -1; v <= 12; v++ {
			want := -1
			for i, src := range srcs {
				if src == v {
					want = i
				}
			}
			got := s.in(v)
			switch {
			case want < 0 && got != nil:
				t.Errorf("sources %v: in(%d) = edge from %d, want none", srcs, v, got.src)
			case want >= 0 && got != &res[want]:
				t.Errorf("sources %v: in(%d) = %v, want the edge from %d", srcs, v, got, v)
			}
		}
	}
}
