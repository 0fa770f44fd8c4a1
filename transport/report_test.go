package transport

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// randomDeltas is a report's deltas as a node cuts them: mostly runs of
// consecutive vertices in one state (which ranges stand for), broken by
// gaps, other states, subflow children, outputs, errors and times at the
// ends of their range (zero: unknown).
func randomDeltas(rng *rand.Rand, n int) []TaskDelta {
	var ds []TaskDelta
	task := uint32(rng.IntN(5))
	times := []int64{0, 1, 1 << 40, 1700000000123456789, math.MaxInt64, math.MinInt64, -5}
	for len(ds) < n {
		d := TaskDelta{Task: task, State: TaskState(rng.IntN(int(taskStateEnd))), Act: uint64(rng.IntN(3)), Executions: uint64(rng.IntN(3))}
		if rng.IntN(3) > 0 && len(ds) > 0 { // continue the run before
			p := ds[len(ds)-1]
			d.State, d.Act, d.Executions = p.State, p.Act, p.Executions
		}
		switch rng.IntN(40) {
		case 0:
			d.Name = "p/c"
		case 1:
			d.Output = []byte{byte(rng.IntN(256))}
		case 2:
			d.Output = []byte{}
		case 3:
			d.Error = "boom"
		}
		base := int64(1700000000000000000)
		d.Start, d.End = base+rng.Int64N(1<<30), base+rng.Int64N(1<<30)
		if rng.IntN(20) == 0 {
			d.Start, d.End = times[rng.IntN(len(times))], times[rng.IntN(len(times))]
		}
		ds = append(ds, d)
		task++
		if rng.IntN(10) == 0 {
			task += uint32(rng.IntN(3)) // a gap, or the same task again
			if rng.IntN(2) == 0 {
				task -= 2
			}
		}
	}
	return ds
}

// A report's deltas, written with range entries where they can be and cut
// into messages at any point, decode to the same deltas, in order; and
// ranges make a run of a layer's tasks a few bytes a task.
func TestReportRangesRoundTrip(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 3))
		ds := randomDeltas(rng, 1+rng.IntN(300))
		var got []TaskDelta
		for i := 0; i < len(ds); {
			j := i + 1 + rng.IntN(len(ds)-i) // a random cut
			b := appendReport(nil, "r1", 3, "n2", ds[i:j])
			var tr TaskReport
			if err := tr.Decode(b, Limits{}); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if tr.Run != "r1" || tr.Gen != 3 || tr.Node != "n2" {
				t.Fatalf("seed %d: report of %s gen %d node %s", seed, tr.Run, tr.Gen, tr.Node)
			}
			n := 0
			if err := EachEvent(b, Limits{}, func(e *TaskEvent) error {
				d := ds[i+n]
				if e.Task != d.Task || e.Name != d.Name || e.State != d.State || e.Act != d.Act || e.Executions != d.Executions ||
					UnixNanos(e.Start) != d.Start || UnixNanos(e.End) != d.End || e.Node != "n2" {
					t.Fatalf("seed %d: event %d %+v, want %v", seed, i+n, *e, d)
				}
				n++
				return nil
			}); err != nil || n != j-i {
				t.Fatalf("seed %d: %d events, %v", seed, n, err)
			}
			got = append(got, tr.Tasks...)
			var runs []uint32
			var byRuns TaskReport
			if err := byRuns.DecodeRuns(b, Limits{}, &runs); err != nil || len(runs) != len(byRuns.Tasks) {
				t.Fatalf("seed %d: DecodeRuns: %v, %d runs of %d deltas", seed, err, len(runs), len(byRuns.Tasks))
			}
			k := i
			for e, d := range byRuns.Tasks {
				for x := range runs[e] {
					w := ds[k]
					if w.Task != d.Task+x || w.State != d.State || w.Act != d.Act || w.Executions != d.Executions || w.Name != d.Name ||
						string(w.Output) != string(d.Output) || w.Error != d.Error || (runs[e] == 1 && (w.Start != d.Start || w.End != d.End)) {
						t.Fatalf("seed %d: delta %d by runs: %v (+%d), want %v", seed, k, d, x, w)
					}
					k++
				}
			}
			if k != j {
				t.Fatalf("seed %d: runs stand for %d deltas, want %d", seed, k-i, j-i)
			}
			i = j
		}
		for k := range got {
			if got[k].Output == nil && ds[k].Output != nil && len(ds[k].Output) == 0 {
				t.Fatalf("seed %d: delta %d: an empty output decoded as none", seed, k)
			}
		}
		if !reflect.DeepEqual(normalOutputs(got), normalOutputs(ds)) {
			t.Fatalf("seed %d: decoded\n%v\nwant\n%v", seed, got, ds)
		}
	}
	var layer []TaskDelta
	for i := range 1000 {
		layer = append(layer, TaskDelta{Task: uint32(5000 + i), State: TaskDone, Act: 1, Executions: 1,
			Start: 1700000000000000000 + int64(i)*1000, End: 1700000000000000000 + int64(i)*1000 + 700})
	}
	b := appendReport(nil, "r1", 1, "n1", layer)
	if len(b) > 6*len(layer)+16 { // and the head, an array32 header and a range's fixed-width count and times' length
		t.Errorf("a layer of %d tasks done: %d bytes, want ranges (at most 6 a task)", len(layer), len(b))
	}
	var tr TaskReport
	if err := tr.Decode(b, Limits{}); err != nil || !reflect.DeepEqual(tr.Tasks, layer) {
		t.Fatalf("a layer: %v, %d deltas", err, len(tr.Tasks))
	}
}

// normalOutputs is ds with empty outputs as nil (reflect.DeepEqual tells
// them apart; a bin of 0 bytes decodes to an empty slice of the data).
func normalOutputs(ds []TaskDelta) []TaskDelta {
	out := make([]TaskDelta, len(ds))
	for i, d := range ds {
		if d.Output != nil && len(d.Output) == 0 {
			d.Output = []byte{}
		}
		out[i] = d
	}
	return out
}

// A range entry that does not hold together is refused, whole.
func TestReportRangeMalformed(t *testing.T) {
	head := func(entries int) []byte {
		b := appendHeader(nil, TypeTaskReport, taskReportFields)
		b = appendStr(b, "r1")
		b = appendUint(b, 1)
		b = appendStr(b, "n1")
		b = appendInt(b, 100)
		return appendArrayHeader(b, entries)
	}
	rng := func(first uint32, count uint64, state byte, times []byte) []byte {
		b := appendArrayHeader(head(1), taskRangeFields)
		b = appendUint(b, uint64(first))
		b = appendUint(b, count)
		b = append(b, state)
		b = appendUint(b, 1)
		b = appendUint(b, 1)
		return appendBin(b, times)
	}
	if err := new(TaskReport).Decode(rng(3, 2, byte(TaskDone), []byte{1, 2, 3, 4}), Limits{}); err != nil {
		t.Fatalf("a well-formed range: %v", err)
	}
	for name, b := range map[string][]byte{
		"no tasks":              rng(3, 0, byte(TaskDone), []byte{}),
		"more tasks than times": rng(3, 3, byte(TaskDone), []byte{1, 2, 3, 4}),
		"times left over":       rng(3, 2, byte(TaskDone), []byte{1, 2, 3, 4, 5, 6}),
		"a time cut short":      rng(3, 2, byte(TaskDone), []byte{1, 2, 3, 0x80}),
		"past the last task":    rng(math.MaxUint32, 2, byte(TaskDone), []byte{1, 2, 3, 4}),
		"unknown state":         rng(3, 2, byte(taskStateEnd), []byte{1, 2, 3, 4}),
		"past the last time":    rng(3, 1, byte(TaskDone), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0}),
		"times not bin":         append(rng(3, 1, byte(TaskDone), nil)[:len(rng(3, 1, byte(TaskDone), nil))-1], appendStr(nil, "ab")...),
		"a range in a version 6 report": func() []byte { // ranges came in version 7: a stored older report holds none
			b := rng(3, 2, byte(TaskDone), []byte{1, 2, 3, 4})
			if b[2] != Version {
				t.Fatalf("byte 2 of a report is %d, not its version", b[2])
			}
			b[2] = rangesSince - 1
			return b
		}(),
	} {
		if err := new(TaskReport).Decode(b, Limits{}); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
		var runs []uint32
		if err := new(TaskReport).DecodeRuns(b, Limits{}, &runs); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: DecodeRuns: %v, want ErrMalformed", name, err)
		}
		n := 0
		_ = EachEvent(b, Limits{}, func(*TaskEvent) error { n++; return nil })
		if n != 0 {
			t.Errorf("%s: %d events handed on", name, n)
		}
	}
	if err := new(TaskReport).Decode(rng(3, 2, byte(TaskDone), []byte{1, 2, 3, 4}), Limits{MaxTasks: 1}); !errors.Is(err, ErrOversized) {
		t.Errorf("a range of 2 tasks, MaxTasks 1: %v, want ErrOversized", err)
	}
	two := append(head(2), rng(3, 2, byte(TaskDone), []byte{1, 2, 3, 4})[len(head(1)):]...)
	two = append(two, rng(5, 2, byte(TaskDone), []byte{1, 2, 3, 4})[len(head(1)):]...)
	var runs []uint32
	if err := new(TaskReport).DecodeRuns(two, Limits{MaxTasks: 4}, &runs); err != nil {
		t.Errorf("two ranges of 2 tasks, MaxTasks 4: %v", err)
	}
	if err := new(TaskReport).DecodeRuns(two, Limits{MaxTasks: 3}, &runs); !errors.Is(err, ErrOversized) {
		t.Errorf("two ranges of 2 tasks, MaxTasks 3, by runs: %v, want ErrOversized", err)
	}
}

// A report is stored as messages of at most reportBytes, each as long as
// its entries (not their bound), that decode back to its deltas in order:
// random deltas with outputs large enough to force cuts, and a run of
// 100,000 tasks done (a few messages, where cuts by the bound made ~23).
func TestReportWriterCutsByTheEntries(t *testing.T) {
	// A writer's messages are written into kept buffers (reportBufs),
	// which hold an earlier message's bytes: here garbage, in a pool that
	// keeps them all (a sync.Pool may drop them: the writer would take
	// clean new ones).
	kept := useKeptBufs(t)
	dirty := map[*[]byte]bool{}
	fill := func() {
		for len(kept.free) < 4 {
			b := make([]byte, reportBytes)
			for i := range b {
				b[i] = 0xd9
			}
			b = b[:0]
			dirty[&b] = true
			kept.Put(&b)
		}
	}
	taken := 0
	check := func(name string, ds []TaskDelta) int {
		fill()
		w := (&TaskReport{Run: "r1", Gen: 2, Node: "n1", Tasks: ds}).writer()
		taken = len(w.bufs)
		for i, p := range w.bufs {
			if i < 4 && !dirty[p] {
				t.Fatalf("%s: message %d written into a new buffer, not a kept one", name, i)
			}
		}
		got := decodeWritten(t, name, w.Messages())
		if !reflect.DeepEqual(normalOutputs(got), normalOutputs(ds)) {
			t.Fatalf("%s: the messages decode to %d deltas, not the report's %d", name, len(got), len(ds))
		}
		return len(w.Messages())
	}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 9))
		ds := randomDeltas(rng, 2000+rng.IntN(5000))
		for k := range ds {
			if rng.IntN(200) == 0 {
				ds[k].Output = make([]byte, rng.IntN(120<<10))
			}
		}
		check("random", ds)
	}
	var layered []TaskDelta
	for i := range 100_000 {
		layered = append(layered, TaskDelta{Task: uint32(i), State: TaskDone, Act: 1, Executions: 1,
			Start: 1700000000000000000 + int64(i)*900, End: 1700000000000000000 + int64(i)*900 + 600})
	}
	if msgs := check("layered", layered); msgs > 8 {
		t.Errorf("100,000 tasks done stored as %d messages, want a few (cut by their bytes, not their bound)", msgs)
	} else if taken == 0 || taken >= msgs {
		// The last message's buffer is made for its room (the hint), not
		// taken: the writer's choice, whatever the pool keeps.
		t.Errorf("100,000 tasks done: %d of %d messages written into kept buffers, want those but the last", taken, msgs)
	}
}

// EachEvent hands a range's tasks on one by one without a TaskDelta made
// for each: a report of 2 wire bytes a task does not cost a reader 104
// bytes a task (a hostile report of ranges would cost some 50 times its
// size).
func TestEachEventWalksRangesInPlace(t *testing.T) {
	const n = 50_000
	ds := make([]TaskDelta, n)
	for i := range ds {
		ds[i] = TaskDelta{Task: uint32(i), State: TaskDone, Act: 1, Executions: 1, Start: 100, End: 100}
	}
	b := appendReport(nil, "r1", 1, "n1", ds)
	if len(b) > 4*n {
		t.Fatalf("a report of %d alike tasks takes %d bytes: no ranges?", n, len(b))
	}
	seen := 0
	allocs := testing.AllocsPerRun(1, func() {
		seen = 0
		_ = EachEvent(b, Limits{}, func(e *TaskEvent) error {
			if e.Task != uint32(seen) || e.State != TaskDone {
				t.Fatalf("event %d: %+v", seen, *e)
			}
			seen++
			return nil
		})
	})
	if seen != n {
		t.Fatalf("%d events, want %d", seen, n)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_ = EachEvent(b, Limits{}, func(*TaskEvent) error { return nil })
	runtime.ReadMemStats(&m1)
	if got := m1.TotalAlloc - m0.TotalAlloc; got > 1<<20 {
		t.Fatalf("EachEvent of %d range tasks (%d bytes) allocated %d bytes (%.0f allocations), want under 1 MB", n, len(b), got, allocs)
	}
}

// A writer fed deltas one at a time, as a node's cut does, with no base
// given, writes messages within reportBytes that decode to them in order:
// random deltas (times in any order, some zero, some at the extremes), and
// times falling all the way, each before every earlier one (a message
// begun for a time before its base widens the next one's margin: a few
// dozen messages, not one every few deltas).
func TestReportWriterFindsItsBases(t *testing.T) {
	check := func(name string, ds []TaskDelta, hint int) int {
		w := NewReportWriter("r1", 4, "n2", hint)
		for i := range ds {
			w.Add(&ds[i])
		}
		w.Finish()
		if w.Tasks() != len(ds) {
			t.Fatalf("%s: %d tasks written, want %d", name, w.Tasks(), len(ds))
		}
		var got []TaskDelta
		for _, b := range w.Messages() {
			if len(b) > reportBytes {
				t.Errorf("%s: a message of %d bytes, over %d", name, len(b), reportBytes)
			}
			var tr TaskReport
			if err := tr.Decode(b, Limits{}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if tr.Run != "r1" || tr.Gen != 4 || tr.Node != "n2" {
				t.Fatalf("%s: a message of %s, %d, %s", name, tr.Run, tr.Gen, tr.Node)
			}
			got = append(got, tr.Tasks...)
		}
		if !reflect.DeepEqual(normalOutputs(got), normalOutputs(ds)) {
			t.Fatalf("%s: the messages decode to\n%v\nwant\n%v", name, got, ds)
		}
		return len(w.Messages())
	}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 11))
		ds := randomDeltas(rng, 1+rng.IntN(3000))
		for k := range ds {
			if rng.IntN(10) == 0 { // a time well before the others
				ds[k].Start -= rng.Int64N(1 << 34)
			}
			if rng.IntN(300) == 0 {
				ds[k].Output = make([]byte, rng.IntN(120<<10))
			}
		}
		check("random", ds, rng.IntN(2)*len(ds))
	}
	var falling []TaskDelta
	for i := range 20_000 {
		at := int64(1700000000000000000) - int64(i)*1_000_000 // a ms earlier each
		falling = append(falling, TaskDelta{Task: uint32(i), State: TaskDone, Act: 1, Executions: 1, Start: at, End: at + 500})
	}
	if msgs := check("falling", falling, len(falling)); msgs > 48 {
		t.Errorf("20,000 tasks, each a ms before the one before: %d messages, want a few dozen at most", msgs)
	}
	w := NewReportWriter("r1", 1, "n1", 0)
	if w.Finish(); len(w.Messages()) != 0 {
		t.Errorf("a writer of no deltas wrote %d messages", len(w.Messages()))
	}
}

// A writer given too few tasks (a node's cut counts the chunks it will read
// before it reads them, while workers go on writing rows) writes all it is
// given all the same: a message begun after the hint is passed (a time
// before the base, here, or the size) takes a buffer of its own size, not
// one of the room the hint left, which is none.
func TestReportWriterOutgrowsItsHint(t *testing.T) {
	for _, hint := range []int{1, 10, 64} {
		var ds []TaskDelta
		for i := range 4000 {
			at := int64(1700000000000000000) - int64(i)*1_000_000_000 // a second earlier each: messages begun for an earlier time
			ds = append(ds, TaskDelta{Task: uint32(2 * i), State: TaskDone, Act: 1, Executions: 1, Start: at, End: at + 500})
			if i%7 == 0 {
				ds = append(ds, TaskDelta{Task: uint32(2*i + 1), State: TaskDone, Act: 1, Executions: 1, Output: make([]byte, 900), Start: at, End: at + 500})
			}
		}
		w := NewReportWriter("r1", 3, "n1", hint)
		for i := range ds {
			w.Add(&ds[i])
		}
		w.Finish()
		got := decodeWritten(t, fmt.Sprintf("hint %d", hint), w.Messages())
		if !reflect.DeepEqual(normalOutputs(got), normalOutputs(ds)) {
			t.Fatalf("hint %d: the messages decode to %d deltas, not the %d written", hint, len(got), len(ds))
		}
		if len(w.Messages()) < 3 {
			t.Fatalf("hint %d: %d messages: none begun past the hint", hint, len(w.Messages()))
		}
	}
}

// keptBufs is a bufPool that keeps every buffer put, where a sync.Pool
// drops some (every GC empties it, and under -race a Put is dropped at
// random): a test of what is taken and put back reads it (useKeptBufs).
type keptBufs struct {
	mu   sync.Mutex
	free []*[]byte
	puts []*[]byte // every buffer put, in order
}

func (k *keptBufs) Get() any {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.free) == 0 {
		return nil
	}
	p := k.free[len(k.free)-1]
	k.free = k.free[:len(k.free)-1]
	return p
}

func (k *keptBufs) Put(x any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.free = append(k.free, x.(*[]byte))
	k.puts = append(k.puts, x.(*[]byte))
}

// put reports whether p was put.
func (k *keptBufs) put(p *[]byte) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Contains(k.puts, p)
}

// useKeptBufs has the writers take and put back their buffers in a
// keptBufs until the test ends (the package's tests run one at a time).
func useKeptBufs(t testing.TB) *keptBufs {
	k := &keptBufs{}
	old := reportBufs
	reportBufs = k
	t.Cleanup(func() { reportBufs = old })
	return k
}

// A lone running task's delta, its end 0 (none), cannot be in a message
// of a base after 0 (a delta entry's times are at or after its base), so
// it begins one of base 0; but it is not a time before the base, and the
// next message's margin stays as it was.
func TestReportWriterZeroTimeKeepsTheMargin(t *testing.T) {
	at := int64(1700000000000000000)
	ds := []TaskDelta{
		{Task: 0, State: TaskDone, Act: 1, Executions: 1, Start: at, End: at + 500},
		{Task: 1, State: TaskDone, Act: 1, Executions: 1, Start: at, End: at + 700},
		{Task: 5, State: TaskRunning, Act: 1, Start: at + 900},
		{Task: 9, State: TaskDone, Act: 1, Executions: 1, Start: at + 100, End: at + 900},
	}
	w := NewReportWriter("r1", 1, "n1", len(ds))
	for i := range ds {
		w.Add(&ds[i])
	}
	w.Finish()
	var got []TaskDelta
	for _, b := range w.Messages() {
		var tr TaskReport
		if err := tr.Decode(b, Limits{}); err != nil {
			t.Fatal(err)
		}
		got = append(got, tr.Tasks...)
	}
	if !reflect.DeepEqual(got, ds) {
		t.Fatalf("the messages decode to\n%v\nwant\n%v", got, ds)
	}
	if len(w.Messages()) != 2 || w.splits != 0 {
		t.Fatalf("%d messages, %d begun for a time before the base: want 2 (the running task's a base of 0), none", len(w.Messages()), w.splits)
	}
}

// decodeWritten decodes a writer's messages, each within reportBytes, into
// the deltas they stand for; what names the case in a failure.
func decodeWritten(t *testing.T, what string, msgs [][]byte) []TaskDelta {
	t.Helper()
	var got []TaskDelta
	for _, b := range msgs {
		if len(b) > reportBytes {
			t.Errorf("%s: a message of %d bytes, over %d", what, len(b), reportBytes)
		}
		var tr TaskReport
		if err := tr.Decode(b, Limits{}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got = append(got, tr.Tasks...)
	}
	return got
}

// A writer whose hint asks for a quarter of a kept buffer or more writes
// into a kept one (put back once stored); a smaller one into an array of
// its own size.
func TestReportWriterTakesAKeptBufferForARoomOfThousands(t *testing.T) {
	kept := useKeptBufs(t)
	for _, tc := range []struct {
		hint int
		kept bool
	}{{10, false}, {5000, true}} {
		b := make([]byte, 0, reportBytes)
		kept.Put(&b)
		w := NewReportWriter("r1", 1, "n1", tc.hint)
		for i := range min(tc.hint, 10) {
			w.Add(&TaskDelta{Task: uint32(2 * i), State: TaskDone, Act: 1, Executions: 1})
		}
		w.Finish()
		if took := slices.Contains(w.bufs, &b); took != tc.kept {
			t.Errorf("a writer hinted %d tasks: took the kept buffer %v, want %v", tc.hint, took, tc.kept)
		}
		kept.free = nil
	}
}
