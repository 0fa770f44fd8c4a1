package coord

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/proto"
)

// A coordinator that restarts must find the other coordinators again
// whatever order they come back in, with or without --join: its raft
// configuration names its peers, and peersFile (in the data directory)
// remembers where their gossip and API listen. findPeers joins the gossip
// addresses of every peer of the configuration it does not see alive,
// forever; the others do the same for it, so one that restarted alone (the
// bootstrap coordinator has no --join) is pulled back in as well.
//
// Until it sees one of its peers in the ring a coordinator cannot lead
// (canLead): the leader loop judges nodes by the ring, and an empty ring
// would make every node look dead. One elected before that hands the
// leadership on (watchLeadership), and /healthz says it is not ready.

const peersFile = "peers.json"

// peerAddrs is what a coordinator remembers of another.
type peerAddrs struct {
	Gossip string `json:"gossip"`
	HTTP   string `json:"http"`
	Raft   string `json:"raft"`
}

// Intervals of findPeers: while a peer is missing, and otherwise (when a
// member is dead: the two halves of a healed partition find each other).
const (
	seekMissing = 500 * time.Millisecond
	seekDead    = 2 * time.Second
	// leadGrace is how long an elected coordinator that cannot lead waits
	// for the ring before it hands the leadership on.
	leadGrace = 2 * time.Second
)

// loadPeers reads peersFile; a missing one is empty. A file that does not
// parse is ignored (it is a cache: the ring rebuilds it).
func (s *Server) loadPeers() {
	s.peers = map[string]peerAddrs{}
	b, err := os.ReadFile(filepath.Join(s.cfg.DataDir, peersFile))
	if err != nil {
		return
	}
	if err := json.Unmarshal(b, &s.peers); err != nil {
		s.log.Warn("ignoring unreadable peer list", "file", peersFile, "err", err)
		s.peers = map[string]peerAddrs{}
	}
}

// notePeers records the coordinators the ring shows alive and writes
// peersFile when that changed.
func (s *Server) notePeers(ms []member.Member) {
	s.mu.Lock()
	changed := false
	for _, m := range ms {
		if m.Meta.Role != proto.RoleCoordinator || m.ID == s.cfg.ID || m.State != proto.NodeAlive {
			continue
		}
		p := peerAddrs{Gossip: m.Addr, HTTP: m.Meta.HTTP, Raft: m.Meta.Raft}
		if s.peers[m.ID] != p {
			s.peers[m.ID] = p
			changed = true
		}
	}
	var b []byte
	if changed {
		b, _ = json.MarshalIndent(s.peers, "", "  ")
	}
	s.mu.Unlock()
	if changed {
		if err := writeFileAtomic(filepath.Join(s.cfg.DataDir, peersFile), b); err != nil {
			s.log.Warn("writing the peer list", "err", err)
		}
	}
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// raftPeers returns the other servers of raft's latest configuration.
func (s *Server) raftPeers() map[string]bool {
	out := map[string]bool{}
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return out
	}
	for _, sv := range f.Configuration().Servers {
		if string(sv.ID) != s.cfg.ID {
			out[string(sv.ID)] = sv.Suffrage == raft.Voter
		}
	}
	return out
}

// present: a member that is in the ring now.
func present(m member.Member) bool {
	return m.State == proto.NodeAlive || m.State == proto.NodeSuspect
}

// seeds returns the gossip addresses to join now: those of the raft peers
// not present in the ring (where the ring last saw them, else where
// peersFile says) and --join. need says whether to join them: a peer of the
// configuration is missing, or the ring holds nobody else.
func (s *Server) seeds(ms []member.Member) (addrs []string, need bool) {
	seen := map[string]member.Member{}
	alone := true
	for _, m := range ms {
		seen[m.ID] = m
		alone = alone && (m.ID == s.cfg.ID || !present(m))
	}
	set := map[string]bool{}
	for _, a := range s.cfg.Join {
		set[a] = true
	}
	peers := s.raftPeers()
	s.mu.Lock()
	for id := range peers {
		if m, ok := seen[id]; ok && present(m) {
			continue
		}
		need = true
		if m, ok := seen[id]; ok && m.Addr != "" {
			set[m.Addr] = true
		}
		if p, ok := s.peers[id]; ok && p.Gossip != "" {
			set[p.Gossip] = true
		}
	}
	if alone {
		for id, p := range s.peers {
			if _, ok := peers[id]; (ok || len(peers) == 0) && p.Gossip != "" {
				set[p.Gossip] = true
			}
		}
	}
	s.mu.Unlock()
	return slices.Sorted(maps.Keys(set)), need || alone
}

// joinSeeds contacts the seeds once; a seed with another gossip key is an
// error (ErrKey), no answer is not.
func (s *Server) joinSeeds(seeds []string) (int, error) {
	if len(seeds) == 0 {
		return 0, nil
	}
	n, err := s.members.Join(seeds)
	if n == 0 && errors.Is(err, member.ErrKey) {
		return 0, fmt.Errorf("coord: %w", err)
	}
	return n, nil
}

// findPeers keeps this coordinator in one ring with its raft peers.
func (s *Server) findPeers() {
	defer s.wg.Done()
	t := time.NewTicker(seekMissing)
	defer t.Stop()
	var lastDead time.Time
	var warned bool
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ms := s.members.Members()
		s.notePeers(ms)
		seeds, need := s.seeds(ms)
		if !need {
			dead := false
			for _, m := range ms {
				dead = dead || m.State == proto.NodeDead
			}
			if !dead || time.Since(lastDead) < seekDead {
				continue
			}
			lastDead = time.Now()
			s.mu.Lock()
			for _, p := range s.peers {
				seeds = append(seeds, p.Gossip)
			}
			s.mu.Unlock()
		}
		n, err := s.joinSeeds(seeds)
		switch {
		case err != nil && !warned:
			s.log.Error("a gossip seed has another cluster secret", "err", err)
			warned = true
		case n > 0:
			warned = false
		}
	}
}

// canLead says whether this coordinator may run the leader loop: its
// configuration has no other server, or the ring shows it at least one of
// them (then it sees what they see). why says what it waits for.
func (s *Server) canLead() (ok bool, why string) {
	peers := s.raftPeers()
	if len(peers) == 0 {
		return true, ""
	}
	for _, m := range s.members.Members() {
		if _, ok := peers[m.ID]; ok && present(m) {
			return true, ""
		}
	}
	return false, "no other coordinator of the raft configuration in the gossip ring yet"
}

// Ready says whether this coordinator can serve the API now: raft knows a
// leader, and it is this one and can lead, or another whose API address is
// known. why says what is missing when it cannot.
func (s *Server) Ready() (ok bool, why string) {
	li, ok := s.leaderInfo()
	switch {
	case !ok:
		return false, "no leader"
	case !s.nodesReady():
		return false, s.nodesWhy()
	case li.ID == s.cfg.ID:
		if ok, why := s.canLead(); !ok {
			return false, "elected but cannot lead: " + why
		}
		return true, ""
	case li.HTTP == "":
		return false, fmt.Sprintf("the API address of the leader %s is unknown", li.ID)
	}
	return true, ""
}

// nodesReady reports whether Config.ReadyNodes nodes have been alive at
// once (always, without ReadyNodes); once true it stays true.
func (s *Server) nodesReady() bool {
	if s.cfg.ReadyNodes <= 0 || s.nodesUp.Load() {
		return true
	}
	if s.aliveNodes() >= s.cfg.ReadyNodes {
		s.nodesUp.Store(true)
		return true
	}
	return false
}

func (s *Server) nodesWhy() string {
	return fmt.Sprintf("%d of the cluster's %d nodes alive: still starting", s.aliveNodes(), s.cfg.ReadyNodes)
}

func (s *Server) aliveNodes() int {
	k := 0
	s.fsm.read(func(fsm *FSM) {
		for _, n := range fsm.Nodes() {
			if n.State == proto.NodeAlive {
				k++
			}
		}
	})
	return k
}
