package coord

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// A coordinator told its cluster's size (Config.ReadyNodes, as the dev
// cluster is) is not ready, and refuses a submit as not ready (retried by
// clients, not "no alive node" as invalid input), until that many nodes are
// alive; then it stays ready. The e2e submit test raced this window: its
// health check passed before the dev cluster's node had joined.
func TestNotReadyBeforeTheClusterSize(t *testing.T) {
	s, _ := fuzzServer(t, func(c *Config) { c.ReadyNodes = 2 })
	if ok, why := s.Ready(); ok || why != "1 of the cluster's 2 nodes alive: still starting" {
		t.Fatalf("with 1 of 2 nodes: ready %v (%q)", ok, why)
	}
	flow := []byte("name: f\ntasks:\n  - {name: a, func: noop}\n")
	if _, err := s.Submit("f.yaml", flow); !errors.Is(err, proto.ErrNotReady) || errors.Is(err, proto.ErrInvalid) ||
		!strings.Contains(err.Error(), "1 of the cluster's 2 nodes alive") {
		t.Fatalf("submit with 1 of 2 nodes: %v, want not ready", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ml, err := member.New(member.Config{ID: "n2", BindAddr: "127.0.0.1:0", Join: []string{s.GossipAddr()},
		Meta: proto.Meta{Role: proto.RoleNode, ID: "n2", CPUs: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 20*time.Second, "ready once n2 is alive", func() bool {
		ok, _ := s.Ready()
		return ok
	})
	if err := ml.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	_ = ml.Shutdown()
	testsupport.Eventually(t, 20*time.Second, "n2 gone", func() bool { return nodeState(s, "n2") != proto.NodeAlive })
	if ok, why := s.Ready(); !ok {
		t.Fatalf("ready went back after a node left: %s", why)
	}
	if _, err := s.Submit("f.yaml", flow); err != nil {
		t.Fatalf("submit once ready: %v", err)
	}
}
