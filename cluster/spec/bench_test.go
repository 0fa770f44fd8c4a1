package spec_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/flowgen"
)

// bigFlow is a 100K-task flow: 1000 chains of 100 hash tasks under one
// source, each chain closed by a loop condition back to its head.
func bigFlow(b *testing.B) *spec.File {
	fb := spec.NewFlow("big")
	src := fb.Task("src").Func("noop")
	for c := 0; c < 1000; c++ {
		head := fb.Task(fmt.Sprintf("c%d-0", c)).Func("hash").Succeed(src)
		prev := head
		for i := 1; i < 99; i++ {
			prev = fb.Task(fmt.Sprintf("c%d-%d", c, i)).Func("hash").Succeed(prev)
		}
		fb.Condition(fmt.Sprintf("c%d-loop", c)).Func("loop").Arg("n", 3).Succeed(prev).Precede(head)
	}
	fl, err := fb.Build()
	if err != nil {
		b.Fatal(err)
	}
	return &spec.File{Path: "big.yaml", Flows: []spec.Flow{*fl}}
}

func BenchmarkParse100K(b *testing.B) {
	f := bigFlow(b)
	for _, format := range []spec.Format{spec.FormatYAML, spec.FormatJSON} {
		data, err := spec.Marshal(f, format)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(strings.ToUpper(format.String()), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := spec.ParseFormat("big", data, format); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkValidate100K(b *testing.B) {
	f := bigFlow(b)
	opts := spec.Options{Funcs: funcs.Default(), Resources: &spec.Resources{Nodes: map[string]spec.NodeRes{"n1": {CPUs: 8}}}}
	for b.Loop() {
		if err := f.Validate(opts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExpand100K(b *testing.B) {
	f := bigFlow(b)
	for b.Loop() {
		g, err := f.Expand()
		if err != nil {
			b.Fatal(err)
		}
		if len(g.LoopGroups()) != 1000 {
			b.Fatal("groups")
		}
	}
}

// BenchmarkCompileFanIn is what a node does with an Assignment of the
// cross-node edge benchmark's flow (cluster/node BenchmarkCrossNodeEdges): a
// source, 2000 tasks after it, a sink after all 2000. "separate" validates
// and then expands (which validates and resolves again), "compile" does both
// at once.
func BenchmarkCompileFanIn(b *testing.B) {
	f, err := spec.Parse("wide.yaml", flowgen.FanInOut(2000))
	if err != nil {
		b.Fatal(err)
	}
	data, err := spec.Marshal(f, spec.FormatJSON)
	if err != nil {
		b.Fatal(err)
	}
	opts := spec.Options{Funcs: funcs.Default()}
	b.Run("parse", func(b *testing.B) {
		for b.Loop() {
			if _, err := spec.ParseJSON("wide.json", data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("separate", func(b *testing.B) {
		for b.Loop() {
			if err := f.Validate(opts); err != nil {
				b.Fatal(err)
			}
			if _, err := f.Expand(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("compile", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.Compile(opts); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMarshalJSON100K: the canonical JSON of the 100 × 1,000 layered
// DAG (internal/flowgen.Layered), what a coordinator writes for each flow
// it is given (the registry's text and id).
func BenchmarkMarshalJSON100K(b *testing.B) {
	f, err := spec.ParseJSON("layered.json", flowgen.Layered(100, 1000, 1, true))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := spec.Marshal(f, spec.FormatJSON); err != nil {
			b.Fatal(err)
		}
	}
}
