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
//	natsd health --url nats://127.0.0.1:4222 [--secret-file F] [--ca-file C]   (exit 0 when JetStream answers)
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hetflow/hetflow/cluster/natsauth"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/natsembed"
	"github.com/nats-io/nats.go"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "health" {
		os.Exit(health(os.Args[2:]))
	}
	os.Exit(serve(os.Args[1:]))
}

func serve(args []string) int {
	fs := flag.NewFlagSet("natsd", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:4222", "client listen address host:port")
	store := fs.String("store", "", "JetStream store directory (required)")
	secretFile := fs.String("secret-file", "", "cluster secret file: require the derived credentials")
	httpAddr := fs.String("http", "", "monitoring listen address host:port (optional)")
	tlsCert := fs.String("tls-cert", "", "require TLS from clients, with this PEM certificate (and --tls-key)")
	tlsKey := fs.String("tls-key", "", "the PEM key of --tls-cert")
	if err := fs.Parse(args); err != nil {
		return 2
	}
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

func health(args []string) int {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	url := fs.String("url", "nats://127.0.0.1:4222", "server URL")
	secretFile := fs.String("secret-file", "", "cluster secret file")
	caFile := fs.String("ca-file", "", "PEM certificates to trust for a TLS server")
	if err := fs.Parse(args); err != nil {
		return 2
	}
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
