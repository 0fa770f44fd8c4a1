package proto

import (
	"errors"
	"testing"
)

func TestProbeWave(t *testing.T) {
	for _, w := range []uint64{0, 1, 1 << 40, ^uint64(0)} {
		got, err := ProbeWave(ProbeBody(w))
		if err != nil || got != w {
			t.Fatalf("ProbeWave(ProbeBody(%d)) = %d, %v", w, got, err)
		}
	}
	for _, b := range [][]byte{nil, {1, 2, 3}, make([]byte, 9)} {
		if _, err := ProbeWave(b); !errors.Is(err, ErrInvalid) {
			t.Fatalf("ProbeWave(%d bytes) = %v, want ErrInvalid", len(b), err)
		}
	}
}
