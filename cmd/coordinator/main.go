// Command coordinator is hetflow's control-plane binary and CLI: it serves a
// raft-replicated coordinator (serve), runs a whole cluster in one process
// (dev), and talks to a running cluster (submit, status, runs, nodes,
// cancel, peers). validate and dump work on a flow file alone.
//
// Exit codes: 0 success; 1 a run failed or was cancelled; 2 invalid input;
// 3 the cluster cannot be reached; 4 not authorised; 5 no such run or node.
package main

import (
	"errors"
	"fmt"
	"os"

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
	// exitInterrupted: submit --wait detached on Ctrl-C (128 + SIGINT, as
	// shells report it); the run goes on in the cluster.
	exitInterrupted = 130
)

// exitError carries an exit code out of a command.
type exitError = cli.ExitError

func withCode(code int, err error) error { return cli.WithCode(code, err) }

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	root := newRoot()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.Err != errSilent {
			fmt.Fprintln(os.Stderr, "coordinator:", ee.Err)
		}
		return ee.Code
	}
	// cobra's own errors: unknown command or flag, bad argument count
	fmt.Fprintln(os.Stderr, "coordinator:", err)
	return exitInvalid
}

// errSilent marks an exit code whose reason was already printed.
var errSilent = errors.New("")

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "coordinator",
		Short:         "hetflow coordinator and cluster CLI",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(validateCmd(), dumpCmd())
	addClusterCommands(root)
	return root
}
