package partition

// iheap is an indexed binary max-heap of vertices keyed by int64 gains; pos
// is shared per vertex so a key can be changed or removed in O(log n).
type iheap struct {
	keys []int64
	ids  []int32
	pos  []int32 // per vertex: index in ids, or -1
}

func newIHeap(n int) *iheap {
	h := &iheap{pos: make([]int32, n)}
	for i := range h.pos {
		h.pos[i] = -1
	}
	return h
}

func (h *iheap) len() int { return len(h.ids) }

func (h *iheap) clear() {
	for _, v := range h.ids {
		h.pos[v] = -1
	}
	h.ids = h.ids[:0]
	h.keys = h.keys[:0]
}

func (h *iheap) push(v int32, key int64) {
	h.ids = append(h.ids, v)
	h.keys = append(h.keys, key)
	i := len(h.ids) - 1
	h.pos[v] = int32(i)
	h.up(i)
}

func (h *iheap) pop() (int32, int64) {
	v, k := h.ids[0], h.keys[0]
	h.removeAt(0)
	return v, k
}

func (h *iheap) remove(v int32) {
	if i := h.pos[v]; i >= 0 {
		h.removeAt(int(i))
	}
}

func (h *iheap) update(v int32, key int64) {
	i := int(h.pos[v])
	old := h.keys[i]
	h.keys[i] = key
	if key > old {
		h.up(i)
	} else if key < old {
		h.down(i)
	}
}

// set inserts v or changes its key.
func (h *iheap) set(v int32, key int64) {
	if h.pos[v] >= 0 {
		h.update(v, key)
	} else {
		h.push(v, key)
	}
}

func (h *iheap) removeAt(i int) {
	last := len(h.ids) - 1
	h.pos[h.ids[i]] = -1
	if i != last {
		h.ids[i] = h.ids[last]
		h.keys[i] = h.keys[last]
		h.pos[h.ids[i]] = int32(i)
	}
	h.ids = h.ids[:last]
	h.keys = h.keys[:last]
	if i != last {
		h.down(i)
		h.up(i)
	}
}

func (h *iheap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h.keys[p] >= h.keys[i] {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *iheap) down(i int) {
	n := len(h.ids)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.keys[r] > h.keys[l] {
			m = r
		}
		if h.keys[i] >= h.keys[m] {
			return
		}
		h.swap(i, m)
		i = m
	}
}

func (h *iheap) swap(i, j int) {
	h.ids[i], h.ids[j] = h.ids[j], h.ids[i]
	h.keys[i], h.keys[j] = h.keys[j], h.keys[i]
	h.pos[h.ids[i]] = int32(i)
	h.pos[h.ids[j]] = int32(j)
}
