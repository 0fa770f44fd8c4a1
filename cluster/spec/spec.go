package spec

import (
	"slices"
	"time"
)

// Kind is what a task does with its function: run it (static), branch on it
// (condition, multicondition), spawn children from it (subflow), or run another
// flow in place (module).
type Kind string

// The task kinds of a flow file. The empty Kind means KindStatic.
const (
	KindStatic         Kind = "static"
	KindCondition      Kind = "condition"
	KindMultiCondition Kind = "multicondition"
	KindSubflow        Kind = "subflow"
	KindModule         Kind = "module"
)

// Kinds lists every kind in the order the flow file documents them.
var Kinds = []Kind{KindStatic, KindCondition, KindMultiCondition, KindSubflow, KindModule}

// Or returns k, or KindStatic when k is empty.
func (k Kind) Or() Kind {
	if k == "" {
		return KindStatic
	}
	return k
}

// Valid reports whether k is empty or one of Kinds.
func (k Kind) Valid() bool { return k == "" || slices.Contains(Kinds, k) }

// IsCondition reports whether k is condition or multicondition: the kinds
// whose out-edges are weak.
func (k Kind) IsCondition() bool { return k == KindCondition || k == KindMultiCondition }

// Domain is where a task runs. The empty Domain means DomainCPU.
type Domain string

// The domains of a flow file.
const (
	DomainCPU Domain = "cpu"
	DomainGPU Domain = "gpu"
)

// Or returns d, or DomainCPU when d is empty.
func (d Domain) Or() Domain {
	if d == "" {
		return DomainCPU
	}
	return d
}

// Valid reports whether d is empty, cpu or gpu.
func (d Domain) Valid() bool { return d == "" || d == DomainCPU || d == DomainGPU }

// File is a parsed flow file: one flow, or several under `flows:`. The first
// flow is the one a submission runs; the others can be composed by module tasks.
type File struct {
	// Path is the name the file was read under; it prefixes error messages.
	Path  string
	Flows []Flow
}

// Root returns the flow that runs (the first), or nil for a file without flows.
func (f *File) Root() *Flow {
	if f == nil || len(f.Flows) == 0 {
		return nil
	}
	return &f.Flows[0]
}

// Flow returns the flow with the given name, or nil.
func (f *File) Flow(name string) *Flow {
	for i := range f.Flows {
		if f.Flows[i].Name == name {
			return &f.Flows[i]
		}
	}
	return nil
}

// Flow is one serializable taskflow.
type Flow struct {
	Name    string
	Timeout time.Duration // for the whole run; 0: none
	Params  []Param       // the first flow only: parameters a submission fills, in declaration order
	Tasks   []Task

	pos *position
}

// Task returns the task with the given name, or nil.
func (f *Flow) Task(name string) *Task {
	for i := range f.Tasks {
		if f.Tasks[i].Name == name {
			return &f.Tasks[i]
		}
	}
	return nil
}

// Sources returns the names of the tasks that have no predecessor at all,
// strong or weak, in declaration order: the tasks a run starts with.
func (f *Flow) Sources() []string {
	hasPred := map[string]bool{}
	for _, t := range f.Tasks {
		if len(t.Succeed) > 0 {
			hasPred[t.Name] = true
		}
		for _, s := range t.Precede {
			hasPred[s] = true
		}
	}
	var out []string
	for _, t := range f.Tasks {
		if !hasPred[t.Name] {
			out = append(out, t.Name)
		}
	}
	return out
}

// Task is one task of a flow, as the flow file writes it.
type Task struct {
	Name    string
	Kind    Kind           // "" means static
	Func    string         // the registered function (not for modules)
	Args    map[string]any // free-form arguments; values are nil, bool, int64, uint64, float64, string, []any, map[string]any
	Succeed []string       // strong predecessors
	Precede []string       // ordered successors (weak when the task is a condition)
	Flow    string         // module tasks: the flow of the same file to run
	Domain  Domain         // "" means cpu
	Device  *int           // optional GPU device (domain gpu only)
	Node    string         // optional node pin
	Retries int            // re-runs on an application error
	Timeout time.Duration  // per activation; 0: none

	pos *position
}

// NodeRes is what one node of the cluster offers.
type NodeRes struct {
	CPUs int
	GPUs int
}

// Resources describes the cluster a flow is validated against. Validation
// without Resources skips the node and GPU checks.
type Resources struct {
	Nodes map[string]NodeRes
}

// FuncInfo is what validation needs to know about a registered function.
type FuncInfo struct {
	// Kind is the task kind the function serves (static, condition,
	// multicondition or subflow); empty accepts any kind.
	Kind Kind
	// CPU and GPU tell the domains the function has a body for.
	CPU, GPU bool
	// CheckArgs, when set, checks a task's arguments before anything runs.
	// Its error message should name the argument, e.g. `"us" must be a
	// non-negative integer, got "abc"`.
	CheckArgs func(args map[string]any) error
}

// Catalog is the set of functions a flow may name: the registry of the nodes
// (funcs.Registry implements it).
type Catalog interface {
	Func(name string) (FuncInfo, bool)
}

// CatalogFunc adapts a name predicate to a Catalog that accepts any kind and
// domain.
type CatalogFunc func(name string) bool

// Func implements Catalog.
func (c CatalogFunc) Func(name string) (FuncInfo, bool) {
	if c(name) {
		return FuncInfo{CPU: true, GPU: true}, true
	}
	return FuncInfo{}, false
}

// Options tune Validate. The zero Options check structure only.
type Options struct {
	// Funcs, when set, is checked for every func a task names (existence,
	// kind, domain, arguments).
	Funcs Catalog
	// Resources, when set, is checked for node pins and GPU requests.
	Resources *Resources

	params bool // the file declares parameters: arguments holding "${" are checked once bound
}

// position records where a flow or task was written, for error messages.
type position struct {
	line   int
	fields map[string]int   // field -> line of its value
	items  map[string][]int // list field -> line of each item
	keys   map[string]int   // args key -> line
}

// setItems records the lines of a list field's items.
func (p *position) setItems(field string, lines []int) {
	if p.items == nil {
		p.items = map[string][]int{}
	}
	p.items[field] = lines
}

func (p *position) field(name string) int {
	if p == nil {
		return 0
	}
	if l, ok := p.fields[name]; ok {
		return l
	}
	return p.line
}

func (p *position) item(name string, i int) int {
	if p == nil {
		return 0
	}
	if l := p.items[name]; i < len(l) {
		return l[i]
	}
	return p.field(name)
}
