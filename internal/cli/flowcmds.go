package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/hetflow/hetflow/cluster"
	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/spf13/cobra"
)

// LoadFlow reads and parses a flow file, fills its parameters and
// validates it against cat (nil: the built-ins). Errors name the file,
// task, field or parameter; they carry exit code 2.
func LoadFlow(path string, cat spec.Catalog, res *spec.Resources, params map[string]any) (*spec.File, error) {
	if cat == nil {
		cat = funcs.Default()
	}
	f, err := spec.ReadFile(path)
	if err == nil {
		f, _, err = f.Bind(params)
	}
	if err == nil {
		err = f.Validate(spec.Options{Funcs: cat, Resources: res})
	}
	if err != nil {
		return nil, WithCode(ExitInvalid, err)
	}
	return f, nil
}

// offline is the catalog a flow file is checked against without a
// cluster: reg, with the exec built-in's argument check when reg lacks it
// (which programs a node allows is up to the node: exec is checked there).
func offline(reg *funcs.Registry) spec.Catalog {
	if _, ok := reg.Lookup(funcs.ExecName); ok {
		return reg
	}
	c := reg.Clone()
	if err := c.EnableExec([]string{"(each node's --exec-allow)"}); err != nil {
		return reg
	}
	return c
}

// ValidateCmd is `validate FLOW...`: check flow files against reg's
// functions without running them, or with --server against what a
// cluster's live nodes offer (their catalogs, CPUs and GPUs).
func ValidateCmd(reg *funcs.Registry) *cobra.Command {
	if reg == nil {
		reg = funcs.Default()
	}
	var params ParamFlag
	var server, tokenFile string
	cmd := &cobra.Command{
		Use:   "validate FLOW...",
		Short: "check flow files without running them (--server: against a cluster's live nodes)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			vals, err := params.Values()
			if err != nil {
				return err
			}
			var cat spec.Catalog = offline(reg)
			var res *spec.Resources
			if server != "" {
				if cat, res, err = clusterCatalog(server, tokenFile, reg); err != nil {
					return err
				}
			}
			bad := false
			for _, p := range args {
				f, err := LoadFlow(p, cat, res, vals)
				if err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), err)
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
				return WithCode(ExitInvalid, ErrSilent)
			}
			return nil
		},
	}
	params.Add(cmd)
	cmd.Flags().StringVar(&server, "server", "", "check against the functions, CPUs and GPUs of this cluster's live nodes (coordinator URL(s), comma-separated)")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the API token (default $HETFLOW_TOKEN), with --server")
	return cmd
}

// clusterCatalog is what a cluster's live nodes offer: the union of their
// function catalogs (checked with reg's code where it has the function) and
// their resources.
func clusterCatalog(server, tokenFile string, reg *funcs.Registry) (spec.Catalog, *spec.Resources, error) {
	token := os.Getenv("HETFLOW_TOKEN")
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, nil, WithCode(ExitInvalid, fmt.Errorf("--token-file: %w", err))
		}
		token = strings.TrimSpace(string(b))
	}
	c := cluster.NewClient(strings.Split(server, ","), token)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := func(err error) error {
		if errors.Is(err, proto.ErrUnauthorized) {
			return WithCode(ExitUnauthorized, err)
		}
		return WithCode(ExitUnreachable, err)
	}
	ns, err := c.Funcs(ctx)
	if err != nil {
		return nil, nil, code(err)
	}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return nil, nil, code(err)
	}
	res := &spec.Resources{Nodes: map[string]spec.NodeRes{}}
	for _, n := range nodes {
		if n.State == proto.NodeAlive {
			res.Nodes[n.ID] = spec.NodeRes{CPUs: n.CPUs, GPUs: n.GPUs}
		}
	}
	return funcs.NewOffered(ns, reg), res, nil
}

// DumpCmd is `dump FLOW`: write a flow file as Graphviz DOT.
func DumpCmd(reg *funcs.Registry) *cobra.Command {
	if reg == nil {
		reg = funcs.Default()
	}
	var params ParamFlag
	cmd := &cobra.Command{
		Use:   "dump FLOW",
		Short: "write a flow file as Graphviz DOT",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			vals, err := params.Values()
			if err != nil {
				return err
			}
			f, err := LoadFlow(args[0], offline(reg), nil, vals)
			if err != nil {
				return err
			}
			return spec.Dump(cmd.OutOrStdout(), f)
		},
	}
	params.Add(cmd)
	return cmd
}

// DevCmd is `dev [FLOW...]`: an all-in-one cluster in this process whose
// nodes run reg's functions (nil: the built-ins); it runs each FLOW (none:
// the bundled examples) and exits like submit --wait.
func DevCmd(reg *funcs.Registry) *cobra.Command {
	var cfg devcluster.Config
	var simGPUs int
	var asJSON, serve, verbose bool
	var secretFile, cpuProfile, memProfile string
	var params ParamFlag
	cmd := &cobra.Command{
		Use:   "dev [FLOW...]",
		Short: "all-in-one cluster in this process: runs each FLOW (default: the bundled examples)",
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			cfg.Registry = reg
			stopCPU, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer func() {
				if perr := stopCPU(); err == nil && perr != nil {
					err = perr
				}
			}()
			vals, err := params.Values()
			if err != nil {
				return err
			}
			type flow struct {
				path   string
				text   []byte
				parsed *spec.File // nil: a bundled example
			}
			var flows []flow
			if len(args) == 0 {
				for _, e := range spec.Examples() {
					flows = append(flows, flow{e.Path, e.Data, nil})
				}
			}
			for _, p := range args {
				b, err := os.ReadFile(p)
				if err != nil {
					return WithCode(ExitInvalid, err)
				}
				pf, err := spec.Parse(p, b)
				if err == nil {
					_, _, err = pf.Bind(vals)
				}
				if err != nil {
					return WithCode(ExitInvalid, err)
				}
				flows = append(flows, flow{p, b, pf})
			}
			if verbose {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			}
			sec, err := ReadSecret(secretFile)
			if err != nil {
				return WithCode(ExitInvalid, err)
			}
			cfg.Secret = sec
			ctx, cancel := SignalContext()
			defer cancel()
			sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
			d, err := devcluster.Start(sctx, cfg)
			scancel()
			if err != nil {
				return WithCode(ExitUnreachable, fmt.Errorf("starting the dev cluster: %w", err))
			}
			defer d.Close()
			for _, f := range flows {
				if f.parsed != nil {
					// parsed once: the submit below finds it (a refusal is the submit's to report)
					_ = d.Coordinator().Prepared(filepath.Base(f.path), f.text, vals, f.parsed)
				}
			}
			out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if !asJSON {
				until := "until the flows have run"
				if serve {
					until = "until interrupted"
				}
				fmt.Fprintf(errw, "dev cluster: %d nodes, API on %s %s\n", cfg.Nodes, d.URL(), until)
			}
			c := d.Client()
			// The coordinator is in this process: no other one to turn to
			// when it is slow. A large flow's submit (parse, validate,
			// place: seconds a 100K tasks, more on a loaded machine) is
			// waited for, not given up at the client's default bounds
			// for a remote cluster.
			c.Attempt, c.Retry = time.Minute, 2*time.Minute
			failed, invalid := false, false
			var ran []string // states of the runs that ran
			for _, f := range flows {
				id, err := c.Submit(ctx, filepath.Base(f.path), f.text, cluster.Params(vals))
				if err != nil {
					fmt.Fprintf(errw, "%s: %v\n", f.path, err)
					failed = true
					invalid = invalid || errors.Is(err, proto.ErrInvalid)
					continue
				}
				st, err := c.Wait(ctx, id, nil)
				if err != nil && st.ID == "" {
					fmt.Fprintf(errw, "%s: %v\n", f.path, err)
					failed = true
					continue
				}
				ran = append(ran, st.State)
				if st.State != proto.RunSucceeded {
					failed = true
				}
				if asJSON {
					_ = PrintJSON(out, st)
				} else {
					fmt.Fprintf(out, "== %s\n", f.path)
					PrintStatus(out, st)
				}
			}
			if err := writeHeapProfile(memProfile); err != nil {
				return err
			}
			if !asJSON {
				ok := 0
				for _, st := range ran {
					if st == proto.RunSucceeded {
						ok++
					}
				}
				fmt.Fprintf(errw, "ran %d flow(s): %d succeeded, %d did not\n", len(flows), ok, len(flows)-ok)
				if !serve {
					fmt.Fprintf(errw, "next: run your own flow file with `%s dev FLOW.yaml` (examples: cluster/spec/examples/, examples/flows/),\n"+
						"      or keep the cluster up with its dashboard: `%s dev --serve`, then open http://127.0.0.1:7070/\n", cmd.Root().Name(), cmd.Root().Name())
				}
			}
			if serve {
				fmt.Fprintf(errw, "serving the API and the dashboard (%s/) until interrupted\n", d.URL())
				<-ctx.Done()
			}
			switch {
			case invalid:
				return WithCode(ExitInvalid, ErrSilent) // a flow the cluster refused: invalid input
			case failed:
				return WithCode(ExitRunFailed, ErrSilent)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&cfg.Nodes, "nodes", 3, "in-process nodes")
	fl.IntVar(&simGPUs, "sim-gpus", 1, "sim GPUs on the last node (0: none)")
	fl.BoolVar(&asJSON, "json", false, "one JSON status object per flow, per line")
	fl.BoolVar(&serve, "serve", false, "keep serving the API after the flows ran")
	fl.StringVar(&secretFile, "secret-file", "", "cluster secret file: secure NATS, gossip and the API (clients need the token)")
	fl.StringVar(&cfg.HTTPAddr, "http", "", "API address (default 127.0.0.1:7070 with --serve, else a free port)")
	fl.BoolVarP(&verbose, "verbose", "v", false, "log to stderr")
	fl.StringSliceVar(&cfg.ExecAllow, "exec-allow", nil, "programs exec tasks may run on the dev nodes (default none: exec is off)")
	fl.IntVar(&cfg.MaxTasks, "max-tasks", coord.DefaultMaxTasks, "most tasks of one run, after module expansion (as serve's)")
	fl.IntVar(&cfg.MaxFlowBytes, "max-flow-bytes", coord.DefaultMaxFlowBytes, "largest flow file a submit may send (as serve's)")
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole command (every in-process part) to this file")
	fl.StringVar(&memProfile, "memprofile", "", "write a heap profile (allocations and what is in use) to this file when the flows have run")
	_ = fl.MarkHidden("cpuprofile") // for benchmarks (scripts/bench-sweep.sh), not users
	_ = fl.MarkHidden("memprofile")
	params.Add(cmd)
	cmd.PreRun = func(cmd *cobra.Command, args []string) {
		if serve && cfg.HTTPAddr == "" {
			cfg.HTTPAddr = "127.0.0.1:7070"
		}
		cfg.SimGPUs = simGPUs
		if simGPUs <= 0 {
			cfg.SimGPUs = -1 // devcluster.Config's 0 is its default (one); the flag's 0 is none
		}
	}
	return cmd
}

// startCPUProfile starts a CPU profile into path (none if empty) and
// returns the function that stops it.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, WithCode(ExitInvalid, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// writeHeapProfile writes a heap profile (allocations so far, and what a
// collection made now leaves in use) to path (nothing if empty).
func writeHeapProfile(path string) error {
	if path == "" {
		return nil
	}
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
}
