package node

import (
	"context"
	"fmt"
	"time"

	"github.com/hetflow/hetflow/localexec"
	"github.com/hetflow/hetflow/transport"
)

// Recovery from lost nodes (docs/cluster-protocol.md, Recovery). When the
// leader moves the tasks of a lost node under a new generation, a node that
// holds the run keeps everything it runs and its state; it switches its owner
// table (its sends address moved tasks to their new owners from then
// on) and, if tasks moved here, opens them as one more part of the run and
// follows the run's record to rebuild their inputs: every Signal addressed to
// a node that is not in the generation, whose destination this node now owns.

// mine marks the vertices this node runs in the generation in force.
func (r *run) mine() []bool {
	in := make([]bool, len(r.g.Vertices))
	for v := range in {
		in[v] = r.local(v)
	}
	return in
}

// update takes a newer generation of the run (see above).
func (r *run) update(a *transport.Assignment) error {
	n := r.n
	if len(a.Owner) != len(r.g.Vertices) {
		return fmt.Errorf("the assignment places %d tasks, the flow has %d", len(a.Owner), len(r.g.Vertices))
	}
	tab := &ownerTab{nodes: a.Nodes, owner: a.Owner}
	n.mu.Lock()
	if r.stopping.Load() || a.Gen <= r.gen {
		n.mu.Unlock()
		return nil
	}
	old := r.tab.Load()
	in := make([]bool, len(a.Owner))
	moved, kept, gone := 0, 0, 0
	for v := range in {
		if r.moved != nil && old.nodeOf(v) != tab.nodeOf(v) {
			r.moved[v] = true
		}
		was, now := old.nodeOf(v) == n.id, tab.nodeOf(v) == n.id
		switch {
		case now && !was:
			in[v] = true
			moved++
			r.vs[v].resetOut() // what it saw of the task as a remote input; it runs here from its first activation now
		case now:
			kept++
		case was:
			gone++
		}
	}
	if gone > 0 {
		// Not what the leader does (a live node keeps its tasks); they go on
		// running here and their Signals are fenced by their receivers.
		n.log.Warn("a newer generation moved tasks away from a live node", "run", r.id, "gen", a.Gen, "tasks", gone)
	}
	prev := r.gen
	r.tab.Store(tab)
	r.gen = a.Gen
	r.genA.Store(a.Gen)
	n.dedup.SetGen(r.id, a.Gen)
	var err error
	if moved > 0 {
		var p *part
		if p, err = r.build(in); err == nil {
			var open *localexec.OpenRun
			if open, err = n.ex.RunOpen(p.tf, r.onIdle); err == nil {
				r.addPart(p, open)
				r.pwg.Add(1)
				go func() {
					defer r.pwg.Done()
					<-open.Done()
					r.openEnded(open.Wait())
				}()
			}
		}
	}
	// Signals that came stamped with this generation before it did.
	pend := r.pending
	r.pending = nil
	for i := range pend {
		r.accept(pend[i].from, pend[i].id, &pend[i].s)
	}
	n.mu.Unlock()
	if err != nil {
		return err
	}
	n.log.Info("run moved to a newer generation", "run", r.id, "gen", a.Gen, "from", prev, "kept", kept, "taken_over", moved)
	if moved > 0 {
		r.startFollow()
	}
	r.onIdle() // report the new generation now
	return nil
}

// followFor bounds how long a takeover retries starting to follow the record.
const followFor = 30 * time.Second

// startFollow (re)starts following the run's record from its start. A
// restart (a later loss moved more tasks here) skips the Signals taken
// already, so that each is counted once.
func (r *run) startFollow() {
	n := r.n
	n.mu.Lock()
	if r.stopping.Load() {
		n.mu.Unlock()
		return
	}
	old := r.follow
	r.follow = nil
	id := r.followID.Add(1)
	r.caught.Store(false)
	if r.taken == nil {
		r.taken = map[sigPos]struct{}{}
	}
	n.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	caught := func() {
		if r.followID.Load() == id {
			r.caught.Store(true)
			r.onIdle()
		}
	}
	// NATS may be restarting as the takeover begins (a loss seldom comes
	// alone): retry with backoff for followFor before failing the run.
	var f *transport.Follow
	var err error
	deadline := time.Now().Add(followFor)
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		f, err = n.conn.FollowSignals(ctx, r.id, r.replayed, caught)
		cancel()
		if err == nil || r.stopping.Load() || time.Now().Add(backoff).After(deadline) {
			break
		}
		n.log.Info("reading the record of the lost nodes' tasks: retrying", "run", r.id, "err", err)
		time.Sleep(backoff) // retry backoff, bounded by followFor
	}
	if r.stopping.Load() {
		if f != nil {
			f.Stop()
		}
		return
	}
	if err != nil {
		r.fail(-1, "", 0, 0, time.Time{}, fmt.Errorf("node %s cannot read the record of the lost nodes' tasks: %w", n.id, err))
		return
	}
	n.mu.Lock()
	if r.stopping.Load() || r.followID.Load() != id {
		n.mu.Unlock()
		f.Stop()
		return
	}
	r.follow = f
	n.mu.Unlock()
}

// replayed takes one batch of the record: the Signals addressed to a node
// not in the generation in force whose destination this node owns now are
// counted (by sender, duplicates included) and delivered when new.
func (r *run) replayed(seq uint64, to string, b *transport.Batch) {
	n := r.n
	n.mu.Lock()
	defer n.mu.Unlock()
	tab := r.tab.Load()
	if r.stopping.Load() || tab.has(to) {
		return
	}
	for i := range b.Signals {
		s := &b.Signals[i]
		if s.Run != r.id || int(s.Dst) >= len(tab.owner) || int(s.Src) >= len(tab.owner) || tab.nodeOf(int(s.Dst)) != n.id {
			continue
		}
		k := sigPos{seq, i}
		if _, ok := r.taken[k]; ok {
			continue
		}
		r.taken[k] = struct{}{}
		n.stats.takenOver.Add(1)
		r.count(b.From)
		if n.dedup.AdmitReplayed(s) != transport.Accept {
			continue
		}
		r.deliver(s, true)
	}
}
