package node

import (
	"context"
	"fmt"
	"time"

	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/transport"
)

// Recovery from lost nodes (docs/cluster-protocol.md, Recovery). When the
// leader moves the tasks of a lost node under a new generation, a node that
// holds the run keeps everything it runs and its state; it switches its owner
// table (its sends address moved tasks to their new owners from then
// on) and, if tasks moved here, opens them as one more part of the run and
// follows the run's record to rebuild their inputs: every Signal addressed to
// a node that is not in the generation, whose destination this node now owns.

// update takes a newer generation of the run (see above): the SM switches
// the owner table and decides the Signals held for it; the node opens the
// tasks that moved here and follows the record for them.
//
// The Assignment's plan holds every task the node owns in the generation;
// the tasks that moved here are added to the run's part (the plans of the
// generations before hold the rest), so that no node needs the whole flow.
func (r *run) update(a *transport.Assignment) error {
	n := r.n
	pt, err := r.extend(a)
	if err != nil {
		return err
	}
	n.mu.Lock()
	if r.stopping.Load() {
		n.mu.Unlock()
		return nil
	}
	// Before Assign: the Signals it lets in for the moved tasks are
	// numbered by their loops and free joins. A part that holds more than
	// the generation needs (Assign refuses an older one) says nothing
	// wrong of the vertices it held before.
	r.pt.Store(pt)
	r.sm.SetPlan(pt.Loops, pt.Free)
	acts, m, err := r.sm.Assign(a)
	if err != nil || len(acts) == 0 {
		n.mu.Unlock()
		return r.named(err)
	}
	if m.Given > 0 {
		// Not what the leader does (a live node keeps its tasks); they go on
		// running here and their Signals are fenced by their receivers.
		n.log.Warn("a newer generation moved tasks away from a live node", "run", r.id, "gen", a.Gen, "tasks", m.Given)
	}
	res := r.apply(acts)
	n.mu.Unlock()
	if res.err != nil {
		return res.err
	}
	n.log.Info("run moved to a newer generation", "run", r.id, "gen", a.Gen, "from", m.Prev, "kept", m.Kept, "taken_over", m.Taken)
	if res.follow != 0 {
		r.startFollow(res.follow)
	}
	if res.report {
		r.onIdle() // report the new generation now
	}
	return nil
}

// extend is the run's part with what a's plan adds, checked to hold every
// task a gives this node (its own goroutine: the node takes one control
// message at a time, so the part it extends is the one in force).
func (r *run) extend(a *transport.Assignment) (*runproto.Part, error) {
	if a.PlanDigest != nil {
		if err := checkDigest(a.Plan, a.PlanDigest); err != nil {
			return nil, err
		}
	}
	p, err := decodePlan(a.Plan, len(a.Owner), r.n.conn.Limits(), r.n.reg)
	if err != nil {
		return nil, err
	}
	pt, err := runproto.OpenPlan(p, r.pt.Load())
	if err != nil {
		return nil, err
	}
	if _, err := planFits(pt, a, r.n.id, false, nil); err != nil {
		return nil, err
	}
	return pt, nil
}

// open builds the vertices of in, moved here, as one more part of the run
// and opens it (under n.mu).
func (r *run) open(in []bool) error {
	for v, ok := range in {
		if ok {
			r.vs[v].resetOut() // what it saw of the task as a remote input; it runs here from its first activation now
		}
	}
	p, err := r.build(in)
	if err != nil {
		return err
	}
	r.hint(p)
	open, err := r.n.ex.RunOpen(p.tf, r.onIdle)
	if err != nil {
		return err
	}
	r.addPart(p, open)
	r.pwg.Add(1)
	go func() {
		defer r.pwg.Done()
		<-open.Done()
		r.openEnded(open.Wait())
	}()
	return nil
}

// followFor bounds how long a takeover retries starting to follow the record.
const followFor = 30 * time.Second

// startFollow starts follow id (the SM numbers them) of the run's record
// from its start, stopping the one before. A restart (a later loss moved
// more tasks here) skips the Signals taken already, so that each is counted
// once (the SM's bookkeeping).
func (r *run) startFollow(id uint64) {
	n := r.n
	n.mu.Lock()
	if r.stopping.Load() || r.sm.FollowID() != id {
		n.mu.Unlock()
		return
	}
	old := r.follow
	r.follow = nil
	n.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	caught := func() {
		n.mu.Lock()
		due := len(r.sm.CaughtUp(id)) > 0
		if due {
			r.decidable() // conditions run again here wait for it (runCondition)
		}
		n.mu.Unlock()
		if due {
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
		f, err = n.conn.FollowSignals(ctx, r.id, r.followed, caught)
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
		r.fail(-1, "", 0, 0, 0, fmt.Errorf("node %s cannot read the record of the lost nodes' tasks: %w", n.id, err))
		return
	}
	n.mu.Lock()
	if r.stopping.Load() || r.sm.FollowID() != id {
		n.mu.Unlock()
		f.Stop()
		return
	}
	r.follow = f
	n.mu.Unlock()
}

// followed takes one batch of the record, read by the follow: the SM
// decides which of its Signals are taken, counted and delivered.
func (r *run) followed(seq uint64, to string, b *transport.Batch) {
	n := r.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if r.stopping.Load() {
		return
	}
	r.apply(r.sm.FollowBatch(seq, to, b))
	r.decidable()
}
