package spec

import (
	"fmt"
	"math"
	"reflect"
	"time"
)

// FlowBuilder builds a Flow in Go; Build gives the same Flow the flow file
// would. Tasks are kept in the order they are created.
//
//	b := spec.NewFlow("demo")
//	init := b.Task("init").Func("hash")
//	body := b.Task("body").Func("spin").Arg("us", 200).Succeed(init)
//	cond := b.Condition("cond").Func("loop").Arg("n", 10).Succeed(body)
//	done := b.Task("done").Func("hash")
//	cond.Precede(body, done)
//	f, err := b.Build()
type FlowBuilder struct {
	flow  Flow
	tasks []*TaskBuilder
	errs  []*Error
}

// TaskBuilder sets the fields of one task; every method returns it for chaining.
type TaskBuilder struct {
	b *FlowBuilder
	t Task
}

// NewFlow starts a flow.
func NewFlow(name string) *FlowBuilder { return &FlowBuilder{flow: Flow{Name: name}} }

// Timeout sets the flow's run timeout.
func (b *FlowBuilder) Timeout(d time.Duration) *FlowBuilder { b.flow.Timeout = d; return b }

// Task adds a static task.
func (b *FlowBuilder) Task(name string) *TaskBuilder {
	tb := &TaskBuilder{b: b, t: Task{Name: name}}
	b.tasks = append(b.tasks, tb)
	return tb
}

// Condition adds a condition task.
func (b *FlowBuilder) Condition(name string) *TaskBuilder { return b.Task(name).Kind(KindCondition) }

// MultiCondition adds a multi-condition task.
func (b *FlowBuilder) MultiCondition(name string) *TaskBuilder {
	return b.Task(name).Kind(KindMultiCondition)
}

// Subflow adds a subflow task.
func (b *FlowBuilder) Subflow(name string) *TaskBuilder { return b.Task(name).Kind(KindSubflow) }

// Module adds a module task running the named flow.
func (b *FlowBuilder) Module(name, flow string) *TaskBuilder {
	tb := b.Task(name).Kind(KindModule)
	tb.t.Flow = flow
	return tb
}

// Kind sets the task's kind.
func (tb *TaskBuilder) Kind(k Kind) *TaskBuilder { tb.t.Kind = k; return tb }

// Func sets the registered function.
func (tb *TaskBuilder) Func(name string) *TaskBuilder { tb.t.Func = name; return tb }

// Arg sets one argument. Values may be nil, bool, any integer or float type,
// string, and slices and string-keyed maps of those; they are stored as the
// parser would store them (int64, uint64, float64, []any, map[string]any).
func (tb *TaskBuilder) Arg(key string, value any) *TaskBuilder {
	v, err := normalize(value, 0)
	if err != nil {
		tb.b.errs = append(tb.b.errs, &Error{Flow: tb.b.flow.Name, Task: tb.t.Name, Field: "args", Msg: fmt.Sprintf("argument %q: %v", key, err), Kind: ErrBadValue})
		return tb
	}
	if tb.t.Args == nil {
		tb.t.Args = map[string]any{}
	}
	tb.t.Args[key] = v
	return tb
}

// Args sets several arguments (see Arg).
func (tb *TaskBuilder) Args(args map[string]any) *TaskBuilder {
	for k, v := range args {
		tb.Arg(k, v)
	}
	return tb
}

// Succeed adds strong predecessors.
func (tb *TaskBuilder) Succeed(preds ...*TaskBuilder) *TaskBuilder {
	for _, p := range preds {
		tb.t.Succeed = append(tb.t.Succeed, p.t.Name)
	}
	return tb
}

// Precede adds successors, in order (the order a condition's index selects).
func (tb *TaskBuilder) Precede(succs ...*TaskBuilder) *TaskBuilder {
	for _, s := range succs {
		tb.t.Precede = append(tb.t.Precede, s.t.Name)
	}
	return tb
}

// Domain sets the domain.
func (tb *TaskBuilder) Domain(d Domain) *TaskBuilder { tb.t.Domain = d; return tb }

// GPU sets domain gpu and, when device >= 0, the device.
func (tb *TaskBuilder) GPU(device int) *TaskBuilder {
	tb.t.Domain = DomainGPU
	if device >= 0 {
		tb.t.Device = &device
	}
	return tb
}

// Node pins the task to a node.
func (tb *TaskBuilder) Node(id string) *TaskBuilder { tb.t.Node = id; return tb }

// Retries sets how often an application error re-runs the task.
func (tb *TaskBuilder) Retries(n int) *TaskBuilder { tb.t.Retries = n; return tb }

// Timeout sets the per-activation timeout.
func (tb *TaskBuilder) Timeout(d time.Duration) *TaskBuilder { tb.t.Timeout = d; return tb }

// Name returns the task's name.
func (tb *TaskBuilder) Name() string { return tb.t.Name }

// Build returns the flow, validated alone (Flow.Validate: every rule except
// module references, which File.Validate checks).
func (b *FlowBuilder) Build() (*Flow, error) {
	fl := b.flow
	fl.Tasks = make([]Task, len(b.tasks))
	for i, tb := range b.tasks {
		fl.Tasks[i] = tb.t
		fl.Tasks[i].Args = cloneArgs(tb.t.Args)
		fl.Tasks[i].Succeed = append([]string(nil), tb.t.Succeed...)
		fl.Tasks[i].Precede = append([]string(nil), tb.t.Precede...)
		if tb.t.Device != nil {
			d := *tb.t.Device
			fl.Tasks[i].Device = &d
		}
	}
	c := &collector{}
	for _, e := range b.errs {
		c.add(e)
	}
	validateFlow(c, &fl, nil, Options{})
	if err := c.result(); err != nil {
		return nil, err
	}
	return &fl, nil
}

// MustBuild is Build that panics on error, for tests and examples.
func (b *FlowBuilder) MustBuild() *Flow {
	f, err := b.Build()
	if err != nil {
		panic(err)
	}
	return f
}

// NewFile assembles flows (the first is the one run) into a File and
// validates it with opts.
func NewFile(opts Options, flows ...*Flow) (*File, error) {
	f := &File{}
	for _, fl := range flows {
		f.Flows = append(f.Flows, *fl)
	}
	if err := f.Validate(opts); err != nil {
		return nil, err
	}
	return f, nil
}

func cloneArgs(m map[string]any) map[string]any {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = cloneValue(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = cloneValue(e)
		}
		return out
	}
	return v
}

func normalize(v any, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	if v == nil {
		return nil, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Bool:
		return rv.Bool(), nil
	case reflect.String:
		return rv.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		u := rv.Uint()
		if u <= math.MaxInt64 {
			return int64(u), nil
		}
		return u, nil
	case reflect.Float32, reflect.Float64:
		f := rv.Float()
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("infinite or NaN number")
		}
		return f, nil
	case reflect.Slice, reflect.Array:
		out := make([]any, rv.Len())
		for i := range out {
			e, err := normalize(rv.Index(i).Interface(), depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map keys must be strings, not %s", rv.Type().Key())
		}
		out := make(map[string]any, rv.Len())
		it := rv.MapRange()
		for it.Next() {
			e, err := normalize(it.Value().Interface(), depth+1)
			if err != nil {
				return nil, err
			}
			out[it.Key().String()] = e
		}
		return out, nil
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil, nil
		}
		return normalize(rv.Elem().Interface(), depth+1)
	}
	return nil, fmt.Errorf("unsupported type %T", v)
}
