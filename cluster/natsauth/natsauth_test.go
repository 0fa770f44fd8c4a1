package natsauth_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/cluster/natsauth"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/natsembed"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/transport"
)

// securedNATS is a real embedded NATS server checking sec's credentials.
func securedNATS(t *testing.T, sec proto.Secret) string {
	t.Helper()
	return testsupport.NATS(t, func(o *natsembed.Options) {
		o.Authorize = func(user, password string) (*natsembed.Permissions, bool) {
			p, ok := natsauth.Authorize(sec, user, password)
			return (*natsembed.Permissions)(p), ok
		}
	}).URL()
}

func dial(t *testing.T, ctx context.Context, url string, opts ...transport.Option) *transport.Conn {
	t.Helper()
	c, err := transport.Connect(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A node holding n1's credential may send only as n1: the NATS server
// refuses its publishes as another node (a Signal batch, a term report, a
// fail envelope, a task event, the notice that one is stored), on control subjects (hf.ctl.*) and on the
// streams' API; and its subscriptions to what is addressed to another node
// (issue 14: every process used to share one user, and a batch's From was
// believed).
func TestNodeCredentialIsEnforcedByTheServer(t *testing.T) {
	ctx := testsupport.Context(t, time.Minute)
	sec, err := proto.DeriveSecret([]byte("the secret of the identity test"))
	if err != nil {
		t.Fatal(err)
	}
	url := securedNATS(t, sec)
	coord := dial(t, ctx, url, transport.WithUserPassword(sec.NATSUser, sec.NATSPassword))
	if err := coord.EnsureStreams(ctx, transport.StreamConfig{Memory: true}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	spy, err := coord.Subscribe("hf.>", func(m *nats.Msg) { mu.Lock(); seen[m.Subject]++; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close(ctx)
	if err := coord.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	cred, err := sec.NodeCredential("n1")
	if err != nil {
		t.Fatal(err)
	}
	n1 := dial(t, ctx, url, natsauth.ConnectOptions(cred)...)

	// What n1 may do arrives.
	const run = "r0000000000001-000001"
	own := func(s string, err error) string {
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	batch := transport.Encode(&transport.Batch{From: "n1", Seq: 1, Signals: []transport.Signal{{Run: run, Gen: 1, Act: 1, Kind: transport.SignalEdge}}})
	sigSubj := own(transport.SignalSubject(run, "n2", "n1"))
	allowed := []string{sigSubj, proto.TermSubject("n1"), proto.FailSubject("n1"), proto.AckSubject("n1")}
	// The batch goes out on each as a node's Batcher sends it, a core
	// publish; the record stream captures the signal subject's, and stores
	// it after the server has taken it in, so the record is read below
	// until it holds the batch (a read straight after the publish found
	// nothing on a busy machine).
	for _, subj := range allowed {
		if err := n1.Publish(subj, batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := n1.PublishEvents(ctx, transport.TaskEvent{Run: run, Gen: 1, Node: "n1", State: transport.TaskDone}); err != nil {
		t.Fatalf("n1's own task event: %v", err)
	}
	allowed = append(allowed, own(transport.EventSubject(run, "n1")), own(transport.EventNoticeSubject(run, "n1"))) // the event and the notice that it is stored
	got := 0
	var rerr error
	testsupport.Eventually(t, 10*time.Second, "n1's batch in the record", func() bool {
		got = 0
		rerr = n1.ReplaySignals(ctx, run, "", func(string, *transport.Batch) error { got++; return nil })
		return rerr != nil || got >= 1
	})
	if rerr != nil || got != 1 {
		t.Fatalf("n1 reading the record: %d batches, %v", got, rerr)
	}
	caught := make(chan struct{})
	follow, err := n1.FollowSignals(ctx, run, func(uint64, string, *transport.Batch) {}, func() { close(caught) })
	if err != nil {
		t.Fatalf("n1 following the record: %v", err)
	}
	select {
	case <-caught:
	case <-ctx.Done():
		t.Fatal("n1's follow of the record did not catch up")
	}
	follow.Stop()
	// n1 answers the coordinators' pings (a reply it may send once).
	pings, err := n1.Subscribe(proto.PingSubject("n1"), func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		t.Fatal(err)
	}
	if err := n1.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Request(ctx, proto.PingSubject("n1"), nil); err != nil {
		t.Fatalf("pinging n1: %v", err)
	}
	_ = pings.Close(ctx)
	testsupport.Eventually(t, 10*time.Second, "n1's own messages arrive", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range allowed {
			if seen[s] == 0 {
				return false
			}
		}
		return true
	})

	// What it may not do is refused by the server, and never arrives.
	refused := []string{
		own(transport.SignalSubject(run, "n3", "n2")), // a batch as n2
		own(transport.SignalSubject(run, "n1", "n2")), // to itself as n2
		own(transport.ControlSubject("n2")), transport.BroadcastSubject, own(transport.ControlSubject("n1")),
		proto.FailSubject("n2"), proto.TermSubject("n2"), proto.AckSubject("n2"), "hf.coord.fail", "hf.coord.term", "hf.coord.ack",
		own(transport.EventSubject(run, "n2")), own(transport.EventNoticeSubject(run, "n2")),
		proto.PingSubject("n2"),
		"$JS.API.STREAM.PURGE." + transport.StreamRecord, "$JS.API.STREAM.DELETE." + transport.StreamEvents,
		"$JS.API.STREAM.UPDATE." + transport.StreamRecord,
	}
	for _, subj := range refused {
		if err := n1.Publish(subj, batch); err != nil {
			t.Fatal(err)
		}
		testsupport.Eventually(t, 10*time.Second, "the server refuses n1's publish on "+subj, func() bool {
			err := n1.NATS().LastError()
			return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subj+`"`)
		})
	}
	for _, subj := range []string{own(transport.NodeSignalsFilter("n2")), own(transport.ControlSubject("n2")), proto.PingSubject("n2"), "hf.>", "_INBOX.>"} {
		sub, err := n1.Subscribe(subj, func(*nats.Msg) {})
		if err != nil {
			t.Fatal(err)
		}
		testsupport.Eventually(t, 10*time.Second, "the server refuses n1's subscription to "+subj, func() bool {
			err := n1.NATS().LastError()
			return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subj+`"`)
		})
		_ = sub.Close(ctx)
	}
	if err := coord.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for _, s := range refused {
		if seen[s] != 0 {
			t.Errorf("%s: a refused publish arrived", s)
		}
	}
	mu.Unlock()

	// n1's credential is n1's alone; another secret's is nobody's.
	other, _ := proto.DeriveSecret([]byte("another cluster's secret entirely"))
	otherCred, _ := other.NodeCredential("n1")
	for name, opts := range map[string][]transport.Option{
		"n1's password as n2":         {transport.WithUserPassword("node:n2", cred.NATSPassword)},
		"n1's password as hetflow":    {transport.WithUserPassword(sec.NATSUser, cred.NATSPassword)},
		"another secret's n1":         natsauth.ConnectOptions(otherCred),
		"the coordinators' as a node": {transport.WithUserPassword("node:n1", sec.NATSPassword)},
	} {
		cctx := testsupport.Context(t, 30*time.Second)
		c, err := transport.Connect(cctx, url, opts...)
		if err == nil {
			c.Close()
			t.Fatalf("%s: connected", name)
		}
		if !errors.Is(err, transport.ErrAuth) {
			t.Fatalf("%s: want ErrAuth, got %v", name, err)
		}
	}
}

// A credential file is written once, read back for its node only.
func TestNodeCredentialFile(t *testing.T) {
	sec, _ := proto.DeriveSecret([]byte("the secret of the credential file test"))
	cred, err := sec.NodeCredential("n7")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "n7.cred")
	if err := proto.WriteNodeCredential(path, cred); err != nil {
		t.Fatal(err)
	}
	if err := proto.WriteNodeCredential(path, cred); !errors.Is(err, proto.ErrInvalid) {
		t.Fatalf("overwriting: %v", err)
	}
	back, err := proto.ReadNodeCredential(path, "n7")
	if err != nil || back != cred {
		t.Fatalf("read back %+v, %v", back, err)
	}
	if _, err := proto.ReadNodeCredential(path, "n8"); !errors.Is(err, proto.ErrCredential) || !strings.Contains(err.Error(), `"n7"`) {
		t.Fatalf("as n8: %v", err)
	}
	if !back.CheckToken(sec.APIToken) || back.CheckToken("wrong") || back.CheckToken("") {
		t.Fatal("the credential's token check")
	}
	if _, err := (proto.Secret{}).NodeCredential("n1"); !errors.Is(err, proto.ErrInvalid) {
		t.Fatalf("without a secret: %v", err)
	}
	if _, err := sec.NodeCredential("a.b"); !errors.Is(err, proto.ErrInvalid) {
		t.Fatalf("bad id: %v", err)
	}
}

// proto checks node ids without importing transport (so the API client
// pulls in no NATS code); its rule must be transport's.
func TestValidNodeIDIsTransports(t *testing.T) {
	sec, err := proto.DeriveSecret([]byte("a secret for the id rule, 16+ bytes"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "", "all", "a.b", "a*", "a>", "a b", "a\x7f", "é", strings.Repeat("x", transport.MaxIDLen), strings.Repeat("x", transport.MaxIDLen+1), "node-7_x"} {
		_, perr := sec.NodeCredential(id)
		terr := transport.ValidateID("node", id)
		if (perr == nil) != (terr == nil) {
			t.Errorf("id %q: proto says %v, transport says %v", id, perr, terr)
		}
	}
}
