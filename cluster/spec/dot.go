package spec

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Dump writes the file's first flow, modules expanded, as a Graphviz DOT
// graph: a box per task labelled with its name and kind (and function, flow,
// domain, node pin), diamonds for conditions, dashed edges out of conditions
// labelled with their index, and each module instance as a cluster holding
// its module task and its flow's tasks, entered by dotted edges.
func Dump(w io.Writer, f *File) error {
	g, err := f.Expand()
	if err != nil {
		return err
	}
	return g.Dump(w)
}

// Dump writes the graph as Graphviz DOT (see the package-level Dump).
func (g *Graph) Dump(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "digraph %s {\n", dotQuote(g.Name))
	fmt.Fprintf(bw, "  label=%s;\n  labelloc=t;\n  node [shape=box, fontname=\"Helvetica\"];\n  edge [fontname=\"Helvetica\"];\n", dotQuote(g.Name))
	g.dumpScope(bw, -1, "  ")
	for i := range g.Vertices {
		v := &g.Vertices[i]
		for _, e := range v.Succ {
			if e.Weak {
				fmt.Fprintf(bw, "  t%d -> t%d [style=dashed, label=\"%d\"];\n", e.From, e.To, e.Index)
			} else {
				fmt.Fprintf(bw, "  t%d -> t%d;\n", e.From, e.To)
			}
		}
		for _, s := range g.ScopeSources(i) {
			if v.Task.Kind == KindModule {
				fmt.Fprintf(bw, "  t%d -> t%d [style=dotted, arrowhead=empty];\n", i, s)
			}
		}
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

func (g *Graph) dumpScope(w *bufio.Writer, module int, indent string) {
	for _, i := range g.Scope(module) {
		v := &g.Vertices[i]
		fmt.Fprintf(w, "%st%d [label=%s%s];\n", indent, i, dotQuote(v.Task.Name+"\n"+kindLabel(&v.Task)), shape(&v.Task))
		if v.Task.Kind == KindModule && v.Members != nil {
			fmt.Fprintf(w, "%ssubgraph cluster_t%d {\n", indent, i)
			fmt.Fprintf(w, "%s  label=%s;\n%s  style=rounded;\n", indent, dotQuote(v.Path+": module "+v.Task.Flow), indent)
			g.dumpScope(w, i, indent+"  ")
			fmt.Fprintf(w, "%s}\n", indent)
		}
	}
}

func kindLabel(t *Task) string {
	var s string
	switch k := t.Kind.Or(); k {
	case KindStatic:
		s = "static " + t.Func
	case KindModule:
		s = "module " + t.Flow
	default:
		s = string(k) + " " + t.Func
	}
	if t.Domain.Or() == DomainGPU && t.Kind != KindModule {
		s += " @gpu"
		if t.Device != nil {
			s += fmt.Sprintf(":%d", *t.Device)
		}
	}
	if t.Node != "" {
		s += " on " + t.Node
	}
	return s
}

func shape(t *Task) string {
	switch t.Kind.Or() {
	case KindCondition, KindMultiCondition:
		return ", shape=diamond"
	case KindSubflow:
		return ", shape=box3d"
	case KindModule:
		return ", shape=folder"
	}
	if t.Domain.Or() == DomainGPU {
		return ", style=filled, fillcolor=\"#c6e5b1\""
	}
	return ""
}

func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`)
	return `"` + r.Replace(s) + `"`
}
