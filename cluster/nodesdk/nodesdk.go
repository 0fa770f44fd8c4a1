package nodesdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/natsauth"
	"github.com/hetflow/hetflow/cluster/node"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/cli"
	"github.com/hetflow/hetflow/transport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
)

// Main runs the program as a hetflow node whose functions are reg's (nil:
// the built-ins; a user's registry starts from funcs.Default() and adds its
// own) and exits with the code of the table in docs/design.md, The
// contract (internal/cli/cli.go holds the codes). The program's name and
// os.Args pick what it does: a node (the stock flags: --id, --nats,
// --gossip, --join, ...), or one of the subcommands health, dev, validate,
// dump and funcs.
func Main(reg *funcs.Registry) {
	os.Exit(Run(os.Args[1:], reg))
}

// Run is Main without the exit: it runs args (without the program's name)
// and returns the exit code.
func Run(args []string, reg *funcs.Registry) int {
	return cli.Execute(Command(reg), args, os.Stderr)
}

// Command returns the node's command tree, for a program that adds
// commands of its own before running it with Execute.
func Command(reg *funcs.Registry) *cobra.Command {
	if reg == nil {
		reg = funcs.Default()
	}
	var f Flags
	root := &cobra.Command{
		Version: cli.Version(),
		Use:     progName() + " --id ID --nats URL --gossip HOST:PORT --join HOST:PORT,... [flags]",
		Short:   "a hetflow node: runs the parts of flows the coordinator assigns it, with this program's functions",
		Long: `A hetflow node: it joins the gossip ring (advertising its CPUs and GPUs),
connects to NATS, and runs the parts of flows the coordinator assigns it on the
local executor, with this program's functions. SIGTERM drains it: it takes no
new runs, finishes what it holds, and leaves the ring.

The same program runs an all-in-one cluster with its functions (dev), checks
flow files against them (validate, dump) and lists them (funcs).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runNode(ctx, f, reg, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	f.register(root)
	root.AddCommand(healthCmd(), cli.DevCmd(reg), cli.ValidateCmd(reg), cli.DumpCmd(reg), funcsCmd(reg))
	return root
}

// Execute runs a command tree from Command with args and returns the exit
// code, printing a failure to stderr.
func Execute(root *cobra.Command, args []string) int { return cli.Execute(root, args, os.Stderr) }

func progName() string {
	if len(os.Args) == 0 {
		return "node"
	}
	name := os.Args[0]
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return name
}

func healthCmd() *cobra.Command { return cli.HealthCmd("node", "http://127.0.0.1:9090", nil) }

func funcsCmd(reg *funcs.Registry) *cobra.Command {
	return &cobra.Command{
		Use:   "funcs",
		Short: "list the functions this node runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range reg.Names() {
				e, _ := reg.Lookup(name)
				dom := "cpu"
				switch {
				case e.CPU != nil && e.GPU != nil:
					dom = "cpu,gpu"
				case e.CPU == nil:
					dom = "gpu"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%-16s %-14s %-8s %s\n", name, e.Kind.Or(), dom, e.Doc)
			}
			return nil
		},
	}
}

// leaver lets the node leave the ring on drain; the ring is started after
// the node (it advertises the node's metadata).
type leaver struct{ l *member.List }

func (lv *leaver) Leave(timeout time.Duration) error {
	if lv.l == nil {
		return nil
	}
	return lv.l.Leave(timeout)
}

// runNode runs a node until ctx is done, then drains it.
func runNode(ctx context.Context, f Flags, reg *funcs.Registry, stdout, stderr io.Writer) error {
	if f.ID == "" {
		return cli.WithCode(cli.ExitInvalid, errors.New("--id is required"))
	}
	if err := transport.ValidateID("node id", f.ID); err != nil {
		return cli.WithCode(cli.ExitInvalid, err)
	}
	if len(f.ExecAllow) > 0 {
		reg = reg.Clone()
		if err := reg.EnableExec(f.ExecAllow); err != nil {
			return cli.WithCode(cli.ExitInvalid, fmt.Errorf("--exec-allow: %w", err))
		}
	}
	cred, secured, err := credential(f.ID, f.SecretFile, f.CredentialsFile)
	if err != nil {
		return cli.WithCode(cli.ExitInvalid, err)
	}
	var logger *slog.Logger
	if f.Verbose {
		logger = slog.New(slog.NewTextHandler(stderr, nil))
	}
	copts := []transport.Option{transport.WithName("node " + f.ID)}
	if secured {
		copts = append(copts, natsauth.ConnectOptions(cred)...)
	}
	tc, err := proto.ClientTLS(f.NATSCA)
	if err != nil {
		return cli.WithCode(cli.ExitInvalid, err)
	}
	if tc != nil {
		copts = append(copts, transport.WithTLS(tc))
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	conn, err := transport.Connect(cctx, f.NATS, copts...)
	cancel()
	if err != nil {
		if errors.Is(err, transport.ErrAuth) {
			return cli.WithCode(cli.ExitUnauthorized, fmt.Errorf("NATS: %w", err))
		}
		return cli.WithCode(cli.ExitUnreachable, fmt.Errorf("NATS: %w", err))
	}
	defer conn.Close()

	var httpLn net.Listener
	if f.HTTP != "" {
		if httpLn, err = net.Listen("tcp", f.HTTP); err != nil {
			return cli.WithCode(cli.ExitInvalid, fmt.Errorf("--http: %w", err))
		}
	}
	lv := &leaver{}
	cfg := node.Config{ID: f.ID, Conn: conn, CPUs: f.CPUs, GPUs: f.SimGPUs, Membership: lv, Logger: logger, Registry: reg}
	if httpLn != nil {
		cfg.HTTP = advertised(httpLn.Addr().String(), f.Advertise)
	}
	n, err := node.New(cfg)
	if err != nil {
		if httpLn != nil {
			httpLn.Close()
		}
		return cli.WithCode(cli.ExitInvalid, err)
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	err = n.Start(sctx)
	scancel()
	if err != nil {
		n.Close()
		if httpLn != nil {
			httpLn.Close()
		}
		return cli.WithCode(cli.ExitRunFailed, err)
	}
	catalog, err := n.ServeCatalog()
	if err != nil {
		n.Close()
		if httpLn != nil {
			httpLn.Close()
		}
		return cli.WithCode(cli.ExitUnreachable, fmt.Errorf("NATS: catalog: %w", err))
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = catalog.Close(cctx)
		cancel()
	}()
	var seeds []string
	if f.Join != "" {
		seeds = strings.Split(f.Join, ",")
	}
	ml, err := member.New(member.Config{ID: f.ID, BindAddr: f.Gossip, Advertise: f.Advertise, Join: seeds,
		Meta: n.AdvertisedMeta(), SecretKey: cred.GossipKeyBytes(), Logger: logger})
	if err == nil {
		err = ml.Start(ctx)
	}
	if err != nil {
		n.Close()
		if ml != nil {
			ml.Shutdown()
		}
		if httpLn != nil {
			httpLn.Close()
		}
		if errors.Is(err, member.ErrKey) {
			return cli.WithCode(cli.ExitUnauthorized, fmt.Errorf("gossip: %w", err)) // another cluster secret, or none
		}
		return cli.WithCode(cli.ExitUnreachable, fmt.Errorf("gossip: %w", err))
	}
	lv.l = ml

	var srv *http.Server
	served := make(chan struct{})
	if httpLn != nil {
		srv = &http.Server{Handler: handler(n, cred), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			defer close(served)
			_ = srv.Serve(httpLn)
		}()
	} else {
		close(served)
	}
	fmt.Fprintf(stdout, "node %s: up (nats %s, gossip %s, %d functions)\n", f.ID, f.NATS, f.Gossip, len(reg.Names()))
	<-ctx.Done()
	fmt.Fprintf(stdout, "node %s: draining\n", f.ID)
	dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	if err := n.Drain(dctx); err != nil {
		fmt.Fprintln(stderr, "node: drain:", err)
	}
	dcancel()
	n.Close()
	_ = ml.Shutdown()
	if srv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(sctx)
		scancel()
	}
	<-served
	return nil
}

func advertised(bound, host string) string {
	if host == "" {
		return bound
	}
	_, port, _ := net.SplitHostPort(bound)
	return net.JoinHostPort(host, port)
}

// handler serves /healthz (open, for container health checks) and
// /metrics, which needs the cluster's API token when it has a secret.
func handler(n *node.Node, cred proto.NodeCredential) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	// process_resident_memory_bytes and friends: bench --server (cmd/bench)
	// samples them for each node's peak memory
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(nodeCollector{n})
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"id\":%q,\"ok\":true}\n", n.ID())
	})
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if cred.APITokenHash != "" && (!ok || !cred.CheckToken(got)) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, "{\"error\":%q}\n", proto.ErrUnauthorized.Error())
			return
		}
		metrics.ServeHTTP(w, r)
	})
	return mux
}

// credential is the node's own credential, read from credFile or derived
// from the cluster secret in secretFile; secured is false with neither.
func credential(id, secretFile, credFile string) (cred proto.NodeCredential, secured bool, err error) {
	switch {
	case credFile != "" && secretFile != "":
		return cred, false, errors.New("--credentials-file and --secret-file: give one")
	case credFile != "":
		cred, err = proto.ReadNodeCredential(credFile, id)
		return cred, err == nil, err
	case secretFile != "":
		sec, err := cli.ReadSecret(secretFile)
		if err != nil {
			return cred, false, err
		}
		cred, err = sec.NodeCredential(id)
		return cred, err == nil, err
	}
	return cred, false, nil
}
