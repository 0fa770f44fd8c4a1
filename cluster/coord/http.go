package coord

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hetflow/hetflow/cluster/dashboard"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// HeaderForwardedBy names the follower that forwarded a request to the leader.
const HeaderForwardedBy = "X-Hetflow-Forwarded-By"

// maxBody bounds a forwarded request body: a flow file of spec.MaxFileSize
// as a JSON string, with room for escapes.
const maxBody = 2*spec.MaxFileSize + 4096

// submitBody bounds a POST /v1/runs body: a flow file of MaxFlowBytes as a
// JSON string (escapes can double it), with room for the path.
func (s *Server) submitBody() int64 { return 2*int64(s.cfg.MaxFlowBytes) + 4096 }

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	lead := s.leaderOnly
	mux.HandleFunc("POST /v1/runs", lead(s.handleSubmit))
	mux.HandleFunc("GET /v1/runs", s.handleRuns)
	mux.HandleFunc("GET /v1/runs/{id}", lead(s.handleStatus))
	mux.HandleFunc("POST /v1/runs/{id}/cancel", lead(s.handleCancel))
	mux.HandleFunc("POST /v1/flows", lead(s.handleRegister))
	mux.HandleFunc("GET /v1/flows", s.handleFlows)
	mux.HandleFunc("POST /v1/flows/{id}/runs", lead(s.handleRunFlow))
	mux.HandleFunc("GET /v1/nodes", s.handleNodes)
	mux.HandleFunc("GET /v1/funcs", s.handleFuncs)
	mux.HandleFunc("GET /v1/peers", s.handlePeers)
	mux.HandleFunc("DELETE /v1/peers/{id}", lead(s.handleRemovePeer))
	mux.HandleFunc("GET /v1/leader", s.handleLeader)
	mux.HandleFunc("GET /healthz", s.handleHealth)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.dash = s.newDashboard() // the web view; it checks the token itself (cookie or Bearer)
	mux.Handle("GET /{$}", s.dash)
	mux.Handle("/ui/", s.dash)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &recorder{ResponseWriter: w, code: http.StatusOK}
		if dashboard.SelfAuth(r.URL.Path) || s.authorised(r) {
			mux.ServeHTTP(rw, r)
		} else {
			writeError(rw, http.StatusUnauthorized, proto.ErrUnauthorized.Error(), nil)
		}
		route := r.Pattern
		if route == "" {
			route = "other"
		}
		s.http.WithLabelValues(methodLabel(r.Method), route, codeLabel(rw.code)).Inc()
	})
}

type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) { r.code = code; r.ResponseWriter.WriteHeader(code) }

// Unwrap lets http.ResponseController reach Flush (the dashboard's event streams).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// authorised: with a cluster secret every route but /healthz needs the API
// token (/metrics too: Prometheus sends it with `authorization:
// {credentials_file: ...}`). /healthz stays open for container health checks
// and tells a caller without the token nothing but the status.
func (s *Server) authorised(r *http.Request) bool {
	return s.cfg.Secret.APIToken == "" || r.URL.Path == "/healthz" || s.hasToken(r)
}

func (s *Server) hasToken(r *http.Request) bool {
	tok := s.cfg.Secret.APIToken
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return tok == "" || ok && subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string, problems []string) {
	writeJSON(w, code, proto.ErrorResponse{Error: msg, Problems: problems})
}

// writeErr maps an error to its status code.
func writeErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, proto.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error(), nil)
	case errors.Is(err, proto.ErrNotLeader), errors.Is(err, proto.ErrNoLeader), errors.Is(err, proto.ErrNotReady):
		writeError(w, http.StatusServiceUnavailable, err.Error(), nil)
	case errors.Is(err, ErrCommand):
		writeError(w, http.StatusConflict, err.Error(), nil)
	default:
		writeError(w, http.StatusInternalServerError, err.Error(), nil)
	}
}

// leaderOnly runs h on the leader and forwards the request to it elsewhere.
func (s *Server) leaderOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.Leader() {
			h(w, r)
			return
		}
		li, ok := s.leaderInfo()
		if !ok || li.HTTP == "" || r.Header.Get(HeaderForwardedBy) != "" {
			writeError(w, http.StatusServiceUnavailable, "no leader", nil)
			return
		}
		s.forward(w, r, li.HTTP)
	}
}

// scheme of this cluster's API: https when it serves TLS.
func (s *Server) scheme() string {
	if s.cfg.TLS != nil {
		return "https"
	}
	return "http"
}

func (s *Server) forward(w http.ResponseWriter, r *http.Request, leader string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "request body: "+err.Error(), nil)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, s.scheme()+"://"+leader+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error(), nil)
		return
	}
	for _, h := range []string{"Authorization", "Content-Type"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set(HeaderForwardedBy, s.cfg.ID)
	resp, err := s.fwd.Do(req)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "no leader: forwarding to "+leader+": "+err.Error(), nil)
		return
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.Header().Set(HeaderForwardedBy, s.cfg.ID)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readRaw(w, r)
	if !ok {
		return
	}
	req, flow, ok := splitSubmit(body)
	if !ok {
		if !decodeBody(w, body, &req, `{"path": FILE, "flow": TEXT}`) {
			return
		}
		flow = []byte(req.Flow)
	}
	id, err := s.SubmitParams(req.ID, req.Path, flow, req.Params)
	if err != nil {
		writeInvalid(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, proto.SubmitResponse{ID: id})
}

// readBody decodes a request's JSON body, one value of at most
// submitBody() bytes (a flow file's size, as the submit of one), into v;
// else it answers 400 and returns false. want is the body's shape, for the
// error of an empty one.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, v any, want string) bool {
	body, ok := s.readRaw(w, r)
	return ok && decodeBody(w, body, v, want)
}

// readRaw reads a request's body, of at most submitBody() bytes; else it
// answers 400 and returns false.
func (s *Server) readRaw(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	limit := s.submitBody()
	body, err := readDeclared(r.Body, r.ContentLength, limit)
	if err != nil {
		msg := "request body: " + err.Error()
		writeError(w, http.StatusBadRequest, msg, []string{msg})
		return nil, false
	}
	if int64(len(body)) > limit {
		// Take (and drop) the rest, within a bound, so that the client is done
		// sending and reads this answer rather than a reset connection.
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxBody))
		msg := fmt.Sprintf("request body: over %d bytes (a flow file of at most %d bytes, coordinator --max-flow-bytes)", limit, s.cfg.MaxFlowBytes)
		writeError(w, http.StatusBadRequest, msg, []string{msg})
		return nil, false
	}
	return body, true
}

// decodeBody decodes body, one JSON value, into v; else it answers 400
// and returns false.
func decodeBody(w http.ResponseWriter, body []byte, v any, want string) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // a parameter's number as written: an int past 2^53 stays exact (spec.ParamValue)
	if err := dec.Decode(v); err != nil {
		msg := "request body: " + err.Error()
		if errors.Is(err, io.EOF) {
			msg = "request body: empty; want " + want
		}
		writeError(w, http.StatusBadRequest, msg, []string{msg})
		return false
	}
	if dec.More() {
		msg := "request body: more than one JSON value"
		writeError(w, http.StatusBadRequest, msg, []string{msg})
		return false
	}
	return true
}

// writeInvalid answers an error of Submit, Register or RunFlow: an
// *InvalidError is 400 with its problems.
func writeInvalid(w http.ResponseWriter, err error) {
	var inv *InvalidError
	if errors.As(err, &inv) {
		writeError(w, http.StatusBadRequest, err.Error(), inv.Problems)
		return
	}
	writeErr(w, err)
}

// handleRegister serves POST /v1/flows: 201 with the flow's id and name
// when it is stored (or registered) now, 200 when it was registered already.
func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) {
	var req proto.RegisterRequest
	if !s.readBody(w, r, &req, `{"path": FILE, "flow": TEXT}`) {
		return
	}
	sf, created, err := s.Register(req.Path, []byte(req.Flow))
	if err != nil {
		writeInvalid(w, err)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	writeJSON(w, code, proto.FlowRef{ID: sf.ID, Flow: sf.Name})
}

// handleRunFlow serves POST /v1/flows/{id}/runs: 201 with the run's id.
func (s *Server) handleRunFlow(w http.ResponseWriter, r *http.Request) {
	var req proto.RunFlowRequest
	if !s.readBody(w, r, &req, `{"id": RUN, "params": {NAME: VALUE}}`) {
		return
	}
	id, err := s.RunFlow(req.ID, r.PathValue("id"), req.Params)
	if err != nil {
		writeInvalid(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, proto.SubmitResponse{ID: id})
}

// handleFlows serves GET /v1/flows: the registry, from this coordinator's
// FSM (as GET /v1/runs).
func (s *Server) handleFlows(w http.ResponseWriter, r *http.Request) {
	out := []proto.FlowInfo{}
	s.fsm.read(func(f *FSM) {
		runs := map[string]int{}
		for _, run := range f.Runs() {
			runs[run.FlowID]++
		}
		for _, fl := range f.Flows() {
			out = append(out, proto.FlowInfo{ID: fl.ID, Flow: fl.Name, Path: fl.Path, Registered: fl.Registered, Params: fl.HasParams,
				Tasks: fl.Tasks, Bytes: fl.Bytes, Stored: fl.Stored, Runs: runs[fl.ID]})
		}
	})
	writeJSON(w, http.StatusOK, out)
}

// InvalidError is a flow Submit refused; Problems has one line per problem
// ("file:line: ...").
type InvalidError struct {
	Problems []string
}

func (e *InvalidError) Error() string {
	return proto.ErrInvalid.Error() + ": " + strings.Join(e.Problems, "; ")
}

func (e *InvalidError) Unwrap() error { return proto.ErrInvalid }

func invalid(err error) *InvalidError { return invalidError(err) }

func invalidError(err error) *InvalidError {
	var es spec.Errors
	if errors.As(err, &es) {
		p := make([]string, len(es))
		for i, e := range es {
			p[i] = e.Error()
		}
		return &InvalidError{Problems: p}
	}
	return &InvalidError{Problems: []string{err.Error()}}
}

// Submit parses, validates and partitions a flow file and commits it as a new
// run; it must be called on the leader (proto.ErrNotLeader otherwise). An
// invalid flow, or one the alive nodes cannot run, is an *InvalidError.
func (s *Server) Submit(path string, text []byte) (string, error) {
	return s.SubmitID("", path, text)
}

// SubmitID is Submit with the run id the client proposed (proto.NewRunID;
// "" lets the leader pick one). A run of that id holding the same flow is
// the one a retried request made: its id comes back and nothing starts
// again. The same id with another flow is an *InvalidError.
func (s *Server) SubmitID(id, path string, text []byte) (string, error) {
	return s.SubmitParams(id, path, text, nil)
}

// SubmitParams is SubmitID with values for the flow's parameters
// (spec.File.Bind): a value missing, ill-typed or for a parameter the
// flow does not declare is an *InvalidError naming it. The flow goes into
// the registry (once: a flow stored before is not stored again) and the
// run names it by its id.
//
// A submit of an id that is being made now, of the same file and values (a
// client's retry: its attempt ran out while the leader parsed, validated
// and placed a large flow), waits for that one's answer and gives it,
// instead of doing it all again beside it.
func (s *Server) SubmitParams(id, path string, text []byte, params map[string]any) (string, error) {
	if id == "" {
		return s.submitParams(id, path, text, params)
	}
	s.mu.Lock()
	in := s.submits[id]
	if in != nil && in.path == path && bytes.Equal(in.text, text) && reflect.DeepEqual(in.params, params) {
		s.mu.Unlock()
		s.submitsJoined.Add(1)
		<-in.done
		return in.id, in.err
	}
	if in != nil { // another file under the id: answered as a taken id, once one is committed
		s.mu.Unlock()
		return s.submitParams(id, path, text, params)
	}
	// errSubmitAbandoned stands until the answer replaces it: what the
	// joined retries get if this attempt panics (the entry goes and done
	// closes all the same, so no retry of the id waits on it for ever).
	in = &inflightSubmit{path: path, text: text, params: params, done: make(chan struct{}), err: errSubmitAbandoned}
	s.submits[id] = in
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.submits, id)
		s.mu.Unlock()
		close(in.done)
	}()
	in.id, in.err = s.submitParams(id, path, text, params)
	return in.id, in.err
}

// errSubmitAbandoned: the attempt a retried submit waited for ended
// without an answer (it panicked); the retry may be made again.
var errSubmitAbandoned = errors.New("coord: the submit attempt this one waited for ended without an answer; try again")

// inflightSubmit is a submit being made (Server.submits, by run id): what
// it was given, and its answer once done is closed.
type inflightSubmit struct {
	path   string
	text   []byte
	params map[string]any
	done   chan struct{}
	id     string
	err    error
}

func (s *Server) submitParams(id, path string, text []byte, params map[string]any) (string, error) {
	s.submitsMade.Add(1)
	if s.submitHook != nil {
		s.submitHook()
	}
	if id != "" && !proto.ValidRunID(id) {
		return "", badRunID(id)
	}
	if !s.Leader() {
		return "", proto.ErrNotLeader
	}
	if path == "" {
		path = "flow.yaml"
	}
	if len(text) > s.cfg.MaxFlowBytes {
		return "", &InvalidError{Problems: []string{fmt.Sprintf("%s: flow file is %d bytes, over this cluster's limit of %d (coordinator --max-flow-bytes)", path, len(text), s.cfg.MaxFlowBytes)}}
	}
	bf, err := s.flows.bind(path, text, params)
	if err != nil {
		return "", invalid(err)
	}
	return s.start(id, path, bf, false)
}

func badRunID(id string) error {
	return &InvalidError{Problems: []string{fmt.Sprintf("request body: id %q is not a run id (r + 13 hex digits + - + 6 hex digits)", id)}}
}

// RunFlow starts a run of the registry's flow flowID (Register, or a
// submit of the same flow) with values for its parameters, as SubmitParams
// starts one of a file: the same checks (this cluster's limits, the live
// nodes' functions and resources), the same run id rules (id "" lets the
// leader pick one; a retry finds the run its first attempt made). Nothing
// is parsed or stored again: the flow is read from the registry (and its
// parse and binding from the caches). A flow id that is not there is an
// *InvalidError, as an ill-typed parameter is.
func (s *Server) RunFlow(id, flowID string, params map[string]any) (string, error) {
	if id != "" && !proto.ValidRunID(id) {
		return "", badRunID(id)
	}
	if !ValidFlowID(flowID) {
		return "", &InvalidError{Problems: []string{fmt.Sprintf("flow id %q is not a flow id (64 lowercase hex digits, as coordinator register prints)", flowID)}}
	}
	if !s.Leader() {
		return "", proto.ErrNotLeader
	}
	sf, ok := s.storedFlow(flowID)
	if !ok {
		return "", &InvalidError{Problems: []string{fmt.Sprintf("flow %s: %v: none is registered under this id (coordinator flows lists them)", flowID, ErrUnknownFlow)}}
	}
	if sf.Bytes > s.cfg.MaxFlowBytes {
		return "", &InvalidError{Problems: []string{fmt.Sprintf("%s (flow %s): flow file is %d bytes, over this cluster's limit of %d (coordinator --max-flow-bytes)", sf.Path, flowID, sf.Bytes, s.cfg.MaxFlowBytes)}}
	}
	bf, err := s.flows.stored(sf, params)
	if err != nil {
		return "", invalid(err)
	}
	return s.start(id, sf.Path, bf, true)
}

// Register keeps a flow file in the registry, registered: it stays there
// until removed, and RunFlow starts runs of it by its id (the SHA-256 of
// its canonical JSON, lowercase hex) without its text being sent, parsed
// or stored again. It must be called on the leader. created is false when
// the flow was registered already (nothing is committed then). The file
// is checked against this cluster's limits and validated for its
// structure (names, predecessors, kinds, modules, cycles, parameter
// references); its functions, resources and parameter values are checked
// at each run, against the nodes alive then. An invalid file is an
// *InvalidError.
func (s *Server) Register(path string, text []byte) (sf StoredFlow, created bool, err error) {
	if !s.Leader() {
		return sf, false, proto.ErrNotLeader
	}
	if path == "" {
		path = "flow.yaml"
	}
	if len(text) > s.cfg.MaxFlowBytes {
		return sf, false, &InvalidError{Problems: []string{fmt.Sprintf("%s: flow file is %d bytes, over this cluster's limit of %d (coordinator --max-flow-bytes)", path, len(text), s.cfg.MaxFlowBytes)}}
	}
	f, err := spec.Parse(path, text)
	if err != nil {
		return sf, false, invalid(err)
	}
	verr := f.Validate(spec.Options{})
	if n := f.ExpandedSize(); verr == nil && n > s.cfg.MaxTasks {
		what := strconv.Itoa(n)
		if n > spec.MaxVertices {
			what = "over " + strconv.Itoa(spec.MaxVertices)
		}
		verr = &InvalidError{Problems: []string{fmt.Sprintf("%s: flow %q expands to %s tasks, over this cluster's limit of %d a run (coordinator --max-tasks)", path, f.Root().Name, what, s.cfg.MaxTasks)}}
	}
	if verr != nil {
		var inv *InvalidError
		if errors.As(verr, &inv) {
			return sf, false, inv
		}
		return sf, false, invalid(verr)
	}
	src, err := spec.Canonical(f)
	if err != nil {
		return sf, false, fmt.Errorf("coord: marshal flow: %w", err)
	}
	if len(src) > spec.MaxFileSize {
		return sf, false, invalid(fmt.Errorf("%s: the flow's canonical JSON is %d bytes, over the limit of %d", path, len(src), spec.MaxFileSize))
	}
	sf = StoredFlow{ID: FlowID(src), Name: f.Root().Name, Path: path, Text: src, HasParams: len(f.Params()) > 0,
		Tasks: f.ExpandedSize(), Bytes: len(text)}
	if !sf.HasParams { // the file parsed here is what a run of it without parameters takes
		if b, err := bound(f, src, nil); err == nil {
			b.stored = sf
			s.flows.keep(b)
		}
	}
	if have, ok := s.storedFlow(sf.ID); ok && have.Registered {
		return have, false, nil
	}
	if err := s.putFlow(sf, true, time.Now()); err != nil {
		return sf, false, err
	}
	return sf, true, nil
}

// storedFlow reads the registry's flow id.
func (s *Server) storedFlow(id string) (sf StoredFlow, ok bool) {
	s.fsm.read(func(f *FSM) { sf, ok = f.Flow(id) })
	return sf, ok
}

// start validates, plans and commits a run of bf (SubmitParams, RunFlow);
// stored: bf was read from the registry (its errors carry no lines).
func (s *Server) start(id, path string, bf *boundFlow, stored bool) (string, error) {
	invalid := invalid // the package's, unless
	if stored {
		invalid = func(err error) *InvalidError { return invalidError(noLines(err)) }
	}
	f, values := bf.f, bf.values
	if !s.nodesReady() {
		return "", fmt.Errorf("%w: %s", proto.ErrNotReady, s.nodesWhy())
	}
	var alive []Node
	var joining []string // members not placeable yet: they have not answered a ping as themselves
	res := &spec.Resources{Nodes: map[string]spec.NodeRes{}}
	s.fsm.read(func(fsm *FSM) {
		for _, n := range fsm.Nodes() {
			switch n.State {
			case proto.NodeAlive:
				alive = append(alive, n)
				res.Nodes[n.ID] = spec.NodeRes{CPUs: n.CPUs, GPUs: n.GPUs}
			case proto.NodeSuspect:
				joining = append(joining, n.ID)
			}
		}
	})
	if len(alive) == 0 && len(joining) > 0 {
		// A cluster whose nodes are still joining (the first seconds of a
		// dev cluster): not ready, which clients retry, not invalid input.
		return "", fmt.Errorf("%w: no node is placeable yet (%s: not yet verified over NATS)", proto.ErrNotReady, strings.Join(joining, ", "))
	}
	fctx, fcancel := context.WithTimeout(context.Background(), 2*catalogFetchTimeout)
	catalogs := s.nodeFuncs(fctx, alive)
	offered := s.offered(catalogs)
	fcancel()
	var unread []string // live nodes whose catalog could not be read
	for _, nf := range catalogs {
		if nf.Error != "" {
			unread = append(unread, nf.Error)
		}
	}
	opts := spec.Options{Funcs: offered, Resources: res}
	if len(alive) == 0 {
		opts.Funcs = s.cfg.Catalog // nothing offers anything: check the flow, and planning says there is no node
	}
	// Before anything grows with the run's size. ExpandedSize is safe on a
	// file not validated yet (a module cycle saturates it): a file over the
	// limit is validated first, so that a cycle is reported as one.
	if n := bf.tasks; n > s.cfg.MaxTasks { // f.ExpandedSize(), counted once when f was bound
		if err := f.Validate(opts); err != nil {
			return "", invalid(err)
		}
		what := strconv.Itoa(n)
		if n > spec.MaxVertices {
			what = "over " + strconv.Itoa(spec.MaxVertices)
		}
		return "", &InvalidError{Problems: []string{fmt.Sprintf("%s: flow %q expands to %s tasks, over this cluster's limit of %d a run (coordinator --max-tasks)", path, f.Root().Name, what, s.cfg.MaxTasks)}}
	}
	// A run of this flow with these values on these nodes, offering these
	// catalogs, was validated, expanded and placed before: its graph and
	// placement stand for this one (flowCaches.placed). Otherwise it is
	// validated once, and expanded from what was validated.
	flowID := bf.stored.ID
	var pkey [32]byte
	cacheable := false
	rk, rkErr := runKey(flowID, values)
	if rkErr == nil {
		pkey, cacheable = placedKey(rk, alive, catalogs)
	}
	var placed *placedRun
	if cacheable {
		placed, _ = s.flows.placed.Get(pkey)
	}
	var g *spec.Graph
	var err error
	if placed != nil {
		g = placed.g
	} else if g, err = f.Compile(opts); err != nil {
		if len(unread) > 0 {
			// Not the flow's fault, perhaps: the functions of a live node
			// it may need are unknown for now. Say so, as a refusal to try
			// again (503), not as invalid input.
			return "", fmt.Errorf("%w: %s; the flow cannot be checked against its functions yet (%v)", proto.ErrNotReady, strings.Join(unread, "; "), err)
		}
		return "", invalid(err)
	}
	// Every process expands the canonical bytes. They parse back to the same
	// flows (spec's fuzz tests hold Marshal to that), so the nodes' vertex
	// indices are g's: the leader does not parse and validate them again.
	for _, b := range [][]byte{bf.canon, bf.stored.Text} {
		if len(b) > spec.MaxFileSize {
			return "", invalid(fmt.Errorf("%s: the flow's canonical JSON is %d bytes, over the limit of %d", path, len(b), spec.MaxFileSize))
		}
	}
	now := time.Now()
	if id == "" {
		id = proto.NewRunID(now)
	} else if done, err := s.submitted(id, flowID, bf.stored.Text, values); done || err != nil {
		return id, err
	}
	var assign []string
	if placed != nil {
		assign = placed.assign
	} else {
		if alive, err = placeByFunction(g, alive, offered, Seed(id)); err != nil {
			return "", err
		}
		if assign, err = PlanWith(g, alive, Seed(id), s.cfg.Placement); err != nil {
			return "", invalid(err)
		}
		s.placements.Add(1)
		if cacheable {
			s.flows.placed.Put(pkey, &placedRun{g: g, assign: assign}, max(len(g.Vertices), 1))
		}
	}
	boots := map[string]string{}
	for _, n := range alive {
		boots[n.ID] = n.Boot
	}
	used := map[string]string{}
	nodes, _ := sharedNodesOf(assign) // a placement's again: listed once (lastAssignment); an error (a task of no node) is the FSM's refusal of the run
	for _, n := range nodes {
		used[n] = boots[n]
	}
	run := &Run{ID: id, FlowID: flowID, FlowName: g.Name, Params: values, State: proto.RunRunning, Submitted: now,
		Timeout: g.Timeout, Gen: 1, Assignment: assign, Boots: used}
	for try := 0; ; try++ {
		if err := s.putFlow(bf.stored, false, now); err != nil {
			return "", err
		}
		if rkErr == nil {
			s.flows.putGraph(rk, g) // the leader compiles the nodes' plans from it
		}
		err := s.apply(&Command{Op: OpRunSubmit, Run: run})
		if err == nil {
			return id, nil
		}
		if errors.Is(err, ErrUnknownFlow) && try == 0 {
			continue // pruned between the put and the run (its last run aged out): put it again
		}
		if errors.Is(err, ErrCommand) { // an earlier attempt's entry was applied meanwhile
			if done, err2 := s.submitted(id, flowID, bf.stored.Text, values); done || err2 != nil {
				return id, err2
			}
		}
		return "", err
	}
}

// putFlow commits sf to the registry unless it is there (and, with
// register, registered) already: a flow is stored once however many
// submits and runs name it.
func (s *Server) putFlow(sf StoredFlow, register bool, now time.Time) error {
	have, ok := s.storedFlow(sf.ID)
	switch {
	case ok && (have.Registered || !register):
		return nil
	case ok: // there: registering it takes its id alone (unless pruned meanwhile)
		err := s.apply(&Command{Op: OpFlowPut, Flow: &StoredFlow{ID: sf.ID, Registered: true}})
		if !errors.Is(err, ErrUnknownFlow) {
			return err
		}
	}
	sf.Registered, sf.Stored = register, now
	return s.apply(&Command{Op: OpFlowPut, Flow: &sf})
}

// Prepared keeps f, text parsed by the caller (spec.Parse, under any
// path: errors found later name that one), for a submit of the same text
// under path with params: that submit does not parse the text again. The
// dev command parses its files to check them before it starts its
// cluster, and hands them over so that a run of a big file costs one
// parse, not two. The error is the spec's (a binding refused); a submit
// then reports it.
func (s *Server) Prepared(path string, text []byte, params map[string]any, f *spec.File) error {
	return s.flows.adopt(path, text, params, f)
}

// submitted reports whether run id exists already: with the same flow and
// parameters it is an earlier attempt of this submit (done); with another
// the id is taken (an *InvalidError). text is the flow's stored text (its
// id flowID): an attempt committed by a build that stored flows indented
// (an earlier id for the same flow) is the same flow when its text,
// compacted, is text.
func (s *Server) submitted(id, flowID string, text []byte, values map[string]any) (done bool, err error) {
	r, ok := s.run(id)
	if !ok {
		return false, nil
	}
	a, _ := json.Marshal(r.Params)
	b, _ := json.Marshal(values)
	if (r.FlowID != flowID && !s.sameFlowText(r.FlowID, text)) || !bytes.Equal(a, b) {
		return true, &InvalidError{Problems: []string{fmt.Sprintf("request body: run id %s is taken by another flow", id)}}
	}
	return true, nil
}

// sameFlowText reports whether the registry's flow id holds text in another
// layout (spec.Canonical's compact JSON against an earlier build's
// indented one).
func (s *Server) sameFlowText(id string, text []byte) bool {
	sf, ok := s.storedFlow(id)
	if !ok {
		return false
	}
	var c bytes.Buffer
	return json.Compact(&c, sf.Text) == nil && bytes.Equal(c.Bytes(), text)
}

// handleStatus serves GET /v1/runs/{id} in its forms: the full status
// (no query: the contract's JSON), ?view=summary (RunProgress: tallies and
// a version, no table) and ?since=VERSION (RunDelta: the rows changed after
// it). ?wait=DURATION (at most MaxStatusWait) with ?version=VERSION (or
// ?since's) first waits until the run's status is no longer that version
// (a long poll: how a client follows a run).
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	id, q := r.PathValue("id"), r.URL.Query()
	view, since, version := q.Get("view"), q.Get("since"), q.Get("version")
	if version == "" {
		version = since
	}
	bad := func(msg string) { writeError(w, http.StatusBadRequest, msg, []string{msg}) }
	if view != "" && view != "summary" {
		bad(fmt.Sprintf("view %q: want summary (or none: the full status)", view))
		return
	}
	if view != "" && since != "" {
		bad("view=summary and since: ask for one of them")
		return
	}
	var wait time.Duration
	if ws := q.Get("wait"); ws != "" {
		var err error
		if wait, err = time.ParseDuration(ws); err != nil || wait < 0 {
			bad(fmt.Sprintf("wait %q: want a duration such as 10s", ws))
			return
		}
		wait = min(wait, MaxStatusWait)
	}
	// A summary's long poll answers from the read that saw the change
	// (awaitChange's answer): the tallies and the version of one read.
	var p proto.RunProgress
	var answer func(c *statusCache, r Run)
	if view == "summary" {
		answer = func(c *statusCache, r Run) { p = c.fold.progress(r, c.nv); p.Version = c.version() }
	}
	answered := false
	if wait > 0 && version != "" {
		var err error
		if answered, err = s.awaitChange(r.Context(), id, version, wait, answer); err != nil {
			writeErr(w, err)
			return
		}
	}
	switch {
	case view == "summary":
		if !answered {
			var err error
			if p, err = s.runProgress(r.Context(), id); err != nil {
				writeErr(w, err)
				return
			}
		}
		writeJSON(w, http.StatusOK, p)
	case since != "":
		d, err := s.runDelta(r.Context(), id, since)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, d)
	default:
		b, err := s.statusJSON(r.Context(), id)
		if err != nil {
			writeErr(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
	}
}

// Cancel ends a running run as cancelled (leader only). Cancelling a run
// that already ended changes nothing.
func (s *Server) Cancel(ctx context.Context, id string) (proto.RunStatus, error) {
	if !s.Leader() {
		return proto.RunStatus{}, proto.ErrNotLeader
	}
	r, ok := s.run(id)
	if !ok {
		return proto.RunStatus{}, fmt.Errorf("run %s: %w", id, proto.ErrNotFound)
	}
	if !proto.Finished(r.State) {
		err := s.apply(&Command{Op: OpRunFinish, Finish: &Finish{ID: id, State: proto.RunCancelled, At: time.Now()}})
		if err != nil && !errors.Is(err, ErrCommand) { // ErrCommand: it ended meanwhile
			return proto.RunStatus{}, err
		}
	}
	return s.runStatus(ctx, id)
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	st, err := s.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request) {
	out := []proto.RunSummary{}
	s.fsm.read(func(f *FSM) {
		for _, run := range f.Runs() {
			rs := proto.RunSummary{ID: run.ID, Flow: run.FlowName, State: run.State, Submitted: run.Submitted}
			if !run.Finished.IsZero() {
				t := run.Finished
				rs.Finished = &t
			}
			out = append(out, rs)
		}
	})
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleNodes(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.nodeInfos())
}

// nodeInfos lists the nodes the FSM knows: an alive node memberlist
// suspects is suspect; HTTP is the address in its memberlist metadata.
func (s *Server) nodeInfos() []proto.NodeInfo {
	out := []proto.NodeInfo{}
	s.fsm.read(func(f *FSM) {
		for _, n := range f.Nodes() {
			st := n.State
			m, ok := s.members.Member(n.ID)
			if ok && st == proto.NodeAlive && m.State == proto.NodeSuspect {
				st = proto.NodeSuspect
			}
			ni := proto.NodeInfo{ID: n.ID, Address: n.Address, State: st, CPUs: n.CPUs, GPUs: n.GPUs}
			if ok {
				ni.HTTP = m.Meta.HTTP
			}
			out = append(out, ni)
		}
	})
	return out
}

// Peers lists raft's configuration.
func (s *Server) Peers() ([]proto.PeerInfo, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("coord: raft configuration: %w", err)
	}
	_, leader := s.raft.LeaderWithID()
	out := []proto.PeerInfo{}
	for _, sv := range f.Configuration().Servers {
		p := proto.PeerInfo{ID: string(sv.ID), Raft: string(sv.Address), Suffrage: strings.ToLower(sv.Suffrage.String()), Leader: sv.ID == leader}
		if string(sv.ID) == s.cfg.ID {
			p.HTTP = s.HTTPAddr()
		} else if m, ok := s.members.Member(string(sv.ID)); ok {
			p.HTTP = m.Meta.HTTP
		}
		out = append(out, p)
	}
	return out, nil
}

func (s *Server) handlePeers(w http.ResponseWriter, r *http.Request) {
	ps, err := s.Peers()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ps)
}

// RemovePeer removes a coordinator from raft's configuration (leader only).
// A coordinator the ring still holds alive is refused (the leader would add
// it back): stop it first.
func (s *Server) RemovePeer(id string) error {
	if !s.Leader() {
		return proto.ErrNotLeader
	}
	ps, err := s.Peers()
	if err != nil {
		return err
	}
	found := false
	for _, p := range ps {
		found = found || p.ID == id
	}
	if !found {
		return fmt.Errorf("peer %s: %w", id, proto.ErrNotFound)
	}
	if m, ok := s.members.Member(id); ok && id != s.cfg.ID && (m.State == proto.NodeAlive || m.State == proto.NodeSuspect) {
		return fmt.Errorf("%w: coordinator %s is still alive; stop it first", ErrCommand, id)
	}
	if err := s.raft.RemoveServer(raft.ServerID(id), 0, 5*time.Second).Error(); err != nil {
		return fmt.Errorf("coord: remove peer %s: %w", id, err)
	}
	return nil
}

func (s *Server) handleRemovePeer(w http.ResponseWriter, r *http.Request) {
	if err := s.RemovePeer(r.PathValue("id")); err != nil {
		writeErr(w, err)
		return
	}
	ps, err := s.Peers()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ps)
}

func (s *Server) handleLeader(w http.ResponseWriter, r *http.Request) {
	li, ok := s.leaderInfo()
	if !ok {
		writeError(w, http.StatusServiceUnavailable, "no leader", nil)
		return
	}
	writeJSON(w, http.StatusOK, li)
}

// handleHealth answers 200 when this coordinator can serve the API (Ready)
// and 503 when it cannot; with the token it says who it is, whom it
// follows, and what it waits for.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	ok, why := s.Ready()
	if !s.hasToken(r) {
		if !ok {
			writeError(w, http.StatusServiceUnavailable, "not ready", nil)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return
	}
	li, _ := s.leaderInfo()
	body := map[string]string{"status": "ok", "id": s.cfg.ID, "leader": li.ID, "state": strings.ToLower(s.raft.State().String())}
	code := http.StatusOK
	if !ok {
		body["status"], body["reason"], code = "unavailable", why, http.StatusServiceUnavailable
	}
	writeJSON(w, code, body)
}

// metrics

func (s *Server) initMetrics() {
	s.reg = prometheus.NewRegistry()
	s.http = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hetflow_coord_http_requests_total",
		Help: "API requests by method, route and status code."}, []string{"method", "route", "code"})
	s.drops = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hetflow_messages_dropped_total",
		Help: "Messages from peers dropped undecoded, by subject and reason (malformed, oversized, kind)."}, []string{"subject", "reason"})
	s.refusedMetric = prometheus.NewCounter(prometheus.CounterOpts{Name: "hetflow_verdicts_refused_total",
		Help: "Success verdicts the leader refused because the run's record shows work owed (a protocol bug; see coord.CheckSuccess)."})
	s.deathsMetric = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hetflow_gossip_deaths_total",
		Help: "Nodes gossip declared dead, by what NATS said: confirmed (dead) or refuted (alive, only slow); see coord.Liveness."}, []string{"verdict"})
	s.sentMetric = prometheus.NewCounter(prometheus.CounterOpts{Name: "hetflow_assignments_sent_total",
		Help: "Assignment copies the leader sent to nodes: one per node and generation of a run, and a re-send to a node that acknowledged nothing (see coord.Leader.Ack)."})
	s.reg.MustRegister(s.http, s.drops, s.refusedMetric, s.deathsMetric, s.sentMetric, (*collector)(s), collectors.NewGoCollector())
}

// assignmentSent counts an Assignment copy sent to a node.
func (s *Server) assignmentSent() {
	s.sentMetric.Inc()
	s.sent.Add(1)
}

// AssignmentsSent is how many Assignment copies this server sent to nodes
// while it led (hetflow_assignments_sent_total).
func (s *Server) AssignmentsSent() uint64 { return s.sent.Load() }

// verdictRefused counts a refused success verdict.
func (s *Server) verdictRefused() {
	s.refusedMetric.Inc()
	s.refused.Add(1)
}

// gossipDeath counts a death gossip declared, confirmed or refuted.
func (s *Server) gossipDeath(confirmed bool) {
	v := "refuted"
	if confirmed {
		v = "confirmed"
		s.deathsConfirmed.Add(1)
	} else {
		s.deathsRefuted.Add(1)
	}
	s.deathsMetric.WithLabelValues(v).Inc()
}

// Verdicts reports how many success verdicts this server refused while it
// led (hetflow_verdicts_refused_total), and how many deaths gossip declared
// that NATS confirmed or refuted (hetflow_gossip_deaths_total).
func (s *Server) Verdicts() (refused, deathsConfirmed, deathsRefuted uint64) {
	return s.refused.Load(), s.deathsConfirmed.Load(), s.deathsRefuted.Load()
}

// errWrongKind: a message that decodes but is not what its subject carries.
var errWrongKind = errors.New("coord: wrong message kind for the subject")

// errSender: a message whose sender is not the one its subject names.
var errSender = errors.New("coord: the sender is not the subject's")

// dropped counts a message from a peer the coordinator could not use; the
// leader keeps going.
func (s *Server) dropped(subject string, err error) {
	reason := "malformed"
	switch {
	case errors.Is(err, transport.ErrOversized):
		reason = "oversized"
	case errors.Is(err, errWrongKind):
		reason = "kind"
	case errors.Is(err, errSender):
		reason = "sender"
	}
	s.drops.WithLabelValues(subject, reason).Inc()
	s.dropMu.Lock()
	s.dropCount[subject+" "+reason]++
	s.dropMu.Unlock()
	s.log.Debug("message dropped", "subject", subject, "reason", reason, "err", err)
}

// Dropped is how many messages from peers the coordinator dropped on
// subject for reason (see hetflow_messages_dropped_total).
func (s *Server) Dropped(subject, reason string) uint64 {
	s.dropMu.Lock()
	defer s.dropMu.Unlock()
	return s.dropCount[subject+" "+reason]
}

type collector Server

var (
	descRuns   = prometheus.NewDesc("hetflow_coord_runs", "Runs in the FSM by state.", []string{"state"}, nil)
	descNodes  = prometheus.NewDesc("hetflow_coord_nodes", "Nodes in the FSM by state.", []string{"state"}, nil)
	descRaft   = prometheus.NewDesc("hetflow_coord_raft_state", "1 for this server's raft state.", []string{"state"}, nil)
	descLeader = prometheus.NewDesc("hetflow_coord_leader", "1 when this server is the leader.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRuns
	ch <- descNodes
	ch <- descRaft
	ch <- descLeader
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := (*Server)(c)
	runs := map[string]int{proto.RunPending: 0, proto.RunRunning: 0, proto.RunSucceeded: 0, proto.RunFailed: 0, proto.RunCancelled: 0}
	nodes := map[string]int{proto.NodeAlive: 0, proto.NodeSuspect: 0, proto.NodeDead: 0, proto.NodeLeft: 0}
	s.fsm.read(func(f *FSM) {
		for _, r := range f.Runs() {
			runs[r.State]++
		}
		for _, n := range f.Nodes() {
			nodes[n.State]++
		}
	})
	for st, n := range runs {
		ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(n), st)
	}
	for st, n := range nodes {
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(n), st)
	}
	state := raft.Shutdown
	if s.raft != nil {
		state = s.raft.State()
	}
	for _, st := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if st == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descRaft, prometheus.GaugeValue, v, strings.ToLower(st.String()))
	}
	v := 0.0
	if state == raft.Leader {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, v)
}
