package transport

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// TaskReport is what changed in a node's tasks of one run under one
// generation since its last report: per changed task its index and its new
// values. A node keeps its tasks' state in arrays and sends a TaskReport
// now and then (cluster/node: every EventLinger, at idle, at the run's end,
// at once on a failure) instead of a TaskEvent per change; the run, the
// generation and the node are written once, and a vertex is named by its
// index alone (the reader maps index → name from the run's graph). Readers
// (EachEvent, ReplayEvents) hand each delta on as the TaskEvent it stands
// for, so a report folds exactly as the events it replaces.
type TaskReport struct {
	Run   string
	Gen   uint64
	Node  string
	Tasks []TaskDelta
}

// TaskDelta is one task's values in a TaskReport: those of its TaskEvent
// without the run, generation and node. Name is "" for a vertex (Task
// names it) and "parent/child" for a subflow child (Task is the parent's
// index). Start and End are Unix nanoseconds (0: unknown).
type TaskDelta struct {
	Task       uint32
	Name       string
	State      TaskState
	Act        uint64
	Executions uint64
	Output     []byte
	Error      string
	Start, End int64
}

// Type implements Message.
func (*TaskReport) Type() Type { return TypeTaskReport }

const (
	taskReportFields = 5
	taskDeltaFields  = 9
	taskRangeFields  = 6
)

// reportBase is the time the deltas' times are counted from: the earliest
// of them (0 for none), so that each is a small unsigned offset.
func reportBase(ds []TaskDelta) int64 {
	if len(ds) == 0 {
		return 0
	}
	base := int64(math.MaxInt64)
	for i := range ds {
		base = min(base, ds[i].Start, ds[i].End)
	}
	return base
}

// AppendWire implements Message.
func (tr *TaskReport) AppendWire(b []byte) []byte {
	return appendReport(b, tr.Run, tr.Gen, tr.Node, tr.Tasks)
}

// appendReport writes a TaskReport of run's deltas ds: a run of deltas
// that a range stands for as one range entry, any other delta as a
// delta entry (appendEntries).
func appendReport(b []byte, run string, gen uint64, node string, ds []TaskDelta) []byte {
	base := reportBase(ds)
	b = appendReportPre(b, run, gen, node, base)
	at := len(b)
	b = appendArray32Header(b)
	b, entries := appendEntries(b, ds, base)
	putArray32Count(b, at, entries)
	return b
}

// appendReportPre writes a TaskReport's fields up to its entries' array
// header.
func appendReportPre(b []byte, run string, gen uint64, node string, base int64) []byte {
	b = appendHeader(b, TypeTaskReport, taskReportFields)
	b = appendStr(b, run)
	b = appendUint(b, gen)
	b = appendStr(b, node)
	return appendInt(b, base)
}

// maxRange is the most tasks one range entry stands for, so that an entry
// stays well within a stored message (reportBytes).
const maxRange = 4096

// rangeHeadSize bounds a range entry's bytes before its times (its count
// and its times' length are written at a fixed width: see appendEntries),
// and rangeTaskSize a task's two times in it.
const (
	rangeHeadSize = 1 + 5 + 3 + 1 + 9 + 9 + 5
	rangeTaskSize = 2 * binary.MaxVarintLen64
)

// appendEntries writes ds to b as entries (a run of deltas inRange from
// the first as one range entry, any other delta as a delta entry) and
// returns b and how many entries it wrote: one message's, with no bound
// on its size (ReportWriter cuts a report into messages).
//
// It reads each delta once: a range is written as its deltas are found to
// continue it, its count (mpUint16: at most maxRange) and its times'
// length (bin32) at a fixed width, patched when it ends. That is legal
// msgpack that every reader of ranges reads (the reader takes any width of
// a uint and of a bin header), where finding the run first, then sizing
// its times, then writing them read the deltas three times.
func appendEntries(b []byte, ds []TaskDelta, base int64) ([]byte, int) {
	i, entries := 0, 0
	for i < len(ds) {
		d0 := &ds[i]
		if i+1 < len(ds) && inRange(d0, d0, 0, base) && inRange(d0, &ds[i+1], 1, base) {
			var count, times int
			b, count, times = appendRangeHead(b, d0)
			n := 0
			for ; i+n < len(ds) && n < maxRange && (n < 2 || inRange(d0, &ds[i+n], n, base)); n++ {
				b = appendTimes(b, &ds[i+n], base) // the first two are checked above
			}
			endRange(b, count, times, n)
			i += n
		} else {
			b = d0.appendFields(b, base)
			i++
		}
		entries++
	}
	return b, entries
}

// appendRangeHead writes the head of a range entry from d0 on, up to its
// times, and returns where its count and its times' length are to be
// written (endRange).
func appendRangeHead(b []byte, d0 *TaskDelta) (_ []byte, count, times int) {
	b = appendArrayHeader(b, taskRangeFields)
	b = appendUint(b, uint64(d0.Task))
	count = len(b)
	b = append(b, mpUint16, 0, 0)
	b = append(b, byte(d0.State))
	b = appendUint(b, d0.Act)
	b = appendUint(b, d0.Executions)
	times = len(b)
	return append(b, mpBin32, 0, 0, 0, 0), count, times
}

// appendTimes writes d's times in a range entry (rangeOff).
func appendTimes(b []byte, d *TaskDelta, base int64) []byte {
	b = binary.AppendUvarint(b, rangeOff(d.Start, base))
	return binary.AppendUvarint(b, rangeOff(d.End, base))
}

// endRange writes the count (n) and the times' length of the range entry
// appendRangeHead began.
func endRange(b []byte, count, times, n int) {
	binary.BigEndian.PutUint16(b[count+1:], uint16(n))
	binary.BigEndian.PutUint32(b[times+1:], uint32(len(b)-times-5))
}

// inRange says whether d can be task n of a range entry that starts at d0:
// consecutive tasks (vertices, named by index alone) in one state, with
// one activation and one count of executions, without output or error,
// their times at most 2⁶³-1 after base.
func inRange(d0, d *TaskDelta, n int, base int64) bool {
	return continues(d0, d, n) && rangeTime(d.Start, base) && rangeTime(d.End, base)
}

// continues is inRange but for the times.
func continues(d0, d *TaskDelta, n int) bool {
	return uint64(d.Task) == uint64(d0.Task)+uint64(n) && d.State == d0.State && d.Act == d0.Act && d.Executions == d0.Executions &&
		d.Name == "" && d.Output == nil && d.Error == ""
}

// rangeTime says whether a range can hold time t of a report from base.
func rangeTime(t, base int64) bool {
	return t == 0 || (t >= base && uint64(t)-uint64(base) < math.MaxInt64)
}

// rangeOff is time t in a range's times: 0 for none, else 1 + its offset
// from base.
func rangeOff(t, base int64) uint64 {
	if t == 0 {
		return 0
	}
	return uint64(t) - uint64(base) + 1
}

func (d *TaskDelta) appendFields(b []byte, base int64) []byte {
	b = appendArrayHeader(b, taskDeltaFields)
	b = appendUint(b, uint64(d.Task))
	b = appendStr(b, d.Name)
	b = append(b, byte(d.State))
	b = appendUint(b, d.Act)
	b = appendUint(b, d.Executions)
	b = appendBin(b, d.Output)
	b = appendStr(b, d.Error)
	b = appendUint(b, uint64(d.Start)-uint64(base)) // ≥ 0: base is the earliest
	return appendUint(b, uint64(d.End)-uint64(base))
}

// Decode decodes a TaskReport into tr (reusing its slice). Outputs alias
// data. A report holds at most Limits.MaxTasks deltas.
func (tr *TaskReport) Decode(data []byte, lim Limits) error {
	_, err := tr.decode(data, lim, nil, nil)
	return err
}

// DecodeRuns decodes a TaskReport into tr as Decode does, but for a range
// entry: it stays one delta, its first task's, without times (checked, not
// kept), and (*runs)[i] is how many consecutive tasks from Tasks[i].Task
// delta i stands for, each with its state, activation and executions (1
// for a single delta). What a reader that folds the deltas and reads no
// time takes, without a delta made for each task.
func (tr *TaskReport) DecodeRuns(data []byte, lim Limits, runs *[]uint32) error {
	*runs = (*runs)[:0]
	_, err := tr.decode(data, lim, runs, nil)
	return err
}

// rangesSince is the version that brought a TaskReport's range entries: an
// older stored report holds none, and one that claims to is refused.
const rangesSince = 7

// decode is Decode (runs nil) or DecodeRuns; with times, it also appends
// the raw times of each entry (nil for a single delta, whose times are in
// it), and returns the report's base time (eachDelta).
func (tr *TaskReport) decode(data []byte, lim Limits, runs *[]uint32, times *[][]byte) (int64, error) {
	var r reader
	if err := r.init(data, lim, TypeTaskReport, taskReportFields); err != nil {
		return 0, err
	}
	var err error
	if tr.Run, err = r.id("run"); err != nil {
		return 0, err
	}
	if tr.Gen, err = r.uint("gen"); err != nil {
		return 0, err
	}
	if tr.Node, err = r.id("node"); err != nil {
		return 0, err
	}
	base, err := r.int("base")
	if err != nil {
		return 0, err
	}
	n, err := r.arrayLen("tasks", r.lim.MaxTasks)
	if err != nil {
		return 0, err
	}
	if n > (len(r.b)-r.off)/(1+taskDeltaFields) { // every entry takes 10 bytes at least: refuse a count the data cannot hold before allocating
		return 0, r.errf("tasks: %d claimed in %d bytes", n, len(r.b)-r.off)
	}
	if cap(tr.Tasks) < n {
		tr.Tasks = make([]TaskDelta, n)
	}
	tr.Tasks = tr.Tasks[:0]
	total := 0 // tasks, ranges expanded
	for i := range n {
		if r.off < len(r.b) && r.b[r.off] == 0x90|taskRangeFields { // a range entry (fixarray of 6)
			if r.ver < rangesSince {
				return 0, r.errf("task %d: a range entry in a version %d report (ranges came in version %d)", i, r.ver, rangesSince)
			}
			r.off++
			var count int
			var raw []byte
			if tr.Tasks, count, raw, err = r.taskRange(tr.Tasks, runs == nil, total, i, base); err != nil {
				return 0, err
			}
			if times != nil {
				*times = append(*times, raw)
			}
			total += count
			if runs != nil {
				*runs = append(*runs, uint32(count))
			}
			continue
		}
		tr.Tasks = append(tr.Tasks, TaskDelta{})
		if err := tr.Tasks[len(tr.Tasks)-1].decodeFields(&r, i, base); err != nil {
			return 0, err
		}
		total++
		if runs != nil {
			*runs = append(*runs, 1)
		}
		if times != nil {
			*times = append(*times, nil)
		}
	}
	return base, r.end()
}

// eachDelta decodes a TaskReport into tr and calls fn for each task it
// stands for, a range's tasks one by one with their times, without a delta
// made for each: Decode makes a 104-byte TaskDelta of a range task's two
// wire bytes, so a hostile report of ranges would cost some 50 times its
// size; this costs a delta a wire entry. The whole report is checked
// before fn is called: a malformed one calls fn for none. The delta is
// valid only during the call.
func (tr *TaskReport) eachDelta(data []byte, lim Limits, fn func(*TaskDelta) error) error {
	var runs []uint32
	var times [][]byte
	base, err := tr.decode(data, lim, &runs, &times)
	if err != nil {
		return err
	}
	for i := range tr.Tasks {
		if times[i] == nil {
			if err := fn(&tr.Tasks[i]); err != nil {
				return err
			}
			continue
		}
		d := tr.Tasks[i]
		ts, first := times[i], d.Task
		for k := range runs[i] {
			var t [2]int64
			for j := range t {
				off, w := binary.Uvarint(ts) // checked by decode
				ts = ts[w:]
				if off > 0 {
					t[j] = int64(uint64(base) + off - 1)
				}
			}
			d.Task, d.Start, d.End = first+k, t[0], t[1]
			if err := fn(&d); err != nil {
				return err
			}
		}
	}
	return nil
}

// taskRange reads range entry i (after its array header) and appends to
// ds the deltas it stands for (expand) or its first task's, without times,
// and returns how many tasks it stands for and its raw times; the report's tasks (total
// before it) stay within Limits.MaxTasks.
func (r *reader) taskRange(ds []TaskDelta, expand bool, total, i int, base int64) ([]TaskDelta, int, []byte, error) {
	first, err := r.uint32("first task")
	if err != nil {
		return ds, 0, nil, err
	}
	count, err := r.uint("count")
	if err != nil {
		return ds, 0, nil, err
	}
	st, err := r.uint8("state")
	if err != nil {
		return ds, 0, nil, err
	}
	if TaskState(st) >= taskStateEnd {
		return ds, 0, nil, r.errf("task range %d: unknown task state %d", i, st)
	}
	act, err := r.uint("act")
	if err != nil {
		return ds, 0, nil, err
	}
	execs, err := r.uint("executions")
	if err != nil {
		return ds, 0, nil, err
	}
	times, err := r.bin("times", r.lim.MaxMessage, true)
	if err != nil {
		return ds, 0, nil, err
	}
	raw := times
	switch {
	case count == 0 || count > uint64(len(times))/2: // a task's two times take 2 bytes at least
		return ds, 0, nil, r.errf("task range %d: %d tasks in %d bytes of times", i, count, len(times))
	case uint64(first)+count-1 > math.MaxUint32:
		return ds, 0, nil, r.errf("task range %d: tasks %d and %d after it past the last", i, first, count-1)
	case uint64(total)+count > uint64(r.lim.MaxTasks):
		return ds, 0, nil, r.oversized("tasks", int(min(uint64(total)+count, math.MaxInt32)), r.lim.MaxTasks)
	}
	if expand {
		ds = slices.Grow(ds, int(count))
	} else {
		ds = append(ds, TaskDelta{Task: first, State: TaskState(st), Act: act, Executions: execs})
	}
	if !expand && timesValid(times, count, base) {
		return ds, int(count), raw, nil
	}
	for k := range uint32(count) {
		var t [2]int64
		for j := range t {
			off, w := binary.Uvarint(times)
			if w <= 0 {
				return ds, 0, nil, r.errf("task range %d: task %d: a malformed time", i, k)
			}
			times = times[w:]
			if off > 0 {
				if off-1 > uint64(math.MaxInt64)-uint64(base) {
					return ds, 0, nil, r.errf("task range %d: task %d: offset %d from %d is past the last time", i, k, off-1, base)
				}
				t[j] = int64(uint64(base) + off - 1)
			}
		}
		if expand {
			ds = append(ds, TaskDelta{Task: first + k, State: TaskState(st), Act: act, Executions: execs, Start: t[0], End: t[1]})
		}
	}
	if len(times) != 0 {
		return ds, 0, nil, r.errf("task range %d: %d bytes after its times", i, len(times))
	}
	return ds, int(count), raw, nil
}

// timesValid reports, without decoding them, that a range's times (of
// count tasks, from base) are what the loop of taskRange reads without an
// error: exactly 2×count uvarints and no byte after them, none over 8
// bytes long (binary.Uvarint's overflow is of a 10-byte one), and every
// offset within MaxInt64 of base: an offset of at most 8 bytes is below
// 2⁵⁶, so that holds of every one when MaxInt64 - base (as taskRange
// computes it) is 2⁵⁶ or more, as it is of any time this side of the year
// 2262 less 2⁵⁶ ns (some 834 days).
//
// A uvarint ends at each byte with its high bit clear: 2×count of those,
// the last byte one of them, is 2×count uvarints filling the times. No
// uvarint is over 8 bytes when no 8 bytes in a row have the high bit set.
// The bytes are read 8 at a time. When it says false, taskRange reads the
// times one by one, and finds the error or (a time of more than 8 bytes
// that is still in bounds) none.
func timesValid(times []byte, count uint64, base int64) bool {
	const hi = 0x8080808080808080
	if uint64(math.MaxInt64)-uint64(base) < 1<<56 || len(times) == 0 || times[len(times)-1]&0x80 != 0 {
		return false
	}
	ends, run := uint64(0), 0 // uvarint ends seen; high bits set in a row at the end of what was read
	b := times
	for ; len(b) >= 8; b = b[8:] {
		c := binary.LittleEndian.Uint64(b) & hi // byte i's high bit at bit 8i+7
		if c == hi {
			return false // 8 in a row
		}
		ends += uint64(8 - bits.OnesCount64(c))
		low := bits.TrailingZeros64(c^hi) >> 3 // high bits set in a row from the first byte
		if run+low >= 8 {
			return false
		}
		run = bits.LeadingZeros64(c^hi) >> 3 // ... and up to the last
	}
	for _, x := range b {
		if x&0x80 == 0 {
			ends++
			run = 0
		} else if run++; run >= 8 {
			return false
		}
	}
	return ends == 2*count
}

func (d *TaskDelta) decodeFields(r *reader, i int, base int64) error {
	if err := r.fields("task delta", taskDeltaFields); err != nil {
		return err
	}
	var err error
	if d.Task, err = r.uint32("task"); err != nil {
		return err
	}
	if d.Name, err = r.str("name", r.lim.MaxText); err != nil {
		return err
	}
	st, err := r.uint8("state")
	if err != nil {
		return err
	}
	if d.State = TaskState(st); d.State >= taskStateEnd {
		return r.errf("task delta %d: unknown task state %d", i, st)
	}
	if d.Act, err = r.uint("act"); err != nil {
		return err
	}
	if d.Executions, err = r.uint("executions"); err != nil {
		return err
	}
	if d.Output, err = r.bin("output", r.lim.MaxOutput, true); err != nil {
		return err
	}
	if d.Error, err = r.str("error", r.lim.MaxText); err != nil {
		return err
	}
	if d.Start, err = r.since(base, "start"); err != nil {
		return err
	}
	d.End, err = r.since(base, "end")
	return err
}

// since reads an offset from base and returns base+offset, which must be a
// time (an int64 of Unix nanoseconds).
func (r *reader) since(base int64, what string) (int64, error) {
	off, err := r.uint(what)
	if err != nil {
		return 0, err
	}
	if off > uint64(math.MaxInt64)-uint64(base) { // the room above base (mod 2⁶⁴, exact: it is in [0, 2⁶⁴))
		return 0, r.errf("%s: offset %d from %d is past the last time", what, off, base)
	}
	return int64(uint64(base) + off), nil
}

// event fills e with delta d of report tr (Output aliases d's).
func (tr *TaskReport) event(e *TaskEvent, d *TaskDelta) {
	*e = TaskEvent{Run: tr.Run, Gen: tr.Gen, Task: d.Task, Name: d.Name, Node: tr.Node, State: d.State,
		Act: d.Act, Executions: d.Executions, Output: d.Output, Error: d.Error, Start: unixTime(d.Start), End: unixTime(d.End)}
}

// UnixNanos is t as a TaskDelta time: Unix nanoseconds, 0 for the zero time.
func UnixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// reportBytes bounds one stored TaskReport (the deltas are cut into
// several before it).
const reportBytes = 256 << 10

// writer is a ReportWriter of tr's deltas (PublishReports' messages of
// tr), written from the whole report's base (its earliest time, so no
// earlier than any message's); its message buffers may come from
// reportBufs (a ReportSend's Wait puts them back). Only PublishReports and
// tests use it: a node writes with NewReportWriter.
func (tr *TaskReport) writer() *ReportWriter {
	w := &ReportWriter{Run: tr.Run, Gen: tr.Gen, Node: tr.Node, fixed: true, based: true, base: reportBase(tr.Tasks), hint: len(tr.Tasks)}
	for i := range tr.Tasks {
		w.Add(&tr.Tasks[i])
	}
	w.Finish()
	return w
}

// deltaSize bounds the encoded size of d (its times at their widest).
func deltaSize(d *TaskDelta) int {
	return 1 + 5 + 5 + len(d.Name) + 1 + 9 + 9 + 5 + len(d.Output) + 5 + len(d.Error) + 9 + 9
}

// String is a short form for logs and test failures.
func (d TaskDelta) String() string {
	return fmt.Sprintf("task %d %q %s act=%d execs=%d", d.Task, d.Name, d.State, d.Act, d.Executions)
}
