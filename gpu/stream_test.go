package gpu

import (
	"errors"
	"testing"
)

// D2DAsync copies all of src to the start of dst on the stream, and refuses a
// source longer than the destination.
func TestD2DAsync(t *testing.T) {
	d := openDev(t)
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	src, dst := mustAlloc[float32](t, d, 4), mustAlloc[float32](t, d, 6)
	if err := H2DAsync(s, src, []float32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := MemsetAsync(s, dst, 9); err != nil {
		t.Fatal(err)
	}
	if err := D2DAsync(s, dst, src); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 6)
	if err := D2HAsync(s, out, dst); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	want := []float32{1, 2, 3, 4, 9, 9}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("dst = %v, want %v", out, want)
		}
	}
	if err := D2DAsync(s, src, dst); !errors.Is(err, ErrInvalid) {
		t.Fatalf("D2DAsync of 6 elements into 4: %v, want ErrInvalid", err)
	}
}
