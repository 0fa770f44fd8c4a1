package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// timesByOne is timesValid's rule read a time at a time: ok when every
// uvarint reads without an error, is of at most 8 bytes and its offset
// fits past base, with MaxInt64 - base at least 2⁵⁶ (timesValid's further
// bounds, under which it is allowed to say false of good times); the
// rule, not taskRange's loop, which FuzzDecodeRunsIsDecode checks against.
func timesByOne(times []byte, count uint64, base int64) (ok bool) {
	if uint64(math.MaxInt64)-uint64(base) < 1<<56 || count == 0 { // taskRange refuses a range of no task before
		return false
	}
	for range 2 * count { // a task's start and end
		off, w := binary.Uvarint(times)
		if w <= 0 || w > 8 {
			return false
		}
		times = times[w:]
		if off > 0 && off-1 > uint64(math.MaxInt64)-uint64(base) {
			return false
		}
	}
	return len(times) == 0
}

// timesValid says true exactly when the times read one by one are good
// (within its bounds): random times of every length about a word, with
// uvarints of up to 10 bytes at every place across the words, counts one
// off, a byte left over, a last uvarint cut short, and bases at and past
// its bound.
func TestTimesValidIsTheLoop(t *testing.T) {
	bases := []int64{0, 1_700_000_000_000_000_000, math.MaxInt64 - 1<<56, math.MaxInt64 - 1<<56 + 1, math.MaxInt64, -1, math.MinInt64}
	rng := rand.New(rand.NewPCG(5, 9))
	for i := range 200_000 {
		var b []byte
		n := rng.IntN(12)
		for range n {
			var x uint64
			switch w := rng.IntN(10); { // a uvarint of w+1 bytes, most of them short
			case w < 6:
				x = rng.Uint64N(1 << (7 * min(w+1, 3)))
			default:
				x = rng.Uint64() >> (64 - min(7*(w+1), 64))
			}
			b = binary.AppendUvarint(b, x)
		}
		switch rng.IntN(8) {
		case 0:
			b = append(b, 0x80|byte(rng.IntN(128))) // a uvarint cut short
		case 1:
			if len(b) > 0 {
				b[rng.IntN(len(b))] ^= 0x80 // one ends where it did not, or not where it did
			}
		case 2:
			b = append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f) // ten bytes: overflows
		}
		count := uint64(n+1) / 2
		if rng.IntN(4) == 0 {
			count = uint64(rng.IntN(8))
		}
		base := bases[i%len(bases)]
		if got, want := timesValid(b, count, base), timesByOne(b, count, base); got != want {
			t.Fatalf("times %x, count %d, base %d: timesValid %v, one by one %v", b, count, base, got, want)
		}
	}
	// a uvarint of 8 bytes is within bounds, of 9 not, wherever it falls
	for lead := range 17 {
		for _, w := range []int{7, 8, 9} {
			b := slices.Repeat([]byte{1}, lead)
			b = append(b, slices.Repeat([]byte{0x81}, w-1)...)
			b = append(b, 1)
			uvarints := lead + 1
			if uvarints%2 == 1 {
				b, uvarints = append(b, 1), uvarints+1
			}
			count := uint64(uvarints / 2)
			if got, want := timesValid(b, count, 0), w <= 8; got != want {
				t.Fatalf("a uvarint of %d bytes after %d: timesValid %v, want %v", w, lead, got, want)
			}
		}
	}
}

// DecodeRuns, which checks a range's times by timesValid, refuses what
// Decode, which reads every time, refuses, with the same error, and reads
// the same tasks from what it takes; so does eachDelta, which reads a
// range's times unchecked after that check, with the same times.
func FuzzDecodeRunsIsDecode(f *testing.F) {
	fuzzSeeds(f, TypeTaskReport)
	ds := make([]TaskDelta, 40)
	for i := range ds {
		ds[i] = TaskDelta{Task: uint32(i), State: TaskDone, Act: 1, Executions: 1, Start: 1_700_000_000_000_000_000 + int64(i)*1000, End: 1_700_000_000_000_000_000 + int64(i)*1000 + 1 + int64(i%3)<<(7*i%8)}
	}
	f.Add(appendReport(nil, "r1", 1, "n1", ds))
	f.Add(appendReport(nil, "r1", 1, "n1", ds[:3]))
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := Limits{MaxMessage: 1 << 20, MaxBatch: 1 << 10, MaxOutput: 1 << 16, MaxText: 1 << 12, MaxTasks: 1 << 12, MaxBody: 1 << 16}
		var all, byRuns TaskReport
		var runs []uint32
		err, rerr := all.Decode(data, lim), byRuns.DecodeRuns(data, lim, &runs)
		if (err == nil) != (rerr == nil) || (err != nil && (err.Error() != rerr.Error() || !errors.Is(rerr, ErrMalformed) && !errors.Is(rerr, ErrOversized))) {
			t.Fatalf("Decode: %v; DecodeRuns: %v", err, rerr)
		}
		if err != nil {
			return
		}
		k := 0
		for e, d := range byRuns.Tasks {
			for x := range runs[e] {
				w := all.Tasks[k]
				if w.Task != d.Task+x || w.State != d.State || w.Act != d.Act || w.Executions != d.Executions || w.Name != d.Name {
					t.Fatalf("delta %d by runs: %v (+%d), want %v", k, d, x, w)
				}
				k++
			}
		}
		if k != len(all.Tasks) {
			t.Fatalf("runs stand for %d tasks, Decode read %d", k, len(all.Tasks))
		}
		var each TaskReport
		k = 0
		if eerr := each.eachDelta(data, lim, func(d *TaskDelta) error {
			if k >= len(all.Tasks) {
				t.Fatalf("eachDelta hands more than the %d tasks Decode read", len(all.Tasks))
			}
			w := all.Tasks[k]
			if w.Task != d.Task || w.State != d.State || w.Act != d.Act || w.Executions != d.Executions || w.Name != d.Name ||
				w.Error != d.Error || !bytes.Equal(w.Output, d.Output) || w.Start != d.Start || w.End != d.End {
				t.Fatalf("delta %d by eachDelta: %+v, want %+v", k, *d, w)
			}
			k++
			return nil
		}); eerr != nil {
			t.Fatalf("Decode took it; eachDelta: %v", eerr)
		}
		if k != len(all.Tasks) {
			t.Fatalf("eachDelta handed %d tasks, Decode read %d", k, len(all.Tasks))
		}
	})
}
