// Command node is a hetflow cluster node: it joins the gossip ring
// (advertising its CPUs and GPUs), connects to NATS, and runs the parts of
// flows the coordinator assigns it on the local executor. SIGTERM drains it:
// it takes no new runs, finishes what it holds, and leaves the ring.
//
//	node --id ID --nats URL --gossip HOST:PORT --join HOST:PORT,... [--http HOST:PORT]
//	     [--cpus N] [--sim-gpus G] [--advertise HOST] [--credentials-file F | --secret-file F] [--nats-ca F]
//
// --credentials-file is the node's own credential (`coordinator credentials
// ID`): recommended, since it lets the node send only as itself and holds
// neither the cluster secret nor the API token. --secret-file still works:
// the node derives its own credential from the secret.
//
//	node health --url http://HOST:PORT     (exit 0 when /healthz answers 200)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/node"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/transport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "health" {
		os.Exit(health(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:]))
}

func health(args []string) int {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:9090", "node HTTP address")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(strings.TrimSuffix(*url, "/") + "/healthz")
	if err != nil {
		fmt.Fprintln(os.Stderr, "node health:", err)
		return 3
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "node health:", resp.Status)
		return 1
	}
	return 0
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

func run(args []string) int {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	id := fs.String("id", "", "node id (required)")
	natsURL := fs.String("nats", "nats://127.0.0.1:4222", "NATS URL")
	gossip := fs.String("gossip", "127.0.0.1:0", "gossip (memberlist) listen address host:port")
	join := fs.String("join", "", "gossip seeds host:port,...")
	httpAddr := fs.String("http", "", "HTTP address for /healthz and /metrics (optional)")
	cpus := fs.Int("cpus", 0, "CPU workers (0: GOMAXPROCS)")
	gpus := fs.Int("sim-gpus", 0, "simulated GPU devices (sim backend)")
	advertise := fs.String("advertise", "", "host others reach this node at")
	secretFile := fs.String("secret-file", "", "cluster secret file (the node derives its credential; --credentials-file is recommended)")
	credFile := fs.String("credentials-file", "", "this node's credential file (coordinator credentials ID)")
	natsCA := fs.String("nats-ca", "", "PEM certificates to trust for a TLS NATS server")
	verbose := fs.Bool("v", false, "log to stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *id == "" {
		fmt.Fprintln(os.Stderr, "node: --id is required")
		return 2
	}
	if err := transport.ValidateID("node id", *id); err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		return 2
	}
	cred, secured, err := credential(*id, *secretFile, *credFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		return 2
	}
	var logger *slog.Logger
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	copts := []transport.Option{transport.WithName("node " + *id)}
	if secured {
		copts = append(copts, cred.ConnectOptions()...)
	}
	tc, err := proto.ClientTLS(*natsCA)
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		return 2
	}
	if tc != nil {
		copts = append(copts, transport.WithTLS(tc))
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	conn, err := transport.Connect(cctx, *natsURL, copts...)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "node: NATS:", err)
		if errors.Is(err, transport.ErrAuth) {
			return 4
		}
		return 3
	}
	defer conn.Close()

	var httpLn net.Listener
	if *httpAddr != "" {
		if httpLn, err = net.Listen("tcp", *httpAddr); err != nil {
			fmt.Fprintln(os.Stderr, "node: --http:", err)
			return 2
		}
	}
	lv := &leaver{}
	cfg := node.Config{ID: *id, Conn: conn, CPUs: *cpus, GPUs: *gpus, Membership: lv, Logger: logger}
	if httpLn != nil {
		cfg.HTTP = advertised(httpLn.Addr().String(), *advertise)
	}
	n, err := node.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		return 2
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	err = n.Start(sctx)
	scancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		n.Close()
		return 1
	}
	var seeds []string
	if *join != "" {
		seeds = strings.Split(*join, ",")
	}
	ml, err := member.New(member.Config{ID: *id, BindAddr: *gossip, Advertise: *advertise, Join: seeds,
		Meta: n.Meta(), SecretKey: cred.GossipKeyBytes(), Logger: logger})
	if err == nil {
		err = ml.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "node: gossip:", err)
		n.Close()
		if ml != nil {
			ml.Shutdown()
		}
		if errors.Is(err, member.ErrKey) {
			return 4 // another cluster secret, or none
		}
		return 3
	}
	lv.l = ml

	var srv *http.Server
	if httpLn != nil {
		srv = &http.Server{Handler: handler(n, cred), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(httpLn)
	}
	fmt.Printf("node %s: up (nats %s, gossip %s)\n", *id, *natsURL, *gossip)
	<-ctx.Done()
	fmt.Printf("node %s: draining\n", *id)
	dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	if err := n.Drain(dctx); err != nil {
		fmt.Fprintln(os.Stderr, "node: drain:", err)
	}
	dcancel()
	n.Close()
	_ = ml.Shutdown()
	if srv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(sctx)
		scancel()
	}
	return 0
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
		raw, err := proto.ReadSecretFile(secretFile)
		if err != nil {
			return cred, false, err
		}
		sec, err := proto.DeriveSecret(raw)
		if err != nil {
			return cred, false, err
		}
		cred, err = sec.NodeCredential(id)
		return cred, err == nil, err
	}
	return cred, false, nil
}

func advertised(bound, host string) string {
	if host == "" {
		return bound
	}
	_, port, _ := net.SplitHostPort(bound)
	return net.JoinHostPort(host, port)
}

// handler serves /healthz (open, for container health checks) and
// /metrics, which needs the cluster's API token when it has a secret (the
// credential holds its hash).
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
