//go:build cuda

package gpu

import "testing"

func TestBackendIsCuda(t *testing.T) {
	if Backend() != "cuda" {
		t.Fatalf("Backend() = %q in a -tags cuda build", Backend())
	}
	d := openDev(t)
	if _, err := Alloc[float32](d, 1<<20); err != nil {
		t.Fatalf("Alloc on %v: %v", d, err)
	}
}
