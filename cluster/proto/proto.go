// Package proto holds what the coordinator, the nodes and the clients of a
// hetflow cluster share beyond the wire types of package transport: the
// coordinator's subjects, the HTTP API's JSON shapes, membership metadata,
// the cluster secret's derived credentials, each node's own credential and
// what the NATS server lets it do (identity.go), and the errors every layer
// names. docs/cluster-protocol.md tells the whole protocol.
package proto

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// PingSubject is the core NATS subject a node answers liveness pings on
// (request/reply, empty bodies): the leader corroborates gossip's verdict of
// death with it (coord.Liveness). node is a valid id (transport.ValidateID).
func PingSubject(node string) string { return "hf.ping." + node }

// Envelope kinds.
const (
	KindFail  = "fail"  // node → leader: a task failed for good; Body is a FailBody as JSON
	KindProbe = "probe" // leader → node: termination probe; Body is the wave, 8 bytes little-endian
)

// FailBody is the body of a KindFail envelope.
type FailBody struct {
	Task  string `json:"task"`
	Error string `json:"error"`
}

// Errors every layer names; wrapped with %w where they are returned.
var (
	ErrNotLeader = errors.New("cluster: not the leader")
	ErrNoLeader  = errors.New("cluster: no leader")
	// ErrNotReady is a submit the leader cannot judge yet (a live node's
	// function catalog unread): the API answers 503 and clients try again.
	ErrNotReady     = errors.New("cluster: not ready")
	ErrNotFound     = errors.New("cluster: no such run or node")
	ErrUnauthorized = errors.New("cluster: not authorised")
	ErrUnreachable  = errors.New("cluster: cannot be reached")
	ErrInvalid      = errors.New("cluster: invalid input")
	ErrRunFailed    = errors.New("cluster: run failed")
)

// Run states.
const (
	RunPending   = "pending"
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunCancelled = "cancelled"
)

// Finished reports whether a run state is final.
func Finished(state string) bool {
	return state == RunSucceeded || state == RunFailed || state == RunCancelled
}

// Task states (as transport.TaskState prints them).
const (
	TaskPending   = "pending"
	TaskRunning   = "running"
	TaskDone      = "done"
	TaskFailed    = "failed"
	TaskSkipped   = "skipped"
	TaskCancelled = "cancelled"
)

// Node states.
const (
	NodeAlive   = "alive"
	NodeSuspect = "suspect"
	NodeDead    = "dead"
	NodeLeft    = "left"
)

// SubmitRequest is the body of POST /v1/runs.
type SubmitRequest struct {
	Path string `json:"path"` // the flow file's name, for error messages and the format
	Flow string `json:"flow"` // the flow file's text (YAML or JSON)
	// ID, when given, is the run id the client proposes (NewRunID). It makes
	// a submit idempotent: a retry of the same request, after a lost answer
	// or a leader change, finds the run the first attempt made instead of
	// starting a second one. Empty: the leader picks the id.
	ID string `json:"id,omitempty"`
	// Params fill the flow's parameters (its params:), by name: a string is
	// parsed by the parameter's type (what submit --param name=value gives),
	// a number or bool must fit it.
	Params map[string]any `json:"params,omitempty"`
}

// NewRunID returns a fresh run id: "r" + 13 lowercase hex digits of now in
// milliseconds + "-" + 6 random hex digits (subject-safe, sorts by time).
func NewRunID(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("r%013x-%s", now.UnixMilli(), hex.EncodeToString(b[:]))
}

// ValidRunID reports whether id has NewRunID's shape.
func ValidRunID(id string) bool {
	if len(id) != 1+13+1+6 || id[0] != 'r' || id[14] != '-' {
		return false
	}
	for i, c := range id {
		if i == 0 || i == 14 {
			continue
		}
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// SubmitResponse is the answer to POST /v1/runs.
type SubmitResponse struct {
	ID string `json:"id"`
}

// RegisterRequest is the body of POST /v1/flows: a flow file to keep in
// the cluster's registry and run by its id (POST /v1/flows/{id}/runs).
type RegisterRequest struct {
	Path string `json:"path"` // the file's name, for error messages and the format
	Flow string `json:"flow"` // the file's text (YAML or JSON)
}

// FlowRef is the answer to POST /v1/flows (and register --json): the
// flow's id, the SHA-256 of its canonical JSON in lowercase hex (the same
// file in YAML or JSON, or under another name, has the same id), and its
// name.
type FlowRef struct {
	ID   string `json:"id"`
	Flow string `json:"flow"`
}

// FlowInfo is one flow of GET /v1/flows (flows --json): what the registry
// holds. Registered: kept until removed; otherwise a submit put it there
// and it goes once no run the cluster keeps names it.
type FlowInfo struct {
	ID         string    `json:"id"`
	Flow       string    `json:"flow"`
	Path       string    `json:"path"` // the file name it was first given under
	Registered bool      `json:"registered"`
	Params     bool      `json:"params,omitempty"` // it declares parameters (run --param fills them)
	Tasks      int       `json:"tasks"`            // after module expansion
	Bytes      int       `json:"bytes"`            // of the file as given
	Stored     time.Time `json:"stored"`
	Runs       int       `json:"runs"` // runs the cluster holds that name it
}

// RunFlowRequest is the body of POST /v1/flows/{id}/runs: a run of a
// registered flow. ID and Params are SubmitRequest's.
type RunFlowRequest struct {
	ID     string         `json:"id,omitempty"`
	Params map[string]any `json:"params,omitempty"`
}

// ErrorResponse is the body of every non-2xx answer.
type ErrorResponse struct {
	Error    string   `json:"error"`
	Problems []string `json:"problems,omitempty"`
}

// RunStatus is GET /v1/runs/{id}, `status --json`, `submit --wait --json`
// and one line of `dev --json` (docs/design.md, "The contract").
type RunStatus struct {
	ID    string `json:"id"`
	Flow  string `json:"flow"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// Params are the values the run's parameters took (given or default).
	Params map[string]any `json:"params,omitempty"`
	Tasks  []TaskStatus   `json:"tasks,omitempty"`
}

// TaskStatus is one task of a RunStatus.
type TaskStatus struct {
	Name        string `json:"name"`
	Node        string `json:"node,omitempty"`
	State       string `json:"state"`
	Activations uint64 `json:"activations"`
	Executions  uint64 `json:"executions"`
	Output      string `json:"output,omitempty"` // lowercase hex
}

// TaskCounts tallies a run's tasks by the state its status gives them.
type TaskCounts struct {
	Tasks     int `json:"tasks"`
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Done      int `json:"done"`
	Failed    int `json:"failed"`
	Skipped   int `json:"skipped"`
	Cancelled int `json:"cancelled"`
}

// Add counts one task in state.
func (c *TaskCounts) Add(state string) {
	c.Tasks++
	switch state {
	case TaskPending:
		c.Pending++
	case TaskRunning:
		c.Running++
	case TaskDone:
		c.Done++
	case TaskFailed:
		c.Failed++
	case TaskSkipped:
		c.Skipped++
	case TaskCancelled:
		c.Cancelled++
	}
}

// RunProgress is GET /v1/runs/{id}?view=summary: a run's status without its
// task table, what following a run needs. Version changes whenever the
// full status would (an opaque token of the coordinator that answered;
// ?version= and ?since= take it back).
type RunProgress struct {
	ID      string         `json:"id"`
	Flow    string         `json:"flow"`
	State   string         `json:"state"`
	Error   string         `json:"error,omitempty"`
	Params  map[string]any `json:"params,omitempty"`
	Version string         `json:"version"`
	Counts  TaskCounts     `json:"counts"`
	// Finished counts the tasks that finished an activation: done, failed or
	// skipped, or in another state after more than one activation (a loop
	// running again), so it never goes back while the run goes on.
	Finished    int    `json:"finished"`
	Activations uint64 `json:"activations"`
	Executions  uint64 `json:"executions"`
}

// Progress tallies a full status as RunProgress (Version left empty).
func (st *RunStatus) Progress() RunProgress {
	p := RunProgress{ID: st.ID, Flow: st.Flow, State: st.State, Error: st.Error, Params: st.Params}
	for _, t := range st.Tasks {
		p.Counts.Add(t.State)
		switch {
		case t.State == TaskDone || t.State == TaskFailed || t.State == TaskSkipped, t.Activations > 1:
			p.Finished++
		}
		p.Activations += t.Activations
		p.Executions += t.Executions
	}
	return p
}

// RunDelta is GET /v1/runs/{id}?since=VERSION: what changed in a run's
// status after the version a client holds. Full says Tasks is the whole
// table (the version was not this coordinator's, or too old, or the run's
// state changed every task it did not start); otherwise Tasks holds the
// tasks that changed, each by name, all already in the table. Apply adds
// it to the status the version came with.
type RunDelta struct {
	ID      string         `json:"id"`
	Flow    string         `json:"flow"`
	State   string         `json:"state"`
	Error   string         `json:"error,omitempty"`
	Params  map[string]any `json:"params,omitempty"`
	Version string         `json:"version"`
	Full    bool           `json:"full,omitempty"`
	Tasks   []TaskStatus   `json:"tasks,omitempty"`
}

// Apply brings st up to d: st as of the version d was asked since becomes
// the status of d.Version.
func (st *RunStatus) Apply(d RunDelta) {
	st.ID, st.Flow, st.State, st.Error, st.Params = d.ID, d.Flow, d.State, d.Error, d.Params
	if d.Full {
		st.Tasks = slices.Clone(d.Tasks)
		return
	}
	if len(d.Tasks) == 0 {
		return
	}
	at := make(map[string]int, len(st.Tasks))
	for i, t := range st.Tasks {
		at[t.Name] = i
	}
	for _, t := range d.Tasks {
		if i, ok := at[t.Name]; ok {
			st.Tasks[i] = t
		} else { // not sent by a coordinator (it sends Full then); keep it rather than lose it
			at[t.Name] = len(st.Tasks)
			st.Tasks = append(st.Tasks, t)
		}
	}
}

// RunSummary is one entry of GET /v1/runs.
type RunSummary struct {
	ID        string     `json:"id"`
	Flow      string     `json:"flow"`
	State     string     `json:"state"`
	Submitted time.Time  `json:"submitted"`
	Finished  *time.Time `json:"finished,omitempty"`
}

// NodeInfo is one entry of GET /v1/nodes.
type NodeInfo struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	State   string `json:"state"`
	CPUs    int    `json:"cpus"`
	GPUs    int    `json:"gpus"`
	// HTTP is the node's HTTP address (its /metrics and /healthz), from its
	// memberlist metadata; absent for a node that runs without --http or
	// that this coordinator has not heard from.
	HTTP string `json:"http,omitempty"`
}

// PeerInfo is one entry of GET /v1/peers.
type PeerInfo struct {
	ID       string `json:"id"`
	Raft     string `json:"raft"`
	HTTP     string `json:"http,omitempty"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
}

// LeaderInfo is GET /v1/leader.
type LeaderInfo struct {
	ID   string `json:"id"`
	HTTP string `json:"http"`
	Raft string `json:"raft"`
	Term uint64 `json:"term"`
}

// Member roles in memberlist metadata.
const (
	RoleCoordinator = "coordinator"
	RoleNode        = "node"
)

// Meta is a member's memberlist metadata (JSON, under 512 bytes).
type Meta struct {
	Role string `json:"role"`
	ID   string `json:"id"`
	Raft string `json:"raft,omitempty"`
	HTTP string `json:"http,omitempty"`
	CPUs int    `json:"cpus,omitempty"`
	GPUs int    `json:"gpus,omitempty"`
	// Boot is random per process start: a node restarted under the same id
	// (a supervisor, a container restart policy) has another one, and the
	// leader treats the runs the old process held as lost on it.
	Boot string `json:"boot,omitempty"`
	// Funcs is the hash of the node's function catalog (Catalog.Hash); the
	// catalog itself answers on CatalogSubject.
	Funcs string `json:"funcs,omitempty"`
	// Log is, for a coordinator, the raft entry forms it reads beyond
	// those every build reads (coord.LogRanges); 0 from a build before
	// the field. A leader writes an entry in a form only when every
	// server of its raft configuration reads it.
	Log int `json:"log,omitempty"`
}

// Secret is what a cluster secret yields.
type Secret struct {
	NATSUser     string
	NATSPassword string
	GossipKey    []byte // 32 bytes: memberlist's SecretKey (AES-256)
	APIToken     string
	// NodeKey issues and checks the nodes' NATS passwords (NodeCredential,
	// natsauth.Authorize); only coordinators and the NATS server hold it.
	NodeKey []byte
}

// DeriveSecret derives the credentials from a cluster secret with
// HKDF-SHA256. An empty secret gives the zero Secret (no security).
func DeriveSecret(secret []byte) (Secret, error) {
	if len(secret) == 0 {
		return Secret{}, nil
	}
	if len(secret) < 16 {
		return Secret{}, fmt.Errorf("%w: the cluster secret must be at least 16 bytes, got %d", ErrInvalid, len(secret))
	}
	key := func(info string, n int) ([]byte, error) {
		return hkdf.Key(sha256.New, secret, []byte("hetflow"), info, n)
	}
	nats, err := key("nats", 24)
	if err != nil {
		return Secret{}, err
	}
	gossip, err := key("gossip", 32)
	if err != nil {
		return Secret{}, err
	}
	api, err := key("api", 24)
	if err != nil {
		return Secret{}, err
	}
	nodeKey, err := key("nats-node", 32)
	if err != nil {
		return Secret{}, err
	}
	return Secret{NATSUser: "hetflow", NATSPassword: hex.EncodeToString(nats), GossipKey: gossip, APIToken: hex.EncodeToString(api),
		NodeKey: nodeKey}, nil
}

// ReadSecretFile reads a cluster secret (surrounding white space trimmed).
// An empty path gives an empty secret.
func ReadSecretFile(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: secret file: %v", ErrInvalid, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil, fmt.Errorf("%w: secret file %s is empty", ErrInvalid, path)
	}
	return []byte(s), nil
}
