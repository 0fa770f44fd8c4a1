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
	want       Action
}

func rep(ms int, node string, wave, sent, recv uint64, idle bool, want Action) step {
	return step{ms: ms, node: node, gen: 1, wave: wave, sent: sent, recv: recv, idle: idle, want: want}
}

func tick(ms int, want Action) step { return step{ms: ms, want: want} }

var none = Action{}

func probe(w uint64) Action { return Action{Probe: w} }

var term = Action{Terminated: true}

func TestDetector(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []string
		steps []step
	}{
		{"one node idle twice", []string{"a"}, []step{
			rep(0, "a", 0, 0, 0, true, probe(1)),
			rep(1, "a", 1, 0, 0, true, term),
			rep(2, "a", 1, 0, 0, true, none), // reported once
		}},
		{"waits for every node", []string{"a", "b"}, []step{
			rep(0, "a", 0, 3, 0, true, none),
			rep(1, "b", 0, 0, 3, false, none),
			rep(2, "b", 0, 0, 3, true, probe(1)),
			rep(3, "a", 1, 3, 0, true, none),
			rep(4, "b", 1, 0, 3, true, term),
		}},
		{"unbalanced counters: a signal in flight", []string{"a", "b"}, []step{
			rep(0, "a", 0, 4, 0, true, none),
			rep(1, "b", 0, 0, 3, true, none), // one Signal not yet received
			rep(2, "b", 0, 0, 4, true, probe(1)),
			rep(3, "a", 1, 4, 0, true, none),
			rep(4, "b", 1, 0, 4, true, term),
		}},
		{"changed counters cancel the wave, a new one follows", []string{"a", "b"}, []step{
			rep(0, "a", 0, 1, 1, true, none),
			rep(1, "b", 0, 1, 1, true, probe(1)),
			rep(2, "a", 1, 2, 2, true, probe(2)), // a did more since: cancel wave 1, balanced again: wave 2
			rep(3, "b", 1, 1, 1, true, none),     // an answer to the cancelled wave counts for nothing
			rep(4, "a", 2, 2, 2, true, none),
			rep(5, "b", 2, 1, 1, true, term),
		}},
		{"a busy heartbeat cancels the wave", []string{"a", "b"}, []step{
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
		{"idle heartbeats with the same counters keep the wave", []string{"a", "b"}, []step{
			rep(0, "a", 0, 0, 0, true, none),
			rep(1, "b", 0, 0, 0, true, probe(1)),
			rep(2, "a", 0, 0, 0, true, none),
			rep(3, "a", 1, 0, 0, true, none),
			rep(4, "b", 0, 0, 0, true, none),
			rep(5, "b", 1, 0, 0, true, term),
		}},
		{"a lost probe is asked again after the timeout", []string{"a", "b"}, []step{
			rep(0, "a", 0, 0, 0, true, none),
			rep(10, "b", 0, 0, 0, true, probe(1)),
			rep(20, "a", 1, 0, 0, true, none),
			tick(500, none),
			tick(1010, probe(2)),
			rep(1020, "b", 1, 0, 0, true, none), // late answer to wave 1
			rep(1030, "a", 2, 0, 0, true, none),
			rep(1040, "b", 2, 0, 0, true, term),
		}},
		{"foreign, other-gen and future-wave reports are ignored", []string{"a"}, []step{
			{ms: 0, node: "a", gen: 2, idle: true},
			rep(1, "z", 0, 0, 0, true, none),
			rep(2, "a", 7, 0, 0, true, none),
			rep(3, "a", 0, 5, 5, true, probe(1)),
			rep(4, "a", 9, 0, 0, false, none), // a future wave cannot cancel
			rep(5, "a", 1, 5, 5, true, term),
		}},
		{"never idle never terminates", []string{"a"}, []step{
			rep(0, "a", 0, 0, 0, false, none),
			tick(5000, none),
			rep(5001, "a", 0, 0, 0, false, none),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDetector(1, tc.nodes, time.Second)
			t0 := time.Unix(1e9, 0)
			for i, s := range tc.steps {
				now := t0.Add(time.Duration(s.ms) * time.Millisecond)
				var got Action
				if s.node == "" {
					got = d.Tick(now)
				} else {
					got = d.Report(now, transport.TermReport{Run: "r", Gen: s.gen, Node: s.node, Wave: s.wave, Sent: s.sent, Received: s.recv, Idle: s.idle})
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
