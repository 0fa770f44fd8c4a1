// Command node is the stock hetflow cluster node: cluster/nodesdk's Main
// with the built-in functions. It joins the gossip ring (advertising its
// CPUs and GPUs), connects to NATS, and runs the parts of flows the
// coordinator assigns it on the local executor. SIGTERM drains it: it takes
// no new runs, finishes what it holds, and leaves the ring.
//
//	node --id ID --nats URL --gossip HOST:PORT --join HOST:PORT,... [--http HOST:PORT]
//	     [--cpus N] [--sim-gpus G] [--advertise HOST] [--credentials-file F | --secret-file F] [--nats-ca F]
//
// --credentials-file is the node's own credential (`coordinator credentials
// ID`): recommended, since it lets the node send only as itself and holds
// neither the cluster secret nor the API token. --secret-file still works:
// the node derives its own credential from the secret.
//
//	node health --server http://HOST:PORT     (exit 0 when /healthz answers 200)
//	node dev | validate | dump | funcs     (see node --help)
//
// A node with functions of your own is the same call with your registry:
// see the package doc of cluster/nodesdk and examples/custom-node.
package main

import (
	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/nodesdk"
)

func main() { nodesdk.Main(funcs.Default()) }
