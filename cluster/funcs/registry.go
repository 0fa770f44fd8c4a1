package funcs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/topo"
)

// Errors of the registry and the built-ins, matched with errors.Is.
var (
	ErrUnknown   = errors.New("funcs: unknown function")
	ErrDuplicate = errors.New("funcs: function registered twice")
	ErrBadEntry  = errors.New("funcs: bad registration")
	ErrBadArg    = errors.New("funcs: bad argument")
	ErrFailed    = errors.New("funcs: task failed")
	ErrNoGPU     = errors.New("funcs: no GPU body")
	ErrBadResult = errors.New("funcs: bad result")
)

// MaxOutput is the largest output a task may produce: what the cluster
// carries in one task event or edge Signal (transport.DefaultLimits
// .MaxOutput). Invoke fails a function that returns more, so the task
// fails with that reason (and retries: apply) instead of the output being
// refused on the wire.
const MaxOutput = 8 << 20

// Func is a registered function body. It must honour ctx (cancelled when the
// run is cancelled or times out) and be idempotent: the runtime may call it
// again for the same activation after a failure.
type Func func(ctx context.Context, c *Call) (Result, error)

// Call is what a function gets for one execution of one activation.
type Call struct {
	Run  string // the run's id (for logs); may be empty
	Task string // the task's name as its flow declares it (what hash and coin use)
	Path string // the task's path in the expanded graph ("module/task"); Task at the top level
	// Args are the task's arguments from the flow file.
	Args Args
	// Inputs maps each strong predecessor's declared name to the output of its
	// latest activation at the time this task runs (nil for a predecessor
	// without output; absent for one that has not run). Nil for a function
	// registered with Entry.NoInputs.
	Inputs map[string][]byte
	// Activation counts how many times the graph asked this task to run in
	// this run, this one included: 1 for the first. Loop iterations and
	// re-activations of an enclosing module count; retries do not.
	Activation uint64
	// Attempt is 0 for the first execution of this activation and grows by one
	// on every re-execution (retries, re-runs after a lost node).
	Attempt int
	// Domain and Device tell where the task runs (Device only for gpu).
	Domain spec.Domain
	Device int
	// State is the Result.State the task's previous activation in this run
	// returned (nil on the first activation, or when it returned none).
	// Nil for a function registered with Entry.NoInputs.
	State []byte
}

// Result is what a function returns.
type Result struct {
	// Output is the task's output bytes (nil: none). Condition, multicondition
	// and subflow tasks produce none (docs/design.md, "The contract"): the runtime drops theirs.
	Output []byte
	// Choice is a condition's answer: the index into its precede list of the
	// successor to run; out of range runs nothing.
	Choice int
	// Choices is a multicondition's answer: indices into its precede list;
	// out of range ones are ignored.
	Choices []int
	// Children is a subflow's answer: the static tasks to spawn (see Child).
	Children []Child
	// State is per-run state for this task's next activation, handed back as
	// Call.State. The runtime records it with the activation's outcome (as it
	// records condition outcomes), so a task replayed or moved to another node
	// after a failure continues from the same state and gives the same
	// answers. The built-in loop keeps its counter here.
	State []byte

	// The padding makes a Result 112 bytes, seven 16-byte moves: at 104
	// the compiler's copies and zeroing wrote its last 16 bytes over the
	// 16 before, and the copy after one of them loaded 16 bytes from two
	// stores, which waits for both to reach the cache (a store is
	// forwarded to a load it holds whole). A call's Result is copied at
	// least once; a no-op's call through Bound.InvokeTo took 23 ns
	// instead of 15 (BenchmarkBoundNoop).
	_ [8]byte
}

// Child is one task a subflow function spawns. The node turns the children
// into a localexec Subflow of the subflow task: one static task per child,
// named "parent/child" in status, running the registered function Func with
// Args and with the outputs of the children named in Succeed as inputs; the
// subflow joins its parent (the parent's successors wait for every child).
// A child's Call has the parent's Run and Activation, Task = Name,
// Path = parent's path + "/" + Name.
type Child struct {
	Name    string
	Func    string
	Args    Args
	Succeed []string
}

// Entry is one registered function.
type Entry struct {
	Name string
	// Kind is the task kind the function serves: static, condition,
	// multicondition or subflow ("" means static).
	Kind spec.Kind
	// CPU is the body on a CPU worker; nil for a GPU-only function.
	CPU Func
	// GPU is the host body for tasks with domain gpu, run on a CPU worker
	// with Call.Device naming the task's device; nil when the function has
	// none. It serves where Graph is nil. SetGPU sets it later.
	GPU Func
	// Graph is the device implementation for tasks with domain gpu (see
	// GPUGraph): the node builds it into the task's GPU graph and launches
	// it on the device. nil: the task runs its GPU body (else its CPU body)
	// on a CPU worker. SetGPUGraph sets it later.
	Graph GPUGraph
	// Check, when set, validates a task's arguments before anything runs
	// (spec validation calls it through the Catalog).
	Check func(args Args) error
	// Doc is one line for listings (`node funcs`, `coordinator funcs`).
	Doc string
	// Args is the argument schema the node's catalog advertises (optional):
	// a coordinator without the function's code checks tasks against it.
	// Check, when set, stays the full check where the code is (a coordinator
	// built with it, validate and dev of the node's own binary).
	Args []Arg
	// NoInputs declares that the function's bodies read neither
	// Call.Inputs nor Call.State: the node then leaves both nil rather
	// than gather them for every activation (a map of its predecessors'
	// outputs), and keeps no Result.State of it. Leave it false for a
	// function that reads either; set it only where neither is read.
	NoInputs bool
	// Transient declares that the function's bodies keep neither the *Call
	// they are given nor its Inputs map once they return, and hand neither
	// to work that outlives the call (a goroutine, an error, a panic value
	// or a result that points into it; copying a field's value out is fine: Args, the
	// strings, Inputs' byte slices and State stay valid). The node then
	// reuses Calls from one activation to the next rather than allocate
	// one each. Without it a function may keep its Call as long as it
	// likes. A Transient function that keeps its Call anyway reads, once
	// it has returned, what Release wrote (Activation 0, Task and Path
	// Released) or, later, another activation's Call; the race detector
	// may report a read of it from elsewhere. The built-ins are Transient.
	Transient bool
}

// Released is what Task, Path and Run of a Call read once the node has
// taken it back from a Transient function (Release).
const Released = "funcs: this Call was taken back when its function returned (Entry.Transient)"

// Release overwrites c, a Call a Transient function has returned from, so
// that a function that kept it against its word reads Released and
// Activation 0 (which no activation has) rather than a live activation's
// values, and drops what c pointed to.
func Release(c *Call) {
	// Field by field: a composite literal is built on the stack and copied
	// 16 bytes at a time from its 8-byte stores, which stalls the copy.
	c.Run, c.Task, c.Path = Released, Released, Released
	c.Args, c.Inputs, c.State, c.Domain = nil, nil, nil, ""
	c.Activation, c.Attempt, c.Device = 0, 0, 0
}

// Registry maps function names to entries. It is safe for concurrent use;
// register at start-up, look up while running.
type Registry struct {
	mu      sync.RWMutex
	entries map[string]*Entry
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{entries: map[string]*Entry{}} }

// Default returns a new registry holding the built-ins (see the package doc).
// Each call returns a fresh registry, so a node binary extends its own.
func Default() *Registry {
	r := NewRegistry()
	for _, e := range builtins() {
		if err := r.Register(e); err != nil {
			panic(err) // the built-ins are fixed; a failure is a bug here
		}
	}
	return r
}

// Clone returns a registry with the same entries, to extend without
// changing r.
func (r *Registry) Clone() *Registry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c := &Registry{entries: make(map[string]*Entry, len(r.entries))}
	for k, e := range r.entries {
		c.entries[k] = e
	}
	return c
}

// Register adds an entry.
func (r *Registry) Register(e Entry) error {
	if e.Name == "" || strings.ContainsAny(e.Name, " \t\n/") {
		return fmt.Errorf("%w: name %q", ErrBadEntry, e.Name)
	}
	e.Kind = e.Kind.Or()
	switch e.Kind {
	case spec.KindStatic, spec.KindCondition, spec.KindMultiCondition, spec.KindSubflow:
	default:
		return fmt.Errorf("%w: function %q: kind %q cannot be registered (module tasks run flows)", ErrBadEntry, e.Name, e.Kind)
	}
	if e.CPU == nil && e.GPU == nil && e.Graph == nil {
		return fmt.Errorf("%w: function %q has no body", ErrBadEntry, e.Name)
	}
	if (e.GPU != nil || e.Graph != nil) && e.Kind != spec.KindStatic {
		return fmt.Errorf("%w: function %q: only static functions have GPU bodies", ErrBadEntry, e.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.entries[e.Name]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicate, e.Name)
	}
	r.entries[e.Name] = &e
	return nil
}

// MustRegister is Register that panics on error.
func (r *Registry) MustRegister(e Entry) {
	if err := r.Register(e); err != nil {
		panic(err)
	}
}

// SetGPU attaches (or replaces) the GPU body of a registered static
// function. The entry is no longer Transient: the new body made no such
// promise (a host body handing its Call to device work may keep it).
func (r *Registry) SetGPU(name string, fn Func) error {
	return r.setGPU(name, func(e *Entry) { e.GPU, e.Transient = fn, false })
}

// setGPU changes a copy of a registered static function's entry with set
// and registers the copy in its place.
func (r *Registry) setGPU(name string, set func(*Entry)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[name]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknown, name)
	}
	if e.Kind != spec.KindStatic {
		return fmt.Errorf("%w: function %q: only static functions have GPU bodies", ErrBadEntry, name)
	}
	c := *e
	set(&c)
	r.entries[name] = &c
	return nil
}

// Lookup returns the entry registered under name.
func (r *Registry) Lookup(name string) (Entry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[name]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.entries))
	for n := range r.entries {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Func implements spec.Catalog, so a registry validates flow files.
func (r *Registry) Func(name string) (spec.FuncInfo, bool) {
	e, ok := r.Lookup(name)
	if !ok {
		return spec.FuncInfo{}, false
	}
	info := spec.FuncInfo{Kind: e.Kind, CPU: e.CPU != nil, GPU: e.GPU != nil || e.Graph != nil}
	if e.Check != nil {
		check := e.Check
		info.CheckArgs = func(args map[string]any) error {
			err := check(Args(args))
			var ae *ArgError
			if errors.As(err, &ae) {
				return &bareArgError{ae}
			}
			return err
		}
	}
	return info, true
}

// Body returns the body of name for a domain ("" is cpu).
func (r *Registry) Body(name string, domain spec.Domain) (Func, spec.Kind, error) {
	e, ok := r.Lookup(name)
	if !ok {
		return nil, "", fmt.Errorf("%w %q", ErrUnknown, name)
	}
	if domain.Or() == spec.DomainGPU {
		if e.GPU == nil {
			return nil, e.Kind, fmt.Errorf("%w: function %q", ErrNoGPU, name)
		}
		return e.GPU, e.Kind, nil
	}
	if e.CPU == nil {
		return nil, e.Kind, fmt.Errorf("%w: function %q has no CPU body", ErrBadEntry, name)
	}
	return e.CPU, e.Kind, nil
}

// Invoke runs function name for c: it picks the body for c.Domain, returns
// ctx's error without calling it when ctx is already done, names the task in
// errors (an *ArgError gets its Task set), and checks the result against the
// function's kind: outputs of non-static functions are dropped, a subflow's
// children are checked with CheckChildren. Panics are not recovered: the
// executor running the task turns them into its PanicError.
func (r *Registry) Invoke(ctx context.Context, name string, c *Call) (Result, error) {
	fn, kind, err := r.Body(name, c.Domain)
	if err != nil {
		return Result{}, fmt.Errorf("task %q: %w", c.Task, err)
	}
	var res Result
	err = r.invoke(ctx, fn, kind, c, &res)
	return res, err
}

// Bound is a function's body for one domain, looked up once (Bind) and
// invoked as Registry.Invoke would, without a lookup per call: a node binds
// each task's function when it builds the task. A body registered or
// replaced (SetGPU, SetGPUGraph) after the bind is not seen by it: register
// at start-up.
type Bound struct {
	r         *Registry
	fn        Func
	kind      spec.Kind
	noInputs  bool
	transient bool
}

// Bind looks up the body of name for domain ("" is cpu), as Invoke does.
func (r *Registry) Bind(name string, domain spec.Domain) (*Bound, error) {
	fn, kind, err := r.Body(name, domain)
	if err != nil {
		return nil, err
	}
	e, _ := r.Lookup(name)
	return &Bound{r: r, fn: fn, kind: kind, noInputs: e.NoInputs, transient: e.Transient}, nil
}

// NoInputs is the function's Entry.NoInputs.
func (b *Bound) NoInputs() bool { return b.noInputs }

// Transient is the function's Entry.Transient.
func (b *Bound) Transient() bool { return b.transient }

// Invoke runs the bound body for c as Registry.Invoke runs it.
func (b *Bound) Invoke(ctx context.Context, c *Call) (Result, error) {
	var res Result
	err := b.r.invoke(ctx, b.fn, b.kind, c, &res)
	return res, err
}

// InvokeTo runs the bound body for c as Invoke does and leaves its Result
// in *res (Result{} on an error): the node's activation passes one Result
// of its own frame down its frames instead of returning a Result by value
// through each of them (a copy a frame).
func (b *Bound) InvokeTo(ctx context.Context, c *Call, res *Result) error {
	return b.r.invoke(ctx, b.fn, b.kind, c, res)
}

// invoke runs fn for c into *res. Its common end (no error, a static
// function's result within MaxOutput) is the short path: the errors'
// formatting and the other kinds' checks are in invokeEnd, out of this
// frame (its size, its stack slots cleared on every call).
func (r *Registry) invoke(ctx context.Context, fn Func, kind spec.Kind, c *Call, res *Result) error {
	if err := ctx.Err(); err != nil {
		*res = Result{}
		return taskErr(c, err)
	}
	// Straight into *res: the compiler copies a call's Result once
	// whatever is done with it (see Result's padding), and this is the
	// one copy more; no frame between here and the node's wrapper
	// copies it again.
	var err error
	*res, err = fn(ctx, c)
	if err == nil && kind == spec.KindStatic && len(res.Output) <= MaxOutput {
		if res.Choice != 0 || res.Choices != nil || res.Children != nil {
			res.Choice, res.Choices, res.Children = 0, nil, nil // a static function answers none
		}
		return nil
	}
	return r.invokeEnd(kind, c, res, err)
}

// taskErr names c's task in err.
//
//go:noinline
func taskErr(c *Call, err error) error { return fmt.Errorf("task %q: %w", c.Task, err) }

// invokeEnd is invoke's end for a function's error, a result over
// MaxOutput and the kinds other than static.
//
//go:noinline
func (r *Registry) invokeEnd(kind spec.Kind, c *Call, res *Result, err error) error {
	if err != nil {
		*res = Result{}
		var ae *ArgError
		if errors.As(err, &ae) && ae.Task == "" {
			ae.Task = c.Task
			return err
		}
		return taskErr(c, err)
	}
	switch kind {
	case spec.KindStatic:
		res.Choice, res.Choices, res.Children = 0, nil, nil
		if len(res.Output) > MaxOutput {
			n := len(res.Output)
			*res = Result{}
			return fmt.Errorf("task %q: %w: output of %d bytes, over the limit of %d (%d MiB) a task output may be; write large data elsewhere and output its name", c.Task, ErrBadResult, n, MaxOutput, MaxOutput>>20)
		}
	case spec.KindCondition:
		res.Output, res.Choices, res.Children = nil, nil, nil
	case spec.KindMultiCondition:
		res.Output, res.Choice, res.Children = nil, 0, nil
	case spec.KindSubflow:
		res.Output, res.Choice, res.Choices = nil, 0, nil
		if err := r.CheckChildren(res.Children); err != nil {
			*res = Result{}
			return taskErr(c, err)
		}
	}
	return nil
}

// CheckChildren checks a subflow's children: unique names without '/',
// registered static functions with a CPU body, Succeed naming earlier or
// later children, no cycle.
func (r *Registry) CheckChildren(children []Child) error {
	idx := make(map[string]int, len(children))
	for i, ch := range children {
		if ch.Name == "" || strings.Contains(ch.Name, "/") {
			return fmt.Errorf("%w: child #%d has a bad name %q", ErrBadResult, i+1, ch.Name)
		}
		if _, dup := idx[ch.Name]; dup {
			return fmt.Errorf("%w: child %q appears twice", ErrBadResult, ch.Name)
		}
		idx[ch.Name] = i
		e, ok := r.Lookup(ch.Func)
		if !ok {
			return fmt.Errorf("%w: child %q: unknown function %q", ErrBadResult, ch.Name, ch.Func)
		}
		if e.Kind != spec.KindStatic || e.CPU == nil {
			return fmt.Errorf("%w: child %q: function %q is not a static CPU function", ErrBadResult, ch.Name, ch.Func)
		}
		if e.Check != nil {
			if err := e.Check(ch.Args); err != nil {
				return fmt.Errorf("%w: child %q: %w", ErrBadResult, ch.Name, err)
			}
		}
	}
	// A topological order of the Succeed edges finds unknown names and cycles.
	succ := make([][]int, len(children))
	for i, ch := range children {
		for _, p := range ch.Succeed {
			j, ok := idx[p]
			if !ok {
				return fmt.Errorf("%w: child %q succeeds unknown child %q", ErrBadResult, ch.Name, p)
			}
			succ[j] = append(succ[j], i)
		}
	}
	if _, ok := topo.Order(succ); !ok {
		return fmt.Errorf("%w: the children's succeed lists form a cycle", ErrBadResult)
	}
	return nil
}
