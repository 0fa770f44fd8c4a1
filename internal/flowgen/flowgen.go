// Package flowgen writes flow files of a given size for tests and
// benchmarks: many tasks in few bytes, or few bytes that expand to many
// tasks through modules.
package flowgen

import (
	"bytes"
	"fmt"
	"strconv"
)

// Flat is a YAML flow of n independent noop tasks (about 25 bytes a task).
func Flat(n int) []byte {
	var b bytes.Buffer
	b.Grow(n * 26)
	b.WriteString("name: flat\ntasks:\n")
	var num []byte
	for i := 0; i < n; i++ {
		b.WriteString("- {name: a")
		num = strconv.AppendInt(num[:0], int64(i), 10)
		b.Write(num)
		b.WriteString(", func: noop}\n")
	}
	return b.Bytes()
}

// WideModules is a small YAML file whose flow expands to outer*(inner+1)
// tasks: outer module tasks over one flow of inner noop tasks.
func WideModules(outer, inner int) []byte {
	var b bytes.Buffer
	b.WriteString("flows:\n  - name: top\n    tasks:\n")
	for i := 0; i < outer; i++ {
		fmt.Fprintf(&b, "      - {name: m%d, kind: module, flow: leaf}\n", i)
	}
	b.WriteString("  - name: leaf\n    tasks:\n")
	for i := 0; i < inner; i++ {
		fmt.Fprintf(&b, "      - {name: l%d, func: noop}\n", i)
	}
	return b.Bytes()
}

// FanInOut is a YAML flow "wide": a source, width noop tasks after it, and a
// sink after all of them (listing width predecessors).
func FanInOut(width int) []byte {
	var b, sink bytes.Buffer
	b.WriteString("name: wide\ntasks:\n  - {name: src, func: noop}\n")
	sink.WriteString("  - {name: sink, func: noop, succeed: [")
	for i := range width {
		fmt.Fprintf(&b, "  - {name: w%d, func: noop, succeed: [src]}\n", i)
		if i > 0 {
			sink.WriteString(", ")
		}
		fmt.Fprintf(&sink, "w%d", i)
	}
	b.WriteString(sink.String() + "]}\n")
	return b.Bytes()
}

// Layered is a flow "layered" of layers×width noop tasks: task Lk_i of
// layer k > 0 runs after two tasks of layer k-1 drawn at random (seeded:
// the same arguments give the same file), the shape of the cluster speed
// benchmarks. json picks JSON over YAML.
func Layered(layers, width int, seed uint64, json bool) []byte {
	var b bytes.Buffer
	b.Grow(layers * width * 48)
	if json {
		b.WriteString(`{"name":"layered","tasks":[`)
	} else {
		b.WriteString("name: layered\ntasks:\n")
	}
	layeredTasks(&b, layers, width, seed, json, "")
	if json {
		b.WriteString("]}\n")
	}
	return b.Bytes()
}

// LayeredModules is a flow "top" of blocks module tasks in a chain (B1
// after B0, ...), each running the flow "block", a layered DAG of
// layers×width noop tasks as Layered's: blocks×layers×width tasks from a
// file the size of one block, for runs larger than a flow file may be
// (spec.MaxFileSize). A block's tasks start when the block before has
// ended.
func LayeredModules(blocks, layers, width int, seed uint64, json bool) []byte {
	var b bytes.Buffer
	b.Grow(layers*width*48 + blocks*40)
	if json {
		b.WriteString(`{"flows":[{"name":"top","tasks":[`)
	} else {
		b.WriteString("flows:\n  - name: top\n    tasks:\n")
	}
	for k := 0; k < blocks; k++ {
		switch {
		case json && k > 0:
			fmt.Fprintf(&b, `,{"name":"B%d","kind":"module","flow":"block","succeed":["B%d"]}`, k, k-1)
		case json:
			b.WriteString(`{"name":"B0","kind":"module","flow":"block"}`)
		case k > 0:
			fmt.Fprintf(&b, "      - {name: B%d, kind: module, flow: block, succeed: [B%d]}\n", k, k-1)
		default:
			b.WriteString("      - {name: B0, kind: module, flow: block}\n")
		}
	}
	if json {
		b.WriteString(`]},{"name":"block","tasks":[`)
	} else {
		b.WriteString("  - name: block\n    tasks:\n")
	}
	layeredTasks(&b, layers, width, seed, json, "      ")
	if json {
		b.WriteString("]}]}\n")
	}
	return b.Bytes()
}

// layeredTasks writes Layered's task list into b: JSON objects separated
// by commas, or YAML list items each indented by indent.
func layeredTasks(b *bytes.Buffer, layers, width int, seed uint64, json bool, indent string) {
	rng := seed*0x9e3779b97f4a7c15 + 1
	next := func(n int) int { // splitmix64
		rng += 0x9e3779b97f4a7c15
		z := rng
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return int((z ^ (z >> 31)) % uint64(n))
	}
	for l := 0; l < layers; l++ {
		for i := 0; i < width; i++ {
			var preds []int
			if l > 0 {
				p := next(width)
				q := next(width)
				if width > 1 {
					for q == p {
						q = next(width)
					}
				}
				preds = []int{p, q}
				if width == 1 {
					preds = preds[:1]
				}
			}
			if json {
				if l+i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(b, `{"name":"L%d_%d","func":"noop"`, l, i)
				if len(preds) > 0 {
					b.WriteString(`,"succeed":[`)
					for j, p := range preds {
						if j > 0 {
							b.WriteByte(',')
						}
						fmt.Fprintf(b, `"L%d_%d"`, l-1, p)
					}
					b.WriteByte(']')
				}
				b.WriteByte('}')
				continue
			}
			b.WriteString(indent)
			fmt.Fprintf(b, "- {name: L%d_%d, func: noop", l, i)
			if len(preds) > 0 {
				b.WriteString(", succeed: [")
				for j, p := range preds {
					if j > 0 {
						b.WriteString(", ")
					}
					fmt.Fprintf(b, "L%d_%d", l-1, p)
				}
				b.WriteByte(']')
			}
			b.WriteString("}\n")
		}
	}
}
