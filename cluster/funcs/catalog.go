package funcs

import (
	"fmt"
	"sort"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
)

// Arg is one argument of a function's schema (Entry.Args), which goes out
// in the node's catalog so that a coordinator that does not have the
// function's Go code checks a task's arguments: every argument must be one
// of the schema's, of its type, and the required ones given.
type Arg struct {
	Name string
	// Type is string, int, float, bool, list, map or any ("" is any).
	Type     string
	Required bool
	Doc      string
}

// Catalog lists the registry's functions as a node advertises them.
func (r *Registry) Catalog() proto.Catalog {
	var c proto.Catalog
	for _, name := range r.Names() {
		e, _ := r.Lookup(name)
		fi := proto.FuncInfo{Name: name, Kind: string(e.Kind.Or()), Doc: e.Doc}
		if e.CPU != nil {
			fi.Domains = append(fi.Domains, string(spec.DomainCPU))
		}
		if e.GPU != nil || e.Graph != nil {
			fi.Domains = append(fi.Domains, string(spec.DomainGPU))
		}
		for _, a := range e.Args {
			t := a.Type
			if t == "" {
				t = "any"
			}
			fi.Args = append(fi.Args, proto.ArgInfo{Name: a.Name, Type: t, Required: a.Required, Doc: a.Doc})
		}
		c.Funcs = append(c.Funcs, fi)
	}
	return c
}

// Offered is what a cluster's live nodes offer: the union of their
// catalogs, as the spec.Catalog a flow is validated against, and which
// nodes have each function, for placing tasks.
type Offered struct {
	funcs   map[string]proto.FuncInfo
	holders map[string][]string
	nodes   []string
	builtin []string     // nodes that advertise no catalog: they have known's functions
	known   spec.Catalog // functions this process has the code (the checks) of
}

// NewOffered builds the union of the nodes' catalogs. known, when set, is
// a catalog this process has the code of (the coordinator's built-ins): its
// argument checks are used for the functions it has (others are checked
// against their schema), and a node marked Builtin has its functions.
func NewOffered(nodes []proto.NodeFuncs, known spec.Catalog) *Offered {
	o := &Offered{funcs: map[string]proto.FuncInfo{}, holders: map[string][]string{}, known: known}
	for _, n := range nodes {
		o.nodes = append(o.nodes, n.Node)
		if n.Builtin {
			o.builtin = append(o.builtin, n.Node)
			continue
		}
		for _, f := range n.Funcs {
			if _, ok := o.funcs[f.Name]; !ok {
				o.funcs[f.Name] = f
			}
			o.holders[f.Name] = append(o.holders[f.Name], n.Node)
		}
	}
	sort.Strings(o.nodes)
	return o
}

// Holders returns the nodes that have function name, sorted.
func (o *Offered) Holders(name string) []string {
	h := append([]string(nil), o.holders[name]...)
	if len(o.builtin) > 0 && o.known != nil {
		if _, ok := o.known.Func(name); ok {
			h = append(h, o.builtin...)
		}
	}
	sort.Strings(h)
	return h
}

// Nodes returns every node of the union, sorted.
func (o *Offered) Nodes() []string { return o.nodes }

// Func implements spec.Catalog.
func (o *Offered) Func(name string) (spec.FuncInfo, bool) {
	var k spec.FuncInfo
	kok := false
	if o.known != nil {
		k, kok = o.known.Func(name)
	}
	f, ok := o.funcs[name]
	if !ok {
		if kok && len(o.builtin) > 0 {
			return k, true
		}
		return spec.FuncInfo{}, false
	}
	info := spec.FuncInfo{Kind: spec.Kind(f.Kind)}
	for _, d := range f.Domains {
		switch spec.Domain(d) {
		case spec.DomainCPU:
			info.CPU = true
		case spec.DomainGPU:
			info.GPU = true
		}
	}
	switch {
	case kok && k.CheckArgs != nil:
		info.CheckArgs = k.CheckArgs
	case len(f.Args) > 0:
		schema := f.Args
		info.CheckArgs = func(args map[string]any) error { return checkSchema(schema, Args(args)) }
	}
	return info, true
}

// checkSchema checks arguments against a function's schema.
func checkSchema(schema []proto.ArgInfo, a Args) error {
	names := make([]string, len(schema))
	for i, s := range schema {
		names[i] = s.Name
	}
	if err := a.Only(names...); err != nil {
		return &bareArgError{err.(*ArgError)}
	}
	for _, s := range schema {
		v, ok := a[s.Name]
		if !ok || v == nil {
			if s.Required {
				return &bareArgError{&ArgError{Arg: s.Name, Msg: "is required"}}
			}
			continue
		}
		var err error
		switch s.Type {
		case "string":
			_, err = a.String(s.Name, "")
		case "int":
			_, err = a.Int(s.Name, 0)
		case "float":
			_, err = a.Float(s.Name, 0)
		case "bool":
			_, err = a.Bool(s.Name, false)
		case "list":
			if _, ok := v.([]any); !ok {
				err = argErr(s.Name, "a list", v)
			}
		case "map":
			if _, ok := v.(map[string]any); !ok {
				err = argErr(s.Name, "a map", v)
			}
		case "any", "":
		default:
			return fmt.Errorf("%w: argument %q has an unknown schema type %q", ErrBadEntry, s.Name, s.Type)
		}
		if ae, ok := err.(*ArgError); ok {
			return &bareArgError{ae}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
