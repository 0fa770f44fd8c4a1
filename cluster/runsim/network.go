package runsim

import (
	"fmt"
	"time"

	"github.com/hetflow/hetflow/transport"
)

// probeMsg is the leader's termination probe (transport.Envelope of kind
// "probe" on the wire).
type probeMsg struct {
	run  string
	wave uint64
}

// failMsg is a node's "fail" envelope.
type failMsg struct {
	run, node, err string
}

// The simulated NATS. Core subjects are at most once: a message is lost
// when the server is down at delivery, when its receiver is disconnected,
// or (control and report subjects, inside the fault window) at random; a
// client that is disconnected keeps what it publishes in its reconnect
// buffer and sends it when it reconnects. Each hop has its own latency, so
// messages of different subjects reorder; one sender's messages on one
// subject arrive in order. Signal batches are stored in the record (the
// JetStream stream HF_RECORD, durable and ordered) when the server takes
// them, whether or not the core delivery arrives.

func (w *world) connected(from *proc) bool {
	if from == nil {
		return w.lead != nil && w.leadConn
	}
	return from.connected
}

// publish sends m from a node process (nil: the leader) to node to ("":
// the coordinator subjects).
func (w *world) publish(from *proc, to string, m any) {
	if !w.natsUp || !w.connected(from) {
		send := func() { w.transmit(from, to, m) }
		if from == nil {
			w.leadOut = append(w.leadOut, send)
		} else {
			from.outbox = append(from.outbox, send)
		}
		return
	}
	w.transmit(from, to, m)
}

func name(p *proc) string {
	if p == nil {
		return "leader"
	}
	return p.id
}

func (w *world) transmit(from *proc, to string, m any) {
	copies := 1
	if b, ok := m.(*transport.Batch); ok {
		w.appendRecord(to, b)
		if w.inFaultWindow() && w.rng.Float64() < w.dupP {
			// the Batcher published the batch again (an ack that timed out)
			w.logf("dup: batch %s#%d to %s published twice", b.From, b.Seq, to)
			w.appendRecord(to, b)
			copies = 2
		}
	} else if w.inFaultWindow() && w.rng.Float64() < w.lossP {
		w.logf("loss: %s → %s %s", name(from), dest(to), describe(m))
		return
	}
	var target *proc
	if to != "" {
		if target = w.procs[to]; target == nil {
			return // nobody subscribed
		}
	}
	for range copies {
		key := [2]string{name(from), to}
		lat := w.latency()
		if a, ok := m.(*transport.Assignment); ok && a.Gen > 1 && w.opt.ResumeAtTakeover && w.rng.IntN(2) == 0 {
			lat += w.dur(10*time.Millisecond, 80*time.Millisecond) // a takeover that reaches this node late
		}
		at := max(w.now+lat, w.chans[key])
		w.chans[key] = at
		w.at(at-w.now, target, func() {
			if !w.natsUp {
				w.logf("lost (NATS down): %s → %s %s", name(from), dest(to), describe(m))
				return
			}
			if target == nil {
				if w.lead == nil || !w.leadConn {
					w.logf("lost (no leader): %s → %s", name(from), describe(m))
					return
				}
				w.lead.receive(m)
				return
			}
			if !target.connected {
				w.logf("lost (%s disconnected): %s %s", to, name(from), describe(m))
				return
			}
			target.receive(name(from), m)
		})
	}
}

func dest(to string) string {
	if to == "" {
		return "coord"
	}
	return to
}

func describe(m any) string {
	switch m := m.(type) {
	case *transport.Batch:
		return fmt.Sprintf("batch %s#%d (%d signals)", m.From, m.Seq, len(m.Signals))
	case *transport.Assignment:
		return fmt.Sprintf("assignment gen %d", m.Gen)
	case *transport.Cancel:
		return fmt.Sprintf("cancel gen %d %s", m.Gen, m.Reason)
	case *transport.Ack:
		return fmt.Sprintf("ack %s gen %d boot %s", m.Node, m.Gen, m.Boot)
	case *transport.TermReport:
		return fmt.Sprintf("report %s gen %d wave %d sent %d recv %d idle %v from %v", m.Node, m.Gen, m.Wave, m.Sent, m.Received, m.Idle, m.ReceivedFrom)
	case probeMsg:
		return fmt.Sprintf("probe wave %d", m.wave)
	case failMsg:
		return "fail " + m.err
	}
	return fmt.Sprintf("%T", m)
}

// appendRecord stores a batch in the record and wakes the follows.
func (w *world) appendRecord(to string, b *transport.Batch) {
	w.record = append(w.record, recEntry{seq: uint64(len(w.record) + 1), to: to, b: b})
	for _, id := range w.nodeIDs {
		if p := w.procs[id]; p != nil {
			for _, run := range sortedKeys(p.runs) {
				p.runs[run].wakeFollow()
			}
		}
	}
}

// natsRestart takes the server down for d; clients reconnect one by one
// after it is back.
func (w *world) natsRestart(d time.Duration) {
	w.logf("FAULT: NATS server down for %v", d)
	w.natsUp = false
	w.leadConn = false
	for _, id := range w.nodeIDs {
		if p := w.procs[id]; p != nil {
			p.connected, p.lossy = false, true
		}
	}
	w.at(d, nil, func() {
		w.natsUp = true
		w.logf("NATS server back")
		w.at(w.dur(0, 300*time.Millisecond), nil, w.leaderReconnect)
		for _, id := range w.nodeIDs {
			if p := w.procs[id]; p != nil {
				w.at(w.dur(0, 300*time.Millisecond), p, p.reconnect)
			}
		}
	})
}

func (w *world) leaderReconnect() {
	if !w.natsUp || w.leadConn {
		return
	}
	w.leadConn = true
	out := w.leadOut
	w.leadOut = nil
	for _, f := range out {
		f()
	}
}

// setRing changes what memberlist says of a node, and tells the leader.
func (w *world) setRing(id, state string) {
	if w.ring[id] == state {
		return
	}
	w.ring[id] = state
	w.logf("ring: %s %s", id, state)
	if w.lead != nil {
		w.lead.memberKick()
	}
}
