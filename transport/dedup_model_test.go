package transport

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// One Signal of a hostile (or merely far) source number must not cost a receiver
// megabytes (SubscribeSignals' Deduper sees wire Src unchecked).
func TestDedupFarSourceCostsNoIndex(t *testing.T) {
	d := NewDeduper()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	s := Signal{Run: "r", Gen: 1, Src: maxChunked - 1, Dst: 1, Act: 1, Kind: SignalEdge}
	if v := d.Admit(&s); v != Accept {
		t.Fatalf("verdict %v", v)
	}
	runtime.ReadMemStats(&m1)
	if got := m1.TotalAlloc - m0.TotalAlloc; got > 64<<10 {
		t.Fatalf("one Signal with Src %d allocated %d bytes", s.Src, got)
	}
	runtime.KeepAlive(d)
}

// Admit, AdmitReplayed and AdmitReplayedAll against a set model,
// many runs, sources across chunks and beyond, fans in any order, gens and
// EndRun.
func TestDedupAgreesWithASetModel(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		d := NewDeduper()
		seen := map[string]map[[3]uint64]bool{}
		gen := map[string]uint64{}
		ended := map[string]bool{}
		srcPool := []uint32{0, 15, 16, 17, 31, 32, 1000, 1 << 16, maxChunked - 1, maxChunked, 1<<32 - 1}
		for range 20000 {
			run := fmt.Sprintf("r%d", rng.IntN(4))
			if rng.IntN(2000) == 0 {
				d.EndRun(run)
				ended[run] = true
				continue
			}
			var src uint32
			if rng.IntN(3) == 0 {
				src = srcPool[rng.IntN(len(srcPool))]
			} else {
				src = uint32(rng.IntN(200))
				if rng.IntN(4) == 0 {
					src = uint32(rng.IntN(8000)) // far ones go to the map first, then the index grows past them
				}
			}
			nd := 1 + rng.IntN(6)
			base := uint32(rng.IntN(20))
			act := uint64(1 + rng.IntN(10))
			g := uint64(1 + rng.IntN(3))
			var sigs []*Signal
			for k := range nd {
				dst := base + uint32(k)
				if rng.IntN(2) == 0 {
					dst = base + uint32(nd-1-k)
				}
				sigs = append(sigs, &Signal{Run: run, Gen: g, Src: src, Dst: dst, Act: act, Kind: SignalEdge})
			}
			mode := rng.IntN(3)
			var vs []Verdict
			if mode == 2 {
				vs = d.AdmitReplayedAll(sigs, nil)
			}
			for i, s := range sigs {
				var v Verdict
				switch mode {
				case 0:
					v = d.Admit(s)
				case 1:
					v = d.AdmitReplayed(s)
				default:
					v = vs[i]
				}
				if seen[run] == nil {
					seen[run] = map[[3]uint64]bool{}
				}
				key := [3]uint64{uint64(s.Src), uint64(s.Dst), s.Act}
				want := Accept
				switch {
				case ended[run]:
					want = Ended
				case mode == 0 && s.Gen < gen[run]:
					want = Fenced
				case seen[run][key]:
					want = Duplicate
				}
				if v != want {
					t.Fatalf("seed %d: %+v mode %d: %v, want %v", seed, *s, mode, v, want)
				}
				if want == Accept {
					seen[run][key] = true
					if mode == 0 && s.Gen > gen[run] {
						gen[run] = s.Gen
					}
				}
			}
		}
	}
}
