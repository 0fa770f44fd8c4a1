// Command natsd runs a NATS server with JetStream on disk, built from the
// nats-server Go module, for hetflow clusters (docker compose, e2e tests).
// With --secret-file it requires the credentials the cluster secret
// derives: the coordinators' (user "hetflow", see cluster/proto.DeriveSecret),
// allowed everything, or a node's own (user "node:<id>", an HMAC of the id
// under a key the secret derives: cluster/proto.Secret.NodeCredential),
// checked without a list of nodes and allowed only what that node may send
// (cluster/natsauth.NodePermissions).
//
//	natsd --addr 0.0.0.0:4222 --store /data [--secret-file F] [--http 0.0.0.0:8222] [--tls-cert C --tls-key K]
//	natsd health --server nats://127.0.0.1:4222 [--secret-file F] [--ca-file C]   (exit 0 when JetStream answers)
//	natsd --version
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hetflow/hetflow/cluster/natsauth"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/cli"
	"github.com/hetflow/hetflow/internal/natsembed"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func main() { os.Exit(run(os.Args[1:])) }

// run parses args as the natsd command line (cobra, in the style of the
// other binaries: --help exits 0, --version, a health subcommand) and
// returns the exit code.
func run(args []string) int {
	code := 0
	var sf serveFlags
	root := &cobra.Command{
		Use:   "natsd --store DIR [--addr HOST:PORT] [--secret-file F] [flags]",
		Short: "a NATS server with JetStream on disk, for hetflow clusters",
		Long: `natsd runs a NATS server with JetStream on disk, built from the nats-server Go
module, for hetflow clusters (docker compose, the e2e tests). With --secret-file
it lets in only the coordinators (the cluster secret's credentials) and nodes
holding their own credential, each allowed only what it may send.`,
		Version:       cli.Version(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          func(cmd *cobra.Command, _ []string) error { code = serve(sf); return nil },
	}
	fs := root.Flags()
	fs.StringVar(&sf.addr, "addr", "127.0.0.1:4222", "client listen address host:port")
	fs.StringVar(&sf.store, "store", "", "JetStream store directory (required)")
	fs.StringVar(&sf.secretFile, "secret-file", "", "cluster secret file: require the derived credentials")
	fs.StringVar(&sf.httpAddr, "http", "", "monitoring listen address host:port (optional)")
	fs.StringVar(&sf.tlsCert, "tls-cert", "", "require TLS from clients, with this PEM certificate (and --tls-key)")
	fs.StringVar(&sf.tlsKey, "tls-key", "", "the PEM key of --tls-cert")

	var hf healthFlags
	hc := &cobra.Command{
		Use:   "health [--server nats://HOST:PORT] [--secret-file F] [--ca-file C]",
		Short: "exit 0 when the server's JetStream answers (for container health checks)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { code = health(hf); return nil },
	}
	hc.Flags().StringVar(&hf.url, "server", "nats://127.0.0.1:4222", "server URL")
	hc.Flags().StringVar(&hf.url, "url", "nats://127.0.0.1:4222", "the same as --server")
	_ = hc.Flags().MarkHidden("url")
	hc.Flags().StringVar(&hf.secretFile, "secret-file", "", "cluster secret file")
	hc.Flags().StringVar(&hf.caFile, "ca-file", "", "PEM certificates to trust for a TLS server")
	root.AddCommand(hc)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		return 2 // cobra's own: an unknown flag or command
	}
	return code
}

type serveFlags struct{ addr, store, secretFile, httpAddr, tlsCert, tlsKey string }

type healthFlags struct{ url, secretFile, caFile string }

func serve(f serveFlags) int {
	addr, store, secretFile, httpAddr, tlsCert, tlsKey := &f.addr, &f.store, &f.secretFile, &f.httpAddr, &f.tlsCert, &f.tlsKey
	if *store == "" {
		fmt.Fprintln(os.Stderr, "natsd: --store is required")
		return 2
	}
	host, portS, err := net.SplitHostPort(*addr)
	port, perr := strconv.Atoi(portS)
	if err != nil || perr != nil {
		fmt.Fprintf(os.Stderr, "natsd: --addr %q: want host:port\n", *addr)
		return 2
	}
	o := natsembed.Options{Host: host, Port: port, StoreDir: *store, Logs: true}
	if *httpAddr != "" {
		h, p, err := net.SplitHostPort(*httpAddr)
		pp, perr := strconv.Atoi(p)
		if err != nil || perr != nil {
			fmt.Fprintf(os.Stderr, "natsd: --http %q: want host:port\n", *httpAddr)
			return 2
		}
		o.HTTPHost, o.HTTPPort = h, pp
	}
	sec, err := readSecret(*secretFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		return 2
	}
	if sec.NATSPassword != "" {
		o.Authorize = func(user, password string) (*natsembed.Permissions, bool) {
			p, ok := natsauth.Authorize(sec, user, password)
			return (*natsembed.Permissions)(p), ok
		}
	}
	if o.TLS, err = proto.ServerTLS(*tlsCert, *tlsKey); err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		return 2
	}
	s, err := natsembed.Start(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		return 1
	}
	fmt.Printf("natsd: listening on %s, JetStream store %s\n", s.URL(), *store)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	s.Shutdown()
	return 0
}

func readSecret(path string) (proto.Secret, error) {
	raw, err := proto.ReadSecretFile(path)
	if err != nil {
		return proto.Secret{}, err
	}
	return proto.DeriveSecret(raw)
}

func health(f healthFlags) int {
	url, secretFile, caFile := &f.url, &f.secretFile, &f.caFile
	sec, err := readSecret(*secretFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsd health:", err)
		return 2
	}
	tc, err := proto.ClientTLS(*caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsd health:", err)
		return 2
	}
	o := []nats.Option{nats.Timeout(2 * time.Second)}
	if tc != nil {
		o = append(o, nats.Secure(tc))
	}
	if sec.NATSUser != "" {
		o = append(o, nats.UserInfo(sec.NATSUser, sec.NATSPassword))
	}
	nc, err := nats.Connect(*url, o...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsd health:", err)
		return 1
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err == nil {
		_, err = js.AccountInfo()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsd health: JetStream:", err)
		return 1
	}
	return 0
}
