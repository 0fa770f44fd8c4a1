package transport

import (
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"testing"
)

func TestDedupScenarios(t *testing.T) {
	type step struct {
		setGen uint64 // when > 0: SetGen(run, setGen) instead of a signal
		end    bool   // EndRun(run)
		run    string
		gen    uint64
		src    uint32
		dst    uint32
		act    uint64
		want   Verdict
	}
	cases := []struct {
		name  string
		steps []step
		stats DedupStats
	}{
		{name: "repeat is dropped", steps: []step{
			{run: "r", gen: 1, src: 1, dst: 2, act: 1, want: Accept},
			{run: "r", gen: 1, src: 1, dst: 2, act: 1, want: Duplicate},
			{run: "r", gen: 1, src: 1, dst: 2, act: 2, want: Accept},
			{run: "r", gen: 1, src: 1, dst: 3, act: 1, want: Accept},
			{run: "s", gen: 1, src: 1, dst: 2, act: 1, want: Accept},
		}, stats: DedupStats{Accepted: 4, Duplicate: 1, Runs: 2}},
		{name: "re-run under a newer generation is still a duplicate", steps: []step{
			{run: "r", gen: 1, src: 1, dst: 2, act: 5, want: Accept},
			{run: "r", gen: 2, src: 1, dst: 2, act: 5, want: Duplicate},
			{run: "r", gen: 2, src: 1, dst: 2, act: 6, want: Accept},
		}, stats: DedupStats{Accepted: 2, Duplicate: 1, Runs: 1}},
		{name: "older generation is fenced", steps: []step{
			{setGen: 3, run: "r"},
			{run: "r", gen: 2, src: 1, dst: 2, act: 1, want: Fenced},
			{run: "r", gen: 3, src: 1, dst: 2, act: 1, want: Accept},
			{setGen: 1, run: "r"}, // lowering is ignored
			{run: "r", gen: 2, src: 1, dst: 2, act: 2, want: Fenced},
		}, stats: DedupStats{Accepted: 1, Fenced: 2, Runs: 1}},
		{name: "a newer generation raises the fence", steps: []step{
			{run: "r", gen: 1, src: 1, dst: 2, act: 1, want: Accept},
			{run: "r", gen: 4, src: 3, dst: 2, act: 1, want: Accept},
			{run: "r", gen: 1, src: 1, dst: 2, act: 2, want: Fenced},
		}, stats: DedupStats{Accepted: 2, Fenced: 1, Runs: 1}},
		{name: "ended run drops late signals", steps: []step{
			{run: "r", gen: 1, src: 1, dst: 2, act: 1, want: Accept},
			{end: true, run: "r"},
			{run: "r", gen: 1, src: 1, dst: 2, act: 2, want: Ended},
			{run: "q", gen: 1, src: 1, dst: 2, act: 2, want: Accept},
		}, stats: DedupStats{Accepted: 2, Ended: 1, Runs: 1}},
		{name: "condition edge with gaps, out of order", steps: []step{
			{run: "r", src: 5, dst: 6, act: 3, want: Accept},
			{run: "r", src: 5, dst: 6, act: 1, want: Accept},
			{run: "r", src: 5, dst: 6, act: 7, want: Accept},
			{run: "r", src: 5, dst: 6, act: 2, want: Accept},
			{run: "r", src: 5, dst: 6, act: 3, want: Duplicate},
			{run: "r", src: 5, dst: 6, act: 2, want: Duplicate},
			{run: "r", src: 5, dst: 6, act: 6, want: Accept},
			{run: "r", src: 5, dst: 6, act: 4, want: Accept},
			{run: "r", src: 5, dst: 6, act: 7, want: Duplicate},
		}, stats: DedupStats{Accepted: 6, Duplicate: 3, Runs: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDeduper()
			for i, st := range tc.steps {
				switch {
				case st.setGen > 0:
					d.SetGen(st.run, st.setGen)
				case st.end:
					d.EndRun(st.run)
				default:
					s := Signal{Run: st.run, Gen: st.gen, Src: st.src, Dst: st.dst, Act: st.act, Kind: SignalEdge}
					if got := d.Admit(&s); got != st.want {
						t.Fatalf("step %d (%+v): %v, want %v", i, st, got, st.want)
					}
				}
			}
			if got := d.Stats(); got != tc.stats {
				t.Errorf("stats %+v, want %+v", got, tc.stats)
			}
		})
	}
}

// insertAct agrees with a plain set on random orders, and keeps its intervals
// sorted, disjoint and non-adjacent.
func TestInsertActMatchesSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		var iv []interval
		set := map[uint64]bool{}
		for i := 0; i < 300; i++ {
			act := 1 + rng.Uint64N(120)
			var fresh bool
			iv, fresh = insertAct(iv, act)
			if fresh == set[act] {
				t.Fatalf("trial %d: act %d fresh=%v but set has it=%v", trial, act, fresh, set[act])
			}
			set[act] = true
		}
		var n uint64
		for k, x := range iv {
			if x.lo > x.hi || (k > 0 && iv[k-1].hi+1 >= x.lo) {
				t.Fatalf("trial %d: bad intervals %v", trial, iv)
			}
			n += x.hi - x.lo + 1
		}
		if n != uint64(len(set)) {
			t.Fatalf("trial %d: intervals hold %d acts, set %d", trial, n, len(set))
		}
	}
}

// edgeActs (one interval inline, a list after) agrees with a plain set on
// random orders, mostly ascending as a live edge's are.
func TestEdgeActsMatchesSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 300; trial++ {
		var r dedupRun
		var a edgeActs
		set := map[uint64]bool{}
		next := uint64(1)
		for i := 0; i < 100; i++ {
			act := next
			if rng.IntN(4) == 0 {
				act = 1 + rng.Uint64N(next+3)
			} else {
				next++
			}
			if fresh := r.insert(&a, act); fresh == set[act] {
				t.Fatalf("trial %d: act %d fresh=%v but set has it=%v", trial, act, fresh, set[act])
			}
			set[act] = true
		}
		for act := uint64(1); act < next+5; act++ {
			if r.insert(&a, act) != !set[act] {
				t.Fatalf("trial %d: act %d: insert disagrees with the set", trial, act)
			}
			set[act] = true
		}
		if n := r.intervals(&a); n != 1 {
			t.Fatalf("trial %d: 1..%d in %d intervals", trial, next+4, n)
		}
	}
}

// A strong edge around a loop costs one interval however long the loop runs.
func TestStrongEdgeStaysOneInterval(t *testing.T) {
	d := NewDeduper()
	for act := uint64(1); act <= 100000; act++ {
		s := Signal{Run: "r", Src: 1, Dst: 2, Act: act, Kind: SignalEdge}
		if d.Admit(&s) != Accept {
			t.Fatal(act)
		}
	}
	if r := d.runs["r"]; r.intervals(r.edge(edgeID{1, 2})) != 1 {
		t.Fatalf("%d intervals", r.intervals(r.edge(edgeID{1, 2})))
	}
}

func TestFilterCompactsAccepted(t *testing.T) {
	d := NewDeduper()
	d.SetGen("r", 2)
	sigs := []Signal{
		{Run: "r", Gen: 2, Src: 1, Dst: 2, Act: 1},
		{Run: "r", Gen: 1, Src: 1, Dst: 2, Act: 2}, // fenced
		{Run: "r", Gen: 2, Src: 1, Dst: 2, Act: 1}, // duplicate
		{Run: "r", Gen: 2, Src: 1, Dst: 2, Act: 3},
	}
	got := d.Filter(sigs)
	want := []Signal{{Run: "r", Gen: 2, Src: 1, Dst: 2, Act: 1}, {Run: "r", Gen: 2, Src: 1, Dst: 2, Act: 3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Filter = %+v", got)
	}
	if d.Gen("r") != 2 || d.Gen("none") != 0 {
		t.Errorf("Gen wrong")
	}
}

func TestEndedRunsAreBounded(t *testing.T) {
	d := NewDeduper()
	for i := 0; i < maxEndedRuns+10; i++ {
		d.EndRun("run" + strconv.Itoa(i))
	}
	d.EndRun("again")
	d.EndRun("again")
	if len(d.ended) != maxEndedRuns || len(d.ring) != maxEndedRuns {
		t.Fatalf("ended %d ring %d, want %d", len(d.ended), len(d.ring), maxEndedRuns)
	}
	if d.SetGen("again", 5) != 0 {
		t.Error("SetGen revived an ended run")
	}
}

// TestAdmitReplayedAllMatchesOneByOne: a batch decided at once gets the
// verdicts, and leaves the state, that deciding it Signal by Signal does.
func TestAdmitReplayedAllMatchesOneByOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	one, all := NewDeduper(), NewDeduper()
	for _, d := range []*Deduper{one, all} {
		d.SetGen("r1", 3)
		d.EndRun("gone")
	}
	var verdicts []Verdict
	for range 200 {
		sigs := make([]*Signal, rng.IntN(40))
		for i := range sigs {
			run := []string{"r1", "r1", "r2", "gone"}[rng.IntN(4)]
			sigs[i] = &Signal{Run: run, Gen: uint64(1 + rng.IntN(4)), Src: uint32(rng.IntN(3)), Dst: 5, Act: uint64(1 + rng.IntN(20))}
		}
		verdicts = all.AdmitReplayedAll(sigs, verdicts)
		if len(verdicts) != len(sigs) {
			t.Fatalf("%d verdicts for %d signals", len(verdicts), len(sigs))
		}
		for i, s := range sigs {
			if want := one.AdmitReplayed(s); verdicts[i] != want {
				t.Fatalf("signal %d %+v: %v in a batch, %v alone", i, *s, verdicts[i], want)
			}
		}
	}
	if a, b := one.Stats(), all.Stats(); a != b {
		t.Errorf("stats differ: one by one %+v, batched %+v", a, b)
	}
}

// TestDedupAnyDestinationOrder: a source's edges are found whatever order
// their destinations arrive in (ascending, descending, shuffled, switching
// between them), and each (edge, activation) is accepted once: the verdicts
// match a set's.
func TestDedupAnyDestinationOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 50; trial++ {
		d := NewDeduper()
		seen := map[[3]uint64]bool{}
		dsts := make([]uint32, 200)
		for i := range dsts {
			dsts[i] = uint32(i + 1)
		}
		switch trial % 3 {
		case 1:
			slices.Reverse(dsts)
		case 2:
			rng.Shuffle(len(dsts), func(i, j int) { dsts[i], dsts[j] = dsts[j], dsts[i] })
		}
		for act := uint64(1); act <= 4; act++ {
			for k := 0; k < 2*len(dsts); k++ {
				dst := dsts[rng.IntN(len(dsts))]
				if k < len(dsts) {
					dst = dsts[k]
				}
				src := uint32(rng.IntN(3))
				a := act
				if rng.IntN(5) == 0 && act > 1 {
					a = act - 1
				}
				s := Signal{Run: "r", Gen: 1, Src: src, Dst: dst, Act: a, Kind: SignalEdge}
				key := [3]uint64{uint64(src), uint64(dst), a}
				want := Accept
				if seen[key] {
					want = Duplicate
				}
				if got := d.Admit(&s); got != want {
					t.Fatalf("trial %d: %d→%d act %d: %v, want %v", trial, src, dst, a, got, want)
				}
				seen[key] = true
			}
		}
	}
}

// TestDedupAnySource: a source is found wherever its number lies — the
// same chunk as another, a chunk of its own far from the rest, beyond the
// chunked range (maxChunked and up to the largest uint32) — and a source
// whose first edge is kept inline keeps its verdicts when more edges follow
// (its destinations outgrow the inline one): each (edge, activation) is
// accepted once, the verdicts match a set's.
func TestDedupAnySource(t *testing.T) {
	srcs := []uint32{0, 1, srcChunk/2 + 1, srcChunk - 1, srcChunk, 5 * srcChunk, 1 << 20, maxChunked - 1, maxChunked, maxChunked + 1, 1<<32 - 1}
	rng := rand.New(rand.NewPCG(3, 4))
	d := NewDeduper()
	seen := map[[3]uint64]bool{}
	for range 5000 {
		src := srcs[rng.IntN(len(srcs))]
		dst := uint32(rng.IntN(6))
		if rng.IntN(2) == 0 {
			dst = uint32(rng.IntN(2)) // mostly one or two destinations a source
		}
		act := uint64(1 + rng.IntN(8))
		key := [3]uint64{uint64(src), uint64(dst), act}
		want := Accept
		if seen[key] {
			want = Duplicate
		}
		s := Signal{Run: "r", Gen: 1, Src: src, Dst: dst, Act: act, Kind: SignalEdge}
		if got := d.Admit(&s); got != want {
			t.Fatalf("%d→%d act %d: %v, want %v", src, dst, act, got, want)
		}
		seen[key] = true
	}
	if st := d.Stats(); st.Accepted != uint64(len(seen)) {
		t.Errorf("accepted %d, %d distinct keys", st.Accepted, len(seen))
	}
}

// BenchmarkDedupDescendingFan: a source whose edges arrive in descending
// order of destination costs per edge what an ascending one does (it moved
// every edge after each insert before: O(n²)).
func BenchmarkDedupDescendingFan(b *testing.B) {
	for _, order := range []string{"ascending", "descending"} {
		b.Run(order, func(b *testing.B) {
			const n = 40000
			sigs := make([]Signal, n)
			for i := range sigs {
				dst := uint32(i + 1)
				if order == "descending" {
					dst = n - uint32(i)
				}
				sigs[i] = Signal{Run: "r", Gen: 1, Src: 0, Dst: dst, Act: 1, Kind: SignalEdge}
			}
			for b.Loop() {
				d := NewDeduper()
				for j := range sigs {
					d.Admit(&sigs[j])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/edge")
		})
	}
}

// intervals is how many intervals hold a's activations.
func (r *dedupRun) intervals(a *edgeActs) int {
	if a.spill > 0 {
		return len(r.spills[a.spill-1])
	}
	if a.spill == oneAct {
		return 1
	}
	return 0
}

// TestDedupBoundKeepsFarSourcesInChunks: a fan-in's Signals come from
// sources in any order, the first maybe from the last source; under Bound
// every source below it is kept in a chunk (no map entry), with the same
// verdicts; a source at or above the bound, out of reach, goes to the map
// as without one.
func TestDedupBoundKeepsFarSourcesInChunks(t *testing.T) {
	const n = 4000
	for _, bound := range []int{0, n} {
		d := NewDeduper()
		if bound > 0 {
			d.Bound("r", bound)
		}
		for _, src := range []uint32{n - 1, 7, n / 2, 2*n + 5000} {
			for range 2 {
				s := Signal{Run: "r", Gen: 1, Src: src, Dst: 0, Act: 1, Kind: SignalEdge}
				d.Admit(&s)
			}
		}
		st := d.Stats()
		if st.Accepted != 4 || st.Duplicate != 4 {
			t.Fatalf("bound %d: accepted %d, duplicate %d, want 4 and 4", bound, st.Accepted, st.Duplicate)
		}
		inMap := len(d.runs["r"].srcs)
		switch {
		case bound > 0 && inMap != 1:
			t.Errorf("bound %d: %d sources in the map, want only the one above the bound", bound, inMap)
		case bound == 0 && inMap < 2:
			t.Errorf("no bound: %d sources in the map, want the far ones", inMap)
		}
	}
}

// TestDedupFanCompact: a source's destinations (a fan of 2,000 edges to
// one node) cost 24 bytes each (the destination, the spill index and the
// interval), not 32: under three times the fan's 24 bytes a destination
// allocated in all, append's growth included (32 bytes a destination came
// to some 170 KB).
func TestDedupFanCompact(t *testing.T) {
	const fan, runs = 2000, 5
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		d := NewDeduper()
		d.Bound("r", fan+1)
		for i := range uint32(fan) {
			s := Signal{Run: "r", Gen: 1, Src: 0, Dst: 1 + i, Act: 1, Kind: SignalEdge}
			if v := d.AdmitReplayed(&s); v != Accept {
				t.Fatalf("dst %d: %v", 1+i, v)
			}
		}
		s := Signal{Run: "r", Gen: 1, Src: 0, Dst: fan, Act: 1, Kind: SignalEdge}
		if v := d.AdmitReplayed(&s); v != Duplicate {
			t.Fatalf("again: %v", v)
		}
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("%d bytes allocated a fan of %d", per, fan)
	if limit := uint64(3 * 24 * fan); per > limit {
		t.Fatalf("%d bytes allocated for a fan of %d destinations, want at most %d", per, fan, limit)
	}
}
