package dashboard

import (
	"context"
	"errors"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/transport"
)

// ErrNotFound is matched by a run the source does not hold.
var ErrNotFound = errors.New("dashboard: not found")

// Source is what the dashboard reads and the one thing it does (cancel). A
// coordinator implements it over its FSM, raft, the gossip ring and the
// JetStream event stream (cluster/coord); tests implement it in memory.
type Source interface {
	// Coordinators lists the raft peers and the raft term.
	Coordinators() ([]Coordinator, uint64)
	// Nodes lists the nodes as GET /v1/nodes does.
	Nodes() []proto.NodeInfo
	// Runs lists the runs as GET /v1/runs does.
	Runs() []proto.RunSummary
	// Run returns one run's control-plane record.
	Run(id string) (RunInfo, bool)
	// Status is the run's status as GET /v1/runs/{id} gives it.
	Status(ctx context.Context, id string) (proto.RunStatus, error)
	// Events hands fn the run's TaskEvents stored after stream sequence
	// after, in stream order, and returns the last sequence read (after when
	// there was none). The event is valid only during the call.
	Events(ctx context.Context, run string, after uint64, fn func(*transport.TaskEvent)) (uint64, error)
	// Cancel cancels a run (forwarding to the leader when needed).
	Cancel(ctx context.Context, id string) error
	// Signals is a monotonic count of cross-node Signals the nodes reported
	// sent (from their termination reports) as this coordinator saw them.
	Signals() uint64
}

// ProgressSource is a Source that also tallies a run's tasks without
// listing them (GET /v1/runs/{id}?view=summary; cluster/coord keeps the
// tallies as its status fold changes). The dashboard then reads a run's
// table only to draw its graph: its summaries, live events and the
// overview's progress bars cost what changed, not the table.
type ProgressSource interface {
	Source
	Progress(ctx context.Context, id string) (proto.RunProgress, error)
}

// Coordinator is one raft peer as the dashboard shows it.
type Coordinator struct {
	ID       string `json:"id"`
	HTTP     string `json:"http,omitempty"`
	Raft     string `json:"raft"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
	State    string `json:"state"` // alive, suspect, dead, left (from the gossip ring); "" unknown
}

// RunInfo is a run's control-plane record.
type RunInfo struct {
	proto.RunSummary
	Error      string
	FlowFile   []byte   // canonical JSON flow file
	Assignment []string // vertex → node id
	Gen        uint64
}

// Age is how long the run has existed (until it finished).
func (r RunInfo) Age(now time.Time) time.Duration {
	end := now
	if r.Finished != nil {
		end = *r.Finished
	}
	return end.Sub(r.Submitted)
}
