package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hetflow/hetflow/cluster"
	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/cli"
	"github.com/hetflow/hetflow/transport"
	"github.com/spf13/cobra"
)

// clientFlags are the flags every client command takes.
type clientFlags struct {
	cmd       *cobra.Command // for its stderr
	server    string
	tokenFile string
	caFile    string
	json      bool
}

func (f *clientFlags) add(cmd *cobra.Command) {
	f.cmd = cmd
	cmd.Flags().StringVar(&f.server, "server", "", "coordinator URL(s), comma-separated (default $HETFLOW_SERVER or http://127.0.0.1:7070)")
	cmd.Flags().StringVar(&f.tokenFile, "token-file", "", "file holding the API token (default: the token itself from $HETFLOW_TOKEN; `coordinator token --secret-file F` prints it)")
	cmd.Flags().StringVar(&f.caFile, "ca-file", "", "PEM certificates to trust for https:// servers (default $HETFLOW_CA; else the system roots)")
	cmd.Flags().BoolVar(&f.json, "json", false, "machine-readable output")
}

func (f *clientFlags) client() (*cluster.Client, error) {
	servers := f.server
	if servers == "" {
		servers = os.Getenv("HETFLOW_SERVER")
	}
	if servers == "" {
		servers = "http://127.0.0.1:7070"
	}
	token := os.Getenv("HETFLOW_TOKEN")
	if token != "" && f.tokenFile == "" && strings.ContainsAny(token, "/\\") {
		if _, err := os.Stat(token); err == nil {
			return nil, withCode(exitInvalid, fmt.Errorf("HETFLOW_TOKEN holds a path (%s): it must hold the token itself; for a file use --token-file %s", token, token))
		}
	}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, withCode(exitInvalid, fmt.Errorf("--token-file: %w", err))
		}
		token = strings.TrimSpace(string(b))
	}
	c := cluster.NewClient(strings.Split(servers, ","), token)
	// A server that is down is said at once, not after the whole retry.
	stderr := io.Writer(os.Stderr)
	if f.cmd != nil {
		stderr = f.cmd.ErrOrStderr()
	}
	// Only once retrying has lasted a second: a moment's 503 (an election,
	// a node's catalog not read yet) goes by unsaid.
	var told sync.Once
	begun := time.Now()
	c.OnRetry = func(err error, left time.Duration) {
		if time.Since(begun) < time.Second {
			return
		}
		told.Do(func() {
			fmt.Fprintf(stderr, "coordinator: no coordinator answered yet (%v)\n  retrying %s for up to %s (Ctrl-C stops)\n", err, servers, left.Round(time.Second))
		})
	}
	if err := trustCA(c.HTTP, f.caFile); err != nil {
		return nil, err
	}
	return c, nil
}

// trustCA makes hc trust the certificates of caFile (or of $HETFLOW_CA).
func trustCA(hc *http.Client, caFile string) error {
	if caFile == "" {
		caFile = os.Getenv("HETFLOW_CA")
	}
	cfg, err := proto.ClientTLS(caFile)
	if err != nil {
		return withCode(exitInvalid, err)
	}
	if cfg != nil {
		hc.Transport = &http.Transport{TLSClientConfig: cfg, Proxy: http.ProxyFromEnvironment}
	}
	return nil
}

// call runs fn with a client and a 30 s deadline, mapping its error to an
// exit code.
func (f *clientFlags) call(fn func(ctx context.Context, c *cluster.Client) error) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return codeOf(fn(ctx, c))
}

// codeOf maps a client error to the exit code the contract gives it (docs/design.md).
func codeOf(err error) error {
	return cli.CodeOf(err, "the cluster wants its API token: --token-file F (a file holding it) or HETFLOW_TOKEN (the token itself, not a path);\n  `coordinator token --secret-file SECRET` prints it")
}

func addClusterCommands(root *cobra.Command) {
	root.AddCommand(cli.DevCmd(funcs.Default()), serveCmd(), submitCmd(), registerCmd(), runFlowCmd(), flowsCmd(), statusCmd(), outputCmd(), runsCmd(),
		nodesCmd(), funcsCmd(), cancelCmd(), peersCmd(), healthCmd(), tokenCmd(), credentialsCmd())
}

// progress draws a progress bar of tasks done / total and the current
// activations on a terminal line. A task counts as done once it has finished
// an activation (RunProgress.Finished), so a loop running again does not
// move the bar back.
func progress(w io.Writer) func(proto.RunProgress) {
	return func(p proto.RunProgress) {
		done, total := p.Finished, p.Counts.Tasks
		const width = 30
		fill := 0
		if total > 0 {
			fill = min(done, total) * width / total
		}
		fmt.Fprintf(w, "\r[%s%s] %d/%d tasks  %d activations  %s   ", strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, total, p.Activations, p.State)
	}
}

// waitRun follows a run to its end and reports it; a run that did not
// succeed gives exit code 1.
func waitRun(ctx context.Context, c *cluster.Client, id string, asJSON bool, out, errw io.Writer) error {
	var onProgress func(proto.RunProgress)
	if !asJSON {
		onProgress = progress(errw)
	}
	// Long polls of the run's tallies while it runs; its table once, at the end.
	st, err := c.Follow(ctx, id, onProgress)
	if !asJSON {
		fmt.Fprintln(errw)
	}
	if err != nil && st.ID == "" {
		return codeOf(err)
	}
	if asJSON {
		if err := printJSON(out, st); err != nil {
			return err
		}
	} else {
		printStatus(out, st)
	}
	if st.State != proto.RunSucceeded {
		return withCode(exitRunFailed, errSilent)
	}
	return nil
}

func submitCmd() *cobra.Command {
	var f clientFlags
	var wait bool
	var params cli.ParamFlag
	cmd := &cobra.Command{
		Use:   "submit FLOW",
		Short: "submit a flow file; prints the run id (--wait follows it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := os.ReadFile(args[0])
			if err != nil {
				return withCode(exitInvalid, err)
			}
			vals, err := params.Values()
			if err != nil {
				return err
			}
			if err := checkFlow(args[0], text, true, vals); err != nil {
				return err
			}
			return startRun(cmd, &f, wait, func(ctx context.Context, c *cluster.Client) (string, error) {
				return c.Submit(ctx, args[0], text, cluster.Params(vals))
			})
		},
	}
	f.add(cmd)
	params.Add(cmd)
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the run with a progress bar until it ends (Ctrl-C detaches and exits 130; the run goes on)")
	return cmd
}

// startRun starts a run with start (submit, run) and prints its id, or
// with wait follows it to its end, as submit does.
func startRun(cmd *cobra.Command, f *clientFlags, wait bool, start func(context.Context, *cluster.Client) (string, error)) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	ctx, cancel := signalCtx()
	defer cancel()
	id, err := start(ctx, c)
	if err != nil {
		return codeOf(err)
	}
	if !wait {
		if f.json {
			return printJSON(cmd.OutOrStdout(), proto.SubmitResponse{ID: id})
		}
		fmt.Fprintln(cmd.OutOrStdout(), id)
		return nil
	}
	errw := cmd.ErrOrStderr()
	fmt.Fprintf(errw, "run %s submitted; following it (Ctrl-C detaches, the run goes on)\n", id)
	err = waitRun(ctx, c, id, f.json, cmd.OutOrStdout(), errw)
	if ctx.Err() != nil { // interrupted: the run is the cluster's, not this command's
		fmt.Fprintf(errw, "detached from run %s: it goes on in the cluster.\n"+
			"  follow it:  coordinator status %s\n  cancel it:  coordinator cancel %s\n", id, id, id)
		return withCode(exitInterrupted, errSilent)
	}
	return err
}

// checkFlow checks a flow file here, for early file:line errors, unless
// it is over the default size limit: that is left to the cluster (it may
// allow more with --max-flow-bytes), since parsing 30 MB of YAML takes
// seconds and GiBs. With bind it binds vals (submit), else it validates
// the file's structure (register: parameters come with each run).
func checkFlow(path string, text []byte, bind bool, vals map[string]any) error {
	if len(text) > coord.DefaultMaxFlowBytes {
		return nil
	}
	pf, err := spec.Parse(path, text)
	switch {
	case err != nil:
	case bind:
		_, _, err = pf.Bind(vals)
	default:
		err = pf.Validate(spec.Options{})
	}
	return withCode(exitInvalid, err)
}

func registerCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "register FLOW",
		Short: "keep a flow file in the cluster; prints its flow id, for run (--json: {id, flow})",
		Long: `register keeps a flow file in the cluster's registry, once, and prints its flow
id: the SHA-256 of the flow's canonical JSON, in lowercase hex (the same flow in
YAML or JSON, or under another name, has the same id; registering it again
prints it again). coordinator run FLOWID starts runs of it, with parameters,
without sending, parsing or storing the file again.

The file is checked for its structure and the cluster's limits now; its
functions, resources and parameter values at each run, against the nodes
alive then.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := os.ReadFile(args[0])
			if err != nil {
				return withCode(exitInvalid, err)
			}
			if err := checkFlow(args[0], text, false, nil); err != nil {
				return err
			}
			return f.call(func(ctx context.Context, c *cluster.Client) error {
				ref, err := c.RegisterFlow(ctx, args[0], text)
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(cmd.OutOrStdout(), ref)
				}
				fmt.Fprintln(cmd.OutOrStdout(), ref.ID)
				return nil
			})
		},
	}
	f.add(cmd)
	return cmd
}

func runFlowCmd() *cobra.Command {
	var f clientFlags
	var wait bool
	var params cli.ParamFlag
	cmd := &cobra.Command{
		Use:   "run FLOWID",
		Short: "start a run of a registered flow; prints the run id (--wait follows it), as submit",
		Long: `run starts a run of a flow the cluster holds (coordinator register prints its id;
coordinator flows lists them), with --param values for its parameters, and then
behaves as submit: it prints the run id, or with --wait follows the run and
exits as the run ended. A flow id the cluster does not hold, or a missing,
ill-typed or undeclared parameter, is invalid input (exit 2).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			vals, err := params.Values()
			if err != nil {
				return err
			}
			if !coord.ValidFlowID(args[0]) {
				return withCode(exitInvalid, fmt.Errorf("flow id %q: want 64 lowercase hex digits, as coordinator register prints (coordinator flows lists them)", args[0]))
			}
			return startRun(cmd, &f, wait, func(ctx context.Context, c *cluster.Client) (string, error) {
				return c.RunFlow(ctx, args[0], cluster.Params(vals))
			})
		},
	}
	f.add(cmd)
	params.Add(cmd)
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the run with a progress bar until it ends (Ctrl-C detaches and exits 130; the run goes on)")
	return cmd
}

func flowsCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "flows",
		Short: "list the flows the cluster holds: registered ones and submitted ones (kept while a run names them)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c *cluster.Client) error {
				fl, err := c.Flows(ctx)
				if err != nil {
					return err
				}
				if f.json {
					if fl == nil {
						fl = []proto.FlowInfo{}
					}
					return printJSON(cmd.OutOrStdout(), fl)
				}
				for _, x := range fl {
					kept := "registered"
					if !x.Registered {
						kept = "submitted"
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s %-20s %-10s %7d tasks %4d runs  %s\n", x.ID, x.Flow, kept, x.Tasks, x.Runs, x.Stored.Format(time.RFC3339))
				}
				return nil
			})
		},
	}
	f.add(cmd)
	return cmd
}

func statusCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "status RUN",
		Short: "show a run's state and its tasks",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c *cluster.Client) error {
				st, err := c.Status(ctx, args[0])
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(cmd.OutOrStdout(), st)
				}
				printStatus(cmd.OutOrStdout(), st)
				return nil
			})
		},
	}
	f.add(cmd)
	return cmd
}

func outputCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "output RUN TASK",
		Short: "write a task's output bytes to stdout (coordinator output RUN TASK > file)",
		Long: `output writes the output of a task's latest activation, as its function
returned it, to stdout. Runs keep the outputs of tasks without successors (those
status shows), up to 8 MiB each (funcs.MaxOutput; a function returning more
fails its task). A task that produced none writes nothing.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c *cluster.Client) error {
				st, err := c.Status(ctx, args[0])
				if err != nil {
					return err
				}
				for _, t := range st.Tasks {
					if t.Name != args[1] {
						continue
					}
					b, err := hex.DecodeString(t.Output)
					if err != nil {
						return fmt.Errorf("task %s: output: %w", t.Name, err)
					}
					if len(b) == 0 {
						fmt.Fprintf(cmd.ErrOrStderr(), "task %s (%s) has no output: only tasks without successors keep theirs, and only hash, saxpy, blob, exec and functions of your own produce one\n", t.Name, t.State)
					}
					_, err = cmd.OutOrStdout().Write(b)
					return err
				}
				names := make([]string, len(st.Tasks))
				for i, t := range st.Tasks {
					names[i] = t.Name
				}
				return fmt.Errorf("run %s has no task %q (tasks: %s): %w", args[0], args[1], strings.Join(names, ", "), proto.ErrNotFound)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func runsCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "list runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c *cluster.Client) error {
				runs, err := c.Runs(ctx)
				if err != nil {
					return err
				}
				if f.json {
					if runs == nil {
						runs = []proto.RunSummary{}
					}
					return printJSON(cmd.OutOrStdout(), runs)
				}
				for _, r := range runs {
					fin := ""
					if r.Finished != nil {
						fin = r.Finished.Format(time.RFC3339)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%-22s %-20s %-10s %s %s\n", r.ID, r.Flow, r.State, r.Submitted.Format(time.RFC3339), fin)
				}
				return nil
			})
		},
	}
	f.add(cmd)
	return cmd
}

func nodesCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "list cluster nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c *cluster.Client) error {
				ns, err := c.Nodes(ctx)
				if err != nil {
					return err
				}
				if f.json {
					if ns == nil {
						ns = []proto.NodeInfo{}
					}
					return printJSON(cmd.OutOrStdout(), ns)
				}
				for _, n := range ns {
					fmt.Fprintf(cmd.OutOrStdout(), "%-10s %-22s %-8s cpus %d gpus %d\n", n.ID, n.Address, n.State, n.CPUs, n.GPUs)
				}
				return nil
			})
		},
	}
	f.add(cmd)
	return cmd
}

func funcsCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "funcs",
		Short: "list the functions the cluster's live nodes offer, per node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c *cluster.Client) error {
				ns, err := c.Funcs(ctx)
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(cmd.OutOrStdout(), ns)
				}
				cli.PrintFuncs(cmd.OutOrStdout(), ns)
				return nil
			})
		},
	}
	f.add(cmd)
	return cmd
}

func cancelCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "cancel RUN",
		Short: "cancel a run on every node",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c *cluster.Client) error {
				st, err := c.Cancel(ctx, args[0])
				if err != nil {
					return err
				}
				if st.State != proto.RunCancelled {
					// It had ended before the cancel arrived: say how.
					fmt.Fprintf(cmd.ErrOrStderr(), "run %s had already %s: nothing to cancel\n", args[0], st.State)
					return nil
				}
				fmt.Fprintln(cmd.OutOrStdout(), "cancelled", args[0])
				return nil
			})
		},
	}
	f.add(cmd)
	return cmd
}

func peersCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "peers [remove ID]",
		Short: "list coordinators (raft peers), or remove one gone for good",
		Args:  cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if len(args) > 0 {
				if args[0] != "remove" || len(args) != 2 {
					return withCode(exitInvalid, fmt.Errorf("usage: peers [remove ID]"))
				}
				if err := c.RemovePeer(ctx, args[1]); err != nil {
					return codeOf(err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), "removed", args[1])
				return nil
			}
			ps, err := c.Peers(ctx)
			if err != nil {
				return codeOf(err)
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), ps)
			}
			for _, p := range ps {
				l := ""
				if p.Leader {
					l = "leader"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%-8s %-22s %-22s %-8s %s\n", p.ID, p.Raft, p.HTTP, p.Suffrage, l)
			}
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func healthCmd() *cobra.Command {
	return cli.HealthCmd("coordinator", "http://127.0.0.1:7070", func(cmd *cobra.Command) func(*http.Client) error {
		var caFile string
		cmd.Flags().StringVar(&caFile, "ca-file", "", "PEM certificates to trust for an https:// --server (default $HETFLOW_CA)")
		return func(hc *http.Client) error { return trustCA(hc, caFile) }
	})
}

// credentialsCmd issues a node's own credential: what `node
// --credentials-file` needs to join, without the cluster secret.
func credentialsCmd() *cobra.Command {
	var secretFile, out string
	cmd := &cobra.Command{
		Use:   "credentials NODE --secret-file F [--out FILE]",
		Short: "write node NODE's own credential (for node --credentials-file), issued from the cluster secret",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sec, err := requireSecret(secretFile)
			if err != nil {
				return err
			}
			cred, err := sec.NodeCredential(args[0])
			if err != nil {
				return withCode(exitInvalid, err)
			}
			if out == "" {
				out = args[0] + ".cred"
			}
			if err := proto.WriteNodeCredential(out, cred); err != nil {
				return withCode(exitInvalid, fmt.Errorf("--out %s: %w", out, err))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s's credential written to %s\n", args[0], out)
			return nil
		},
	}
	cmd.Flags().StringVar(&secretFile, "secret-file", "", "cluster secret file")
	cmd.Flags().StringVar(&out, "out", "", "file to write, not overwritten (default NODE.cred)")
	return cmd
}

func tokenCmd() *cobra.Command {
	var secretFile string
	cmd := &cobra.Command{
		Use:   "token --secret-file F",
		Short: "print the API token a cluster secret derives",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			sec, err := requireSecret(secretFile)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), sec.APIToken)
			return nil
		},
	}
	cmd.Flags().StringVar(&secretFile, "secret-file", "", "cluster secret file")
	return cmd
}

// requireSecret reads the cluster secret a verb cannot do without.
func requireSecret(path string) (proto.Secret, error) {
	sec, err := cli.ReadSecret(path)
	if err != nil {
		return sec, withCode(exitInvalid, err)
	}
	if sec.APIToken == "" {
		return sec, withCode(exitInvalid, errors.New("--secret-file is required"))
	}
	return sec, nil
}

// parseCosts reads --cost: function name to a duration.
func parseCosts(in map[string]string) (map[string]time.Duration, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]time.Duration, len(in))
	for name, v := range in {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || name == "" {
			return nil, fmt.Errorf("--cost %s=%s: want FUNCTION=DURATION, a duration >= 0 such as 200us or 3ms", name, v)
		}
		out[name] = d
	}
	return out, nil
}

func serveCmd() *cobra.Command {
	var cfg coord.Config
	var join, secretFile, tlsCert, tlsKey, caFile, natsCA string
	var costs map[string]string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run one coordinator replica",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg.ID == "" || cfg.DataDir == "" {
				return withCode(exitInvalid, errors.New("--id and --data are required"))
			}
			if join != "" {
				cfg.Join = strings.Split(join, ",")
			}
			var err error
			if cfg.Placement.Funcs, err = parseCosts(costs); err != nil {
				return withCode(exitInvalid, err)
			}
			sec, err := readSecret(secretFile)
			if err != nil {
				return withCode(exitInvalid, err)
			}
			cfg.Secret = sec
			if cfg.TLS, err = proto.ServerTLS(tlsCert, tlsKey); err != nil {
				return withCode(exitInvalid, err)
			}
			if caFile == "" {
				caFile = tlsCert // a self-signed certificate shared by the coordinators
			}
			if cfg.TLS != nil {
				if cfg.ForwardTLS, err = proto.ClientTLS(caFile); err != nil {
					return withCode(exitInvalid, err)
				}
			}
			if cfg.NATSTLS, err = proto.ClientTLS(natsCA); err != nil {
				return withCode(exitInvalid, err)
			}
			if verbose {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			}
			ctx, cancel := signalCtx()
			defer cancel()
			s, err := coord.New(cfg)
			if err != nil {
				return withCode(exitInvalid, err)
			}
			if err := s.Start(ctx); err != nil {
				if errors.Is(err, transport.ErrAuth) || errors.Is(err, member.ErrKey) {
					return withCode(exitUnauthorized, err) // another cluster secret, or none
				}
				if errors.Is(err, coord.ErrDataDir) || errors.Is(err, coord.ErrConfig) {
					return withCode(exitInvalid, err) // the data directory (a damaged raft.db says how to recover), or a bad flag
				}
				return withCode(exitUnreachable, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "coordinator %s: http %s raft %s gossip %s\n", cfg.ID, s.HTTPAddr(), s.RaftAddr(), s.GossipAddr())
			<-ctx.Done()
			return s.Close()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.ID, "id", "", "coordinator id (required)")
	fl.StringVar(&cfg.DataDir, "data", "", "data directory: raft log, stable store, snapshots (required)")
	fl.StringVar(&cfg.RaftAddr, "raft", "127.0.0.1:7000", "raft listen address")
	fl.StringVar(&cfg.HTTPAddr, "http", "127.0.0.1:7070", "API listen address")
	fl.StringVar(&cfg.GossipAddr, "gossip", "127.0.0.1:7946", "gossip listen address")
	fl.StringVar(&cfg.NATSURL, "nats", "nats://127.0.0.1:4222", "NATS URL")
	fl.StringVar(&join, "join", "", "gossip seeds host:port,...")
	fl.BoolVar(&cfg.Bootstrap, "bootstrap", false, "form a new cluster (a no-op when --data holds state)")
	fl.StringVar(&cfg.Advertise, "advertise", "", "host others reach this coordinator at")
	fl.StringVar(&secretFile, "secret-file", "", "cluster secret file")
	fl.StringVar(&tlsCert, "tls-cert", "", "serve the API over HTTPS with this PEM certificate (with --tls-key)")
	fl.StringVar(&tlsKey, "tls-key", "", "the PEM key of --tls-cert")
	fl.StringVar(&caFile, "ca-file", "", "PEM certificates to trust when forwarding to the leader over HTTPS (default: --tls-cert)")
	fl.StringVar(&natsCA, "nats-ca", "", "PEM certificates to trust for a TLS NATS server")
	fl.IntVar(&cfg.MaxTasks, "max-tasks", coord.DefaultMaxTasks, "most tasks of one run, after module expansion")
	fl.IntVar(&cfg.MaxFlowBytes, "max-flow-bytes", coord.DefaultMaxFlowBytes, "largest flow file a submit may send")
	fl.IntVar(&cfg.MaxConns, "max-conns", coord.DefaultMaxConns, "most open API connections; one over it is closed at once")
	fl.DurationVar(&cfg.Placement.Hop, "hop", coord.DefaultHop,
		"latency of one cross-node hop, which the placement weighs task costs against (raise it for a slow network)")
	fl.StringToStringVar(&costs, "cost", nil,
		"declared cost of one execution of a function, NAME=DURATION,... (replaces the built-in estimate the placement uses)")
	fl.DurationVar(&cfg.NodeSilence, "node-silence", coord.DefaultSilence,
		"how long a node gossip declares dead must stay unheard over NATS before its tasks move (a killed node is confirmed at once)")
	fl.BoolVarP(&verbose, "verbose", "v", false, "log to stderr")
	return cmd
}
