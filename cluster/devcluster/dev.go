// Package devcluster is hetflow's all-in-one cluster in one process: an
// embedded NATS server with JetStream, one raft coordinator and in-process
// nodes on loopback, for `coordinator dev`, a node SDK binary's `dev`
// subcommand, tests and benchmarks.
//
//	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 2, Registry: reg})
//	defer d.Close()
//	id, err := d.Client().Submit(ctx, "flow.yaml", text)
//
// It lives apart from package cluster so that a program that only talks to
// a cluster (cluster.Client) does not compile a coordinator, nodes and a NATS
// server into itself.
package devcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hetflow/hetflow/cluster"
	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/natsauth"
	"github.com/hetflow/hetflow/cluster/node"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/natsembed"
	"github.com/hetflow/hetflow/transport"
)

// Config configures an all-in-one cluster in one process.
type Config struct {
	Nodes   int // in-process nodes (default 3)
	CPUs    int // CPU workers per node (default 2)
	SimGPUs int // sim GPUs on the last node (default 1; -1 none)
	// GPUsEach, when > 0, gives every node that many sim GPUs instead
	// (SimGPUs is then ignored).
	GPUsEach int
	HTTPAddr string // coordinator API address (default 127.0.0.1:0)
	Dir      string // data directory (default: a temporary one, removed by Close)
	// Secret secures the cluster (proto.DeriveSecret): NATS requires its
	// credentials, the gossip ring its key, the API its token (Client uses it).
	Secret proto.Secret
	Logger *slog.Logger
	// MaxTasks and MaxFlowBytes are the coordinator's run size limits
	// (coord.Config; 0: its defaults). The bench's 100K-task HTDG file is
	// over the default 8 MiB.
	MaxTasks, MaxFlowBytes int
	// Registry holds the functions every node runs and the coordinator
	// checks flows against (nil: funcs.Default(), the built-ins). A user's
	// registry usually starts from funcs.Default() and adds to it.
	Registry *funcs.Registry
	// ExecAllow turns on the exec built-in for these programs on every node
	// (funcs.Registry.EnableExec, as node --exec-allow does); nil: off.
	ExecAllow []string
	// Placement is the coordinator's cost model (coord.Config.Placement;
	// zero: the default). Spread: true balances every run across the nodes
	// however small its tasks (tests of cross-node edges).
	Placement coord.Placement
}

// Cluster is an all-in-one cluster: an embedded NATS server with JetStream, one
// coordinator (raft with a durable store) and in-process nodes, each with its
// own executor, NATS connection and gossip member, all on loopback.
type Cluster struct {
	nats    *natsembed.Server
	coord   *coord.Server
	nodes   []*node.Node
	members []*member.List
	conns   []*transport.Conn
	subs    []*transport.Subscription // the nodes' catalog answers
	dir     string
	ownDir  bool
	token   string
}

// Start starts the all-in-one cluster and returns when the coordinator
// leads and every node has joined.
func Start(ctx context.Context, cfg Config) (d *Cluster, err error) {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 3
	}
	if cfg.CPUs <= 0 {
		cfg.CPUs = 2
	}
	if cfg.SimGPUs == 0 {
		cfg.SimGPUs = 1
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	if cfg.Registry == nil {
		cfg.Registry = funcs.Default() // and not a nil *Registry in coord.Config.Catalog
	}
	if len(cfg.ExecAllow) > 0 {
		cfg.Registry = cfg.Registry.Clone()
		if err := cfg.Registry.EnableExec(cfg.ExecAllow); err != nil {
			return nil, err
		}
	}
	dev := &Cluster{dir: cfg.Dir, token: cfg.Secret.APIToken}
	d = dev
	sec := cfg.Secret
	if d.dir == "" {
		if d.dir, err = os.MkdirTemp("", "hetflow-dev-"); err != nil {
			return nil, err
		}
		d.ownDir = true
	}
	defer func() {
		if err != nil {
			dev.Close() // not d: a failed start returns nil, which the named result already holds
		}
	}()
	no := natsembed.Options{Port: -1, StoreDir: filepath.Join(d.dir, "nats")}
	if sec.NATSPassword != "" {
		// Every node connects as itself, with its own credential, and may
		// send only as itself (natsauth.NodePermissions).
		no.Authorize = func(user, password string) (*natsembed.Permissions, bool) {
			p, ok := natsauth.Authorize(sec, user, password)
			return (*natsembed.Permissions)(p), ok
		}
	}
	if d.nats, err = natsembed.Start(no); err != nil {
		return nil, err
	}
	d.coord, err = coord.New(coord.Config{
		ID: "c1", DataDir: filepath.Join(d.dir, "c1"), RaftAddr: "127.0.0.1:0", HTTPAddr: cfg.HTTPAddr,
		GossipAddr: "127.0.0.1:0", Bootstrap: true, NATSURL: d.nats.URL(), Secret: sec, Logger: cfg.Logger,
		MaxTasks: cfg.MaxTasks, MaxFlowBytes: cfg.MaxFlowBytes, Placement: cfg.Placement,
		Catalog:        cfg.Registry,
		InProcessNodes: true,      // gossip between members of one process learns nothing
		ReadyNodes:     cfg.Nodes, // not healthy, nor taking submits, before its nodes are up
	})
	if err != nil {
		return nil, err
	}
	if err = d.coord.Start(ctx); err != nil {
		return nil, err
	}
	if err = d.coord.WaitLeader(ctx); err != nil {
		return nil, err
	}
	seed := []string{d.coord.GossipAddr()}
	for i := 0; i < cfg.Nodes; i++ {
		id := "n" + strconv.Itoa(i+1)
		opts := []transport.Option{transport.WithName("dev " + id)}
		if sec.NATSPassword != "" {
			cred, err := sec.NodeCredential(id)
			if err != nil {
				return nil, err
			}
			opts = append(opts, natsauth.ConnectOptions(cred)...)
		}
		conn, err := transport.Connect(ctx, d.nats.URL(), opts...)
		if err != nil {
			return nil, err
		}
		d.conns = append(d.conns, conn)
		gpus := 0
		switch {
		case cfg.GPUsEach > 0:
			gpus = cfg.GPUsEach
		case i == cfg.Nodes-1 && cfg.SimGPUs > 0:
			gpus = cfg.SimGPUs
		}
		n, err := node.New(node.Config{ID: id, Conn: conn, CPUs: cfg.CPUs, GPUs: gpus, Logger: cfg.Logger, Registry: cfg.Registry})
		if err != nil {
			return nil, err
		}
		d.nodes = append(d.nodes, n)
		if err := n.Start(ctx); err != nil {
			return nil, err
		}
		sub, err := n.ServeCatalog()
		if err != nil {
			return nil, err
		}
		d.subs = append(d.subs, sub)
		ml, err := member.New(member.Config{ID: id, BindAddr: "127.0.0.1:0", Join: seed, Meta: n.AdvertisedMeta(),
			SecretKey: sec.GossipKey, Logger: cfg.Logger, NoCompression: true})
		if err != nil {
			return nil, err
		}
		d.members = append(d.members, ml)
		if err := ml.Start(ctx); err != nil {
			return nil, err
		}
	}
	c := d.Client()
	for {
		nodes, err := c.Nodes(ctx)
		if err == nil && alive(nodes) == cfg.Nodes {
			return d, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dev cluster: waiting for %d nodes: %w", cfg.Nodes, ctx.Err())
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func alive(ns []proto.NodeInfo) int {
	k := 0
	for _, n := range ns {
		if n.State == proto.NodeAlive {
			k++
		}
	}
	return k
}

// URL is the coordinator's API address (http://host:port).
func (d *Cluster) URL() string { return "http://" + d.coord.HTTPAddr() }

// Client returns a client of the dev cluster (with the API token when it
// has a secret).
func (d *Cluster) Client() *cluster.Client { return cluster.NewClient([]string{d.URL()}, d.token) }

// NATSURL is the embedded NATS server's client URL.
func (d *Cluster) NATSURL() string { return d.nats.URL() }

// GossipAddr is the coordinator's gossip address (a seed to join).
func (d *Cluster) GossipAddr() string { return d.coord.GossipAddr() }

// Coordinator is the dev cluster's coordinator.
func (d *Cluster) Coordinator() *coord.Server { return d.coord }

// Nodes returns the in-process nodes, in start order (n1, n2, ...), for
// their counters (Node.Stats, Node.Executor().Stats()).
func (d *Cluster) Nodes() []*node.Node { return append([]*node.Node(nil), d.nodes...) }

// Close stops everything and removes a temporary data directory.
func (d *Cluster) Close() error {
	var errs []error
	for _, m := range d.members {
		_ = m.Leave(200 * time.Millisecond)
		errs = append(errs, m.Shutdown())
	}
	for _, s := range d.subs {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, s.Close(cctx))
		cancel()
	}
	for _, n := range d.nodes {
		errs = append(errs, n.Close())
	}
	for _, c := range d.conns {
		c.Close()
	}
	if d.coord != nil {
		errs = append(errs, d.coord.Close())
	}
	if d.nats != nil {
		d.nats.Shutdown()
	}
	if d.ownDir {
		errs = append(errs, os.RemoveAll(d.dir))
	}
	return errors.Join(errs...)
}
