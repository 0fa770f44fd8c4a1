package coord

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
)

// ErrCommand is matched by every error the FSM returns for a command it
// refuses (the command is in the log but changed nothing).
var ErrCommand = errors.New("coord: command refused")

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
	ID       string `json:"id"`
	Flow     []byte `json:"flow"` // canonical JSON flow file (spec.Marshal)
	FlowName string `json:"flow_name"`
	// Params are the values of the flow's parameters (spec.File.Bind); Flow
	// holds the flow with them substituted.
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

// Settings are the cluster-wide settings in the FSM.
type Settings struct {
	Retention time.Duration `json:"retention"`
}

// Command ops.
const (
	OpNodeUpsert  = "node_upsert"
	OpRunSubmit   = "run_submit"
	OpRunReassign = "run_reassign"
	OpRunFinish   = "run_finish"
	OpPrune       = "prune"
	OpConfig      = "config"
)

// Command is one raft log entry, as JSON. Op says which of the fields
// matters.
type Command struct {
	Op       string    `json:"op"`
	Node     *Node     `json:"node,omitempty"`     // node_upsert
	Run      *Run      `json:"run,omitempty"`      // run_submit
	Reassign *Reassign `json:"reassign,omitempty"` // run_reassign
	Finish   *Finish   `json:"finish,omitempty"`   // run_finish
	Before   time.Time `json:"before,omitzero"`    // prune
	Config   *Settings `json:"config,omitempty"`   // config
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
	Nodes  map[string]*Node `json:"nodes"`
	Runs   map[string]*Run  `json:"runs"`
	Config Settings         `json:"config"`
}

// FSM is the coordinator's pure state machine: commands in, state out. Time
// comes only from the commands. It is not safe for concurrent use (the raft
// adapter locks around it).
type FSM struct {
	st State
}

// NewFSM returns an empty FSM.
func NewFSM() *FSM {
	return &FSM{st: State{Nodes: map[string]*Node{}, Runs: map[string]*Run{}}}
}

// ApplyJSON decodes and applies one command.
func (f *FSM) ApplyJSON(data []byte) error {
	var c Command
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("%w: undecodable command: %v", ErrCommand, err)
	}
	return f.Apply(&c)
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
		nodes, err := nodesOf(r.Assignment)
		if err != nil {
			return refuse("run %s: %v", r.ID, err)
		}
		cp := *r
		cp.Nodes = nodes
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

func nodesOf(assign []string) ([]string, error) {
	if len(assign) == 0 {
		return nil, errors.New("empty assignment")
	}
	seen := map[string]bool{}
	var nodes []string
	for i, n := range assign {
		if n == "" {
			return nil, fmt.Errorf("task %d has no node", i)
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

// Runs returns copies of every run, by submit time then id. Flow and
// Assignment are shared with the FSM: do not modify them.
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
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("coord: restore snapshot: %w", err)
	}
	if st.Nodes == nil {
		st.Nodes = map[string]*Node{}
	}
	if st.Runs == nil {
		st.Runs = map[string]*Run{}
	}
	f.st = st
	return nil
}
