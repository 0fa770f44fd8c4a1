package coord

import (
	"testing"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// step is one input to a Detector: a report (node != "") or a tick, at ms.
type step struct {
	ms         int
	node       string
	gen, wave  uint64
	sent, recv uint64
	idle       bool
	from       map[string]uint64 // ReceivedFrom; nil: recv came from the other node (itself when alone)
	want       Action
}

func rep(ms int, node string, wave, sent, recv uint64, idle bool, want Action) step {
	return step{ms: ms, node: node, gen: 1, wave: wave, sent: sent, recv: recv, idle: idle, want: want}
}

// repFrom is a report with explicit per-sender counts (recv is their sum).
func repFrom(ms int, node string, gen, wave, sent uint64, from map[string]uint64, idle bool, want Action) step {
	var recv uint64
	for _, c := range from {
		recv += c
	}
	return step{ms: ms, node: node, gen: gen, wave: wave, sent: sent, recv: recv, idle: idle, from: from, want: want}
}

func tick(ms int, want Action) step { return step{ms: ms, want: want} }

var none = Action{}

func probe(w uint64) Action { return Action{Probe: w} }

var term = Action{Terminated: true}

func TestDetector(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []string
		gen   uint64 // 0: 1
		steps []step
	}{
		{"one node idle twice", []string{"a"}, 0, []step{
			rep(0, "a", 0, 0, 0, true, probe(1)),
			rep(1, "a", 1, 0, 0, true, term),
			rep(2, "a", 1, 0, 0, true, none), // reported once
		}},
		{"reports answering an earlier detector's waves count, and our waves go above them", []string{"a", "b"}, 0, []step{
			// a stayed idle across a reassign (or a leader change): its
			// reports still carry the wave 7 the old detector sent
			rep(0, "a", 7, 1, 1, true, none),
			rep(1, "b", 0, 1, 1, true, probe(8)),
			rep(2, "a", 7, 1, 1, true, none), // a stale answer is not an answer to 8
			rep(3, "b", 8, 1, 1, true, none),
			rep(4, "a", 8, 1, 1, true, term),
		}},
		{"waits for every node", []string{"a", "b"}, 0, []step{
			rep(0, "a", 0, 3, 0, true, none),
			rep(1, "b", 0, 0, 3, false, none),
			rep(2, "b", 0, 0, 3, true, probe(1)),
			rep(3, "a", 1, 3, 0, true, none),
			rep(4, "b", 1, 0, 3, true, term),
		}},
		{"unbalanced counters: a signal in flight", []string{"a", "b"}, 0, []step{
			rep(0, "a", 0, 4, 0, true, none),
			rep(1, "b", 0, 0, 3, true, none), // one Signal not yet received
			rep(2, "b", 0, 0, 4, true, probe(1)),
			rep(3, "a", 1, 4, 0, true, none),
			rep(4, "b", 1, 0, 4, true, term),
		}},
		{"changed counters cancel the wave, a new one follows", []string{"a", "b"}, 0, []step{
			rep(0, "a", 0, 1, 1, true, none),
			rep(1, "b", 0, 1, 1, true, probe(1)),
			repFrom(2, "a", 1, 1, 2, map[string]uint64{"a": 1, "b": 1}, true, probe(2)), // a did more (sent itself one): cancel wave 1, balanced again: wave 2
			rep(3, "b", 1, 1, 1, true, none),                                            // an answer to the cancelled wave counts for nothing
			repFrom(4, "a", 1, 2, 2, map[string]uint64{"a": 1, "b": 1}, true, none),
			rep(5, "b", 2, 1, 1, true, term),
		}},
		{"a busy heartbeat cancels the wave", []string{"a", "b"}, 0, []step{
			rep(0, "a", 0, 0, 0, true, none),
			rep(1, "b", 0, 0, 0, true, probe(1)),
			rep(2, "a", 1, 0, 0, true, none),
			rep(3, "b", 0, 0, 1, false, none), // b got a Signal (a's counters changed would show it too)
			rep(4, "b", 1, 0, 1, false, none),
			rep(5, "b", 0, 0, 1, true, none), // idle again but unbalanced (a has not reported its send)
			rep(6, "a", 0, 1, 0, true, probe(2)),
			rep(7, "a", 2, 1, 0, true, none),
			rep(8, "b", 2, 0, 1, true, term),
		}},
		{"idle heartbeats with the same counters keep the wave", []string{"a", "b"}, 0, []step{
			rep(0, "a", 0, 0, 0, true, none),
			rep(1, "b", 0, 0, 0, true, probe(1)),
			rep(2, "a", 0, 0, 0, true, none),
			rep(3, "a", 1, 0, 0, true, none),
			rep(4, "b", 0, 0, 0, true, none),
			rep(5, "b", 1, 0, 0, true, term),
		}},
		{"a lost probe is asked again after the timeout", []string{"a", "b"}, 0, []step{
			rep(0, "a", 0, 0, 0, true, none),
			rep(10, "b", 0, 0, 0, true, probe(1)),
			rep(20, "a", 1, 0, 0, true, none),
			tick(500, none),
			tick(1010, probe(2)),
			rep(1020, "b", 1, 0, 0, true, none), // late answer to wave 1
			rep(1030, "a", 2, 0, 0, true, none),
			rep(1040, "b", 2, 0, 0, true, term),
		}},
		{"foreign and other-gen reports are ignored; one answering a wave we never sent is a plain report", []string{"a"}, 0, []step{
			{ms: 0, node: "a", gen: 2, idle: true},
			rep(1, "z", 0, 0, 0, true, none),
			rep(2, "a", 7, 0, 0, true, probe(8)), // numbered above the wave seen
			rep(3, "a", 0, 5, 5, true, probe(9)), // changed counters cancel 8
			rep(4, "a", 9, 5, 5, false, none),    // busy cancels 9
			rep(5, "a", 9, 5, 5, true, probe(10)),
			rep(6, "a", 10, 5, 5, true, term),
		}},
		{"balanced totals but not per sender", []string{"a", "b", "c"}, 0, []step{
			repFrom(0, "a", 1, 0, 2, nil, true, none),
			repFrom(1, "b", 1, 0, 1, map[string]uint64{"a": 1}, true, none),
			// c received one of a's and one of b's: ΣSent = ΣReceived = 3, but
			// a's second Signal is still in flight and c's count from b is b's.
			repFrom(2, "c", 1, 0, 0, map[string]uint64{"b": 1, "c": 1}, true, none),
			repFrom(3, "c", 1, 0, 0, map[string]uint64{"a": 1, "b": 1}, true, probe(1)),
			repFrom(4, "a", 1, 1, 2, nil, true, none),
			repFrom(5, "b", 1, 1, 1, map[string]uint64{"a": 1}, true, none),
			repFrom(6, "c", 1, 1, 0, map[string]uint64{"a": 1, "b": 1}, true, term),
		}},
		{"a changed split cancels the wave", []string{"a", "b"}, 0, []step{
			repFrom(0, "a", 1, 0, 1, map[string]uint64{"b": 1}, true, none),
			repFrom(1, "b", 1, 0, 1, map[string]uint64{"a": 1}, true, probe(1)),
			repFrom(2, "a", 1, 1, 1, map[string]uint64{"a": 1}, true, none), // same totals, other sender
			repFrom(3, "b", 1, 1, 1, map[string]uint64{"a": 1}, true, none),
		}},
		// Gen 2 after c was lost: c's Sent is unknown and its receipts do not
		// count; a and b balance among themselves, duplicates included.
		{"a lost node's counters are ignored", []string{"a", "b"}, 2, []step{
			repFrom(0, "a", 2, 0, 5, map[string]uint64{"c": 7, "b": 2}, true, none),
			// b re-ran c's lost tasks: it sent 4 to a (2 of them duplicates of
			// what c had sent a), and a has counted only 2 of b's so far.
			repFrom(1, "b", 2, 0, 4, map[string]uint64{"a": 5, "c": 3}, true, none),
			repFrom(2, "a", 2, 0, 5, map[string]uint64{"c": 7, "b": 4}, true, probe(1)),
			repFrom(3, "a", 2, 1, 5, map[string]uint64{"c": 7, "b": 4}, true, none),
			repFrom(4, "b", 2, 1, 4, map[string]uint64{"a": 5, "c": 3}, true, term),
		}},
		{"a report of the old generation does not count in the new", []string{"a", "b"}, 2, []step{
			repFrom(0, "a", 2, 0, 0, nil, true, none),
			repFrom(1, "b", 1, 0, 0, nil, true, none), // b has not taken gen 2 yet
			repFrom(2, "b", 2, 0, 0, nil, true, probe(1)),
		}},
		{"never idle never terminates", []string{"a"}, 0, []step{
			rep(0, "a", 0, 0, 0, false, none),
			tick(5000, none),
			rep(5001, "a", 0, 0, 0, false, none),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gen := tc.gen
			if gen == 0 {
				gen = 1
			}
			d := NewDetector(gen, tc.nodes, time.Second)
			t0 := time.Unix(1e9, 0)
			for i, s := range tc.steps {
				now := t0.Add(time.Duration(s.ms) * time.Millisecond)
				var got Action
				if s.node == "" {
					got = d.Tick(now)
				} else {
					from := s.from
					if from == nil && s.recv > 0 {
						peer := s.node
						for _, n := range tc.nodes {
							if n != s.node {
								peer = n
								break
							}
						}
						from = map[string]uint64{peer: s.recv}
					}
					got = d.Report(now, transport.TermReport{Run: "r", Gen: s.gen, Node: s.node, Wave: s.wave, Sent: s.sent, Received: s.recv, Idle: s.idle, ReceivedFrom: from})
				}
				if got != s.want {
					t.Fatalf("step %d (%+v): got %+v, want %+v", i, s, got, s.want)
				}
			}
		})
	}
}

func TestDetectorReported(t *testing.T) {
	d := NewDetector(3, []string{"a", "b"}, 0)
	if d.Reported("a") {
		t.Fatal("a has not reported")
	}
	d.Report(time.Now(), transport.TermReport{Gen: 3, Node: "a"})
	d.Report(time.Now(), transport.TermReport{Gen: 2, Node: "b"})
	if !d.Reported("a") || d.Reported("b") {
		t.Fatal("Reported: a for gen 3 only")
	}
}
