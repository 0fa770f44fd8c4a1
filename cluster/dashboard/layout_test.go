package dashboard

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// checkLayout asserts the layout's invariants: every forward edge goes to a
// lower row (a higher layer, a larger y), boxes of one layer share a row, no
// two boxes overlap, and only the edges marked back point backwards.
func checkLayout(t *testing.T, boxes []Box, edges []LEdge, L Layout) {
	t.Helper()
	n := len(boxes)
	for i, e := range edges {
		if L.Back[i] {
			if L.Layer[e.To] > L.Layer[e.From] {
				t.Errorf("edge %d (%d→%d) is marked back but points down (layers %d→%d)", i, e.From, e.To, L.Layer[e.From], L.Layer[e.To])
			}
			continue
		}
		if L.Layer[e.To] <= L.Layer[e.From] {
			t.Errorf("forward edge %d (%d→%d) does not go down: layers %d→%d", i, e.From, e.To, L.Layer[e.From], L.Layer[e.To])
		}
		if L.Y[e.To] < L.Y[e.From]+boxes[e.From].H {
			t.Errorf("forward edge %d (%d→%d): target top %.1f above source bottom %.1f", i, e.From, e.To, L.Y[e.To], L.Y[e.From]+boxes[e.From].H)
		}
	}
	for a := 0; a < n; a++ {
		if L.X[a] < 0 || L.Y[a] < 0 || L.X[a]+boxes[a].W > L.Width || L.Y[a]+boxes[a].H > L.Height {
			t.Errorf("box %d at (%.1f,%.1f) size %v outside the drawing %.1f×%.1f", a, L.X[a], L.Y[a], boxes[a], L.Width, L.Height)
		}
		for b := a + 1; b < n; b++ {
			if L.X[a] < L.X[b]+boxes[b].W && L.X[b] < L.X[a]+boxes[a].W &&
				L.Y[a] < L.Y[b]+boxes[b].H && L.Y[b] < L.Y[a]+boxes[a].H {
				t.Errorf("boxes %d (%.1f,%.1f %v) and %d (%.1f,%.1f %v) overlap", a, L.X[a], L.Y[a], boxes[a], b, L.X[b], L.Y[b], boxes[b])
			}
		}
	}
}

func TestPlaceDoWhileLoopBackIsTheConditionEdge(t *testing.T) {
	// init→body→cond, cond→[body, done] (Listing 5).
	boxes := []Box{{80, 40}, {80, 40}, {100, 40}, {80, 40}}
	edges := []LEdge{{0, 1, false}, {1, 2, false}, {2, 1, true}, {2, 3, true}}
	L := Place(boxes, edges)
	checkLayout(t, boxes, edges, L)
	want := []int{0, 1, 2, 3}
	for v, l := range want {
		if L.Layer[v] != l {
			t.Errorf("layer of %d = %d, want %d", v, L.Layer[v], l)
		}
	}
	for i, wantBack := range []bool{false, false, true, false} {
		if L.Back[i] != wantBack {
			t.Errorf("edge %d back = %v, want %v", i, L.Back[i], wantBack)
		}
	}
}

func TestPlaceNestedLoopsBreakOnlyWeakEdges(t *testing.T) {
	// Listing 6: init→F1, F1→[F2, F1], F2→[F3, F1], F3→[stop, F1].
	boxes := make([]Box, 5)
	for i := range boxes {
		boxes[i] = Box{70, 40}
	}
	edges := []LEdge{{0, 1, false}, {1, 2, true}, {1, 1, true}, {2, 3, true}, {2, 1, true}, {3, 4, true}, {3, 1, true}}
	L := Place(boxes, edges)
	checkLayout(t, boxes, edges, L)
	for i, e := range edges {
		if L.Back[i] != (e.To == 1 && e.From != 0) {
			t.Errorf("edge %d→%d back = %v", e.From, e.To, L.Back[i])
		}
	}
}

// randomFlow builds a random flow-like graph: a DAG of strong edges (from
// lower to higher ids, shuffled so ids do not give the order away) plus weak
// edges anywhere, loops included.
func randomFlow(r *rand.Rand, n int) ([]Box, []LEdge) {
	perm := r.Perm(n)
	boxes := make([]Box, n)
	for i := range boxes {
		boxes[i] = Box{W: float64(60 + r.IntN(120)), H: float64(30 + r.IntN(20))}
	}
	var edges []LEdge
	for i := 1; i < n; i++ {
		for k := r.IntN(3); k > 0; k-- {
			edges = append(edges, LEdge{From: perm[r.IntN(i)], To: perm[i]})
		}
	}
	for k := r.IntN(n/3 + 1); k > 0; k-- {
		edges = append(edges, LEdge{From: r.IntN(n), To: r.IntN(n), Weak: true})
	}
	return boxes, edges
}

func TestPlaceRandomFlowsKeepInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for it := 0; it < 200; it++ {
		n := 1 + r.IntN(60)
		boxes, edges := randomFlow(r, n)
		t.Run(fmt.Sprint(it), func(t *testing.T) {
			L := Place(boxes, edges)
			checkLayout(t, boxes, edges, L)
			for i, e := range edges {
				if L.Back[i] && !e.Weak {
					t.Errorf("strong edge %d→%d drawn as a loop-back", e.From, e.To)
				}
			}
		})
	}
}

func TestPlaceStrongCycleStillLaysOut(t *testing.T) {
	// Not a valid flow, but the layout must not hang or overlap.
	boxes := []Box{{50, 30}, {50, 30}, {50, 30}}
	edges := []LEdge{{0, 1, false}, {1, 2, false}, {2, 0, false}}
	L := Place(boxes, edges)
	checkLayout(t, boxes, edges, L)
	back := 0
	for _, b := range L.Back {
		if b {
			back++
		}
	}
	if back != 1 {
		t.Errorf("%d back edges, want 1", back)
	}
}

func TestPlaceEmpty(t *testing.T) {
	L := Place(nil, nil)
	if L.Width <= 0 || L.Height <= 0 || L.Layers != 0 {
		t.Errorf("empty layout = %+v", L)
	}
}
