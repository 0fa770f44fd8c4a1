package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hetflow/hetflow/bench"
	"github.com/spf13/cobra"
)

// benchCmd is `coordinator bench`: the cluster benchmark of package bench.
func benchCmd() *cobra.Command {
	var quick, quiet bool
	var out, server, tokenFile, replot, resim string
	var workers int
	var seed uint64
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "run the cluster benchmarks (HTDG, loop, co-run, granularity, simulation); write JSON results and plots",
		Long: `bench submits generated workloads to in-process dev clusters of 1, 2 and 3 nodes
(or, with --server, to a running cluster) and writes one JSON result file per
experiment and SVG/PNG plots under --out. --quick is the CI-sized run (under two
minutes on a 2-core machine); without it, the full run behind docs/bench/.
See docs/benchmarks/cluster-bench.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if replot != "" {
				files, err := bench.Replot(replot)
				for _, f := range files {
					fmt.Fprintln(cmd.OutOrStdout(), f)
				}
				if errors.Is(err, bench.ErrConfig) {
					return withCode(exitInvalid, err)
				}
				return withCode(exitRunFailed, err)
			}
			c := bench.Full()
			if quick {
				c = bench.Quick()
			}
			if cmd.Flags().Changed("out") || quick {
				c.Out = out
			}
			if resim != "" {
				if !cmd.Flags().Changed("out") {
					c.Out = resim
				}
				c.Workers = workers
				c.Progress = cmd.ErrOrStderr()
				if quiet {
					c.Progress = nil
				}
				ctx, cancel := signalCtx()
				defer cancel()
				_, files, err := bench.Resim(ctx, c, resim)
				for _, f := range files {
					fmt.Fprintln(cmd.OutOrStdout(), f)
				}
				if errors.Is(err, bench.ErrConfig) {
					return withCode(exitInvalid, err)
				}
				return withCode(exitRunFailed, err)
			}
			c.Workers, c.Seed = workers, seed
			if server != "" {
				c.Servers = strings.Split(server, ",")
				if tokenFile != "" {
					b, err := os.ReadFile(tokenFile)
					if err != nil {
						return withCode(exitInvalid, fmt.Errorf("--token-file: %w", err))
					}
					c.Token = strings.TrimSpace(string(b))
				} else {
					c.Token = os.Getenv("HETFLOW_TOKEN")
				}
			}
			if !quiet {
				c.Progress = cmd.ErrOrStderr()
			}
			bench.Command = "coordinator bench " + strings.Join(os.Args[min(2, len(os.Args)):], " ")
			ctx, cancel := signalCtx()
			defer cancel()
			rep, err := bench.Run(ctx, c)
			if rep != nil {
				for _, f := range rep.Files {
					fmt.Fprintln(cmd.OutOrStdout(), f)
				}
			}
			switch {
			case err == nil:
				return nil
			case errors.Is(err, bench.ErrConfig):
				return withCode(exitInvalid, err)
			}
			return codeOf(err)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&quick, "quick", false, "CI-sized run: small graphs, few repetitions (writes to --out, default ./bench-out)")
	fl.StringVar(&out, "out", "bench-out", "directory for the JSON results and plots (full run default: docs/bench)")
	fl.StringVar(&server, "server", "", "a running cluster's coordinator URL(s), comma-separated (default: in-process dev clusters)")
	fl.StringVar(&tokenFile, "token-file", "", "API token file for --server (default $HETFLOW_TOKEN)")
	fl.IntVar(&workers, "workers", 2, "CPU workers per in-process node")
	fl.Uint64Var(&seed, "seed", 1, "seed of the generated graphs")
	fl.StringVar(&replot, "replot", "", "only draw the plots again from the JSON results under `DIR`")
	fl.StringVar(&resim, "resim", "", "only run the simulation again on the HTDG results under `DIR` (writes sim.json there, or to --out)")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no progress lines on stderr")
	return cmd
}
