package coord

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
)

// ErrCommand is matched by every error the FSM returns for a command it
// refuses (the command is in the log but changed nothing).
var ErrCommand = errors.New("coord: command refused")

// ErrUnknownFlow is matched by a command naming a flow id the registry does
// not hold (a run_submit whose flow was never put, or was pruned), and by a
// run of an unknown flow id (proto.ErrNotFound too).
var ErrUnknownFlow = errors.New("coord: no such flow")

// Node is a cluster node as the FSM holds it.
type Node struct {
	ID      string    `json:"id"`
	Address string    `json:"address"`
	State   string    `json:"state"` // proto.NodeAlive, NodeSuspect, NodeDead, NodeLeft
	CPUs    int       `json:"cpus"`
	GPUs    int       `json:"gpus"`
	Boot    string    `json:"boot,omitempty"` // proto.Meta.Boot: the process incarnation
	Updated time.Time `json:"updated"`
}

// Run is one submitted run.
type Run struct {
	ID string `json:"id"`
	// FlowID names the run's flow in the registry (State.Flows): the
	// SHA-256 of its canonical JSON, lowercase hex. What the run executes
	// is that flow bound to Params (View.RunFlow), not a copy in the run.
	FlowID string `json:"flow_id,omitempty"`
	// Flow is the canonical JSON flow (parameters substituted) inline, as
	// run_submit entries and snapshots written before the registry carry
	// it. The FSM moves it into the registry when it applies or restores
	// such a run (the run then has a FlowID and no Flow): new code never
	// sets it, and no run the FSM holds has it.
	Flow     []byte `json:"flow,omitempty"`
	FlowName string `json:"flow_name"`
	// Params are the values of the flow's parameters (spec.File.Bind),
	// given or default.
	Params     map[string]any `json:"params,omitempty"`
	State      string         `json:"state"`
	Error      string         `json:"error,omitempty"`
	Submitted  time.Time      `json:"submitted"`
	Finished   time.Time      `json:"finished,omitzero"`
	Timeout    time.Duration  `json:"timeout,omitempty"`
	Gen        uint64         `json:"gen"`
	Assignment []string       `json:"assignment"` // vertex → node id
	Nodes      []string       `json:"nodes"`      // the nodes of Assignment, sorted
	// Boots are the incarnations (Node.Boot) of Nodes when the run took them
	// (submit, reassign): a node whose Boot has changed since was restarted
	// and lost its part, like a dead one.
	Boots map[string]string `json:"boots,omitempty"`
	// Lost are the nodes the run lost (they held a part and a reassign
	// left them out), in the order it lost them. None of them is given a
	// part of the run again (a reassign naming one is refused): such a node
	// may still run its old part until it hears of the loss, where it would
	// take Signals meant for the tasks' new owners; and the Signals its
	// earlier part sent are counted by the receivers for its name, which a
	// new part there, starting from Sent 0, could never balance
	// (docs/cluster-protocol.md, Recovery).
	Lost []string `json:"lost,omitempty"`
}

// StoredFlow is a flow in the registry: its canonical JSON (spec.Canonical,
// parameters not substituted), stored once under its hash however many
// runs use it (docs/design.md, "The flow registry").
type StoredFlow struct {
	ID   string `json:"id"`   // FlowID of Text
	Name string `json:"name"` // the flow's name (its first flow's)
	Path string `json:"path"` // the file name it was first given under (errors name it)
	Text []byte `json:"text"`
	// HasParams: the flow declares parameters, so a run binds its Params
	// into Text (spec.File.Bind); without, Text is what the run executes.
	HasParams bool `json:"has_params,omitempty"`
	Tasks     int  `json:"tasks"` // after module expansion
	Bytes     int  `json:"bytes"` // of the file as it was given (the --max-flow-bytes check of a run)
	// Registered: put by register (POST /v1/flows), kept until removed;
	// otherwise it was put by a submit and is kept while a run uses it
	// (Prune drops it after that).
	Registered bool      `json:"registered,omitempty"`
	Stored     time.Time `json:"stored"`
}

// FlowID is the registry's name of a canonical flow text: its SHA-256 in
// lowercase hex.
func FlowID(text []byte) string {
	h := sha256.Sum256(text)
	return hex.EncodeToString(h[:])
}

// ValidFlowID reports whether id has FlowID's shape (64 lowercase hex digits).
func ValidFlowID(id string) bool {
	if len(id) != 2*sha256.Size {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Settings are the cluster-wide settings in the FSM.
type Settings struct {
	Retention time.Duration `json:"retention"`
}

// Command ops.
const (
	OpNodeUpsert  = "node_upsert"
	OpFlowPut     = "flow_put"
	OpRunSubmit   = "run_submit"
	OpRunReassign = "run_reassign"
	OpRunFinish   = "run_finish"
	OpPrune       = "prune"
	OpConfig      = "config"
)

// Command is one raft log entry, as JSON. Op says which of the fields
// matters.
type Command struct {
	Op       string      `json:"op"`
	Node     *Node       `json:"node,omitempty"`     // node_upsert
	Flow     *StoredFlow `json:"flow,omitempty"`     // flow_put
	Run      *Run        `json:"run,omitempty"`      // run_submit
	Reassign *Reassign   `json:"reassign,omitempty"` // run_reassign
	Finish   *Finish     `json:"finish,omitempty"`   // run_finish
	Before   time.Time   `json:"before,omitzero"`    // prune
	Config   *Settings   `json:"config,omitempty"`   // config
}

// Reassign gives a running run a new generation and assignment (a node was
// lost).
type Reassign struct {
	ID         string            `json:"id"`
	Gen        uint64            `json:"gen"`
	Assignment []string          `json:"assignment"`
	Boots      map[string]string `json:"boots,omitempty"` // of the new assignment's nodes
}

// Finish ends a run.
type Finish struct {
	ID    string    `json:"id"`
	State string    `json:"state"`
	Error string    `json:"error,omitempty"`
	At    time.Time `json:"at"`
}

// State is the whole replicated state; it is also the snapshot (as JSON).
type State struct {
	Nodes map[string]*Node `json:"nodes"`
	Runs  map[string]*Run  `json:"runs"`
	// Flows is the registry: each flow text once, by FlowID. A snapshot
	// written before the registry has none (its runs carry Flow inline).
	Flows  map[string]*StoredFlow `json:"flows,omitempty"`
	Config Settings               `json:"config"`
}

// FSM is the coordinator's pure state machine: commands in, state out. Time
// comes only from the commands. It is not safe for concurrent use (the raft
// adapter locks around it).
type FSM struct {
	st State
}

// NewFSM returns an empty FSM.
func NewFSM() *FSM {
	return &FSM{st: State{Nodes: map[string]*Node{}, Runs: map[string]*Run{}, Flows: map[string]*StoredFlow{}}}
}

// ApplyJSON decodes and applies one command written as JSON.
func (f *FSM) ApplyJSON(data []byte) error {
	var c Command
	if err := decodeExact(data, &c); err != nil {
		return fmt.Errorf("%w: undecodable command: %v", ErrCommand, err)
	}
	return f.Apply(&c)
}

// ApplyEntry decodes and applies one raft entry (EncodeCommand's): a
// command as JSON, or one framed with its bulk apart. The text of a
// framed flow_put is kept as it lies in data, which the caller must not
// change afterwards (raft does not: an entry read from the log store is a
// copy of its own).
func (f *FSM) ApplyEntry(data []byte) error {
	c, err := DecodeCommand(data)
	if err != nil {
		return err
	}
	return f.Apply(c)
}

// A framed entry is a command with its bulk apart from its JSON: a frame
// byte, the length of the command's JSON as a uvarint, the command's JSON
// without the bulk, then the bulk. No JSON value starts with a frame
// byte, so an entry written before the frames (JSON) reads as it did.
const (
	// framedFlowPut: a flow_put; the bulk is its flow's text, as is.
	framedFlowPut = 0x01
	// framedRunSubmit: a run_submit; the bulk is its run's assignment,
	// packed (packAssignment).
	framedRunSubmit = 0x02
	// framedRunSubmitRanges: a run_submit; the bulk is its run's
	// assignment in runs of consecutive tasks on one node (packRanges): a
	// few bytes for a flow placed in a few blocks, where framedRunSubmit's
	// is a byte a task (100 KB a run of a 100K-task flow, written to bolt
	// and synced, held in raft's log cache). A coordinator of an earlier
	// build reads it as undecodable JSON, so a leader writes it only when
	// every server of its raft configuration says it reads it
	// (LogRanges, Server.entryRanges).
	framedRunSubmitRanges = 0x03
)

// LogRanges is the entry form this build reads beyond the first frames
// (proto.Meta.Log): a run_submit framed with its assignment in ranges.
const LogRanges = 1

// EncodeCommand writes c as a raft entry. A flow_put with a text and a
// run_submit with an assignment are framed: the text, a flow's canonical
// JSON of up to 16 MB, is neither base64-encoded into the entry nor
// scanned by a JSON decoder when the entry is applied (a fifth of a second
// at 100K tasks, on every coordinator; its hash is still checked,
// FSM.putFlow), and the assignment, a node id a task, is a node's index a
// task (100K JSON strings took 20-30 ms to write and read a run). Any
// other command is its JSON.
func EncodeCommand(c *Command) ([]byte, error) { return encodeCommand(c, false) }

// encodeCommand is EncodeCommand, with a run_submit's assignment in
// ranges (framedRunSubmitRanges) when ranges is set: only when every
// coordinator that applies the entry reads that form (Server.apply).
func encodeCommand(c *Command, ranges bool) ([]byte, error) {
	head := *c
	var frame byte
	var bulk []byte
	switch {
	case c.Op == OpFlowPut && c.Flow != nil && len(c.Flow.Text) > 0:
		fl := *c.Flow
		fl.Text = nil
		head.Flow, frame, bulk = &fl, framedFlowPut, c.Flow.Text
	case c.Op == OpRunSubmit && c.Run != nil && len(c.Run.Assignment) > 0:
		r := *c.Run
		r.Assignment = nil
		head.Run, frame, bulk = &r, framedRunSubmit, nil
		if ranges {
			frame, bulk = framedRunSubmitRanges, rangesOf(c.Run.Assignment)
		} else {
			bulk = packAssignment(c.Run.Assignment)
		}
	default:
		return json.Marshal(c)
	}
	h, err := json.Marshal(&head)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(h)+len(bulk))
	b = append(b, frame)
	b = binary.AppendUvarint(b, uint64(len(h)))
	b = append(b, h...)
	return append(b, bulk...), nil
}

// DecodeCommand reads an entry EncodeCommand wrote, or a JSON command of
// any version. A framed flow_put's text is a slice of data. What does not
// decode is an ErrCommand.
func DecodeCommand(data []byte) (*Command, error) {
	var c Command
	if len(data) == 0 || (data[0] != framedFlowPut && data[0] != framedRunSubmit && data[0] != framedRunSubmitRanges) {
		if err := decodeExact(data, &c); err != nil {
			return nil, fmt.Errorf("%w: undecodable command: %v", ErrCommand, err)
		}
		return &c, nil
	}
	bad := func(why string) (*Command, error) {
		return nil, fmt.Errorf("%w: undecodable command: a framed entry %s", ErrCommand, why)
	}
	n, k := binary.Uvarint(data[1:])
	if k <= 0 || n > uint64(len(data)-1-k) {
		return bad("with a bad length")
	}
	head, bulk := data[1+k:1+k+int(n)], data[1+k+int(n):]
	if err := decodeExact(head, &c); err != nil {
		return nil, fmt.Errorf("%w: undecodable command: %v", ErrCommand, err)
	}
	switch data[0] {
	case framedFlowPut:
		if c.Op != OpFlowPut || c.Flow == nil || len(c.Flow.Text) != 0 || len(bulk) == 0 {
			return bad("that is not a flow_put of a text")
		}
		c.Flow.Text = bulk
	default:
		if c.Op != OpRunSubmit || c.Run == nil || len(c.Run.Assignment) != 0 {
			return bad("that is not a run_submit of an assignment")
		}
		a, err := internAssignment(data[0], bulk)
		if err != nil {
			return bad(err.Error())
		}
		c.Run.Assignment = a
	}
	return &c, nil
}

// packAssignment writes an assignment (vertex → node id) as the number of
// distinct ids, each id (its length, its bytes) in the order it first
// comes, the number of vertices, and each vertex's id's place among them,
// all uvarints.
func packAssignment(assign []string) []byte {
	idx := map[string]uint64{}
	var ids []string
	for lo := range nodeRuns(assign) {
		if _, ok := idx[assign[lo]]; !ok {
			idx[assign[lo]] = uint64(len(ids))
			ids = append(ids, assign[lo])
		}
	}
	b := binary.AppendUvarint(make([]byte, 0, 16+len(assign)+8*len(ids)), uint64(len(ids)))
	for _, n := range ids {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
	}
	b = binary.AppendUvarint(b, uint64(len(assign)))
	for lo, hi := range nodeRuns(assign) {
		i := idx[assign[lo]]
		for range hi - lo {
			b = binary.AppendUvarint(b, i)
		}
	}
	return b
}

// lastAssignment is the assignment array DecodeCommand read last, or
// the leader packed last in ranges (rangesOf), with its packed bytes in
// each form known (plain: packAssignment's, ranges: packRanges's) and,
// once asked (sharedNodesOf), the nodes it names: a run of a flow again
// on the same placement decodes to the same array, which the FSM's runs
// then share, where each run of a 100,000-task flow held its own 1.6 MB of
// string headers, for the garbage collector to scan, until pruned; and
// what is derived from that array is derived once, not at each run (each
// is a pass over its 100,000 tasks). Both forms are kept because an entry
// may be in either (a leader writes the plain form while a server of its
// configuration reads no ranges, Server.entryRanges) while plansKey always
// names the plans by ranges: an entry in the plain form decodes to the
// kept array, and its ranges are packed once, added beside the plain
// bytes rather than in their place. A run's assignment is read-only (a
// reassign replaces it whole; FSM.Run's callers must not modify it), as
// the placed cache already shares it between runs on the leader; the
// packed bytes and nodes are read-only too (copied into an entry or
// hashed; nodes is copied out).
//
// What is kept is named by the array's identity (its first element's
// address and its length) where it is looked up by an array: lastAssignment
// itself holds the array (a), so no other array takes its address while it
// is kept, and an array is never written after it is shared, so the kept
// bytes are its bytes. Where it is looked up by an entry's bytes
// (internAssignment), the array handed out is one those bytes unpack to:
// plain was unpacked to a; ranges was unpacked to a, or is packRanges(a),
// which unpackRanges reads back to a's contents for any array of at most
// spec.MaxVertices tasks (unpackRanges refuses more; rangesOf keeps no
// longer array). Every answer is the one computed from the array's
// contents or the entry's bytes: the FSM stays a function of its entries.
var lastAssignment struct {
	mu     sync.Mutex
	a      []string
	plain  []byte   // a's entry bytes in framedRunSubmit's form, or nil
	ranges []byte   // a's entry bytes in framedRunSubmitRanges's form, or nil
	nodes  []string // nodesOf(a) once asked, else nil
}

// sameArray says a and b are one array: the same elements, not equal ones.
func sameArray(a, b []string) bool { return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0] }

// internAssignment is unpackAssignment (frame framedRunSubmit) or
// unpackRanges (framedRunSubmitRanges): the kept array when b is its
// bytes in that form, else a fresh array, which is then the one kept.
func internAssignment(frame byte, b []byte) ([]string, error) {
	la := &lastAssignment
	la.mu.Lock()
	defer la.mu.Unlock()
	unpack, kept := unpackAssignment, la.plain
	if frame == framedRunSubmitRanges {
		unpack, kept = unpackRanges, la.ranges
	}
	if la.a != nil && kept != nil && bytes.Equal(b, kept) {
		return la.a, nil
	}
	a, err := unpack(b)
	if err != nil {
		return nil, err
	}
	la.a, la.plain, la.ranges, la.nodes = a, nil, nil, nil
	if frame == framedRunSubmitRanges {
		la.ranges = bytes.Clone(b)
	} else {
		la.plain = bytes.Clone(b)
	}
	return a, nil
}

// rangesOf is an assignment in ranges, kept with the array
// (lastAssignment): a run of a flow again on the same placement packs its
// assignment, the placed cache's array, into its run_submit entry
// (encodeCommand) and names its plans by it (plansKey, from the FSM's
// array, which the entry decodes to: the kept one), and neither passes
// over its tasks again. The bytes are packRanges(assign) where rangesOf
// packed them; where they are the bytes of an entry the array was
// decoded from (internAssignment), they are packRanges's only if that
// entry was canonical (a leader of this build writes no other), else
// bytes that unpack to the same assignment: plansKey stays a name of the
// assignment either way (bytes that unpack to one assignment name no
// other), a non-canonical one at worst misses plans kept under the
// canonical name. The bytes are read-only, with no room to append.
func rangesOf(assign []string) []byte {
	la := &lastAssignment
	la.mu.Lock()
	if la.ranges != nil && sameArray(la.a, assign) {
		defer la.mu.Unlock()
		return la.ranges[:len(la.ranges):len(la.ranges)]
	}
	la.mu.Unlock()
	p := packRanges(assign) // outside the lock: a pass over the tasks
	p = p[:len(p):len(p)]
	if len(assign) > spec.MaxVertices {
		return p // unpackRanges refuses it: no entry decodes to it, nothing to keep
	}
	la.mu.Lock()
	defer la.mu.Unlock()
	if sameArray(la.a, assign) { // the array kept: its ranges beside what else it has
		if la.ranges == nil {
			la.ranges = p
		}
		return p
	}
	la.a, la.plain, la.ranges, la.nodes = assign, nil, p, nil
	return p
}

// sharedNodesOf is nodesOf(assign), found once for the kept array
// (lastAssignment): a run_submit of a flow again on the same placement
// lists its nodes without a pass over its tasks. The slice is the
// caller's own.
func sharedNodesOf(assign []string) ([]string, error) {
	la := &lastAssignment
	la.mu.Lock()
	if la.nodes != nil && sameArray(la.a, assign) {
		defer la.mu.Unlock()
		return slices.Clone(la.nodes), nil
	}
	la.mu.Unlock()
	nodes, err := nodesOf(assign)
	if err != nil {
		return nil, err
	}
	la.mu.Lock()
	defer la.mu.Unlock()
	if sameArray(la.a, assign) {
		la.nodes = slices.Clone(nodes)
	}
	return nodes, nil
}

// packRanges writes an assignment (vertex → node id) as the number of
// distinct ids, each id (its length, its bytes) in the order it first
// comes, the number of vertices, the number of runs (nodeRuns: maximal
// spans of consecutive vertices on one node), and each run's id's place
// among the ids and its length, all uvarints.
func packRanges(assign []string) []byte {
	idx := map[string]uint64{}
	var ids []string
	runs := 0
	for lo := range nodeRuns(assign) {
		runs++
		if _, ok := idx[assign[lo]]; !ok {
			idx[assign[lo]] = uint64(len(ids))
			ids = append(ids, assign[lo])
		}
	}
	b := binary.AppendUvarint(make([]byte, 0, 32+8*len(ids)+4*runs), uint64(len(ids)))
	for _, n := range ids {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
	}
	b = binary.AppendUvarint(b, uint64(len(assign)))
	b = binary.AppendUvarint(b, uint64(runs))
	for lo, hi := range nodeRuns(assign) {
		b = binary.AppendUvarint(b, idx[assign[lo]])
		b = binary.AppendUvarint(b, uint64(hi-lo))
	}
	return b
}

// unpackRanges reads packRanges's bytes, all of them. The runs must cover
// exactly the vertices counted, each run at least one (a run of none, or
// one past the count, is damage, not an assignment), and no more
// vertices than a flow expands to (spec.MaxVertices): the array is made
// before the runs are read.
func unpackRanges(b []byte) ([]string, error) {
	p := packed{b}
	ids, err := p.nodeIDs()
	if err != nil {
		return nil, err
	}
	nids := uint64(len(ids))
	nv, ok := p.next()
	if !ok || nv > spec.MaxVertices {
		return nil, errors.New("with a bad count of tasks")
	}
	nruns, ok := p.next()
	if !ok || nruns > uint64(len(p.b))/2 || nruns > nv { // a run is two bytes at least
		return nil, errors.New("with a bad count of runs")
	}
	out := make([]string, nv)
	at := uint64(0)
	for range nruns {
		i, ok := p.next()
		if !ok || i >= nids {
			return nil, errors.New("with a run of no node id")
		}
		l, ok := p.next()
		if !ok || l == 0 || l > nv-at {
			return nil, errors.New("with a run of a bad length")
		}
		for v := at; v < at+l; v++ {
			out[v] = ids[i]
		}
		at += l
	}
	if at != nv {
		return nil, errors.New("with runs that do not cover its tasks")
	}
	return out, p.end()
}

// unpackAssignment reads packAssignment's bytes, all of them.
func unpackAssignment(b []byte) ([]string, error) {
	p := packed{b}
	ids, err := p.nodeIDs()
	if err != nil {
		return nil, err
	}
	nv, err := p.count("tasks")
	if err != nil {
		return nil, err
	}
	out := make([]string, nv)
	for v := range out {
		i, ok := p.next()
		if !ok || i >= uint64(len(ids)) {
			return nil, errors.New("with a task of no node id")
		}
		out[v] = ids[i]
	}
	return out, p.end()
}

// packed reads the uvarints of a packed assignment (packAssignment,
// packRanges) from the front of b.
type packed struct{ b []byte }

func (p *packed) next() (uint64, bool) {
	v, k := binary.Uvarint(p.b)
	if k <= 0 {
		return 0, false
	}
	p.b = p.b[k:]
	return v, true
}

// count reads a count of things each written in a byte at least.
func (p *packed) count(what string) (uint64, error) {
	n, ok := p.next()
	if !ok || n > uint64(len(p.b)) {
		return 0, fmt.Errorf("with a bad count of %s", what)
	}
	return n, nil
}

// nodeIDs reads the node ids both forms begin with: their count, then
// each as its length and bytes.
func (p *packed) nodeIDs() ([]string, error) {
	nids, err := p.count("node ids")
	if err != nil {
		return nil, err
	}
	ids := make([]string, nids)
	for i := range ids {
		l, ok := p.next()
		if !ok || l > uint64(len(p.b)) {
			return nil, errors.New("with a bad node id")
		}
		ids[i], p.b = string(p.b[:l]), p.b[l:]
	}
	return ids, nil
}

// end reports bytes left after a whole assignment.
func (p *packed) end() error {
	if len(p.b) > 0 {
		return errors.New("with bytes after its assignment")
	}
	return nil
}

// decodeExact decodes a command or a snapshot with its numbers of no
// fixed type (a run's Params) as json.Number: exactly what was written
// (an int parameter past float64's 2^53 keeps its value), and as the
// spec binds them again (spec.ParamValue).
func decodeExact(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF { // as json.Unmarshal: nothing after the value
		return errors.New("data after the JSON value")
	}
	return nil
}

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCommand}, args...)...)
}

// Apply applies one command. A refused command changes nothing.
func (f *FSM) Apply(c *Command) error {
	switch c.Op {
	case OpNodeUpsert:
		n := c.Node
		if n == nil || n.ID == "" {
			return refuse("node_upsert without a node id")
		}
		switch n.State {
		case proto.NodeAlive, proto.NodeSuspect, proto.NodeDead, proto.NodeLeft:
		default:
			return refuse("node %s: unknown state %q", n.ID, n.State)
		}
		cp := *n
		f.st.Nodes[n.ID] = &cp
	case OpFlowPut:
		return f.putFlow(c.Flow)
	case OpRunSubmit:
		r := c.Run
		if r == nil || r.ID == "" {
			return refuse("run_submit without a run id")
		}
		if _, dup := f.st.Runs[r.ID]; dup {
			return refuse("run %s exists", r.ID)
		}
		if r.State != proto.RunRunning && r.State != proto.RunPending {
			return refuse("run %s submitted in state %q", r.ID, r.State)
		}
		if r.Gen != 1 {
			return refuse("run %s submitted with gen %d, want 1", r.ID, r.Gen)
		}
		nodes, err := sharedNodesOf(r.Assignment)
		if err != nil {
			return refuse("run %s: %v", r.ID, err)
		}
		switch {
		case r.Flow != nil && r.FlowID != "":
			return refuse("run %s names flow %s and carries one inline", r.ID, r.FlowID)
		case r.Flow == nil && f.st.Flows[r.FlowID] == nil:
			return refuse("run %s: flow %q: %w", r.ID, r.FlowID, ErrUnknownFlow)
		}
		cp := *r
		cp.Nodes = nodes
		f.inline(&cp)
		f.st.Runs[r.ID] = &cp
	case OpRunReassign:
		a := c.Reassign
		if a == nil {
			return refuse("run_reassign without a body")
		}
		r := f.st.Runs[a.ID]
		switch {
		case r == nil:
			return refuse("run %s: %w", a.ID, proto.ErrNotFound)
		case proto.Finished(r.State):
			return refuse("run %s is %s", a.ID, r.State)
		case a.Gen <= r.Gen:
			return refuse("run %s: gen %d is not after %d", a.ID, a.Gen, r.Gen)
		case len(a.Assignment) != len(r.Assignment):
			return refuse("run %s: assignment of %d tasks, the run has %d", a.ID, len(a.Assignment), len(r.Assignment))
		}
		nodes, err := nodesOf(a.Assignment)
		if err != nil {
			return refuse("run %s: %v", a.ID, err)
		}
		for _, n := range nodes {
			if slices.Contains(r.Lost, n) {
				return refuse("run %s: node %s lost its part of the run in an earlier generation; it cannot take one again", a.ID, n)
			}
		}
		for _, n := range r.Nodes {
			if !slices.Contains(nodes, n) && !slices.Contains(r.Lost, n) {
				r.Lost = append(r.Lost, n)
			}
		}
		r.Gen, r.Assignment, r.Nodes = a.Gen, append([]string(nil), a.Assignment...), nodes
		if a.Boots != nil {
			r.Boots = maps.Clone(a.Boots)
		}
		r.State = proto.RunRunning
	case OpRunFinish:
		x := c.Finish
		if x == nil {
			return refuse("run_finish without a body")
		}
		r := f.st.Runs[x.ID]
		switch {
		case r == nil:
			return refuse("run %s: %w", x.ID, proto.ErrNotFound)
		case !proto.Finished(x.State):
			return refuse("run %s: %q is not a final state", x.ID, x.State)
		case proto.Finished(r.State):
			return refuse("run %s is already %s", x.ID, r.State) // the first finish wins
		}
		r.State, r.Error, r.Finished = x.State, x.Error, x.At
	case OpPrune:
		for id, r := range f.st.Runs {
			if proto.Finished(r.State) && r.Finished.Before(c.Before) {
				delete(f.st.Runs, id)
			}
		}
		// A flow a submit put is kept while a run uses it; one stored
		// after Before is kept too, for the run its put is for (a submit
		// puts the flow, then commits the run in an entry of its own).
		used := map[string]bool{}
		for _, r := range f.st.Runs {
			used[r.FlowID] = true
		}
		for id, fl := range f.st.Flows {
			if !fl.Registered && !used[id] && fl.Stored.Before(c.Before) {
				delete(f.st.Flows, id)
			}
		}
	case OpConfig:
		if c.Config == nil || c.Config.Retention < 0 {
			return refuse("config: missing or negative retention")
		}
		f.st.Config = *c.Config
	default:
		return refuse("unknown op %q", c.Op)
	}
	return nil
}

// putFlow stores a flow under its id, once: a put of a flow the registry
// holds stores nothing again (it may register it). A put without Text
// only registers a flow that is there.
func (f *FSM) putFlow(p *StoredFlow) error {
	switch {
	case p == nil:
		return refuse("flow_put without a flow")
	case !ValidFlowID(p.ID):
		return refuse("flow_put: id %q is not a flow id (64 lowercase hex digits)", p.ID)
	}
	if have := f.st.Flows[p.ID]; have != nil {
		have.Registered = have.Registered || p.Registered
		return nil
	}
	switch {
	case len(p.Text) == 0:
		return refuse("flow %s: %w", p.ID, ErrUnknownFlow)
	case FlowID(p.Text) != p.ID:
		return refuse("flow_put: id %s is not the SHA-256 of its text", p.ID)
	}
	cp := *p
	f.st.Flows[p.ID] = &cp
	return nil
}

// inline moves a run's inline flow (an entry or snapshot from before the
// registry) into the registry: the run then names it by FlowID. Its text
// has its parameters substituted, so it is stored as a flow without any
// (HasParams false) and the run's Params only say what they were.
func (f *FSM) inline(r *Run) {
	if r.Flow == nil {
		return
	}
	id := FlowID(r.Flow)
	if f.st.Flows[id] == nil {
		f.st.Flows[id] = &StoredFlow{ID: id, Name: r.FlowName, Path: r.ID + ".json", Text: r.Flow, Bytes: len(r.Flow),
			Tasks: len(r.Assignment), Stored: r.Submitted}
	}
	r.FlowID, r.Flow = id, nil
}

func nodesOf(assign []string) ([]string, error) {
	if len(assign) == 0 {
		return nil, errors.New("empty assignment")
	}
	seen := map[string]bool{}
	var nodes []string
	for lo := range nodeRuns(assign) {
		n := assign[lo]
		if n == "" {
			return nil, fmt.Errorf("task %d has no node", lo)
		}
		if !seen[n] {
			seen[n] = true
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	return nodes, nil
}

// Run returns a copy of one run.
func (f *FSM) Run(id string) (Run, bool) {
	r, ok := f.st.Runs[id]
	if !ok {
		return Run{}, false
	}
	return *r, true
}

// Flow returns a copy of the registry's flow id; its Text is shared with
// the FSM: do not modify it.
func (f *FSM) Flow(id string) (StoredFlow, bool) {
	fl, ok := f.st.Flows[id]
	if !ok {
		return StoredFlow{}, false
	}
	return *fl, true
}

// Flows returns copies of the registry's flows, by the time they were
// stored then id. Their Text is shared with the FSM.
func (f *FSM) Flows() []StoredFlow {
	out := make([]StoredFlow, 0, len(f.st.Flows))
	for _, fl := range f.st.Flows {
		out = append(out, *fl)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Stored.Equal(out[j].Stored) {
			return out[i].Stored.Before(out[j].Stored)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// RunFlow is the canonical JSON flow run r executes: its registered flow,
// with r.Params bound into it when the flow declares parameters. It parses
// such a flow each call; the server caches the result (Server.runFlow).
func (f *FSM) RunFlow(r Run) ([]byte, error) {
	fl, ok := f.st.Flows[r.FlowID]
	if !ok {
		return nil, fmt.Errorf("coord: run %s: flow %q: %w", r.ID, r.FlowID, ErrUnknownFlow)
	}
	if !fl.HasParams {
		return fl.Text, nil
	}
	b, err := bindStored(*fl, r.Params)
	if err != nil {
		return nil, fmt.Errorf("coord: run %s: %w", r.ID, err)
	}
	return b.canon, nil
}

// Runs returns copies of every run, by submit time then id. Their
// Assignment is shared with the FSM: do not modify it.
func (f *FSM) Runs() []Run {
	out := make([]Run, 0, len(f.st.Runs))
	for _, r := range f.st.Runs {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Submitted.Equal(out[j].Submitted) {
			return out[i].Submitted.Before(out[j].Submitted)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Nodes returns copies of every node, by id.
func (f *FSM) Nodes() []Node {
	out := make([]Node, 0, len(f.st.Nodes))
	for _, n := range f.st.Nodes {
		out = append(out, *n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Settings returns the cluster settings.
func (f *FSM) Settings() Settings { return f.st.Config }

// Snapshot writes the whole state as JSON.
func (f *FSM) Snapshot() ([]byte, error) { return json.Marshal(&f.st) }

// Restore replaces the state with a snapshot.
func (f *FSM) Restore(data []byte) error {
	var st State
	if err := decodeExact(data, &st); err != nil {
		return fmt.Errorf("coord: restore snapshot: %w", err)
	}
	if st.Nodes == nil {
		st.Nodes = map[string]*Node{}
	}
	if st.Runs == nil {
		st.Runs = map[string]*Run{}
	}
	if st.Flows == nil {
		st.Flows = map[string]*StoredFlow{}
	}
	f.st = st
	for _, id := range slices.Sorted(maps.Keys(st.Runs)) { // a snapshot from before the registry
		f.inline(st.Runs[id])
	}
	return nil
}
