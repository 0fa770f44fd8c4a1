package node

import (
	"testing"
	"unsafe"
)

// TestVstateLayout holds a vertex's record (vstate), what every
// activation of a plain task touches of it, to 128 bytes: the vertex's
// line (64 bytes) and its task row's, so that a run's page-aligned table
// of them is one whole 128-byte block a vertex (see vstate).
func TestVstateLayout(t *testing.T) {
	var vs vstate
	if n := unsafe.Sizeof(vs); n != 128 {
		t.Errorf("vstate is %d bytes, not two cache lines", n)
	}
	if o := unsafe.Offsetof(vs.row); o != 64 {
		t.Errorf("a vstate's row is at byte %d, not its second line", o)
	}
	if vs := newVstates(3); vs[0].vcold == nil || vs[2].vcold == nil || vs[0].vcold == vs[1].vcold {
		t.Error("newVstates gives a vertex no vcold of its own")
	}
	var row taskRow
	if n := unsafe.Sizeof(row); n != 64 {
		t.Errorf("taskRow is %d bytes, not one cache line", n)
	}
}
