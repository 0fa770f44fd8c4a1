package cluster_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/cluster"
	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/natsauth"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/transport"
)

// twoNodeFlow crosses nodes: a on n1, b on n2, c after both.
const twoNodeFlow = "name: two\ntasks:\n  - {name: a, func: hash, node: n1}\n  - {name: b, func: hash, node: n2, succeed: [a]}\n  - {name: c, func: hash, succeed: [a, b]}\n"

func secret(t *testing.T, s string) proto.Secret {
	t.Helper()
	sec, err := proto.DeriveSecret([]byte(s))
	must(t, err)
	return sec
}

// A dev cluster with a secret, every part real (embedded NATS with
// credentials, memberlist with the key, the coordinator checking the
// token): whoever lacks the secret cannot connect to NATS (so cannot
// publish on the run subjects nor take tasks), cannot join the ring and
// cannot submit; whoever holds it runs flows.
func TestSecuredDevClusterRefusesOutsiders(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	sec := secret(t, "the cluster secret of this test")
	other := secret(t, "another cluster's secret, not ours")
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 2, SimGPUs: -1, Secret: sec})
	must(t, err)
	t.Cleanup(func() { must(t, d.Close()) })

	// NATS: no credentials, or another secret's, are refused at once.
	for name, opts := range map[string][]transport.Option{
		"no credentials":    nil,
		"another secret's":  {transport.WithUserPassword(other.NATSUser, other.NATSPassword)},
		"a guessed account": {transport.WithUserPassword("hetflow", "hetflow")},
	} {
		cctx := timeout(t, time.Minute)
		nc, err := transport.Connect(cctx, d.NATSURL(), opts...)
		if err == nil {
			nc.Close()
			t.Fatalf("NATS with %s: connected", name)
		}
		if !errors.Is(err, transport.ErrAuth) || cctx.Err() != nil {
			t.Fatalf("NATS with %s: want ErrAuth at once, got %v", name, err)
		}
	}
	if nc, err := nats.Connect(d.NATSURL(), nats.Timeout(2*time.Second)); err == nil {
		// It must not be able to do anything, least of all send a node work.
		err = nc.Publish(transport.BroadcastSubject, []byte("x"))
		nc.Close()
		t.Fatalf("a plain NATS client connected (publish: %v)", err)
	}

	// Gossip: no key, or another secret's, cannot join.
	for name, key := range map[string][]byte{"no key": nil, "another secret's key": other.GossipKey} {
		l, err := member.New(member.Config{ID: "intruder", BindAddr: "127.0.0.1:0", Join: []string{d.GossipAddr()},
			SecretKey: key, Meta: proto.Meta{Role: proto.RoleNode, ID: "intruder", CPUs: 64}})
		must(t, err)
		jctx := timeout(t, time.Minute)
		err = l.Start(jctx)
		_ = l.Shutdown()
		if !errors.Is(err, member.ErrKey) || jctx.Err() != nil {
			t.Fatalf("gossip with %s: want ErrKey at once, got %v", name, err)
		}
	}

	// API: no token or a wrong one is refused and runs nothing.
	for _, tok := range []string{"", "wrong", other.APIToken} {
		c := cluster.NewClient([]string{d.URL()}, tok)
		if _, err := c.Submit(ctx, "two.yaml", []byte(twoNodeFlow)); !errors.Is(err, cluster.ErrUnauthorized) {
			t.Fatalf("submit with token %q: %v", tok, err)
		}
		if _, err := c.Nodes(ctx); !errors.Is(err, cluster.ErrUnauthorized) {
			t.Fatalf("nodes with token %q: %v", tok, err)
		}
	}
	c := d.Client()
	runs, err := c.Runs(ctx)
	must(t, err)
	if len(runs) != 0 {
		t.Fatalf("refused submits made runs: %+v", runs)
	}
	nodes, err := c.Nodes(ctx)
	must(t, err)
	for _, n := range nodes {
		if n.ID == "intruder" {
			t.Fatalf("the intruder is a node: %+v", nodes)
		}
	}

	// With the secret: the flow runs across both nodes.
	id, err := c.Submit(ctx, "two.yaml", []byte(twoNodeFlow))
	must(t, err)
	st, err := c.Wait(ctx, id, nil)
	must(t, err)
	if st.State != proto.RunSucceeded || len(st.Tasks) != 3 {
		t.Fatalf("secured run: %+v", st)
	}
}

// A peer holding the secret sends garbage, oversized and mismatched
// messages on a node's control and signal subjects and on the leader's term
// and fail subjects: each is dropped and counted, and the cluster keeps
// running flows.
func TestMalformedPeerMessagesAreDroppedAndCounted(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	sec := secret(t, "the cluster secret of this test")
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 2, SimGPUs: -1, Secret: sec})
	must(t, err)
	t.Cleanup(func() { must(t, d.Close()) })
	peer, err := transport.Connect(ctx, d.NATSURL(), transport.WithUserPassword(sec.NATSUser, sec.NATSPassword))
	must(t, err)
	defer peer.Close()

	long := strings.Repeat("k", 100<<10) // over the decoders' 64 KiB text limit
	garbage := [][]byte{nil, []byte("\xc1\xff garbage"), {0x93, 0x01}, {0xdd, 0xff, 0xff, 0xff, 0xff}}
	oversizedEnv := transport.Encode(&transport.Envelope{Kind: long, Run: "r1", Node: "n9"})
	truncated := transport.Encode(&transport.Assignment{Run: "r1", Gen: 1, Nodes: []string{"n1"}, Owner: []uint32{0}, Plan: []byte("{}")})
	truncated = truncated[:len(truncated)-3]
	ctl, err := transport.ControlSubject("n1")
	must(t, err)
	sig, err := transport.SignalSubject("rbad", "n1", "n2")
	must(t, err)
	badFrom := transport.Encode(&transport.Batch{From: strings.Repeat("n", transport.MaxIDLen+1)})
	otherRun := transport.Encode(&transport.Batch{From: "n2", Signals: []transport.Signal{{Run: "rother", Gen: 1, Src: 0, Dst: 1, Act: 1, Kind: transport.SignalEdge}}})

	// What each receiver will make of each message, by the decoders it uses.
	var wantMal, wantOver int
	tally := func(decode func([]byte) error, msgs [][]byte) {
		for _, m := range msgs {
			err := decode(m)
			if !errors.Is(err, transport.ErrMalformed) {
				t.Fatalf("test message %.40x decodes: %v", m, err)
			}
			wantMal++
			if errors.Is(err, transport.ErrOversized) {
				wantOver++
			}
		}
	}
	send := func(subject string, msgs ...[]byte) {
		t.Helper()
		for _, m := range msgs {
			must(t, peer.Publish(subject, m))
		}
	}
	toCtl := append(append([][]byte{}, garbage...), truncated, oversizedEnv)
	toSig := append(append([][]byte{}, garbage...), badFrom)
	tally(func(m []byte) error { _, err := transport.Decode(m, transport.Limits{}); return err }, append(toCtl, garbage[1]))
	tally(func(m []byte) error { var b transport.Batch; return b.Decode(m, transport.Limits{}) }, toSig)
	if wantOver != 2 {
		t.Fatalf("the oversized test messages are not oversized (%d)", wantOver)
	}
	send(ctl, toCtl...)
	send(transport.BroadcastSubject, garbage[1]) // n2 gets it too
	send(sig, toSig...)
	send(sig, otherRun)                                            // decodes, but names another run than its subject
	toTerm := append(append([][]byte{}, garbage...), oversizedEnv) // an Envelope is no TermReport
	toFail := append(append([][]byte{}, garbage...), truncated)
	send(proto.TermSubject("n9"), toTerm...)
	toAck := append(append([][]byte{}, garbage...), oversizedEnv) // an Envelope is no Ack
	send(proto.AckSubject("n9"), toAck...)
	send(proto.FailSubject("n1"), toFail...)
	send(proto.FailSubject("n9"), oversizedEnv)
	send(proto.FailSubject("n1"), transport.Encode(&transport.Envelope{Kind: "not-fail", Run: "r1", Node: "n1"}))
	must(t, peer.Sync(ctx))

	n1 := d.Nodes()[0]
	testsupport.Eventually(t, 20*time.Second, "n1 counts what it dropped", func() bool {
		s := n1.Stats()
		return s.MessagesMalformed == uint64(wantMal) && s.MessagesOversized == uint64(wantOver) && s.MessagesMismatched == 1
	})
	co := d.Coordinator()
	testsupport.Eventually(t, 20*time.Second, "the leader counts what it dropped", func() bool {
		return co.Dropped(proto.SubjectTerm, "malformed") == uint64(len(toTerm)) && co.Dropped(proto.SubjectFail, "malformed") == uint64(len(toFail)) &&
			co.Dropped(proto.SubjectAck, "malformed") == uint64(len(toAck)) &&
			co.Dropped(proto.SubjectFail, "oversized") == 1 && co.Dropped(proto.SubjectFail, "kind") == 1
	})
	if s := n1.Stats(); s.Assignments != 0 || s.Refused != 0 || s.RunsActive != 0 || s.SignalsEarly != 0 {
		t.Fatalf("n1 acted on garbage: %+v", s)
	}
	// n2 reads the broadcast on its own connection: counted in its time,
	// not by when n1's counts are seen (failed so once beside a CPU hog).
	testsupport.Eventually(t, 20*time.Second, "n2 counts the broadcast it dropped", func() bool {
		return d.Nodes()[1].Stats().MessagesMalformed >= 1
	})
	if s := d.Nodes()[1].Stats(); s.MessagesMalformed != 1 || s.Assignments != 0 || s.RunsActive != 0 {
		t.Fatalf("n2 was sent one broadcast, yet: %+v", s)
	}

	// Nothing crashed: a flow across both nodes still runs.
	c := d.Client()
	id, err := c.Submit(ctx, "two.yaml", []byte(twoNodeFlow))
	must(t, err)
	st, err := c.Wait(ctx, id, nil)
	must(t, err)
	if st.State != proto.RunSucceeded || len(st.Tasks) != 3 {
		t.Fatalf("run after the garbage: %+v", st)
	}
}

// forgeFlow crosses nodes and keeps its run open a while: a on n1, w (a
// sleep) and c on n2, c after a and w.
const forgeFlow = "name: forge\ntasks:\n  - {name: a, func: hash, node: n1}\n  - {name: w, func: sleep, args: {ms: 1500}, node: n2, succeed: [a]}\n  - {name: c, func: hash, node: n2, succeed: [a, w]}\n"

// A compromised process holding one node's own credential (n9, not even a
// node of the run) tries, while a run is running and after it finished,
// every forgery of issue 14: a Signal batch to n2 as n1 (a forged input, a
// forged condition's choice),
// a Cancel on n2's control subject, a fail envelope and a term report as
// n1 or on the old shared subjects, a task event rewriting the finished
// run's output as n1, as n2 in the body, or of a generation to come. The
// NATS server refuses what names another sender, receivers take the
// sender from the subject, the leader and the status fold believe only a
// node of the run about its own tasks: the run succeeds with the output
// of an unattacked run, and keeps it.
func TestForgeriesWithANodeCredentialFail(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	sec := secret(t, "the cluster secret of the forgery test")
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 2, SimGPUs: -1, Secret: sec})
	must(t, err)
	t.Cleanup(func() { must(t, d.Close()) })
	c := d.Client()
	sink := func(st proto.RunStatus) string {
		for _, task := range st.Tasks {
			if task.Name == "c" {
				return task.Output
			}
		}
		return ""
	}
	id, err := c.Submit(ctx, "forge.yaml", []byte(forgeFlow))
	must(t, err)
	base, err := c.Wait(ctx, id, nil)
	must(t, err)
	if base.State != proto.RunSucceeded || sink(base) == "" {
		t.Fatalf("unattacked run: %+v", base)
	}

	cred, err := sec.NodeCredential("n9")
	must(t, err)
	evil, err := transport.Connect(ctx, d.NATSURL(), natsauth.ConnectOptions(cred)...)
	must(t, err)
	defer evil.Close()
	refused := func(subj string, data []byte) {
		t.Helper()
		must(t, evil.Publish(subj, data))
		testsupport.Eventually(t, 10*time.Second, "the server refuses n9's publish on "+subj, func() bool {
			err := evil.NATS().LastError()
			return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subj+`"`)
		})
	}
	subject := func(s string, err error) string { t.Helper(); must(t, err); return s }

	id, err = c.Submit(ctx, "forge.yaml", []byte(forgeFlow))
	must(t, err)
	f, err := spec.Parse("forge.yaml", []byte(forgeFlow))
	must(t, err)
	g, err := f.Expand()
	must(t, err)
	a, _ := g.Lookup("a")
	cv, _ := g.Lookup("c")
	forged := transport.Encode(&transport.Batch{From: "n1", Seq: 1, Signals: []transport.Signal{
		{Run: id, Gen: 1, Src: uint32(a), Dst: uint32(cv), Act: 1, Kind: transport.SignalEdge, Output: []byte("forged")}}})
	n2 := d.Nodes()[1]
	mismatched := n2.Stats().MessagesMismatched
	refused(subject(transport.SignalSubject(id, "n2", "n1")), forged)
	choice := transport.Encode(&transport.Batch{From: "n2", Seq: 2, Signals: []transport.Signal{ // a forged condition's pick
		{Run: id, Gen: 1, Src: uint32(cv), Dst: uint32(a), Act: 1, Kind: transport.SignalChoice}}})
	refused(subject(transport.SignalSubject(id, "n1", "n2")), choice)
	must(t, evil.Publish(subject(transport.SignalSubject(id, "n2", "n9")), forged)) // n9's own subject, n1 in the body
	must(t, evil.Sync(ctx))
	testsupport.EventuallyState(t, 10*time.Second, "n2 drops a batch whose body names another sender", func() (bool, string) {
		s := n2.Stats()
		// (counted again when n2 reads it back from the record)
		return s.MessagesMismatched > mismatched, fmt.Sprintf("%+v %v", s, evil.NATS().LastError())
	})
	refused(subject(transport.ControlSubject("n2")), transport.Encode(&transport.Cancel{Run: id, Gen: 1, Reason: "forged"}))
	failBody, _ := json.Marshal(proto.FailBody{Task: "c", Error: "forged"})
	fail := func(node string) []byte {
		return transport.Encode(&transport.Envelope{Kind: proto.KindFail, Run: id, Node: node, Body: failBody})
	}
	refused(proto.FailSubject("n1"), fail("n1"))
	refused("hf.coord.fail", fail("n1"))
	refused(proto.TermSubject("n1"), transport.Encode(&transport.TermReport{Run: id, Gen: 1, Node: "n1", Idle: true}))
	refused(proto.AckSubject("n1"), transport.Encode(&transport.Ack{Run: id, Gen: 1, Node: "n1"}))
	must(t, evil.Publish(proto.FailSubject("n9"), fail("n9"))) // allowed: n9 is no node of the run
	must(t, evil.Publish(proto.FailSubject("n9"), fail("n1"))) // n1 in the body
	forgedAck := transport.Encode(&transport.Ack{Run: id, Gen: 1, Node: "n1"})
	must(t, evil.Publish(proto.AckSubject("n9"), forgedAck)) // n1 in the body
	must(t, evil.Sync(ctx))
	testsupport.Eventually(t, 10*time.Second, "the leader drops an ack whose body names another node than its subject", func() bool {
		return d.Coordinator().Dropped(proto.SubjectAck, "sender") == 1
	})
	st, err := c.Wait(ctx, id, nil)
	must(t, err)
	if st.State != proto.RunSucceeded || sink(st) != sink(base) {
		t.Fatalf("attacked run: %s %q, output %s (unattacked %s)", st.State, st.Error, sink(st), sink(base))
	}

	// The finished run's output cannot be rewritten.
	rewrite := transport.TaskEvent{Run: id, Gen: 99, Task: uint32(cv), Node: "n2", State: transport.TaskDone, Act: 9, Executions: 1, Output: []byte("forged")}
	refused(subject(transport.EventSubject(id, "n2")), transport.Encode(&rewrite))
	_, err = evil.JetStream().Publish(ctx, subject(transport.EventSubject(id, "n9")), transport.Encode(&rewrite)) // n2 in the body
	must(t, err)
	rewrite.Node = "n9"
	must(t, evil.PublishEvents(ctx, rewrite)) // n9 does not own c, and there is no generation 99
	rewrite.Gen = 1
	must(t, evil.PublishEvents(ctx, rewrite))
	after, err := c.Status(ctx, id)
	must(t, err)
	if after.State != proto.RunSucceeded || sink(after) != sink(base) {
		t.Fatalf("after the forged events: %s, output %s (was %s)", after.State, sink(after), sink(base))
	}
}

// A holder of the gossip key (every node; here n1's own credential)
// announces a made-up node, n9, with many CPUs, and cannot answer n9's
// pings: its credential may not subscribe to n9's ping subject. n9 stays
// suspect, a flow pinned to it is refused, and flows that would fit it are
// placed on the real nodes only and succeed.
func TestAForgedGossipMemberGetsNoWork(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	sec := secret(t, "the cluster secret of the forged member test")
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 2, SimGPUs: -1, Secret: sec})
	must(t, err)
	t.Cleanup(func() { must(t, d.Close()) })
	c := d.Client()

	cred, err := sec.NodeCredential("n1")
	must(t, err)
	evil, err := transport.Connect(ctx, d.NATSURL(), natsauth.ConnectOptions(cred)...)
	must(t, err)
	defer evil.Close()
	sub, err := evil.NATS().Subscribe(proto.PingSubject("n9"), func(m *nats.Msg) { _ = m.Respond([]byte("forged")) })
	must(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	testsupport.Eventually(t, 10*time.Second, "the server refuses n1's subscription to n9's pings", func() bool {
		err := evil.NATS().LastError()
		return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), proto.PingSubject("n9"))
	})

	forged, err := member.New(member.Config{ID: "n9", BindAddr: "127.0.0.1:0", Join: []string{d.GossipAddr()},
		SecretKey: cred.GossipKeyBytes(), Meta: proto.Meta{Role: proto.RoleNode, ID: "n9", CPUs: 64, Boot: "forged"}})
	must(t, err)
	must(t, forged.Start(ctx))
	t.Cleanup(func() { _ = forged.Shutdown() })
	state := func(id string) string {
		nodes, err := c.Nodes(ctx)
		must(t, err)
		for _, n := range nodes {
			if n.ID == id {
				return n.State
			}
		}
		return ""
	}
	testsupport.Eventually(t, 20*time.Second, "the leader records n9", func() bool { return state("n9") != "" })

	if _, err := c.Submit(ctx, "pinned.yaml", []byte("name: pinned\ntasks:\n  - {name: a, func: hash, node: n9}\n")); err == nil {
		t.Fatal("a flow pinned to the forged member was accepted")
	}
	var wide strings.Builder
	wide.WriteString("name: wide\ntasks:\n")
	for i := range 16 {
		fmt.Fprintf(&wide, "  - {name: t%d, func: sleep, args: {ms: 20}}\n", i)
	}
	for _, flow := range []string{twoNodeFlow, wide.String()} {
		id, err := c.Submit(ctx, "flow.yaml", []byte(flow))
		must(t, err)
		st, err := c.Wait(ctx, id, nil)
		must(t, err)
		if st.State != proto.RunSucceeded {
			t.Fatalf("run beside a forged member: %s %q", st.State, st.Error)
		}
		for _, task := range st.Tasks {
			if task.Node != "n1" && task.Node != "n2" {
				t.Fatalf("task %s placed on %q", task.Name, task.Node)
			}
		}
	}
	if st := state("n9"); st != proto.NodeSuspect {
		t.Fatalf("the forged member is %s, want suspect", st)
	}
}
