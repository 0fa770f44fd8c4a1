// Command custom-node is a hetflow node with functions of its own: copy
// this directory, change the functions, build it. See README.md.
//
//	go build -o custom-node . && go build -o wordfreq ./wordfreq
//	./custom-node validate flow.yaml
//	./custom-node dev --exec-allow $PWD/wordfreq --param tool=$PWD/wordfreq flow.yaml
package main

import (
	"context"
	"strconv"
	"strings"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/nodesdk"
)

func main() {
	reg := funcs.Default() // the built-ins (hash, spin, loop, ...), and ours beside them
	reg.MustRegister(funcs.Entry{
		Name: "say",
		Doc:  "outputs args.text",
		Args: []funcs.Arg{{Name: "text", Type: "string", Required: true, Doc: "what to say"}},
		CPU: func(ctx context.Context, c *funcs.Call) (funcs.Result, error) {
			text, err := c.Args.String("text", "")
			return funcs.Result{Output: []byte(text)}, err
		},
	})
	reg.MustRegister(funcs.Entry{
		Name: "wordcount",
		Doc:  "counts the words of its inputs: \"N words\"",
		CPU: func(ctx context.Context, c *funcs.Call) (funcs.Result, error) {
			n := 0
			for _, in := range c.Inputs {
				n += len(strings.Fields(string(in)))
			}
			return funcs.Result{Output: []byte(strconv.Itoa(n) + " words")}, nil
		},
	})
	nodesdk.Main(reg) // a node with the stock flags, or: dev, validate, dump, funcs, health
}
