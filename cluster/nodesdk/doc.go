// Package nodesdk turns a program into a hetflow node that runs your own
// functions: one call, Main, gives it the stock node's flags (--id, --nats,
// --gossip, --join, --http, --cpus, --sim-gpus, --advertise,
// --credentials-file, --secret-file, --nats-ca, --exec-allow, -v) and
// subcommands that use your functions too: dev (the
// all-in-one cluster of `coordinator dev`, its nodes running your
// functions), validate and dump (check a flow file against them), funcs
// (list them) and health. The stock cmd/node is Main(funcs.Default()).
//
// A complete node binary:
//
//	package main
//
//	import (
//		"context"
//		"strconv"
//		"strings"
//
//		"github.com/hetflow/hetflow/cluster/funcs"
//		"github.com/hetflow/hetflow/cluster/nodesdk"
//	)
//
//	func main() {
//		reg := funcs.Default() // the built-ins, and yours beside them
//		reg.MustRegister(funcs.Entry{
//			Name: "wordcount",
//			Doc:  "counts the words of args.text and of the inputs",
//			CPU: func(ctx context.Context, c *funcs.Call) (funcs.Result, error) {
//				text, err := c.Args.String("text", "")
//				if err != nil {
//					return funcs.Result{}, err
//				}
//				n := len(strings.Fields(text))
//				for _, in := range c.Inputs {
//					n += len(strings.Fields(string(in)))
//				}
//				return funcs.Result{Output: []byte(strconv.Itoa(n) + " words")}, nil
//			},
//		})
//		nodesdk.Main(reg)
//	}
//
// Then, with a flow file naming func: wordcount:
//
//	go build -o mynode .
//	./mynode validate flow.yaml --param who=ann  # checked against your functions
//	./mynode dev flow.yaml                       # an all-in-one cluster running them
//	coordinator credentials n4 --secret-file S   # writes n4.cred, n4's own credential
//	./mynode --id n4 --nats nats://HOST:4222 --join HOST:7946 --credentials-file n4.cred  # a node of a real cluster
//
// A node should hold its own credential (--credentials-file, the file
// `coordinator credentials ID` writes), not the cluster secret, which
// yields every node's credential and the API token. --secret-file still
// works: the node derives its credential from the secret (give one of the
// two). exec tasks are off unless --exec-allow names the programs they may
// run.
//
// Command returns the command tree instead, for a program that adds
// commands of its own; Run is Main without the exit. examples/custom-node
// is a module to copy, with a Dockerfile and a compose override.
package nodesdk
