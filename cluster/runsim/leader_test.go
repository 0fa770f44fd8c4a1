package runsim

import (
	"strings"
	"testing"
)

// tally runs seeds 1..n under opt and counts the violations whose text
// holds want, the refused verdicts, and the deaths gossip
// declared that NATS refuted.
func tally(n uint64, opt Options, want string) (hits, refused, refuted int, first *Violation) {
	for seed := uint64(1); seed <= n; seed++ {
		res := RunWith(seed, false, opt)
		refused += res.Leader.Refused
		refuted += res.Leader.Refuted
		if v := res.Violation; v != nil && strings.Contains(v.What, want) {
			hits++
			if first == nil {
				first = v
			}
		}
	}
	return hits, refused, refuted, first
}

// TestPlantedLeaderBugs shows that the simulation, now that it runs the
// real coord.Leader, catches bugs planted in the leader's decisions, and
// that the decisions it checks are exercised: gossip's false suspicions
// refuted over NATS, verdicts refused by the record check, Assignments
// re-sent to nodes that had acked them.
func TestPlantedLeaderBugs(t *testing.T) {
	n := uint64(200)
	if raceEnabled {
		n = 50
	}
	fixes := Options{ReadRecordAtStart: true, ResendFail: true}

	// Liveness as designed: false suspicions happen and are refuted, and no
	// live node is confirmed dead (TestSimulation checks the invariant on
	// every seed).
	hits, _, refuted, v := tally(n, Default, "slow is not dead")
	if hits != 0 || refuted == 0 {
		t.Errorf("as designed: %d live nodes confirmed dead (first: %v), %d suspicions refuted (want some)", hits, v, refuted)
	}
	// Liveness confirming a death on the first suspicion, before any ping
	// is answered: the live, answering node loses its tasks.
	opt := fixes
	opt.Silence = 1
	if hits, _, _, v := tally(n, opt, "slow is not dead"); hits == 0 {
		t.Errorf("death confirmed on first suspicion: no seed of %d caught it", n)
	} else {
		t.Logf("death confirmed on first suspicion: %d of %d seeds caught it; first: %v", hits, n, v)
	}

	// CheckSuccess bypassed, where the detector's verdict is wrong: a node
	// that lost its failure report (no runproto.Fail, no re-send) looks
	// idle; only the record's failed event stops a success.
	opt = Options{ReadRecordAtStart: true, NoFailInput: true}
	if hits, _, _, v := tally(n, opt, "failed for good"); hits != 0 {
		t.Errorf("failure report lost, verdict checked: %d successes despite a failed task (first: %v)", hits, v)
	}
	opt.SkipCheck = true
	// (200 seeds under -race too: 4 of seeds 1–200 show it, the first 105,
	// since Assignments are acknowledged and the draws changed.)
	if hits, _, _, v := tally(max(n, 200), opt, "failed for good"); hits == 0 {
		t.Errorf("failure report lost, CheckSuccess bypassed: no seed of %d caught it", max(n, 200))
	} else {
		t.Logf("failure report lost, CheckSuccess bypassed: %d of %d seeds caught it; first: %v", hits, max(n, 200), v)
	}

	// A leader that takes no acks re-sends the Assignment to nodes that
	// acked it (and build it, for all it knows).
	opt = fixes
	opt.IgnoreAcks = true
	if hits, _, _, v := tally(n, opt, "had acknowledged it"); hits == 0 {
		t.Errorf("acks ignored: no seed of %d caught a copy sent after an ack", n)
	} else {
		t.Logf("acks ignored: %d of %d seeds caught a copy sent after an ack; first: %v", hits, n, v)
	}

	// Nodes that report idle while work runs or waits: the record check
	// refuses verdicts; bypassed, far more runs succeed with work undone.
	opt = fixes
	opt.LieIdle = true
	checked, refused, _, _ := tally(n, opt, "succeeded with")
	// The verdicts it refuses are refused by the rows the leader's fold
	// has not proved as it folded, and the pass over every row finds the
	// same on each (the simulation's check fails a seed where they differ).
	if hits, _, _, v := tally(n, opt, "the rows not proved"); hits != 0 {
		t.Errorf("lying idle: on %d seeds the check of the rows not proved differs from the pass over every row (first: %v)", hits, v)
	}
	opt.SkipCheck = true
	bypassed, _, _, v := tally(n, opt, "succeeded with")
	if refused == 0 || bypassed <= checked {
		t.Errorf("lying idle: %d verdicts refused (want some); %d false successes checked, %d bypassed (want more)", refused, checked, bypassed)
	}
	t.Logf("lying idle: %d verdicts refused; false successes: %d with the check, %d without (first: %v)", refused, checked, bypassed, v)
}
