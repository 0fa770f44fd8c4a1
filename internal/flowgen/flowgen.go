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
