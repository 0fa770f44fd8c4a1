package localexec

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Conservation: under concurrent push, pushN and pop by the owner and
// steals by thieves, every pushed node is taken exactly once.
func TestDequeConservation(t *testing.T) {
	const total = 200000
	nodes := make([]node, total)
	taken := make([]atomic.Int32, total)
	idx := func(n *node) int { return int((uintptrOf(n) - uintptrOf(&nodes[0])) / sizeofNode) }
	var q wsq
	q.init(4) // small, to exercise growth
	var stop atomic.Bool
	var wg sync.WaitGroup
	var stolen atomic.Int64
	for th := 0; th < 3; th++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() || !q.empty() {
				if n := q.steal(); n != nil {
					taken[idx(n)].Add(1)
					stolen.Add(1)
				}
			}
		}()
	}
	popped := 0
	for i, round := 0, 0; i < total; round++ {
		// single pushes and batches (pushN, growing the ring mid-batch)
		k := 1
		if round%2 == 1 {
			k = min(1+(round*7919)%37, total-i)
		}
		if k == 1 {
			q.push(&nodes[i])
		} else {
			batch := make([]*node, k)
			for j := range batch {
				batch[j] = &nodes[i+j]
			}
			q.pushN(batch)
		}
		i += k
		if round%3 == 0 {
			if n := q.pop(); n != nil {
				taken[idx(n)].Add(1)
				popped++
			}
		}
	}
	for {
		n := q.pop()
		if n == nil {
			break
		}
		taken[idx(n)].Add(1)
		popped++
	}
	stop.Store(true)
	wg.Wait()
	for i := range taken {
		if c := taken[i].Load(); c != 1 {
			t.Fatalf("node %d taken %d times (popped %d stolen %d)", i, c, popped, stolen.Load())
		}
	}
	if popped+int(stolen.Load()) != total {
		t.Fatalf("popped %d + stolen %d != %d", popped, stolen.Load(), total)
	}
}

func TestDequeLIFOAndFIFO(t *testing.T) {
	var q wsq
	q.init(2)
	ns := make([]node, 10)
	for i := range ns {
		q.push(&ns[i])
	}
	if q.size() != 10 {
		t.Fatalf("size %d", q.size())
	}
	if q.steal() != &ns[0] || q.pop() != &ns[9] || q.steal() != &ns[1] {
		t.Fatal("owner pops newest, thieves steal oldest")
	}
}

func TestDequePushNOrder(t *testing.T) {
	var q wsq
	q.init(2)
	ns := make([]node, 9)
	q.push(&ns[0])
	q.pushN([]*node{&ns[1], &ns[2], &ns[3], &ns[4], &ns[5], &ns[6], &ns[7]}) // grows 2 -> 8
	q.pushN(nil)
	q.push(&ns[8])
	if q.size() != 9 {
		t.Fatalf("size %d", q.size())
	}
	for i := 0; i < 4; i++ {
		if q.steal() != &ns[i] {
			t.Fatalf("steal %d: thieves take the oldest, in push order", i)
		}
	}
	for i := 8; i >= 4; i-- {
		if q.pop() != &ns[i] {
			t.Fatalf("pop %d: the owner takes the newest", i)
		}
	}
	if q.pop() != nil || q.steal() != nil {
		t.Fatal("empty deque returned a node")
	}
}
