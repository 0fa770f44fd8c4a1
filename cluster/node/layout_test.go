package node

import (
	"testing"
	"unsafe"
)

// TestVstateLayout holds a vertex's vstate, what every activation of a
// plain task reads of it, to 64 bytes (one cache line), so that a run's
// page-aligned table of them is one whole line a vertex (see vstate).
func TestVstateLayout(t *testing.T) {
	var vs vstate
	if n := unsafe.Sizeof(vs); n != 64 {
		t.Errorf("vstate is %d bytes, not one cache line", n)
	}
	if vs := newVstates(3); vs[0].vcold == nil || vs[2].vcold == nil || vs[0].vcold == vs[1].vcold {
		t.Error("newVstates gives a vertex no vcold of its own")
	}
	var row taskRow
	if n := unsafe.Sizeof(row); n != 64 {
		t.Errorf("taskRow is %d bytes, not one cache line", n)
	}
}
