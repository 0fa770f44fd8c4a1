package nodesdk

import "github.com/spf13/cobra"

// Flags are the node's flags, the stock ones, parsed in this one place:
// a new flag is a field here, a line in register and its use in runNode.
type Flags struct {
	ID         string
	NATS       string
	Gossip     string
	Join       string
	HTTP       string
	CPUs       int
	SimGPUs    int
	Advertise  string
	SecretFile string
	// CredentialsFile is the node's own credential (`coordinator
	// credentials ID`), the recommended way in: the node can then send only
	// as itself and holds neither the cluster secret nor the API token.
	CredentialsFile string
	NATSCA          string
	Verbose         bool
	// ExecAllow turns on the exec built-in for exactly these programs
	// (funcs.Registry.EnableExec); empty: exec is off.
	ExecAllow []string
}

func (f *Flags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.ID, "id", "", "node id (required)")
	fs.StringVar(&f.NATS, "nats", "nats://127.0.0.1:4222", "NATS URL")
	fs.StringVar(&f.Gossip, "gossip", "127.0.0.1:0", "gossip (memberlist) listen address host:port")
	fs.StringVar(&f.Join, "join", "", "gossip seeds host:port,...")
	fs.StringVar(&f.HTTP, "http", "", "HTTP address for /healthz and /metrics (optional)")
	fs.IntVar(&f.CPUs, "cpus", 0, "CPU workers (0: GOMAXPROCS)")
	fs.IntVar(&f.SimGPUs, "sim-gpus", 0, "simulated GPU devices (sim backend)")
	fs.StringVar(&f.Advertise, "advertise", "", "host others reach this node at")
	fs.StringVar(&f.SecretFile, "secret-file", "", "cluster secret file (the node derives its credential; --credentials-file is recommended)")
	fs.StringVar(&f.CredentialsFile, "credentials-file", "", "this node's credential file (coordinator credentials ID)")
	fs.StringVar(&f.NATSCA, "nats-ca", "", "PEM certificates to trust for a TLS NATS server")
	fs.BoolVarP(&f.Verbose, "verbose", "v", false, "log to stderr")
	fs.StringSliceVar(&f.ExecAllow, "exec-allow", nil, "programs exec tasks may run on this node (comma-separated or repeated; default none: exec is off). Anyone holding the API token can then run them here")
}
