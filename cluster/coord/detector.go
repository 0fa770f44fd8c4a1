package coord

import (
	"time"

	"github.com/hetflow/hetflow/transport"
)

// Detector decides when a run has terminated, by the four-counter method
// (Mattern): it keeps each node's latest TermReport for the run's generation;
// when every node has reported idle and the counters balance, it asks for a
// probe wave; the run has terminated when every node answers that wave idle
// with exactly the counters of its report before the probe. Any non-idle or
// changed report cancels the wave. A wave unanswered for ProbeTimeout is asked
// again (probes travel on core NATS and may be lost).
//
// The counters balance per sender: for every node a of the generation,
// a's Sent equals the sum over the generation's nodes b of b's
// ReceivedFrom[a]. Senders outside the generation (nodes lost before it) are
// ignored: what they sent is fenced, or was applied already, or is redone by
// the new owners of their tasks, whose re-sent Signals count on both sides.
// Without a lost node this is ΣSent = ΣReceived, split by sender.
//
// Detector is pure: reports and time come in, probes and the verdict go out.
// It is not safe for concurrent use.
type Detector struct {
	gen     uint64
	nodes   []string
	timeout time.Duration

	latest   map[string]transport.TermReport
	wave     uint64
	seen     uint64 // the highest wave number in any report (see Report)
	probing  bool
	base     map[string]transport.TermReport // the reports the current wave checks against
	answered map[string]bool
	started  time.Time
	done     bool
}

// Action is what the detector asks for after an input.
type Action struct {
	Probe      uint64 // when not 0: send a probe of this wave to every node
	Terminated bool   // the run has terminated (reported once)
}

// NewDetector returns a detector for one generation of a run over nodes.
// probeTimeout 0 means 2s.
func NewDetector(gen uint64, nodes []string, probeTimeout time.Duration) *Detector {
	if probeTimeout <= 0 {
		probeTimeout = 2 * time.Second
	}
	return &Detector{gen: gen, nodes: append([]string(nil), nodes...), timeout: probeTimeout, latest: map[string]transport.TermReport{}}
}

// Reported reports whether node has sent any report for this generation (the
// leader stops re-sending the Assignment to it then).
func (d *Detector) Reported(node string) bool {
	_, ok := d.latest[node]
	return ok
}

// Wave is the number of the latest probe wave (0: none yet).
func (d *Detector) Wave() uint64 { return d.wave }

// Report feeds one report received at now. Reports of another generation or
// from a node outside the run are ignored.
func (d *Detector) Report(now time.Time, r transport.TermReport) Action {
	if d.done || r.Gen != d.gen || !d.member(r.Node) {
		return Action{} // late or foreign
	}
	if r.Wave > d.wave {
		// An answer to a wave of an earlier detector of this run (the
		// previous generation's, or the previous leader's): the node's
		// counters are current, the wave is not ours. Keep the report as
		// a plain one, and number our waves above every wave seen, so no
		// stale answer can pass for an answer to ours. Dropping these left
		// a node that stayed idle across a reassign unheard for good.
		d.seen = max(d.seen, r.Wave)
		r.Wave = 0
	}
	if d.probing {
		b := d.base[r.Node]
		same := r.Idle && r.Sent == b.Sent && r.Received == b.Received && sameCounts(r.ReceivedFrom, b.ReceivedFrom)
		switch {
		case !same:
			d.probing = false // activity since the wave's base: cancel
		case r.Wave == d.wave:
			d.answered[r.Node] = true
		}
	}
	d.latest[r.Node] = r
	if d.probing && len(d.answered) == len(d.nodes) {
		d.done, d.probing = true, false
		return Action{Terminated: true}
	}
	return d.maybeProbe(now)
}

// Tick advances time: a wave unanswered for the probe timeout is asked again.
func (d *Detector) Tick(now time.Time) Action {
	if d.done || !d.probing || now.Sub(d.started) < d.timeout {
		return Action{}
	}
	d.probing = false
	return d.maybeProbe(now)
}

// maybeProbe starts a wave when every node's latest report is idle and the
// counters balance.
func (d *Detector) maybeProbe(now time.Time) Action {
	if d.probing || len(d.latest) < len(d.nodes) {
		return Action{}
	}
	recv := map[string]uint64{}
	for _, n := range d.nodes {
		r := d.latest[n]
		if !r.Idle {
			return Action{}
		}
		for from, c := range r.ReceivedFrom {
			recv[from] += c
		}
	}
	for _, n := range d.nodes {
		if d.latest[n].Sent != recv[n] {
			return Action{}
		}
	}
	d.wave = max(d.wave, d.seen) + 1
	d.probing, d.started = true, now
	d.base = make(map[string]transport.TermReport, len(d.nodes))
	for _, n := range d.nodes {
		d.base[n] = d.latest[n]
	}
	d.answered = map[string]bool{}
	return Action{Probe: d.wave}
}

func (d *Detector) member(node string) bool {
	for _, n := range d.nodes {
		if n == node {
			return true
		}
	}
	return false
}

func sameCounts(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
