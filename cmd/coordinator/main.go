// Command coordinator is hetflow's control-plane binary and CLI: it serves a
// raft-replicated coordinator (serve), runs a whole cluster in one process
// (dev), and talks to a running cluster (submit, status, runs, nodes,
// cancel, peers). validate and dump work on a flow file alone.
//
// Exit codes: 0 success; 1 a run failed or was cancelled; 2 invalid input;
// 3 the cluster cannot be reached; 4 not authorised; 5 no such run or node.
package main

import (
	"os"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/internal/cli"
	"github.com/spf13/cobra"
)

// Exit codes (docs/design.md, "The contract"; internal/cli).
const (
	exitOK           = cli.ExitOK
	exitRunFailed    = cli.ExitRunFailed
	exitInvalid      = cli.ExitInvalid
	exitUnreachable  = cli.ExitUnreachable
	exitUnauthorized = cli.ExitUnauthorized
	exitNotFound     = cli.ExitNotFound
	exitInterrupted  = cli.ExitInterrupted
)

// exitError carries an exit code out of a command.
type exitError = cli.ExitError

func withCode(code int, err error) error { return cli.WithCode(code, err) }

// errSilent marks an exit code whose reason was already printed.
var errSilent = cli.ErrSilent

var (
	printJSON   = cli.PrintJSON
	printStatus = cli.PrintStatus
	signalCtx   = cli.SignalContext
	readSecret  = cli.ReadSecret
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int { return cli.Execute(newRoot(), args, os.Stderr) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "coordinator",
		Short:         "hetflow coordinator and cluster CLI",
		Version:       cli.Version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(cli.ValidateCmd(funcs.Default()), cli.DumpCmd(funcs.Default()))
	addClusterCommands(root)
	return root
}
