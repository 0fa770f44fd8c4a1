// Command bench runs hetflow's cluster benchmarks (package bench): the
// seed's experiments on in-process dev clusters or, with --server, on a
// running cluster, writing JSON results and SVG/PNG plots. It is a binary of
// its own so that the coordinator does not link the plotting libraries.
//
//	go run ./cmd/bench --quick                 # CI-sized, under two minutes on 2 cores
//	go run ./cmd/bench --out docs/bench        # the full run behind docs/bench/
//	go run ./cmd/bench --server URL[,URL...]   # a running cluster (node --http for /metrics)
//
// Exit codes: 0 done, 1 a run failed, 2 invalid input (flags, results
// directory), 3 the cluster cannot be reached, 4 not authorised, 5 not
// found. See docs/benchmarks/cluster-bench.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hetflow/hetflow/bench"
	"github.com/hetflow/hetflow/internal/cli"
	"github.com/spf13/cobra"
)

// Exit codes, those of every command (internal/cli).
const (
	exitOK      = cli.ExitOK
	exitInvalid = cli.ExitInvalid
)

func withCode(code int, err error) error { return cli.WithCode(code, err) }

func codeOf(err error) error {
	return cli.CodeOf(err, "the cluster wants its API token: --token-file F or HETFLOW_TOKEN")
}

func signalCtx() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	cmd := benchCmd()
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err == nil {
		return exitOK
	}
	var ee *cli.ExitError
	if errors.As(err, &ee) {
		fmt.Fprintln(os.Stderr, err) // package bench's errors name it
		return ee.Code
	}
	fmt.Fprintln(os.Stderr, "bench:", err) // cobra's own: unknown flag, bad argument count
	return exitInvalid
}

// benchCmd is the command line of package bench.
func benchCmd() *cobra.Command {
	var quick, quiet bool
	var out, server, tokenFile, replot, resim string
	var workers int
	var seed uint64
	cmd := &cobra.Command{
		Use:     "bench",
		Version: cli.Version(),
		Short:   "run the cluster benchmarks (HTDG, loop, co-run, granularity, simulation); write JSON results and plots",
		Long: `bench submits generated workloads to in-process dev clusters of 1, 2 and 3 nodes
(or, with --server, to a running cluster) and writes one JSON result file per
experiment and SVG/PNG plots under --out. --quick is the CI-sized run (under two
minutes on a 2-core machine); without it, the full run behind docs/bench/.
See docs/benchmarks/cluster-bench.md.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if replot != "" {
				files, err := bench.Replot(replot)
				for _, f := range files {
					fmt.Fprintln(cmd.OutOrStdout(), f)
				}
				if errors.Is(err, bench.ErrConfig) {
					return withCode(exitInvalid, err)
				}
				return withCode(cli.ExitRunFailed, err)
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
				return withCode(cli.ExitRunFailed, err)
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
			bench.Command = strings.Join(append([]string{"bench"}, os.Args[min(1, len(os.Args)):]...), " ")
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
