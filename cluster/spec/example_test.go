package spec_test

import (
	"fmt"
	"os"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
)

func Example_builder() {
	b := spec.NewFlow("demo")
	init := b.Task("init").Func("hash")
	body := b.Task("body").Func("spin").Arg("us", 200).Succeed(init)
	cond := b.Condition("cond").Func("loop").Arg("n", 10).Succeed(body)
	done := b.Task("done").Func("hash")
	cond.Precede(body, done)
	fl, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	data, _ := fl.YAML()
	os.Stdout.Write(data)
	// Output:
	// name: demo
	// tasks:
	//   - name: init
	//     func: hash
	//   - name: body
	//     func: spin
	//     args: {us: 200}
	//     succeed: [init]
	//   - name: cond
	//     kind: condition
	//     func: loop
	//     args: {n: 10}
	//     succeed: [body]
	//     precede: [body, done]
	//   - name: done
	//     func: hash
}

func ExampleFile_Validate() {
	src := `name: demo
tasks:
  - name: init
    func: hash
  - name: cond
    kind: condition
    func: loop
    args: {n: 3}
    succeed: [init]
    precede: [bdy, done]
  - name: done
    func: hsh
  - name: gpu
    func: saxpy
    domain: gpu
    succeed: [init]
`
	f, err := spec.Parse("flows.yaml", []byte(src))
	if err != nil {
		fmt.Println(err)
		return
	}
	res := &spec.Resources{Nodes: map[string]spec.NodeRes{"n1": {CPUs: 8}}}
	fmt.Println(f.Validate(spec.Options{Funcs: funcs.Default(), Resources: res}))
	// Output:
	// flows.yaml:10: flow "demo" task "cond" field "precede": unknown task "bdy"
	// flows.yaml:12: flow "demo" task "done" field "func": unknown function "hsh"
	// flows.yaml:15: flow "demo" task "gpu" field "domain": asks for a GPU but no node of the cluster has one
}

func ExampleGraph_LoopGroups() {
	f, _ := spec.Parse("loops.yaml", []byte(`
name: loops
tasks:
  - {name: init, func: noop}
  - {name: body, func: spin, succeed: [init]}
  - {name: cond, kind: condition, func: loop, args: {n: 9}, succeed: [body], precede: [body, done]}
  - {name: done, func: hash}
`))
	g, _ := f.Expand()
	for _, grp := range g.LoopGroups() {
		fmt.Println(g.Paths(grp))
	}
	cond, _ := g.Lookup("cond")
	fmt.Println(g.Paths(g.Successors(cond)), g.StrongPredCount(cond))
	// Output:
	// [body cond]
	// [body done] 1
}

func ExampleExamples() {
	for _, ex := range spec.Examples() {
		fmt.Println(ex.Name)
	}
	// Output:
	// listing1-static
	// listing2-subflow
	// listing3-module
	// listing4-ifelse
	// listing5-dowhile
	// listing6-nested-loops
	// saxpy
}
