package node

import (
	"testing"
	"unsafe"
)

// TestVstateLayout holds what every activation of a plain task reads of a
// vertex's vstate in its first 64 bytes (one cache line) and the vstate a
// whole number of lines, so that in a run's page-aligned table a vertex's
// hot part is one line, not two (see vstate).
func TestVstateLayout(t *testing.T) {
	var vs vstate
	if n := unsafe.Sizeof(vs); n%64 != 0 {
		t.Errorf("vstate is %d bytes, not a whole number of cache lines", n)
	}
	hot := map[string]uintptr{
		"acts": unsafe.Offsetof(vs.acts) + unsafe.Sizeof(vs.acts), "execs": unsafe.Offsetof(vs.execs) + unsafe.Sizeof(vs.execs),
		"done": unsafe.Offsetof(vs.done) + unsafe.Sizeof(vs.done), "body": unsafe.Offsetof(vs.body) + unsafe.Sizeof(vs.body),
		"name": unsafe.Offsetof(vs.name) + unsafe.Sizeof(vs.name), "args": unsafe.Offsetof(vs.args) + unsafe.Sizeof(vs.args),
		"flags": unsafe.Offsetof(vs.flags) + unsafe.Sizeof(vs.flags),
	}
	for f, end := range hot {
		if end > 64 {
			t.Errorf("vstate.%s ends at byte %d, past the hot 64", f, end)
		}
	}
	var row taskRow
	if n := unsafe.Sizeof(row); n != 64 {
		t.Errorf("taskRow is %d bytes, not one cache line", n)
	}
}
