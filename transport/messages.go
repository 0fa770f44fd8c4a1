package transport

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Wire format (version 9). Every top-level message is one msgpack array whose first
// two elements are the message Type and the format Version, followed by the fields
// of that type in a fixed order:
//
//	Signal      [1, 9, run, gen, src, dst, act, kind, output, dst_act, [ctx, ...]]
//	Batch       [2, 9, from, seq, run, [[gen, src, dst | [dst, ...], act, kind, output, dst_act, [ctx, ...]], ...]]
//	TaskEvent   [3, 9, run, gen, task, name, node, state, act, executions, output, error, start, end]
//	Assignment  [4, 9, run, gen, [node, ...], [owner, ...], plan, [boot, ...], plan_digest]
//	Cancel      [5, 9, run, gen, reason]
//	TermReport  [6, 9, run, gen, node, wave, sent, received, idle, {from: count, ...}]
//	Envelope    [7, 9, kind, run, node, body]
//	EventBatch  [8, 9, [[run, gen, task, name, node, state, act, executions, output, error, start, end], ...]]
//	Ack         [9, 9, run, gen, node, boot, need_plan]
//	Plan        [10, 9, tasks, [vertex, ...], [loop, ...]]   (plan.go)
//	TaskReport  [11, 9, run, gen, node, base, [[task, name, state, act, executions, output, error, start, end], ...]]   (report.go)
//
// Version 2 added a Signal's dst_act and ctx (the destination activation it
// starts, and the loop context of the source's activation); a version 1
// peer's messages are refused, as this build's are by it. Ack (type 9), a
// node's receipt of an Assignment on a subject of its own
// (cluster/proto.AckSubject), came within version 2. Version 3 added an
// Assignment's boots (the incarnation of each node's process the part was
// made for). Version 4 replaced an Assignment's flow (the canonical JSON of
// the whole flow, which every node parsed and expanded) by its plan (the
// encoded Plan of the node's own part, compiled by the leader).
// Version 5 added the signal kind switched (3), a node's mark in the
// record that it took a generation, and the record's batches of picks
// (transport.PicksNode): a version 4 node neither writes them nor waits for
// them, so the two do not mix. TaskReport (type 11), a node's per-task
// deltas that replace its TaskEvents, came within version 5: a reader of
// this build still folds the TaskEvents and EventBatches an earlier build
// stored (the event stream keeps them for days), and an earlier reader
// refuses a TaskReport as an unknown type (its status shows the tasks
// unreported and its verdict check finds the sources unrun: never a
// success).
// Version 6 lets a batch entry name an array
// of destinations in place of dst (a fan): as many Signals, equal but for
// Dst, which the Batcher writes once for a source activation's edges to one
// node and Decode gives back one by one, in order (a batch's Signals,
// counted against Limits.MaxBatch, are the decoded ones).
// Version 7 lets a TaskReport's entry stand for a range of deltas: a run
// of consecutive tasks in one state, with one activation and one count of
// executions and no output or error, written once with the tasks' times
// (transport/report.go); a reader of this build still folds the reports of
// versions 5 and 6, whose entries are all single deltas.
// Version 8 added an Assignment's plan_digest (the SHA-256 of its plan) and
// lets an Assignment name its plan by that digest alone (plan nil): a run of
// a flow again on the same placement no longer carries some MB of plan to a
// node that holds it. A node that does not hold the plan named answers with
// an Ack whose need_plan (added to Ack in version 8) is set, and takes
// nothing; the leader then sends the Assignment with its plan. A version 7
// node would refuse a plan-less Assignment (ErrNoPlan), so the two do not
// mix: live processes still speak one version, and the stored task events
// of versions 5 to 7 are read as before.
// Version 9 writes a batch's run once, after its seq, where each entry
// wrote it before (a batch is one run's, the run its subject names): a
// run id is some 22 bytes of a fan-in Signal's ~36, which its sender
// wrote, NATS and the record carried and stored, and its receiver read
// and compared, once an edge. A batch of no Signals names the run "".
// Nothing else changed: the stored task events are version 8's.
//
// Strings are msgpack str, byte fields bin (nil stays nil), times int64 Unix
// nanoseconds (0 for the zero time). A decoder rejects an unknown type or version,
// a wrong field count, a field of the wrong kind, an out-of-range value, trailing
// bytes, and anything over its Limits, with an error matching ErrMalformed (and
// ErrOversized for a limit). A new field means a new Version.

// Type identifies a message on the wire.
type Type uint8

// Message types.
const (
	TypeSignal     Type = 1
	TypeBatch      Type = 2
	TypeTaskEvent  Type = 3
	TypeAssignment Type = 4
	TypeCancel     Type = 5
	TypeTermReport Type = 6
	TypeEnvelope   Type = 7
	TypeEventBatch Type = 8
	TypeAck        Type = 9
	TypePlan       Type = 10
	TypeTaskReport Type = 11
)

// Version is the wire format version this package writes and reads.
const Version = 9

func (t Type) String() string {
	switch t {
	case TypeSignal:
		return "signal"
	case TypeBatch:
		return "batch"
	case TypeTaskEvent:
		return "task event"
	case TypeAssignment:
		return "assignment"
	case TypeCancel:
		return "cancel"
	case TypeTermReport:
		return "termination report"
	case TypeEnvelope:
		return "envelope"
	case TypeEventBatch:
		return "event batch"
	case TypeAck:
		return "ack"
	case TypePlan:
		return "plan"
	case TypeTaskReport:
		return "task report"
	}
	return fmt.Sprintf("type %d", uint8(t))
}

// Message is any top-level wire message.
type Message interface {
	// Type is the message's wire type.
	Type() Type
	// AppendWire appends the message's encoding to b and returns the result.
	AppendWire(b []byte) []byte
}

// Encode returns the wire encoding of m.
func Encode(m Message) []byte {
	if s, ok := m.(interface{ sizeHint() int }); ok {
		return m.AppendWire(make([]byte, 0, s.sizeHint()))
	}
	return m.AppendWire(nil)
}

// Limits bound what a decoder accepts. A zero field takes its default.
type Limits struct {
	MaxMessage int // bytes of one encoded message (default 64 MiB)
	MaxBatch   int // Signals in one Batch (default 65536)
	MaxOutput  int // bytes of one task output (default 8 MiB)
	MaxText    int // bytes of a name, error text, reason or envelope kind (default 64 KiB)
	MaxTasks   int // tasks (and nodes) in one Assignment (default 1<<24)
	MaxBody    int // bytes of an opaque body: Assignment.Plan, Envelope.Body (default 64 MiB)
}

// DefaultLimits are the limits a zero Limits stands for.
var DefaultLimits = Limits{
	MaxMessage: 64 << 20,
	MaxBatch:   1 << 16,
	MaxOutput:  8 << 20,
	MaxText:    64 << 10,
	MaxTasks:   1 << 24,
	MaxBody:    64 << 20,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxMessage > 0 {
		d.MaxMessage = l.MaxMessage
	}
	if l.MaxBatch > 0 {
		d.MaxBatch = l.MaxBatch
	}
	if l.MaxOutput > 0 {
		d.MaxOutput = l.MaxOutput
	}
	if l.MaxText > 0 {
		d.MaxText = l.MaxText
	}
	if l.MaxTasks > 0 {
		d.MaxTasks = l.MaxTasks
	}
	if l.MaxBody > 0 {
		d.MaxBody = l.MaxBody
	}
	return d
}

// init checks the message size and the [type, version, ...] header. The reader
// lives on the caller's stack.
func (r *reader) init(data []byte, lim Limits, t Type, fields int) error {
	*r = reader{b: data, lim: lim.withDefaults(), msg: t.String()}
	if len(data) > r.lim.MaxMessage {
		return r.oversized("message size", len(data), r.lim.MaxMessage)
	}
	// The type and version first: a message of another version is refused
	// as one, not for its count of fields.
	n, err := r.arrayLen(t.String(), 0)
	if err != nil {
		return err
	}
	if n >= 2 {
		if err := r.header(t); err != nil {
			return err
		}
	}
	if n != 2+fields {
		return r.errf("%s: want %d fields, found %d", t, 2+fields, n)
	}
	return nil
}

func (r *reader) header(t Type) error {
	got, err := r.uint8("type")
	if err != nil {
		return err
	}
	if Type(got) != t {
		return r.errf("want a %s, found %s", t, Type(got))
	}
	v, err := r.uint8("version")
	if err != nil {
		return err
	}
	if v != Version && !(v >= oldestStored && v < Version && storedType(t)) {
		return r.errf("unsupported version %d (this build reads version %d)", v, Version)
	}
	r.ver = v
	return nil
}

// oldestStored is the oldest version whose task events this build still
// reads. The event stream keeps a run's TaskEvents, EventBatches and
// TaskReports for days, and status and the record check fold them after an
// upgrade; their layout is the same in versions 5 and 6 (version 6 changed
// only a Batch's entries) and 7 reads them as they are (it added a
// TaskReport's range entries, which none of them holds); version 8 changed
// only Assignments and Acks and version 9 only Batches, so their stored
// events are version 7's. Messages between
// live processes (Signals, Batches, Assignments, ...) are still refused
// unless of this Version: the processes of one run do not mix versions.
const oldestStored = 5

func storedType(t Type) bool {
	return t == TypeTaskEvent || t == TypeEventBatch || t == TypeTaskReport
}

func appendHeader(b []byte, t Type, fields int) []byte {
	b = appendArrayHeader(b, 2+fields)
	return append(b, byte(t), Version)
}

func (r *reader) id(what string) (string, error) {
	s, err := r.rawStr(what, MaxIDLen)
	if err != nil {
		return "", err
	}
	if !validIDBytes(s) {
		return "", r.errf("%s: %q is not a valid id", what, s)
	}
	return string(s), nil
}

func appendTime(b []byte, t time.Time) []byte { return appendInt(b, UnixNanos(t)) }

func (r *reader) time(what string) (time.Time, error) {
	n, err := r.int(what)
	return unixTime(n), err
}

// ---- Signal ----

// SignalKind says what a Signal reports.
type SignalKind uint8

const (
	// SignalEdge: the source task finished an activation; the edge to Dst is a
	// strong one and Output carries the source's output (nil when it has none).
	SignalEdge SignalKind = 1
	// SignalChoice: the source is a condition (or multi-condition) task and this
	// activation chose Dst (a weak edge); Output is unused.
	SignalChoice SignalKind = 2
	// SignalSwitched: the sender switched to generation Gen of Run (and
	// fences by its owner table from then on); Src, Dst and Output are
	// unused, Act is 1. Only the record holds it (Batcher.AddSwitched):
	// a node that runs conditions again after a loss decides them once it
	// has read every node's mark of the generation (docs/cluster-protocol.md,
	// "Condition replay").
	SignalSwitched SignalKind = 3
)

func (k SignalKind) String() string {
	switch k {
	case SignalEdge:
		return "edge"
	case SignalChoice:
		return "choice"
	case SignalSwitched:
		return "switched"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// Signal is one cross-node edge completion or condition outcome.
//
// Tasks are named by their uint32 index in the flow spec (the order of its task
// list), which every node holds; names are not sent. Act is the source task's
// activation number, counted from 1 since the run started: activation k of Src
// sends at most one Signal per out-edge, so (Run, Src, Dst, Act) names one logical
// edge traversal even around loops. Gen is the assignment generation the sender ran
// under: a receiver fences (drops) Signals older than its current generation, and
// deduplicates on (Run, Src, Dst, Act) regardless of Gen, so a task re-run under a
// newer generation after a failure repeats, not adds, its edges. See Deduper.
//
// DstAct is the activation of Dst this traversal starts (or, for a join,
// counts towards), 0 when the sender does not say. A receiver numbers Dst's
// activations by it, not by arrival: a task re-executed on a new owner
// after a loss, whose inputs come all at once from the run's record and
// from live senders in any order, runs activation k on activation k's
// inputs, as the original did. Ctx is the loop context of the source's
// activation: the latest activation, in its causal past, of each task that
// a condition of the source's loop picks (in the order of the flow's
// vertices; nil outside a loop, at most MaxSignalCtx). The receiver carries
// it on to the tasks it starts, so that a condition picking the loop's head
// again can say which activation of the head it starts.
type Signal struct {
	Run    string
	Gen    uint64
	Src    uint32
	Dst    uint32
	Act    uint64
	Kind   SignalKind
	Output []byte
	DstAct uint64
	Ctx    []uint64
}

// MaxSignalCtx bounds a Signal's Ctx (the tasks picked by the conditions of
// one loop).
const MaxSignalCtx = 1024

// Type implements Message.
func (*Signal) Type() Type { return TypeSignal }

// Key is the dedup identity of s.
func (s *Signal) Key() SignalKey { return SignalKey{Src: s.Src, Dst: s.Dst, Act: s.Act} }

// Validate checks what a decoder would check.
func (s *Signal) Validate() error { return s.validate("") }

// validate is Validate; a run equal to known (checked already) is not
// checked again.
func (s *Signal) validate(known string) error {
	if s.Run != known || known == "" {
		if err := ValidateID("run", s.Run); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidSignal, err)
		}
	}
	if s.Act == 0 {
		return fmt.Errorf("%w: run %s edge %d->%d: activation 0 (activations count from 1)", ErrInvalidSignal, s.Run, s.Src, s.Dst)
	}
	if s.Kind != SignalEdge && s.Kind != SignalChoice && s.Kind != SignalSwitched {
		return fmt.Errorf("%w: run %s edge %d->%d: unknown kind %d", ErrInvalidSignal, s.Run, s.Src, s.Dst, s.Kind)
	}
	return nil
}

func (s *Signal) appendFields(b []byte) []byte { return s.appendFan(appendStr(b, s.Run), nil) }

// appendFan writes s's fields but its run (a batch entry's eight: the batch
// names the run once, Version 9) with, when dsts holds two or more, the
// array of dsts in place of Dst: one entry of a batch for as many Signals,
// equal but for Dst (a fan; Version 6). Decoding a batch gives the Signals
// back, in the order of dsts.
func (s *Signal) appendFan(b []byte, dsts []uint32) []byte {
	b = appendUint(b, s.Gen)
	b = appendUint(b, uint64(s.Src))
	if len(dsts) > 1 {
		b = appendArrayHeader(b, len(dsts))
		for _, d := range dsts {
			b = appendUint(b, uint64(d))
		}
	} else {
		b = appendUint(b, uint64(s.Dst))
	}
	b = appendUint(b, s.Act)
	b = append(b, byte(s.Kind))
	b = appendBin(b, s.Output)
	b = appendUint(b, s.DstAct)
	b = appendArrayHeader(b, len(s.Ctx))
	for _, c := range s.Ctx {
		b = appendUint(b, c)
	}
	return b
}

const (
	signalFields = 9
	entryFields  = signalFields - 1 // a batch entry: no run (Version 9)
)

// AppendWire implements Message.
func (s *Signal) AppendWire(b []byte) []byte {
	return s.appendFields(appendHeader(b, TypeSignal, signalFields))
}

// decodeFields reads the nine Signal fields. fan, in a batch, takes the
// destinations of a fan entry (appendFan; Dst is then the first); nil
// refuses one.
func (s *Signal) decodeFields(r *reader, fan *[]uint32) error {
	run, err := r.id("run")
	if err != nil {
		return err
	}
	s.Run = run
	return s.decodeEntry(r, fan)
}

// decodeEntry reads a Signal's fields after its run: the eight of a batch
// entry (Version 9: the batch names the run once).
func (s *Signal) decodeEntry(r *reader, fan *[]uint32) (err error) {
	if s.Gen, err = r.uint("gen"); err != nil {
		return err
	}
	if s.Src, err = r.uint32("src"); err != nil {
		return err
	}
	if fan != nil {
		*fan = (*fan)[:0]
	}
	if r.off < len(r.b) && isArrayHeader(r.b[r.off]) {
		if fan == nil {
			return r.errf("dst: a fan of destinations outside a batch")
		}
		n, err := r.arrayLen("dsts", r.lim.MaxBatch)
		if err != nil {
			return err
		}
		if n < 2 {
			return r.errf("dsts: a fan of %d destinations (at least 2)", n)
		}
		for range n {
			d, err := r.uint32("dst")
			if err != nil {
				return err
			}
			*fan = append(*fan, d)
		}
		s.Dst = (*fan)[0]
	} else if s.Dst, err = r.uint32("dst"); err != nil {
		return err
	}
	if s.Act, err = r.uint("act"); err != nil {
		return err
	}
	if s.Act == 0 {
		return r.errf("act: activation 0 (activations count from 1)")
	}
	k, err := r.uint8("kind")
	if err != nil {
		return err
	}
	s.Kind = SignalKind(k)
	if s.Kind != SignalEdge && s.Kind != SignalChoice && s.Kind != SignalSwitched {
		return r.errf("kind: unknown signal kind %d", k)
	}
	if s.Output, err = r.bin("output", r.lim.MaxOutput, true); err != nil {
		return err
	}
	if s.DstAct, err = r.uint("dst_act"); err != nil {
		return err
	}
	n, err := r.arrayLen("ctx", MaxSignalCtx)
	if err != nil {
		return err
	}
	s.Ctx = nil
	if n > 0 {
		s.Ctx = make([]uint64, n)
		for i := range s.Ctx {
			if s.Ctx[i], err = r.uint("ctx"); err != nil {
				return err
			}
		}
	}
	return nil
}

// Decode decodes a Signal message into s. Output aliases data.
func (s *Signal) Decode(data []byte, lim Limits) error {
	var r reader
	if err := r.init(data, lim, TypeSignal, signalFields); err != nil {
		return err
	}
	if err := s.decodeFields(&r, nil); err != nil {
		return err
	}
	return r.end()
}

// DecodeSignal decodes a Signal message. Output aliases data.
func DecodeSignal(data []byte, lim Limits) (Signal, error) {
	var s Signal
	err := s.Decode(data, lim)
	return s, err
}

// ---- Batch ----

// Batch is many Signals of one run for one destination node, sent as one
// NATS message. From is the sending node and Seq its batch counter (per
// Batcher, from 1), for tracing. The run is written once (Version 9): the
// first Signal's, which every Signal of a batch shares (a batch's subject
// names its run); a batch of Signals of two runs is written so that every
// receiver refuses it (see run).
type Batch struct {
	From    string
	Seq     uint64
	Signals []Signal
}

// Type implements Message.
func (*Batch) Type() Type { return TypeBatch }

const batchFields = 4

// AppendWire implements Message.
func (bt *Batch) AppendWire(b []byte) []byte {
	b = appendHeader(b, TypeBatch, batchFields)
	b = appendStr(b, bt.From)
	b = appendUint(b, bt.Seq)
	b = appendStr(b, bt.run())
	b = appendArrayHeader(b, len(bt.Signals))
	for i := range bt.Signals {
		b = appendArrayHeader(b, entryFields)
		b = bt.Signals[i].appendFan(b, nil)
	}
	return b
}

// run is the run a batch is written under: its first Signal's ("" when it
// has none). A batch whose Signals name more than one run is written under
// "", which no receiver accepts with Signals in it: the wire cannot say such
// a batch, and relabelling its Signals as the first's would apply them to
// the wrong run.
func (bt *Batch) run() string {
	if len(bt.Signals) == 0 {
		return ""
	}
	run := bt.Signals[0].Run
	for i := 1; i < len(bt.Signals); i++ {
		if bt.Signals[i].Run != run {
			return ""
		}
	}
	return run
}

// Decode decodes a Batch message into bt, reusing bt.Signals' storage. Outputs
// alias data; every Signal shares one run string.
func (bt *Batch) Decode(data []byte, lim Limits) error {
	var r reader
	if err := r.init(data, lim, TypeBatch, batchFields); err != nil {
		return err
	}
	var err error
	if bt.From, err = r.id("from"); err != nil {
		return err
	}
	if bt.Seq, err = r.uint("seq"); err != nil {
		return err
	}
	raw, err := r.rawStr("run", MaxIDLen)
	if err != nil {
		return err
	}
	n, err := r.arrayLen("signals", r.lim.MaxBatch)
	if err != nil {
		return err
	}
	run := ""
	switch {
	case n > 0 && !validIDBytes(raw):
		return r.errf("run: %q is not a valid id", raw)
	case n > 0:
		run = string(raw)
	case len(raw) > 0:
		return r.errf("run: %q named by a batch of no signals (AppendWire writes none)", raw)
	}
	if cap(bt.Signals) >= n {
		bt.Signals = bt.Signals[:n]
	} else {
		bt.Signals = make([]Signal, n)
	}
	var fan []uint32
	k := 0 // Signals decoded: a fan entry gives several
	for i := range n {
		if err := r.fields("signal", entryFields); err != nil {
			return fmt.Errorf("signal %d: %w", i, err)
		}
		s := bt.slot(k)
		s.Run = run
		if err := s.decodeEntry(&r, &fan); err != nil {
			return fmt.Errorf("signal %d: %w", i, err)
		}
		k++
		if len(fan) == 0 {
			continue
		}
		if k-1+len(fan) > r.lim.MaxBatch {
			return r.oversized("signals", k-1+len(fan), r.lim.MaxBatch)
		}
		one := *s
		for _, d := range fan[1:] {
			s := bt.slot(k)
			*s = one
			s.Dst = d
			k++
		}
	}
	clear(bt.Signals[k:])
	bt.Signals = bt.Signals[:k]
	return r.end()
}

// slot is bt.Signals[k], the slice grown to its capacity to hold it (Decode
// reuses what an earlier decode left).
func (bt *Batch) slot(k int) *Signal {
	if k >= len(bt.Signals) {
		bt.Signals = append(bt.Signals, Signal{})
		bt.Signals = bt.Signals[:cap(bt.Signals)]
	}
	return &bt.Signals[k]
}

// PeekBatch reads a Batch message's sender, batch number, number of entries
// (a fan entry is one: Decode gives it back as a Signal per destination)
// and the Gen of its first Signal, without decoding the rest: a receiver
// that took the batch before skips it (ok false: the message does not
// start as a batch with a Signal does; Decode says why).
func PeekBatch(data []byte, lim Limits) (from string, seq, gen uint64, n int, ok bool) {
	var r reader
	if r.init(data, lim, TypeBatch, batchFields) != nil {
		return "", 0, 0, 0, false
	}
	var err error
	if from, err = r.id("from"); err != nil {
		return "", 0, 0, 0, false
	}
	if seq, err = r.uint("seq"); err != nil {
		return "", 0, 0, 0, false
	}
	if _, err := r.rawStr("run", MaxIDLen); err != nil {
		return "", 0, 0, 0, false
	}
	if n, err = r.arrayLen("signals", r.lim.MaxBatch); err != nil || n == 0 {
		return "", 0, 0, 0, false
	}
	if r.fields("signal", entryFields) != nil {
		return "", 0, 0, 0, false
	}
	if gen, err = r.uint("gen"); err != nil {
		return "", 0, 0, 0, false
	}
	return from, seq, gen, n, true
}

// DecodeBatch decodes a Batch message. Outputs alias data.
func DecodeBatch(data []byte, lim Limits) (Batch, error) {
	var b Batch
	err := b.Decode(data, lim)
	return b, err
}

// ---- TaskEvent ----

// TaskState is a task's state in a TaskEvent; the names match the CLI's --json.
type TaskState uint8

// Task states.
const (
	TaskPending TaskState = iota
	TaskRunning
	TaskDone
	TaskFailed
	TaskSkipped
	TaskCancelled
	taskStateEnd
)

func (s TaskState) String() string {
	switch s {
	case TaskPending:
		return "pending"
	case TaskRunning:
		return "running"
	case TaskDone:
		return "done"
	case TaskFailed:
		return "failed"
	case TaskSkipped:
		return "skipped"
	case TaskCancelled:
		return "cancelled"
	}
	return fmt.Sprintf("state %d", uint8(s))
}

// TaskEvent is per-task progress in JetStream (StreamEvents), from which any
// coordinator rebuilds a run's status: later events of a task supersede earlier
// ones. Nodes now store TaskReports (report.go), which readers hand on as the
// TaskEvents they stand for; TaskEvents and EventBatches an earlier build stored
// are still read. Task is the flow index; Name is optional and names tasks the flow
// has no index for (children of subflows and modules, as "parent/child").
type TaskEvent struct {
	Run        string
	Gen        uint64
	Task       uint32
	Name       string
	Node       string
	State      TaskState
	Act        uint64 // activations so far
	Executions uint64 // times the function actually ran
	Output     []byte // latest output, for sinks
	Error      string
	Start, End time.Time
}

// Type implements Message.
func (*TaskEvent) Type() Type { return TypeTaskEvent }

const taskEventFields = 12

// AppendWire implements Message.
func (e *TaskEvent) AppendWire(b []byte) []byte {
	return e.appendFields(appendHeader(b, TypeTaskEvent, taskEventFields))
}

func (e *TaskEvent) appendFields(b []byte) []byte {
	b = appendStr(b, e.Run)
	b = appendUint(b, e.Gen)
	b = appendUint(b, uint64(e.Task))
	b = appendStr(b, e.Name)
	b = appendStr(b, e.Node)
	b = append(b, byte(e.State))
	b = appendUint(b, e.Act)
	b = appendUint(b, e.Executions)
	b = appendBin(b, e.Output)
	b = appendStr(b, e.Error)
	b = appendTime(b, e.Start)
	return appendTime(b, e.End)
}

// Decode decodes a TaskEvent into e. Output aliases data.
func (e *TaskEvent) Decode(data []byte, lim Limits) error {
	var r reader
	if err := r.init(data, lim, TypeTaskEvent, taskEventFields); err != nil {
		return err
	}
	if err := e.decodeFields(&r); err != nil {
		return err
	}
	return r.end()
}

func (e *TaskEvent) decodeFields(r *reader) error {
	var err error
	if e.Run, err = r.id("run"); err != nil {
		return err
	}
	if e.Gen, err = r.uint("gen"); err != nil {
		return err
	}
	if e.Task, err = r.uint32("task"); err != nil {
		return err
	}
	if e.Name, err = r.str("name", r.lim.MaxText); err != nil {
		return err
	}
	if e.Node, err = r.id("node"); err != nil {
		return err
	}
	st, err := r.uint8("state")
	if err != nil {
		return err
	}
	if e.State = TaskState(st); e.State >= taskStateEnd {
		return r.errf("state: unknown task state %d", st)
	}
	if e.Act, err = r.uint("act"); err != nil {
		return err
	}
	if e.Executions, err = r.uint("executions"); err != nil {
		return err
	}
	if e.Output, err = r.bin("output", r.lim.MaxOutput, true); err != nil {
		return err
	}
	if e.Error, err = r.str("error", r.lim.MaxText); err != nil {
		return err
	}
	if e.Start, err = r.time("start"); err != nil {
		return err
	}
	e.End, err = r.time("end")
	return err
}

// ---- Assignment ----

// Assignment is the partition of a run under one generation: task i runs on
// Nodes[Owner[i]]. Plan is the receiving node's part, an encoded Plan (the
// leader sends each node its own; nil: none). PlanDigest, when not nil, is
// the SHA-256 of that plan (32 bytes); with Plan nil it names the plan
// alone (a reference: the node runs the plan of that digest it holds, or
// asks for it with an Ack whose NeedPlan is set). Boots, when
// not empty, has one entry per node: the incarnation (boot id) of the
// process the part was made for, or "" where the sender did not know it; a
// node's later process (a restart under the same id) is not that process
// and takes no part of it. Owner is read only: one that SubscribeControl
// delivers can be an earlier Assignment's.
type Assignment struct {
	Run   string
	Gen   uint64
	Nodes []string
	Owner []uint32
	Plan  []byte
	Boots []string
	// PlanDigest is nil or the 32-byte SHA-256 of the node's plan.
	PlanDigest []byte
}

// PlanDigestLen is the length of an Assignment's PlanDigest (SHA-256).
const PlanDigestLen = 32

// PlanRef reports whether a names its plan by digest only.
func (a *Assignment) PlanRef() bool { return a.Plan == nil && a.PlanDigest != nil }

// BootOf is the incarnation the part of Nodes[i] was made for ("": any).
func (a *Assignment) BootOf(i int) string {
	if i < 0 || i >= len(a.Boots) {
		return ""
	}
	return a.Boots[i]
}

// Type implements Message.
func (*Assignment) Type() Type { return TypeAssignment }

// TasksOf lists the tasks assigned to node, in index order.
func (a *Assignment) TasksOf(node string) []uint32 {
	var out []uint32
	for ni, n := range a.Nodes {
		if n != node {
			continue
		}
		for t, o := range a.Owner {
			if int(o) == ni {
				out = append(out, uint32(t))
			}
		}
	}
	return out
}

// NodeOf names the node task runs on ("" when task is out of range).
func (a *Assignment) NodeOf(task uint32) string {
	if int(task) >= len(a.Owner) || int(a.Owner[task]) >= len(a.Nodes) {
		return ""
	}
	return a.Nodes[a.Owner[task]]
}

const assignmentFields = 7

// sizeHint is the bytes of a's encoding or a little over: what Encode
// makes room for at once, where a 100K-task owner table grew the buffer
// some twenty times (650 KB made for a 100 KB message). Every owner is
// below len(Nodes) (Decode checks it), so each takes the bytes of that.
func (a *Assignment) sizeHint() int {
	per := len(appendUint(nil, uint64(max(len(a.Nodes), 1)-1)))
	n := 64 + len(a.Run) + len(a.Plan) + len(a.PlanDigest) + per*len(a.Owner)
	for _, s := range a.Nodes {
		n += 8 + len(s)
	}
	for _, s := range a.Boots {
		n += 8 + len(s)
	}
	return n
}

// AppendWire implements Message.
func (a *Assignment) AppendWire(b []byte) []byte {
	b = appendHeader(b, TypeAssignment, assignmentFields)
	b = appendStr(b, a.Run)
	b = appendUint(b, a.Gen)
	b = appendArrayHeader(b, len(a.Nodes))
	for _, n := range a.Nodes {
		b = appendStr(b, n)
	}
	b = appendOwners(b, a.Owner)
	b = appendBin(b, a.Plan)
	b = appendArrayHeader(b, len(a.Boots))
	for _, boot := range a.Boots {
		b = appendStr(b, boot)
	}
	return appendBin(b, a.PlanDigest)
}

// appendOwners appends an owner table: its length, then each owner. An
// owner below 128 (every one of a run on up to 128 nodes) is one byte,
// its positive fixint, written straight into the grown buffer: a call of
// appendUint an owner was 0.4 ms for 100K tasks, on the head of every
// run. The bytes are appendUint's either way.
func appendOwners(b []byte, owner []uint32) []byte {
	b = appendArrayHeader(b, len(owner))
	n := len(b)
	b = slices.Grow(b, len(owner))[:n+len(owner)]
	dst := b[n:]
	for i, o := range owner {
		if o >= 0x80 {
			b = b[:n+i]
			for _, o := range owner[i:] {
				b = appendUint(b, uint64(o))
			}
			return b
		}
		dst[i] = byte(o)
	}
	return b
}

// ownersLike reads n owners, each an index into nodes entries: like
// itself when they are equal to it (a run again's, like the Assignment
// before), else a table of their own, like's up to the first difference.
// A stretch of one-byte owners (positive fixints) is compared straight
// with the bytes, as decodeOwners reads it.
func (r *reader) ownersLike(n, nodes int, like []uint32) ([]uint32, error) {
	if n == 0 {
		return nil, nil
	}
	i := 0
	for len(like) == n && i < n {
		rest := r.b[r.off:]
		rest = rest[:min(len(rest), n-i)]
		j := 0
		for ; j < len(rest); j++ {
			if c := rest[j]; c >= 0x80 || int(c) >= nodes || like[i+j] != uint32(c) {
				break
			}
		}
		i, r.off = i+j, r.off+j
		if i == n {
			return like, nil
		}
		at := r.off
		o, err := r.uint32("owner")
		if err != nil {
			return nil, fmt.Errorf("task %d: %w", i, err)
		}
		if int(o) >= nodes {
			return nil, r.errf("owner of task %d: node index %d, only %d nodes", i, o, nodes)
		}
		if o != like[i] {
			r.off = at // read again below, into a table of its own
			break
		}
		i++
	}
	if i == n {
		return like, nil
	}
	owner := make([]uint32, n)
	copy(owner, like[:i])
	return owner, r.decodeOwners(owner, i, nodes)
}

// decodeOwners reads the owners of owner from index i on, each an index
// into nodes entries. A stretch of one-byte owners (positive fixints) is
// read straight from the bytes; any other owner, and one that names no
// node, the general way, with its error.
func (r *reader) decodeOwners(owner []uint32, i, nodes int) error {
	for i < len(owner) {
		rest := r.b[r.off:]
		rest = rest[:min(len(rest), len(owner)-i)]
		j := 0
		for ; j < len(rest); j++ {
			c := rest[j]
			if c >= 0x80 || int(c) >= nodes {
				break
			}
			owner[i+j] = uint32(c)
		}
		i, r.off = i+j, r.off+j
		if i == len(owner) {
			break
		}
		o, err := r.uint32("owner")
		if err != nil {
			return fmt.Errorf("task %d: %w", i, err)
		}
		if int(o) >= nodes {
			return r.errf("owner of task %d: node index %d, only %d nodes", i, o, nodes)
		}
		owner[i] = o
		i++
	}
	return nil
}

// Decode decodes an Assignment into a. Plan aliases data (a plan is some MB
// for a 100K-task part; a node that keeps it copies it). Every owner must
// name one of Nodes.
func (a *Assignment) Decode(data []byte, lim Limits) error {
	return a.decodeLike(data, lim, nil)
}

// decodeLike is Decode, with the owner table like (nil: none) itself when
// the owners are equal to it (reader.ownersLike): read only.
func (a *Assignment) decodeLike(data []byte, lim Limits, like []uint32) error {
	var r reader
	if err := r.init(data, lim, TypeAssignment, assignmentFields); err != nil {
		return err
	}
	var err error
	if a.Run, err = r.id("run"); err != nil {
		return err
	}
	if a.Gen, err = r.uint("gen"); err != nil {
		return err
	}
	n, err := r.arrayLen("nodes", r.lim.MaxTasks)
	if err != nil {
		return err
	}
	a.Nodes = nil
	if n > 0 {
		a.Nodes = make([]string, n)
	}
	for i := range a.Nodes {
		if a.Nodes[i], err = r.id("node"); err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
	}
	n, err = r.arrayLen("owner", r.lim.MaxTasks)
	if err != nil {
		return err
	}
	if a.Owner, err = r.ownersLike(n, len(a.Nodes), like); err != nil {
		return err
	}
	if a.Plan, err = r.bin("plan", r.lim.MaxBody, true); err != nil {
		return err
	}
	if n, err = r.arrayLen("boots", len(a.Nodes)); err != nil {
		return err
	}
	a.Boots = nil
	if n > 0 {
		if n != len(a.Nodes) {
			return r.errf("boots: %d entries for %d nodes", n, len(a.Nodes))
		}
		a.Boots = make([]string, n)
	}
	for i := range a.Boots {
		if a.Boots[i], err = r.optID("boot"); err != nil {
			return fmt.Errorf("boot of node %d: %w", i, err)
		}
	}
	if a.PlanDigest, err = r.bin("plan_digest", PlanDigestLen, false); err != nil {
		return err
	}
	if a.PlanDigest != nil && len(a.PlanDigest) != PlanDigestLen {
		return r.errf("plan_digest: %d bytes, want %d", len(a.PlanDigest), PlanDigestLen)
	}
	return r.end()
}

// ---- Cancel ----

// Cancel asks every node to stop run.
type Cancel struct {
	Run    string
	Gen    uint64
	Reason string
}

// Type implements Message.
func (*Cancel) Type() Type { return TypeCancel }

// AppendWire implements Message.
func (c *Cancel) AppendWire(b []byte) []byte {
	b = appendHeader(b, TypeCancel, 3)
	b = appendStr(b, c.Run)
	b = appendUint(b, c.Gen)
	return appendStr(b, c.Reason)
}

// Decode decodes a Cancel into c.
func (c *Cancel) Decode(data []byte, lim Limits) error {
	var r reader
	if err := r.init(data, lim, TypeCancel, 3); err != nil {
		return err
	}
	var err error
	if c.Run, err = r.id("run"); err != nil {
		return err
	}
	if c.Gen, err = r.uint("gen"); err != nil {
		return err
	}
	if c.Reason, err = r.str("reason", r.lim.MaxText); err != nil {
		return err
	}
	return r.end()
}

// ---- TermReport ----

// TermReport is one node's answer in a termination-detection wave for run (the
// four-counter method of Mattern, as cluster implements it): how many Signals of
// run it has sent and received, and whether it is idle (no task of the run running
// or ready). Wave numbers the detection round the report answers; Gen is the
// generation the node runs.
//
// Sent counts the Signals the node handed to its Batcher for the run, over every
// generation. Received counts the Signals it processed after fencing (from its
// live subscription or read back from the record; duplicates that their sender
// re-sent, and so counted, included: see cluster/node), and
// ReceivedFrom splits Received by sending node, so that after a node is lost the
// leader can balance each live sender's Sent against what the live nodes received
// from it. ReceivedFrom is encoded as a msgpack map (keys sorted); an empty map
// decodes as nil.
type TermReport struct {
	Run          string
	Gen          uint64
	Node         string
	Wave         uint64
	Sent         uint64
	Received     uint64
	Idle         bool
	ReceivedFrom map[string]uint64
}

// Type implements Message.
func (*TermReport) Type() Type { return TypeTermReport }

const termReportFields = 8

// AppendWire implements Message.
func (t *TermReport) AppendWire(b []byte) []byte {
	b = appendHeader(b, TypeTermReport, termReportFields)
	b = appendStr(b, t.Run)
	b = appendUint(b, t.Gen)
	b = appendStr(b, t.Node)
	b = appendUint(b, t.Wave)
	b = appendUint(b, t.Sent)
	b = appendUint(b, t.Received)
	b = appendBool(b, t.Idle)
	keys := make([]string, 0, len(t.ReceivedFrom))
	for k := range t.ReceivedFrom {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = appendMapHeader(b, len(keys))
	for _, k := range keys {
		b = appendStr(b, k)
		b = appendUint(b, t.ReceivedFrom[k])
	}
	return b
}

// Decode decodes a TermReport into t. Every ReceivedFrom key must be a valid
// node id, given once.
func (t *TermReport) Decode(data []byte, lim Limits) error {
	var r reader
	if err := r.init(data, lim, TypeTermReport, termReportFields); err != nil {
		return err
	}
	var err error
	if t.Run, err = r.id("run"); err != nil {
		return err
	}
	if t.Gen, err = r.uint("gen"); err != nil {
		return err
	}
	if t.Node, err = r.id("node"); err != nil {
		return err
	}
	if t.Wave, err = r.uint("wave"); err != nil {
		return err
	}
	if t.Sent, err = r.uint("sent"); err != nil {
		return err
	}
	if t.Received, err = r.uint("received"); err != nil {
		return err
	}
	if t.Idle, err = r.bool("idle"); err != nil {
		return err
	}
	n, err := r.mapLen("received_from", r.lim.MaxTasks)
	if err != nil {
		return err
	}
	t.ReceivedFrom = nil
	if n > 0 {
		t.ReceivedFrom = make(map[string]uint64, n)
	}
	for i := 0; i < n; i++ {
		k, err := r.id("received_from sender")
		if err != nil {
			return fmt.Errorf("received_from entry %d: %w", i, err)
		}
		if _, dup := t.ReceivedFrom[k]; dup {
			return r.errf("received_from: sender %q given twice", k)
		}
		if t.ReceivedFrom[k], err = r.uint("received_from count"); err != nil {
			return fmt.Errorf("received_from %q: %w", k, err)
		}
	}
	return r.end()
}

// ---- Ack ----

// Ack is a node's receipt of an Assignment: node (whose process has boot id
// Boot; "" when it does not say) has decoded the Assignment of run under
// generation gen and holds or builds it; the leader need not send it again.
// It is sent on receipt, before the node builds the run (seconds for a big
// flow), and again for a copy that comes once the node holds the run.
//
// An Ack with NeedPlan set is no receipt: the Assignment named its plan by
// digest (Assignment.PlanRef) and the node does not hold that plan (it
// restarted, evicted it, or never had it). The node took nothing; the
// leader sends the Assignment again with its plan.
type Ack struct {
	Run      string
	Gen      uint64
	Node     string
	Boot     string
	NeedPlan bool
}

// Type implements Message.
func (*Ack) Type() Type { return TypeAck }

const ackFields = 5

// AppendWire implements Message.
func (a *Ack) AppendWire(b []byte) []byte {
	b = appendHeader(b, TypeAck, ackFields)
	b = appendStr(b, a.Run)
	b = appendUint(b, a.Gen)
	b = appendStr(b, a.Node)
	b = appendStr(b, a.Boot)
	return appendBool(b, a.NeedPlan)
}

// Decode decodes an Ack into a. Run and Node must be valid ids, and Boot
// one or empty.
func (a *Ack) Decode(data []byte, lim Limits) error {
	var r reader
	if err := r.init(data, lim, TypeAck, ackFields); err != nil {
		return err
	}
	var err error
	if a.Run, err = r.id("run"); err != nil {
		return err
	}
	if a.Gen, err = r.uint("gen"); err != nil {
		return err
	}
	if a.Node, err = r.id("node"); err != nil {
		return err
	}
	if a.Boot, err = r.optID("boot"); err != nil {
		return err
	}
	if a.NeedPlan, err = r.bool("need_plan"); err != nil {
		return err
	}
	return r.end()
}

// ---- Envelope ----

// Envelope carries a message type transport does not know: Kind names it (for
// example "hello" or "drain"), Body is opaque. Run and Node are optional.
type Envelope struct {
	Kind string
	Run  string
	Node string
	Body []byte
}

// Type implements Message.
func (*Envelope) Type() Type { return TypeEnvelope }

// AppendWire implements Message.
func (e *Envelope) AppendWire(b []byte) []byte {
	b = appendHeader(b, TypeEnvelope, 4)
	b = appendStr(b, e.Kind)
	b = appendStr(b, e.Run)
	b = appendStr(b, e.Node)
	return appendBin(b, e.Body)
}

// Decode decodes an Envelope into e (Body is copied).
func (e *Envelope) Decode(data []byte, lim Limits) error {
	var r reader
	if err := r.init(data, lim, TypeEnvelope, 4); err != nil {
		return err
	}
	var err error
	if e.Kind, err = r.str("kind", r.lim.MaxText); err != nil {
		return err
	}
	if e.Kind == "" {
		return r.errf("kind: empty")
	}
	if e.Run, err = r.optID("run"); err != nil {
		return err
	}
	if e.Node, err = r.optID("node"); err != nil {
		return err
	}
	if e.Body, err = r.bin("body", r.lim.MaxBody, false); err != nil {
		return err
	}
	return r.end()
}

func (r *reader) optID(what string) (string, error) {
	s, err := r.rawStr(what, MaxIDLen)
	if err != nil || len(s) == 0 {
		return "", err
	}
	if !validIDBytes(s) {
		return "", r.errf("%s: %q is not a valid id", what, s)
	}
	return string(s), nil
}

// ---- any message ----

// PeekType reports the type of an encoded message without decoding it.
func PeekType(data []byte) (Type, error) {
	r := &reader{b: data, msg: "message"}
	if _, err := r.arrayLen("message", 0); err != nil {
		return 0, err
	}
	t, err := r.uint8("type")
	if err != nil {
		return 0, err
	}
	if t < uint8(TypeSignal) || t > uint8(TypeTaskReport) {
		return 0, r.errf("unknown message type %d", t)
	}
	return Type(t), nil
}

// Decode decodes any message; the result is a *Signal, *Batch, *TaskEvent,
// *Assignment, *Cancel, *TermReport, *Envelope, *EventBatch, *Ack, *Plan or
// *TaskReport.
func Decode(data []byte, lim Limits) (Message, error) {
	t, err := PeekType(data)
	if err != nil {
		return nil, err
	}
	var m interface {
		Message
		Decode([]byte, Limits) error
	}
	switch t {
	case TypeSignal:
		m = new(Signal)
	case TypeBatch:
		m = new(Batch)
	case TypeTaskEvent:
		m = new(TaskEvent)
	case TypeAssignment:
		m = new(Assignment)
	case TypeCancel:
		m = new(Cancel)
	case TypeTermReport:
		m = new(TermReport)
	case TypeEventBatch:
		m = new(EventBatch)
	case TypeAck:
		m = new(Ack)
	case TypePlan:
		m = new(Plan)
	case TypeTaskReport:
		m = new(TaskReport)
	default:
		m = new(Envelope)
	}
	if err := m.Decode(data, lim); err != nil {
		return nil, err
	}
	return m, nil
}
