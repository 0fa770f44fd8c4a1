// Command bench runs hetflow's cluster benchmarks (package bench): the
// seed's experiments on in-process dev clusters or, with --server, on a
// running cluster, writing JSON results and SVG/PNG plots. It is a binary of
// its own so that the coordinator does not link the plotting libraries.
//
//	go run ./cmd/bench --quick                 # CI-sized, under two minutes on 2 cores
//	go run ./cmd/bench --out docs/bench        # the full run behind docs/bench/
//	go run ./cmd/bench --server URL[,URL...]   # a running cluster (node --http for /metrics)
//	go run ./cmd/bench --quick --only htdg --sizes 1K,5K --nodes 1,2 --gpus-per-node 1,2 --sim-profile h200
//	                                           # one experiment, its sizes and node sets, timed sim devices
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hetflow/hetflow/bench"
	"github.com/hetflow/hetflow/gpu"
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
	var sizes, boxSizes, simProfile string
	var nodes, gpusPerNode, only []string
	var reps, boxRuns int
	var timeout time.Duration
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
			if err := narrow(cmd.Flags().Changed, &c, sweep{sizes: sizes, boxSizes: boxSizes, nodes: nodes, gpusPerNode: gpusPerNode,
				only: only, reps: reps, boxRuns: boxRuns, timeout: timeout}); err != nil {
				return withCode(exitInvalid, fmt.Errorf("bench: %w", err))
			}
			if cmd.Flags().Changed("sim-profile") {
				// the in-process nodes' gpu.Open reads it, and so do the notes and plot titles
				if _, err := gpu.LookupProfile(simProfile); err != nil {
					return withCode(exitInvalid, fmt.Errorf("bench: --sim-profile: %w", err))
				}
				if err := os.Setenv(gpu.SimProfileEnv, simProfile); err != nil {
					return withCode(exitInvalid, err)
				}
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
	// The HTDG sweep and what runs, over the preset's (--quick or the full run).
	fl.StringSliceVar(&only, "only", nil, "run only these experiments ("+strings.Join(bench.Experiments, ", ")+"; default all; sim needs htdg)")
	fl.StringVar(&sizes, "sizes", "", "HTDG sizes in tasks, comma-separated, K = 1000 (default: the preset's; full 1K…100K, --quick 250,1K,2K)")
	fl.StringSliceVar(&nodes, "nodes", nil, "node counts of the HTDG sweep's dev clusters, comma-separated (default 1,2,3)")
	fl.StringSliceVar(&gpusPerNode, "gpus-per-node", nil, "sim GPUs per node of the HTDG sweep, comma-separated (default: full 1,2, --quick 1)")
	fl.IntVar(&reps, "reps", 0, "runs of each HTDG size and configuration (default: full 3, --quick 1)")
	fl.StringVar(&boxSizes, "box-sizes", "", "HTDG sizes of the box plots, comma-separated, K = 1000 (default: full 5K,20K, --quick 500,1K)")
	fl.IntVar(&boxRuns, "box-runs", 0, "runs of each box plot (default: full 100, --quick 5)")
	fl.DurationVar(&timeout, "timeout", 0, "the generated flows' timeout: longest one run may take (default: full 10m, --quick 2m)")
	fl.StringVar(&simProfile, "sim-profile", "", "run the nodes on timed sim devices of `PROFILE` (a built-in: h200, h100; or a JSON file): sets "+gpu.SimProfileEnv+", whose value is the default; the times are then modeled")
	return cmd
}

// sweep holds the flags that narrow a preset.
type sweep struct {
	sizes, boxSizes          string
	nodes, gpusPerNode, only []string
	reps, boxRuns            int
	timeout                  time.Duration
}

// narrow sets in c what the flags given (changed) say; bench.Run validates
// the ranges.
func narrow(changed func(string) bool, c *bench.Config, s sweep) error {
	var err error
	if changed("sizes") {
		if c.Sizes, err = taskCounts("--sizes", s.sizes); err != nil {
			return err
		}
	}
	if changed("box-sizes") {
		if c.BoxSizes, err = taskCounts("--box-sizes", s.boxSizes); err != nil {
			return err
		}
	}
	if changed("nodes") {
		if c.NodeSet, err = counts("--nodes", s.nodes); err != nil {
			return err
		}
	}
	if changed("gpus-per-node") {
		if c.GPUSet, err = counts("--gpus-per-node", s.gpusPerNode); err != nil {
			return err
		}
	}
	if changed("only") {
		c.Only = s.only
	}
	if changed("reps") {
		c.Reps = s.reps
	}
	if changed("box-runs") {
		c.BoxRuns = s.boxRuns
	}
	if changed("timeout") {
		if s.timeout <= 0 {
			return fmt.Errorf("--timeout %s: want more than 0", s.timeout)
		}
		c.Timeout = s.timeout
	}
	return nil
}

// taskCounts reads a list of task counts like 500,1K,20K.
func taskCounts(flag, list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		if n := strings.TrimSuffix(strings.TrimSuffix(f, "K"), "k"); n != f {
			mult, f = 1000, n
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 || v > 1_000_000/mult {
			return nil, fmt.Errorf("%s: %q is not a task count (like 500, 2K; 1 to 1M)", flag, f)
		}
		out = append(out, v*mult)
	}
	return out, nil
}

// counts reads a list of small positive counts (nodes, GPUs).
func counts(flag string, list []string) ([]int, error) {
	var out []int
	for _, f := range list {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%s: %q: want a count of at least 1", flag, f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: empty", flag)
	}
	return out, nil
}
