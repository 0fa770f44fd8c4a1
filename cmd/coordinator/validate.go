package main

import (
	"fmt"
	"os"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/spf13/cobra"
)

// loadFlow reads, parses and validates a flow file against the stock
// registry. Errors name the file, task and field; they map to exit code 2.
func loadFlow(path string, res *spec.Resources) (*spec.File, error) {
	f, err := spec.Load(path, spec.Options{Funcs: funcs.Default(), Resources: res})
	if err != nil {
		return nil, withCode(exitInvalid, err)
	}
	return f, nil
}

func validateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FLOW...",
		Short: "check flow files without running them",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bad := false
			for _, p := range args {
				f, err := loadFlow(p, nil)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					bad = true
					continue
				}
				n := 0
				for _, fl := range f.Flows {
					n += len(fl.Tasks)
				}
				for _, w := range f.Warnings() {
					fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d flow(s), %d task(s))\n", p, len(f.Flows), n)
			}
			if bad {
				return withCode(exitInvalid, errSilent)
			}
			return nil
		},
	}
}

func dumpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "dump FLOW",
		Short: "write a flow file as Graphviz DOT",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := loadFlow(args[0], nil)
			if err != nil {
				return err
			}
			return spec.Dump(cmd.OutOrStdout(), f)
		},
	}
}
