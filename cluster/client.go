// Package cluster is hetflow's Go client: Client submits flows to a
// cluster and follows their runs, as the CLI does. It imports HTTP and JSON
// only, so a program that talks to a cluster does not compile one in; the
// all-in-one cluster is in package cluster/devcluster, the parts of a
// cluster in cluster/coord, cluster/node and the packages beside them.
package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
)

// Errors every layer names (re-exported from cluster/proto).
var (
	ErrNotLeader    = proto.ErrNotLeader
	ErrNoLeader     = proto.ErrNoLeader
	ErrNotFound     = proto.ErrNotFound
	ErrUnauthorized = proto.ErrUnauthorized
	ErrUnreachable  = proto.ErrUnreachable
	ErrInvalid      = proto.ErrInvalid
	ErrRunFailed    = proto.ErrRunFailed
)

// InvalidError is a flow the cluster refused; Problems has one line per
// problem ("file:line: flow ... task ... field ...: message"). It matches
// ErrInvalid.
type InvalidError struct {
	Problems []string
}

func (e *InvalidError) Error() string {
	if len(e.Problems) == 0 {
		return ErrInvalid.Error()
	}
	return ErrInvalid.Error() + ": " + strings.Join(e.Problems, "; ")
}

func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Client talks to a cluster's coordinators over their HTTP API. It follows
// the leader by itself: a connection error, a 503 (no leader) or a server
// that does not answer within Attempt moves on to the next server, and a
// round of failures is retried with backoff until Retry has passed or the
// context ends. Safe for concurrent use.
type Client struct {
	servers []string
	token   string

	// HTTP is the client used for every call.
	HTTP *http.Client
	// Retry bounds how long one call keeps retrying (default 15s; the
	// context's deadline, when sooner, wins).
	Retry time.Duration
	// Poll is Wait's polling interval (default 200ms).
	Poll time.Duration
	// Attempt bounds one try at one server (default DefaultAttempt): a
	// server that accepts the connection but does not answer in time (a
	// frozen or overloaded process) is left for the next one. Each round
	// in which some server ran out of time doubles it, so a call that is
	// merely slow everywhere (a large submit) still gets through.
	Attempt time.Duration
	// OnRetry, when set, is told of every round in which no server
	// answered: the last server's error and how long the call goes on
	// retrying (at most; the context may end it sooner). The CLI prints
	// the first one, so a server that is down is not 15 s of silence.
	OnRetry func(err error, left time.Duration)

	mu   sync.Mutex
	next int // the server that answered last
}

// DefaultAttempt is Client.Attempt's default: far above what a healthy
// coordinator takes to answer (milliseconds), far below a user's patience.
const DefaultAttempt = 3 * time.Second

// NewClient returns a client for the given coordinator URLs
// ("http://host:port"; a bare "host:port" means http) and API token ("" when
// the cluster has no secret).
func NewClient(servers []string, token string) *Client {
	c := &Client{token: token, HTTP: &http.Client{Timeout: 60 * time.Second}, Retry: 15 * time.Second, Poll: 200 * time.Millisecond, Attempt: DefaultAttempt}
	for _, s := range servers {
		s = strings.TrimRight(strings.TrimSpace(s), "/")
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = "http://" + s
		}
		c.servers = append(c.servers, s)
	}
	return c
}

// errNoAnswer cancels an attempt at a server that gave no sign of life
// within Client.Attempt.
var errNoAnswer = errors.New("no answer in time")

// aliveBody is how much of a request body a server must have read for the
// client to count it alive: more than the kernel's socket buffers take in
// without the process reading.
const aliveBody = 1 << 20

// readCounter is a request body that counts what the server has read.
type readCounter struct {
	payload []byte
	r       *bytes.Reader
	n       atomic.Int64
}

func (rc *readCounter) Read(p []byte) (int, error) {
	n, err := rc.r.Read(p)
	rc.n.Add(int64(n))
	return n, err
}

// watchAttempt cancels an attempt that shows no sign of life within
// attempt. Slow is not dead: a server that keeps reading a large request
// body (a submit of a 100,000-task flow is megabytes, and a loaded leader
// takes seconds to validate and plan it) is working, so each period in
// which it read more of a body over aliveBody, or after it read all of it,
// extends the attempt, up to the HTTP client's own timeout. A frozen
// process reads nothing and is left after one period, as before.
func watchAttempt(attempt time.Duration, body *readCounter, cancel context.CancelCauseFunc) (stop func()) {
	var (
		mu   sync.Mutex
		t    *time.Timer
		seen int64
	)
	var fire func()
	fire = func() {
		mu.Lock()
		defer mu.Unlock()
		if t == nil {
			return // stopped
		}
		n := body.n.Load()
		if len(body.payload) > aliveBody && (n > seen || n == int64(len(body.payload))) && n > aliveBody/2 {
			seen = n
			t = time.AfterFunc(attempt, fire)
			return
		}
		cancel(errNoAnswer)
	}
	mu.Lock()
	t = time.AfterFunc(attempt, fire)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if t != nil {
			t.Stop()
			t = nil
		}
	}
}

// retryable is a server's answer that sends the client to the next one.
type retryable struct{ err error }

func (r *retryable) Error() string { return r.err.Error() }

// do sends one call and decodes a 2xx answer into out.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	return c.doWait(ctx, method, path, body, out, 0)
}

// doWait is do for a call the server may hold for up to wait before it
// answers (a long poll): each attempt is given that much longer.
func (c *Client) doWait(ctx context.Context, method, path string, body, out any, wait time.Duration) error {
	if len(c.servers) == 0 {
		return fmt.Errorf("%w: no server given", ErrUnreachable)
	}
	var payload []byte
	if enc, ok := body.(encodedBody); ok {
		payload = enc
	} else if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("cluster: encode request: %w", err)
		}
	}
	deadline := time.Now().Add(c.Retry)
	backoff := 50 * time.Millisecond
	attempt := c.Attempt
	if attempt <= 0 {
		attempt = DefaultAttempt
	}
	attempt += wait
	var last error
	for {
		c.mu.Lock()
		start := c.next
		c.mu.Unlock()
		slow := false
		for i := range c.servers {
			k := (start + i) % len(c.servers)
			body := &readCounter{payload: payload}
			actx, cancel := context.WithCancelCause(ctx)
			stop := watchAttempt(attempt, body, cancel)
			err := c.once(actx, c.servers[k], method, path, body, out)
			stop()
			if err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errNoAnswer) {
				// The server took the connection but gave no answer in time.
				err = &retryable{fmt.Errorf("%s: no answer within %v", c.servers[k], attempt)}
				slow = true
			}
			cancel(nil)
			var r *retryable
			if !errors.As(err, &r) {
				if err == nil {
					c.mu.Lock()
					c.next = k
					c.mu.Unlock()
				}
				return err
			}
			last = r.err
			if ctx.Err() != nil {
				break
			}
		}
		wait := min(backoff, time.Until(deadline))
		if wait <= 0 || ctx.Err() != nil {
			break
		}
		if c.OnRetry != nil {
			left := time.Until(deadline)
			if d, ok := ctx.Deadline(); ok {
				left = min(left, time.Until(d))
			}
			c.OnRetry(last, left)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
		if slow {
			attempt *= 2
		}
	}
	if errors.Is(last, ErrNoLeader) {
		return fmt.Errorf("%w: %w", ErrUnreachable, last)
	}
	return fmt.Errorf("%w: %v", ErrUnreachable, last)
}

func (c *Client) once(ctx context.Context, server, method, path string, body *readCounter, out any) error {
	var rd io.Reader
	if body.payload != nil {
		body.r = bytes.NewReader(body.payload)
		rd = body
	}
	req, err := http.NewRequestWithContext(ctx, method, server+path, rd)
	if err != nil {
		return fmt.Errorf("cluster: %s %s: %w", method, path, err)
	}
	if body.payload != nil {
		req.ContentLength = int64(len(body.payload))
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return &retryable{fmt.Errorf("%s: %w", server, err)}
	}
	defer resp.Body.Close()
	// Sized by Content-Length, up to 32 MB (a 100K-task status is 7.7 MB):
	// one buffer, not one doubled again and again; ReadFrom wants MinRead
	// bytes free to see the end.
	const maxAnswer = 256 << 20
	buf := bytes.NewBuffer(make([]byte, 0, min(max(resp.ContentLength, 0), 32<<20)+bytes.MinRead))
	_, err = buf.ReadFrom(io.LimitReader(resp.Body, maxAnswer))
	data := buf.Bytes()
	if err != nil {
		return &retryable{fmt.Errorf("%s: read answer: %w", server, err)}
	}
	if resp.StatusCode/100 == 2 {
		if d, ok := out.(answerDecoder); ok {
			if err := d.decodeAnswer(data); err != nil {
				return fmt.Errorf("cluster: %s %s: bad answer from %s: %w", method, path, server, err)
			}
		} else if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				return fmt.Errorf("cluster: %s %s: bad answer from %s: %w", method, path, server, err)
			}
		}
		return nil
	}
	var er proto.ErrorResponse
	_ = json.Unmarshal(data, &er)
	if er.Error == "" {
		er.Error = strings.TrimSpace(string(data))
	}
	switch resp.StatusCode {
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return &retryable{fmt.Errorf("%s: %w (%s)", server, ErrNoLeader, er.Error)}
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w: %s", ErrUnauthorized, server)
	case http.StatusNotFound:
		return remoteErr(ErrNotFound, er.Error)
	case http.StatusBadRequest:
		if len(er.Problems) > 0 {
			return &InvalidError{Problems: er.Problems}
		}
		return &InvalidError{Problems: []string{er.Error}}
	}
	return fmt.Errorf("cluster: %s %s: %s: %d %s", method, path, server, resp.StatusCode, er.Error)
}

// remoteError is an error the server worded: it prints the server's words
// alone (which already name the sentinel's meaning: "run r1: cluster: no such
// run or node") and matches the sentinel with errors.Is.
type remoteError struct {
	kind error
	msg  string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

// remoteErr wraps the server's message msg as kind, saying it once: the
// sentinel's text is added only when msg does not already hold it.
func remoteErr(kind error, msg string) error {
	if msg == "" {
		return kind
	}
	if !strings.Contains(msg, kind.Error()) {
		msg = kind.Error() + ": " + msg
	}
	return &remoteError{kind: kind, msg: msg}
}

// Submit submits a flow file's text (path names it in error messages and
// picks YAML or JSON by extension) and returns the run id. An invalid flow
// is an *InvalidError. The client proposes the run id itself, so the
// retries it makes across coordinators (a lost answer, a leader that died
// after committing) find the run the first attempt made: one submit is at
// most one run.
func (c *Client) Submit(ctx context.Context, path string, flowText []byte, opts ...SubmitOption) (string, error) {
	var r proto.SubmitResponse
	req := proto.SubmitRequest{Path: path, ID: proto.NewRunID(time.Now())}
	for _, o := range opts {
		o.applySubmit(&req)
	}
	body, err := submitBody(req, flowText)
	if err != nil {
		return "", fmt.Errorf("cluster: encode request: %w", err)
	}
	if err := c.do(ctx, http.MethodPost, "/v1/runs", body, &r); err != nil {
		return "", err
	}
	return r.ID, nil
}

// A SubmitOption tunes a Submit.
type SubmitOption interface{ applySubmit(*proto.SubmitRequest) }

// Params is a SubmitOption that fills the flow's parameters (its params:)
// by name: a string is parsed by the parameter's type (as submit --param
// name=value does), an int, float or bool must fit it. A missing or
// ill-typed value is an *InvalidError naming the parameter.
//
//	id, err := c.Submit(ctx, "wc.yaml", text, cluster.Params{"n": 3, "who": "ann"})
type Params map[string]any

func (p Params) applySubmit(r *proto.SubmitRequest) {
	if r.Params == nil {
		r.Params = make(map[string]any, len(p))
	}
	for k, v := range p {
		r.Params[k] = v
	}
}

func runPath(id string) string { return "/v1/runs/" + url.PathEscape(id) }

// RegisterFlow keeps a flow file's text in the cluster's registry and
// returns its id (the SHA-256 of its canonical JSON, lowercase hex: the
// same flow in YAML or JSON, or under another file name, has one id) and
// name. RunFlow then starts runs of it without sending, parsing or
// storing it again. Registering a flow twice is harmless (the same id
// comes back). The file is checked for its structure and this cluster's
// limits now, and for its functions and parameter values at each run; an
// invalid one is an *InvalidError.
func (c *Client) RegisterFlow(ctx context.Context, path string, flowText []byte) (proto.FlowRef, error) {
	var ref proto.FlowRef
	err := c.do(ctx, http.MethodPost, "/v1/flows", proto.RegisterRequest{Path: path, Flow: string(flowText)}, &ref)
	return ref, err
}

// RunFlow starts a run of the registered flow flowID and returns the run's
// id, as Submit does for a file: Params fill its parameters, the client
// proposes the run id (a retry is still one run), and the run is followed
// with Follow or Wait. A flow id the cluster does not hold, and a missing
// or ill-typed parameter, are *InvalidErrors naming it.
//
//	ref, err := c.RegisterFlow(ctx, "wc.yaml", text)
//	id, err := c.RunFlow(ctx, ref.ID, cluster.Params{"n": 3})
func (c *Client) RunFlow(ctx context.Context, flowID string, opts ...SubmitOption) (string, error) {
	var sr proto.SubmitRequest
	for _, o := range opts {
		o.applySubmit(&sr)
	}
	var r proto.SubmitResponse
	req := proto.RunFlowRequest{ID: proto.NewRunID(time.Now()), Params: sr.Params}
	if err := c.do(ctx, http.MethodPost, "/v1/flows/"+url.PathEscape(flowID)+"/runs", req, &r); err != nil {
		return "", err
	}
	return r.ID, nil
}

// Flows lists every flow in the cluster's registry: those registered, and
// those a submit stored (held while a run names them, and from their put
// until the next prune: one whose run was refused has Runs 0).
func (c *Client) Flows(ctx context.Context) ([]proto.FlowInfo, error) {
	var out []proto.FlowInfo
	err := c.do(ctx, http.MethodGet, "/v1/flows", nil, &out)
	return out, err
}

// Status returns a run's status.
func (c *Client) Status(ctx context.Context, id string) (proto.RunStatus, error) {
	var st statusAnswer
	err := c.do(ctx, http.MethodGet, runPath(id), nil, &st)
	return st.RunStatus, err
}

// statusAnswer is a full status as Status reads it (readStatus).
type statusAnswer struct{ proto.RunStatus }

func (a *statusAnswer) decodeAnswer(data []byte) error {
	st, err := readStatus(data)
	a.RunStatus = st
	return err
}

// answerDecoder is an answer read by its own code rather than
// json.Unmarshal (Client.once).
type answerDecoder interface {
	decodeAnswer(data []byte) error
}

// FollowWait is how long one look of Follow lets the coordinator hold
// the call while nothing changes (its bound, coord.MaxStatusWait).
const FollowWait = 10 * time.Second

// Progress returns a run's tallies without its task table (GET
// /v1/runs/{id}?view=summary). With version (the Version of an earlier
// answer) and wait > 0, the coordinator first waits until the run's status
// is no longer that version, up to wait (at most 10 s): a long poll. A
// coordinator of a version before the summary answers with the full status,
// read into the fields they share: Version is then empty.
func (c *Client) Progress(ctx context.Context, id, version string, wait time.Duration) (proto.RunProgress, error) {
	var p proto.RunProgress
	q := url.Values{"view": {"summary"}}
	if version != "" && wait > 0 {
		q.Set("version", version)
		q.Set("wait", wait.String())
	} else {
		wait = 0
	}
	err := c.doWait(ctx, http.MethodGet, runPath(id)+"?"+q.Encode(), nil, &p, wait)
	return p, err
}

// Delta returns what changed in a run's status after version since (GET
// /v1/runs/{id}?since=VERSION; "" or a version another coordinator gave:
// the whole table, Full). RunStatus.Apply adds it to the status of that
// version. wait > 0 long-polls as Progress does.
func (c *Client) Delta(ctx context.Context, id, since string, wait time.Duration) (proto.RunDelta, error) {
	var d proto.RunDelta
	if since == "" {
		since = "none"
	}
	q := url.Values{"since": {since}}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	err := c.doWait(ctx, http.MethodGet, runPath(id)+"?"+q.Encode(), nil, &d, wait)
	if err == nil && d.Version == "" {
		return d, fmt.Errorf("cluster: GET %s: the coordinator does not serve status deltas", runPath(id))
	}
	return d, err
}

// Follow follows a run until it ends, calling onProgress (when not nil)
// with its tallies whenever they changed, and returns its final status,
// read whole once. A run that did not succeed also returns an error
// matching ErrRunFailed that carries the run's error.
//
// Each look is a long poll of the run's summary (Progress, FollowWait):
// the coordinator answers when something changed, so following a run of
// 100,000 tasks costs what changed, not its table; looks are at least
// Poll apart.
func (c *Client) Follow(ctx context.Context, id string, onProgress func(proto.RunProgress)) (proto.RunStatus, error) {
	var (
		version string
		prev    *proto.RunProgress
		last    time.Time
	)
	for {
		if !last.IsZero() {
			if err := sleepCtx(ctx, c.Poll-time.Since(last)); err != nil {
				return proto.RunStatus{}, fmt.Errorf("cluster: waiting for run %s: %w", id, err)
			}
		}
		last = time.Now()
		p, err := c.Progress(ctx, id, version, FollowWait)
		if err != nil {
			return proto.RunStatus{}, err
		}
		if p.Version == "" { // an older coordinator: its answer was the full status
			st, err := c.Status(ctx, id)
			if err != nil {
				return st, err
			}
			p = st.Progress()
		}
		if onProgress != nil && (prev == nil || !sameProgress(*prev, p)) {
			onProgress(p)
		}
		prev, version = &p, p.Version
		if proto.Finished(p.State) {
			st, err := c.Status(ctx, id)
			if err != nil {
				return st, err
			}
			return st, runErr(st)
		}
	}
}

func sameProgress(a, b proto.RunProgress) bool {
	return a.State == b.State && a.Error == b.Error && a.Counts == b.Counts && a.Finished == b.Finished &&
		a.Activations == b.Activations && a.Executions == b.Executions
}

// runErr is the error of a finished run that did not succeed.
func runErr(st proto.RunStatus) error {
	if st.State == proto.RunSucceeded {
		return nil
	}
	msg := st.State
	if st.Error != "" {
		msg += ": " + st.Error
	}
	return fmt.Errorf("%w: run %s %s", ErrRunFailed, st.ID, msg)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Wait follows a run until it ends (as Follow does), calling onProgress
// (when not nil) with the full status each time it changed (at most once a
// Poll; each is a read of the whole table: prefer Follow). It returns the
// final status; a run that did not succeed also returns an error matching
// ErrRunFailed that carries the run's error.
func (c *Client) Wait(ctx context.Context, id string, onProgress func(proto.RunStatus)) (proto.RunStatus, error) {
	if onProgress == nil {
		return c.Follow(ctx, id, nil)
	}
	var prev []byte
	var ferr error
	st, err := c.Follow(ctx, id, func(p proto.RunProgress) {
		if proto.Finished(p.State) {
			return // the final status comes below
		}
		st, err := c.Status(ctx, id)
		if err != nil {
			ferr = err
			return
		}
		if b, _ := json.Marshal(st); !bytes.Equal(b, prev) {
			prev = b
			onProgress(st)
		}
	})
	if st.ID != "" {
		if b, _ := json.Marshal(st); !bytes.Equal(b, prev) {
			onProgress(st)
		}
	}
	if err == nil && ferr != nil && st.ID == "" {
		err = ferr
	}
	return st, err
}

// Runs lists the runs the cluster holds.
func (c *Client) Runs(ctx context.Context) ([]proto.RunSummary, error) {
	var out []proto.RunSummary
	err := c.do(ctx, http.MethodGet, "/v1/runs", nil, &out)
	return out, err
}

// Nodes lists the cluster's nodes.
func (c *Client) Nodes(ctx context.Context) ([]proto.NodeInfo, error) {
	var out []proto.NodeInfo
	err := c.do(ctx, http.MethodGet, "/v1/nodes", nil, &out)
	return out, err
}

// Funcs returns what each live node offers: its function catalog.
func (c *Client) Funcs(ctx context.Context) ([]proto.NodeFuncs, error) {
	var out []proto.NodeFuncs
	err := c.do(ctx, http.MethodGet, "/v1/funcs", nil, &out)
	return out, err
}

// Cancel cancels a run and returns its status.
func (c *Client) Cancel(ctx context.Context, id string) (proto.RunStatus, error) {
	var st proto.RunStatus
	err := c.do(ctx, http.MethodPost, runPath(id)+"/cancel", nil, &st)
	return st, err
}

// Peers lists the coordinators in raft's configuration.
func (c *Client) Peers(ctx context.Context) ([]proto.PeerInfo, error) {
	var out []proto.PeerInfo
	err := c.do(ctx, http.MethodGet, "/v1/peers", nil, &out)
	return out, err
}

// RemovePeer removes a coordinator that is gone for good from raft's
// configuration; a coordinator still alive is refused.
func (c *Client) RemovePeer(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/peers/"+url.PathEscape(id), nil, nil)
}

// Leader names the current leader.
func (c *Client) Leader(ctx context.Context) (proto.LeaderInfo, error) {
	var li proto.LeaderInfo
	err := c.do(ctx, http.MethodGet, "/v1/leader", nil, &li)
	return li, err
}
