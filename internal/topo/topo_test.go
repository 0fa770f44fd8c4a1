package topo

import (
	"slices"
	"testing"
)

func TestOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		succ [][]int
		want []int
		ok   bool
	}{
		{"empty", nil, []int{}, true},
		{"diamond", [][]int{{1, 2}, {3}, {3}, nil}, []int{0, 1, 2, 3}, true},
		{"reversed chain", [][]int{nil, {0}, {1}}, []int{2, 1, 0}, true},
		{"repeated edge", [][]int{{1, 1}, nil}, []int{0, 1}, true},
		{"cycle after a source", [][]int{{1}, {2}, {1}}, []int{0}, false},
	} {
		got, ok := Order(tc.succ)
		if !slices.Equal(got, tc.want) || ok != tc.ok {
			t.Errorf("%s: Order = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
