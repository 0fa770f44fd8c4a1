package funcs_test

import (
	"context"
	"fmt"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
)

func ExampleRegistry_Register() {
	reg := funcs.Default()
	reg.MustRegister(funcs.Entry{
		Name: "greet",
		CPU: func(ctx context.Context, c *funcs.Call) (funcs.Result, error) {
			who, err := c.Args.String("who", "world")
			if err != nil {
				return funcs.Result{}, err
			}
			return funcs.Result{Output: []byte("hello, " + who)}, nil
		},
		Check: func(a funcs.Args) error {
			if err := a.Only("who"); err != nil {
				return err
			}
			_, err := a.String("who", "")
			return err
		},
	})
	res, err := reg.Invoke(context.Background(), "greet", &funcs.Call{Task: "g", Args: funcs.Args{"who": "hetflow"}})
	fmt.Printf("%s %v\n", res.Output, err)
	_, err = reg.Invoke(context.Background(), "greet", &funcs.Call{Task: "g", Args: funcs.Args{"who": 3}})
	fmt.Println(err)
	// Output:
	// hello, hetflow <nil>
	// task "g": args: "who" must be a string, got 3
}

func Example_loop() {
	// loop's per-run state travels from one activation to the next through
	// Result.State and Call.State.
	reg := funcs.Default()
	var state []byte
	for a := uint64(1); a <= 5; a++ {
		res, _ := reg.Invoke(context.Background(), "loop", &funcs.Call{Task: "cond", Args: funcs.Args{"n": 2}, Activation: a, State: state})
		state = res.State
		fmt.Print(res.Choice, " ")
	}
	fmt.Println()
	// Output: 0 0 1 0 0
}

func ExampleRegistry_Func() {
	// A registry validates flow files as a spec.Catalog.
	f, _ := spec.Parse("f.yaml", []byte("name: x\ntasks:\n  - {name: a, func: spin, args: {us: abc}}\n"))
	fmt.Println(f.Validate(spec.Options{Funcs: funcs.Default()}))
	// Output: f.yaml:3: flow "x" task "a" field "args": "us" must be a non-negative integer, got "abc"
}
