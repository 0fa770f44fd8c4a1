package coord

import (
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// submitWide submits wideFlow to s and waits until every coordinator of
// all holds the run succeeded.
func submitWide(t *testing.T, s *Server, all ...*Server) string {
	t.Helper()
	var sub proto.SubmitResponse
	if code, _ := api(t, s.HTTPAddr(), "POST", "/v1/runs", "", proto.SubmitRequest{Path: "wide.yaml", Flow: wideFlow}, &sub); code != http.StatusCreated {
		t.Fatalf("submit to %s: %d", s.ID(), code)
	}
	for _, c := range all {
		testsupport.Eventually(t, 15*time.Second, c.ID()+" holds the run succeeded", func() bool { return runState(c, sub.ID) == proto.RunSucceeded })
	}
	return sub.ID
}

// A coordinator alone (every server of its configuration reads ranges)
// writes its run_submits with the assignment in ranges, and applies them.
func TestRunSubmitInRangesWhereEveryCoordinatorReadsThem(t *testing.T) {
	url := testsupport.NATS(t).URL()
	c1 := leadingCoord(t, url, nil)
	seeds := []string{c1.GossipAddr()}
	startFakeNode(t, "n1", url, seeds, 2, 0, nil)
	startFakeNode(t, "n2", url, seeds, 2, 0, nil)
	testsupport.Eventually(t, 10*time.Second, "both nodes alive", func() bool {
		return nodeState(c1, "n1") == proto.NodeAlive && nodeState(c1, "n2") == proto.NodeAlive
	})
	submitWide(t, c1, c1)
	if n := c1.fsm.ranged.Load(); n != 1 {
		t.Fatalf("%d run_submits applied in ranges, want 1", n)
	}
}

// A coordinator of an earlier build (Config.oldLog: it says it reads no
// later form, and refuses a ranged entry as that build did) in the
// configuration: the leader of this build writes the form it reads, so
// it holds every run. Both directions: the earlier build leads first (its
// entries are read by this build), then this build leads.
func TestRunSubmitNotInRangesWithAnOlderCoordinator(t *testing.T) {
	url := testsupport.NATS(t).URL()
	old := startCoord(t, "c1", t.TempDir(), url, true, nil, func(c *Config) { c.oldLog = true })
	must(t, old.WaitLeader(ctxFor(t, 20*time.Second)))
	testsupport.Eventually(t, 10*time.Second, "c1 leads", old.Leader)
	seeds := []string{old.GossipAddr()}
	cur := startCoord(t, "c2", t.TempDir(), url, false, seeds, nil)
	all := []*Server{old, cur}
	testsupport.Eventually(t, 20*time.Second, "two voters", func() bool { l := leaderOf(all); return l != nil && voters(l) == 2 })
	startFakeNode(t, "n1", url, seeds, 2, 0, nil)
	startFakeNode(t, "n2", url, seeds, 2, 0, nil)
	for _, s := range all {
		testsupport.Eventually(t, 10*time.Second, s.ID()+" sees both nodes alive", func() bool {
			return nodeState(s, "n1") == proto.NodeAlive && nodeState(s, "n2") == proto.NodeAlive
		})
	}
	submitWide(t, old, all...)

	// This build leads, the earlier one a voter still.
	testsupport.Eventually(t, 20*time.Second, "c2 leads", func() bool {
		if cur.Leader() {
			return true
		}
		if old.Leader() {
			_ = old.raft.LeadershipTransferToServer(raft.ServerID(cur.ID()), raft.ServerAddress(cur.raftAddr)).Error()
		}
		return cur.Leader()
	})
	testsupport.Eventually(t, 10*time.Second, "c2 sees the nodes alive", func() bool {
		return nodeState(cur, "n1") == proto.NodeAlive && nodeState(cur, "n2") == proto.NodeAlive
	})
	submitWide(t, cur, all...)
	for _, s := range all {
		if n := s.fsm.ranged.Load(); n != 0 {
			t.Fatalf("%s applied %d run_submits in ranges with a coordinator of an earlier build in the configuration", s.ID(), n)
		}
	}
}
