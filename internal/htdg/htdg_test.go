package htdg

import (
	"fmt"
	"testing"
)

func TestGenerate(t *testing.T) {
	for _, n := range []int{1, 2, 3, 10, 1000} {
		g, err := Generate(n, 7, 3)
		if err != nil {
			t.Fatal(err)
		}
		if g.N != n || g.NGPU != n/2 {
			t.Fatalf("n=%d: %d tasks, %d GPU", n, g.N, g.NGPU)
		}
		nGPU, perDev := 0, make([]int, 3)
		layerOf := make([]int, n)
		edges := 0
		for i := range n {
			if g.GPU[i] {
				nGPU++
				perDev[g.Device[i]]++
			}
			seen := map[int32]bool{}
			for _, p := range g.Preds[i] {
				if p >= int32(i) || seen[p] {
					t.Fatalf("n=%d: task %d has predecessor %d (dup %v)", n, i, p, seen[p])
				}
				seen[p] = true
				layerOf[i] = layerOf[p] + 1
			}
			edges += len(g.Preds[i])
			if len(g.Preds[i]) > 3 {
				t.Fatalf("task %d has %d predecessors", i, len(g.Preds[i]))
			}
		}
		// every edge goes from one layer to the next
		for i := range n {
			for _, p := range g.Preds[i] {
				if layerOf[p] != layerOf[i]-1 {
					t.Fatalf("edge %d→%d spans layers %d→%d", p, i, layerOf[p], layerOf[i])
				}
			}
		}
		if nGPU != g.NGPU || edges != g.Edges || max(perDev[0], perDev[1], perDev[2])-min(perDev[0], perDev[1], perDev[2]) > 1 {
			t.Fatalf("n=%d: %d GPU tasks, per device %v, %d edges (g says %d)", n, nGPU, perDev, edges, g.Edges)
		}
		if n == 1000 && (g.Layers < 10 || g.Layers > 100) {
			t.Fatalf("%d layers for 1000 tasks", g.Layers)
		}
	}
	a, _ := Generate(500, 1, 2)
	b, _ := Generate(500, 1, 2)
	c, _ := Generate(500, 2, 2)
	if fmt.Sprint(a.Preds, a.GPU) != fmt.Sprint(b.Preds, b.GPU) {
		t.Fatal("same seed, different graphs")
	}
	if fmt.Sprint(a.Preds, a.GPU) == fmt.Sprint(c.Preds, c.GPU) {
		t.Fatal("different seeds, same graph")
	}
	if _, err := Generate(0, 1, 1); err == nil {
		t.Fatal("0 tasks accepted")
	}
	if _, err := Generate(10, 1, 0); err == nil {
		t.Fatal("0 devices accepted")
	}
}
