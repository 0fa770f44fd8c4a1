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

// rangedAlone starts a coordinator alone and nodes n1 and n2 on a NATS
// server of its own (at url), submits a run across both nodes, and checks
// that its run_submit was applied in ranges.
func rangedAlone(t *testing.T) (url string, c1 *Server) {
	t.Helper()
	url = testsupport.NATS(t).URL()
	c1 = leadingCoord(t, url, nil)
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
	return url, c1
}

// A coordinator alone (every server of its configuration reads ranges)
// writes its run_submits with the assignment in ranges, and applies them.
func TestRunSubmitInRangesWhereEveryCoordinatorReadsThem(t *testing.T) {
	rangedAlone(t)
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

// suffrage is id's place in s's raft configuration: "voter", "nonvoter"
// or "" where it has none.
func suffrage(t *testing.T, s *Server, id string) string {
	t.Helper()
	f := s.raft.GetConfiguration()
	must(t, f.Error())
	for _, sv := range f.Configuration().Servers {
		if string(sv.ID) == id {
			if sv.Suffrage == raft.Voter {
				return "voter"
			}
			return "nonvoter"
		}
	}
	return ""
}

// A leader of this build whose log holds a ranged run_submit never adds a
// coordinator of an earlier build as a voter, even where the ring no longer
// shows every server of its configuration (ghost: a server it cannot see,
// which turns entryRanges off), nor moves a known one (c2: a server of the
// configuration at another address) to its new address. Added, it would
// replicate the ranged entry, refuse it (ErrCommand) and hold no run where
// the leader holds it succeeded.
func TestOlderCoordinatorNeverAddedAsAVoter(t *testing.T) {
	for _, tc := range []struct{ name, nonvoter string }{
		{"server the ring misses", "ghost"},
		{"known at another address", "c2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, c1 := rangedAlone(t)
			seeds := []string{c1.GossipAddr()}
			must(t, c1.raft.AddNonvoter(raft.ServerID(tc.nonvoter), "127.0.0.1:1", 0, 5*time.Second).Error())

			c2 := startCoord(t, "c2", t.TempDir(), url, false, seeds, func(c *Config) { c.oldLog = true })
			testsupport.Eventually(t, 20*time.Second, "c2 refused or added as a voter", func() bool {
				return c1.votersRefused.Load() > 0 || suffrage(t, c1, c2.ID()) == "voter"
			})
			if got := suffrage(t, c1, c2.ID()); got == "voter" {
				t.Fatalf("c2, of an earlier build, is a voter of a configuration whose log holds a ranged run_submit")
			}
		})
	}
}

// Two coordinators of this build: the leader writes its run_submit in
// ranges and the follower applies it (it holds the run succeeded, from the
// ranged entry, not a snapshot).
func TestFollowerAppliesARangedRunSubmit(t *testing.T) {
	url := testsupport.NATS(t).URL()
	c1 := leadingCoord(t, url, nil)
	seeds := []string{c1.GossipAddr()}
	c2 := startCoord(t, "c2", t.TempDir(), url, false, seeds, nil)
	all := []*Server{c1, c2}
	testsupport.Eventually(t, 20*time.Second, "c2 a voter", func() bool { return suffrage(t, c1, c2.ID()) == "voter" })
	startFakeNode(t, "n1", url, seeds, 2, 0, nil)
	startFakeNode(t, "n2", url, seeds, 2, 0, nil)
	testsupport.Eventually(t, 10*time.Second, "c1 sees both nodes alive and c2 in the ring", func() bool {
		_, ok := c1.members.Member(c2.ID())
		return ok && nodeState(c1, "n1") == proto.NodeAlive && nodeState(c1, "n2") == proto.NodeAlive
	})
	submitWide(t, c1, all...)
	for _, s := range all {
		if n := s.fsm.ranged.Load(); n != 1 {
			t.Fatalf("%s applied %d run_submits in ranges, want 1", s.ID(), n)
		}
	}
}
