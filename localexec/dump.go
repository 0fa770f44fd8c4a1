package localexec

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Dump writes the taskflow as a Graphviz DOT digraph. Condition edges are
// dashed and labelled with their index; subflows (children retained with
// Subflow.Retain) and module tasks' taskflows are drawn as clusters; GPU
// tasks that have run show their GPU graph as a cluster.
func (tf *Taskflow) Dump(w io.Writer) error {
	bw := bufio.NewWriter(w)
	d := dumper{w: bw, ids: map[*node]string{}, modules: map[*Taskflow]bool{}}
	fmt.Fprintf(bw, "digraph %s {\n", quote("Taskflow: "+tf.name))
	fmt.Fprintf(bw, "  compound=true;\n")
	d.graph(&tf.graph, "  ")
	bw.WriteString("}\n")
	if d.err != nil {
		return d.err
	}
	return bw.Flush()
}

type dumper struct {
	w       *bufio.Writer
	ids     map[*node]string
	next    int
	modules map[*Taskflow]bool
	err     error
}

func (d *dumper) id(n *node) string {
	if s, ok := d.ids[n]; ok {
		return s
	}
	s := "n" + strconv.Itoa(d.next)
	d.next++
	d.ids[n] = s
	return s
}

func quote(s string) string { return strconv.Quote(s) }

func label(n *node) string {
	if name := n.taskName(); name != "" {
		return name
	}
	return fmt.Sprintf("%s %p", n.kind, n)
}

func (d *dumper) graph(g *graph, ind string) {
	for n := range g.all() {
		id := d.id(n)
		attrs := []string{"label=" + quote(label(n))}
		switch n.kind {
		case kindCondition, kindMultiCondition:
			attrs = append(attrs, "shape=diamond", "color=black", "fillcolor=aquamarine", "style=filled")
		case kindSubflow:
			attrs = append(attrs, "shape=box3d")
		case kindModule:
			m := n.ext.module
			attrs = []string{"label=" + quote(label(n)+" [m:"+m.name+"]"), "shape=box3d"}
		case kindRuntime:
			attrs = append(attrs, "shape=component")
		case kindGPU:
			attrs = []string{"label=" + quote(fmt.Sprintf("%s [gpu %d]", label(n), n.ext.device)), "shape=box", "style=filled", "fillcolor=lightgreen"}
		case kindPlaceholder:
			attrs = append(attrs, "style=dotted")
		}
		fmt.Fprintf(d.w, "%s%s [%s];\n", ind, id, strings.Join(attrs, ", "))
	}
	for n := range g.all() {
		for i, s := range n.successors() {
			if n.kind.weakOut() {
				fmt.Fprintf(d.w, "%s%s -> %s [style=dashed, label=%q];\n", ind, d.id(n), d.id(s), strconv.Itoa(i))
			} else {
				fmt.Fprintf(d.w, "%s%s -> %s;\n", ind, d.id(n), d.id(s))
			}
		}
	}
	for n := range g.all() {
		x := n.ext
		if x == nil {
			continue
		}
		switch {
		case n.kind == kindSubflow && x.sub != nil && x.sub.count > 0:
			fmt.Fprintf(d.w, "%ssubgraph %s {\n", ind, quote("cluster_"+d.id(n)))
			fmt.Fprintf(d.w, "%s  label=%s;\n", ind, quote("Subflow: "+label(n)))
			d.graph(x.sub, ind+"  ")
			fmt.Fprintf(d.w, "%s}\n", ind)
			// the subflow joins its parent
			for c := range x.sub.all() {
				if c.nSucc == 0 {
					fmt.Fprintf(d.w, "%s%s -> %s [style=dotted];\n", ind, d.id(c), d.id(n))
				}
			}
		case n.kind == kindModule && x.module != nil && !d.modules[x.module]:
			d.modules[x.module] = true
			fmt.Fprintf(d.w, "%ssubgraph %s {\n", ind, quote("cluster_m_"+d.id(n)))
			fmt.Fprintf(d.w, "%s  label=%s;\n", ind, quote("Taskflow: "+x.module.name))
			d.graph(&x.module.graph, ind+"  ")
			fmt.Fprintf(d.w, "%s}\n", ind)
		case n.kind == kindGPU && x.gpuGraph != nil:
			fmt.Fprintf(d.w, "%ssubgraph %s {\n", ind, quote("cluster_g_"+d.id(n)))
			fmt.Fprintf(d.w, "%s  label=%s;\n", ind, quote("GPU graph: "+label(n)))
			d.w.Flush()
			if err := x.gpuGraph.Dump(d.w, d.id(n)+"_"); err != nil && d.err == nil {
				d.err = err
			}
			fmt.Fprintf(d.w, "%s}\n", ind)
		}
	}
}
