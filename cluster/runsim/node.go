package runsim

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

// proc is one process of a node (a restart makes a new one, with a new
// boot): what cluster/node keeps around runproto — the runs it holds, the
// runs it released, the Signals of runs not assigned yet, its NATS client,
// its CPUs running the activations.
type proc struct {
	w         *world
	id        string
	boot      int
	cpus      int
	connected bool
	// lossy: the client has been disconnected since the process started
	// (or started so): core NATS may have lost a Signal addressed to it
	// (cluster/node's mayHaveLost).
	lossy   bool
	frozen  bool
	backlog []func() // events due while frozen
	outbox  []func() // publishes while disconnected (the client's reconnect buffer)

	runs  map[string]*hold
	ended map[string]uint64
	early map[string][]earlySig
	seq   uint64                       // Batcher's batch numbers
	plans map[[sha256.Size]byte][]byte // the plans it compiled, by digest (cluster/node's graph cache)

	running int
	queue   []queued
}

type earlySig struct {
	from string
	seq  uint64
	i    int
	s    transport.Signal
	b    *transport.Batch // the batch it came in
}

type queued struct {
	h *hold
	j job
}

// hold is one holding of a run by a process: from its first Assignment to
// its release (Cancel) or the process's end. It keeps the ledger of the
// activations it executed, which outlives the process.
type hold struct {
	p        *proc
	run      *simRun
	n        int    // holding number, for the log
	startGen uint64 // the generation of its first Assignment
	r        *runproto.Run
	e        *engine
	part     *runproto.Part // compiled from the plans of its Assignments, as cluster/node's
	parts    int
	out      map[string][]transport.Signal // Signals of the current input, by destination
	dests    []string
	picks    []transport.Signal // picks of tasks of their condition's part, to record before out (recordPick)
	// replaying is the (condition, activation) whose pick choose took from
	// the record last (world.picked's replayed)
	replaying [2]uint64
	gone      bool // released, or the process ended
	failed    bool // a task failed for good: the parts are cancelled

	exec  map[[2]uint64]int // (task, activation) → executions
	execs int

	// The node's task table (cluster/node's eventPub): each task's latest
	// event, those changed since the last store in dirty (in order), and
	// changes cut under an earlier generation in cut (stored first).
	tab      map[uint32]transport.TaskEvent
	dirty    []uint32
	tabDirty map[uint32]bool
	tabGen   uint64
	cutTasks []transport.TaskEvent

	fol struct {
		id            uint64
		pos, start    int
		caught        bool
		active, armed bool
	}
}

func (w *world) newProc(id string) *proc {
	w.boots[id]++
	p := &proc{w: w, id: id, boot: w.boots[id], cpus: w.cpus[id], connected: w.natsUp, lossy: !w.natsUp,
		runs: map[string]*hold{}, ended: map[string]uint64{}, early: map[string][]earlySig{}, plans: map[[sha256.Size]byte][]byte{}}
	w.procs[id] = p
	return p
}

func (p *proc) logf(format string, args ...any) {
	p.w.logf("%s: "+format, append([]any{p.id}, args...)...)
}

// receive takes one message of the node's control or signal subject.
func (p *proc) receive(from string, m any) {
	switch m := m.(type) {
	case *transport.Assignment:
		p.assign(m)
	case *transport.Cancel:
		p.cancel(m)
	case probeMsg:
		if h := p.runs[m.run]; h != nil {
			h.apply(h.r.Probe(m.wave))
		}
	case *transport.Batch:
		p.take(m)
	}
}

// assign mirrors cluster/node Node.assign: an Assignment the process
// takes, or a copy of one it holds, is acknowledged at once (the ack goes
// before the build in cluster/node).
func (p *proc) assign(a *transport.Assignment) {
	me := slices.Index(a.Nodes, p.id)
	if me < 0 {
		return
	}
	if b := a.BootOf(me); b != "" && b != fmt.Sprint(p.boot) && !p.w.opt.NoBootCheck {
		p.logf("assignment gen %d for boot %s ignored (this process is boot %d)", a.Gen, b, p.boot)
		return
	}
	old := p.runs[a.Run]
	if old != nil && a.Gen <= old.r.Gen() {
		p.ack(a)
		return
	}
	if g, ok := p.ended[a.Run]; ok && a.Gen <= g {
		return
	}
	if a = p.planOf(a); a == nil {
		return
	}
	p.ack(a)
	if old != nil {
		pt := p.plan(a, old.part)
		if pt == nil {
			return
		}
		old.part = pt
		old.r.SetPlan(pt.Loops, p.freeOf(pt))
		acts, mv, err := old.r.Assign(a)
		if err != nil {
			p.logf("assignment gen %d refused: %v", a.Gen, err)
			return
		}
		p.logf("gen %d: kept %d, taken %d, given %d", a.Gen, mv.Kept, mv.Taken, mv.Given)
		old.apply(acts)
		old.idleCheck()
		return
	}
	w := p.w
	sr := w.run(a.Run)
	if sr == nil {
		return
	}
	pt := p.plan(a, nil)
	if pt == nil {
		return
	}
	if a.PlanDigest != nil {
		p.plans[[sha256.Size]byte(a.PlanDigest)] = a.Plan
	}
	e := newEngine(sr.g)
	r, err := runproto.New(runproto.Config{Self: p.id, Run: a.Run, Gen: a.Gen, Nodes: a.Nodes, Owner: a.Owner,
		Done: func(v int) uint64 { return e.done[v] }, Loops: pt.Loops, Free: p.freeOf(pt)})
	if err != nil {
		p.logf("assignment gen %d refused: %v", a.Gen, err)
		return
	}
	h := &hold{p: p, run: sr, n: len(w.holds) + 1, startGen: a.Gen, r: r, e: e, part: pt, out: map[string][]transport.Signal{}, exec: map[[2]uint64]int{}}
	w.holds = append(w.holds, h)
	h.e.schedule = func(j job) { p.queue = append(p.queue, queued{h, j}); p.runJobs() }
	h.e.emit = h.emit
	h.e.choose = h.choose
	h.e.picked = h.recordPick
	h.e.completed = func(v int) {
		if h.r.Waits(v) {
			h.apply(h.r.Completed(v))
		}
	}
	p.runs[a.Run] = h
	p.logf("%s started at gen %d (holding %d)", a.Run, a.Gen, h.n)
	h.e.open(r.Mine(), 0)
	h.flush()
	early := p.early[a.Run]
	delete(p.early, a.Run)
	for i := 0; i < len(early); {
		// each stretch of one batch at once; a whole batch as one, which
		// the run remembers (cluster/node takeEarly)
		s := early[i]
		j := i + 1
		for j < len(early) && early[j].b == s.b && early[j].i == early[j-1].i+1 {
			j++
		}
		sigs := make([]transport.Signal, 0, j-i)
		for _, e := range early[i:j] {
			sigs = append(sigs, e.s)
		}
		var acts []runproto.Action
		if s.i == 0 && j-i == len(s.b.Signals) {
			acts, _ = h.r.BatchAll(s.from, s.seq, sigs)
		} else {
			acts = h.r.Batch(s.from, s.seq, s.i, sigs)
		}
		h.noteAccepted(s.b, acts)
		h.apply(acts)
		i = j
	}
	if w.opt.ReadRecordAtStart && (a.Gen > 1 || p.lossy || a.BootOf(me) != fmt.Sprint(p.boot)) {
		// What core NATS lost before this node held the run (it was
		// disconnected, and reconnected before the Assignment came, so its
		// replays did not cover the run) is only in the record. A process
		// never disconnected that the run was made for lost nothing
		// (cluster/node's mayHaveLost): every Signal of the run to it was
		// published once it listened.
		p.replayRun(a.Run)
	}
	if a.Gen > 1 {
		h.apply(h.r.StartFollow())
		h.mark(a.Gen)
	}
	h.idleCheck()
	h.beat()
}

// planOf is a with its plan, as cluster/node's assign takes it: a plan a
// carries must have the digest a names (a leader that names another is a
// violation); a plan a names by digest alone is the one the process holds
// of that digest, or, when it holds none (Options.LosePlans drops them
// all, one time in two), the process asks for it (an Ack with NeedPlan)
// and takes nothing (nil).
func (p *proc) planOf(a *transport.Assignment) *transport.Assignment {
	w := p.w
	if a.PlanDigest == nil {
		return a
	}
	d := [sha256.Size]byte(a.PlanDigest)
	if a.Plan != nil {
		if sha256.Sum256(a.Plan) != d {
			w.fail("%s gen %d: the plan sent to %s does not have the digest its Assignment names", a.Run, a.Gen, p.id)
			return nil
		}
		return a
	}
	if w.opt.LosePlans && w.rng.IntN(2) == 0 {
		clear(p.plans)
	}
	plan, ok := p.plans[d]
	if !ok {
		p.logf("assignment gen %d of %s names a plan this process does not hold: asking for it", a.Gen, a.Run)
		w.publish(p, "", &transport.Ack{Run: a.Run, Gen: a.Gen, Node: p.id, Boot: fmt.Sprint(p.boot), NeedPlan: true})
		return nil
	}
	c := *a // the message is the network's
	c.Plan = plan
	return &c
}

// plan is the part a's plan gives the process, on top of base (the run's
// part from earlier generations), as cluster/node compiles it: the
// simulated nodes run by the flow's graph, and their run protocol by the
// plan's loops and free joins. A plan that does not hold every task a
// gives the process is a violation.
func (p *proc) plan(a *transport.Assignment, base *runproto.Part) *runproto.Part {
	w := p.w
	pl, err := transport.DecodePlan(a.Plan, transport.Limits{})
	if err != nil {
		w.fail("%s gen %d: %s's plan does not decode: %v", a.Run, a.Gen, p.id, err)
		return nil
	}
	pt, err := runproto.OpenPlan(pl, base)
	if err != nil {
		w.fail("%s gen %d: %s's plan does not open: %v", a.Run, a.Gen, p.id, err)
		return nil
	}
	for _, v := range a.TasksOf(p.id) {
		if !pt.Holds(int(v)) {
			w.fail("%s gen %d: %s's plan does not hold task %s, assigned to it", a.Run, a.Gen, p.id, w.run(a.Run).path(v))
			return nil
		}
	}
	return pt
}

func (p *proc) freeOf(pt *runproto.Part) []bool {
	if p.w.opt.NoFreeJoins {
		return nil
	}
	return pt.Free
}

// ack acknowledges an Assignment to the leader (transport.Ack on
// proto.AckSubject, a control-plane subject: lost like a report).
func (p *proc) ack(a *transport.Assignment) {
	p.w.publish(p, "", &transport.Ack{Run: a.Run, Gen: a.Gen, Node: p.id, Boot: fmt.Sprint(p.boot)})
}

func (h *hold) sendFail() {
	sr := h.run
	h.p.w.publish(h.p, "", failMsg{run: sr.id, node: h.p.id, err: "task " + sr.failedTask + ": injected failure"})
}

// beat is the run's heartbeat: a report every 500 ms while it is held (and
// the fail envelope again, Options.ResendFail).
func (h *hold) beat() {
	h.p.w.at(heartbeat, h.p, func() {
		if h.gone {
			return
		}
		if h.failed && h.p.w.opt.ResendFail {
			h.sendFail()
		}
		h.apply(h.r.Tick())
		h.beat()
	})
}

// cancel mirrors cluster/node Node.cancel.
func (p *proc) cancel(c *transport.Cancel) {
	h := p.runs[c.Run]
	if h == nil {
		delete(p.early, c.Run)
		if _, ok := p.ended[c.Run]; !ok {
			p.ended[c.Run] = c.Gen
		}
		return
	}
	if c.Gen != 0 && c.Gen < h.r.Gen() {
		return
	}
	p.logf("release (%s) at gen %d", c.Reason, h.r.Gen())
	h.apply(h.r.Stop())
	h.gone = true
	delete(p.runs, c.Run)
	p.ended[c.Run] = max(p.ended[c.Run], h.r.Gen())
}

// take mirrors cluster/node Node.take.
func (p *proc) take(b *transport.Batch) {
	if len(b.Signals) == 0 {
		return
	}
	run := b.Signals[0].Run
	if h := p.runs[run]; h != nil {
		h.take(b)
		return
	}
	if _, gone := p.ended[run]; gone {
		return
	}
	for i, s := range b.Signals {
		p.early[run] = append(p.early[run], earlySig{b.From, b.Seq, i, s, b})
	}
}

// take hands a batch addressed to this node to runproto, noting whether it
// accepted any of it (world.accepted).
func (h *hold) take(b *transport.Batch) {
	acts, _ := h.r.BatchAll(b.From, b.Seq, b.Signals)
	h.noteAccepted(b, acts)
	h.apply(acts)
}

func (h *hold) noteAccepted(b *transport.Batch, acts []runproto.Action) {
	for _, a := range acts {
		if a.Kind == runproto.Deliver || a.Kind == runproto.Wait {
			var newest uint64
			for g := range h.run.tables {
				newest = max(newest, g)
			}
			if newest > 1 && !slices.Contains(h.run.tables[newest], b.From) {
				h.p.w.res.OldOwner++
			}
			h.p.w.accepted[b] = true
			return
		}
	}
}

// reconnect: the client is back; it sends its reconnect buffer and reads
// what the outage lost from the record, now and again later (node.go
// replayMissed, replayAgain).
func (p *proc) reconnect() {
	w := p.w
	if !w.natsUp || p.connected {
		return
	}
	p.connected = true
	p.logf("reconnected")
	out := p.outbox
	p.outbox = nil
	for _, f := range out {
		f()
	}
	p.replayMissed()
	w.at(replayAgain, p, p.replayMissed)
	for _, run := range sortedKeys(p.runs) {
		p.runs[run].wakeFollow()
	}
}

func (p *proc) replayMissed() {
	for _, run := range sortedKeys(p.runs) {
		p.replayRun(run)
	}
}

// replayRun reads the record of the Signals addressed to this node for one
// run it holds, as if they had arrived (fencing, dedup and counting as
// live).
func (p *proc) replayRun(run string) {
	if !p.connected || !p.w.natsUp {
		return
	}
	for _, e := range p.w.record {
		if e.to == p.id && e.b.Signals[0].Run == run {
			if h := p.runs[run]; h != nil {
				h.take(e.b)
			}
		}
	}
}

// runJobs starts queued activations on free CPUs.
func (p *proc) runJobs() {
	w := p.w
	for p.running < p.cpus && len(p.queue) > 0 {
		q := p.queue[0]
		p.queue = p.queue[1:]
		if q.h.gone {
			continue
		}
		p.running++
		q.h.taskEvent(q.j, transport.TaskRunning)
		d := w.dur(time.Millisecond, 40*time.Millisecond)
		if t := q.h.run.g.Vertices[q.j.v].Task; t.Kind == spec.KindSubflow {
			// the subflow's children run before it completes
			for range argInt(t.Args, "n") {
				d += w.dur(time.Millisecond, 20*time.Millisecond)
			}
		}
		w.at(d, p, func() {
			p.running--
			if !q.h.gone {
				q.h.execute(q.j)
			}
			p.runJobs()
		})
	}
}

// execute runs one activation: its effect goes into the ledger, checked
// against the ground truth.
func (h *hold) execute(j job) {
	w := h.p.w
	if h.failed {
		return // the parts were cancelled
	}
	if sr := h.run; sr.failNext && (sr.failedTask == "" || sr.failedTask == sr.g.Vertices[j.v].Path) {
		// the task fails for good (retries exhausted), wherever it runs:
		// cluster/node's run.fail — the fail envelope (core NATS) and the
		// parts cancelled — and runproto's Fail: never idle again
		sr.failedTask = sr.g.Vertices[j.v].Path
		h.failed = true
		w.logf("%s: task %s#%d of %s fails for good", h.p.id, sr.failedTask, j.act, sr.id)
		h.taskEvent(j, transport.TaskFailed)
		h.sendFail()
		if !w.opt.NoFailInput {
			h.apply(h.r.Fail())
		}
		h.idleCheck()
		return
	}
	if h.r.Replays(j.v) && h.run.g.Vertices[j.v].Task.Kind.IsCondition() && (!h.r.Caught() || !h.r.Settled() && !w.opt.NoSwitchMarks) && !w.opt.NoConditionReplay {
		// a condition run again here takes the outcome the record holds for
		// its activation: it decides once the follow has read the record
		// and every node's mark of the generation (cluster/node:
		// runCondition waits for both)
		w.at(w.latency(), h.p, func() {
			if !h.gone {
				h.execute(j)
			}
		})
		return
	}
	k := [2]uint64{uint64(j.v), j.act}
	h.exec[k]++
	h.execs++
	sr := h.run
	path := sr.g.Vertices[j.v].Path
	if h.exec[k] > 1 {
		w.fail("task %q activation %d executed twice on %s (holding %d): an effect applied twice", path, j.act, h.p.id, h.n)
	}
	if j.act > sr.truth.acts[j.v] {
		w.fail("task %q activation %d executed on %s, the ground truth has %d activations", path, j.act, h.p.id, sr.truth.acts[j.v])
	}
	out := h.e.finish(j)
	h.taskEvent(j, transport.TaskDone)
	if want, ok := sr.truth.outs[j.v][j.act]; ok && want != out && !sr.free[j.v] {
		w.fail("task %q activation %d on %s: output %x, the ground truth's is %x (wrong inputs)", path, j.act, h.p.id, out, want)
	}
	w.logf("%s: ran %s %s#%d", h.p.id, sr.id[len(sr.id)-2:], path, j.act)
	h.flush()
	h.idleCheck()
}

// idleCheck tells runproto the parts went idle (localexec's onIdle).
func (h *hold) idleCheck() {
	if !h.gone && (h.failed || !h.e.busy()) {
		h.apply(h.r.Idle())
	}
}

// choose is a condition's pick for activation act of v. The simulation's
// conditions are deterministic per (task, activation) — except when a
// holding runs a condition again after a loss (runproto.Run.Replays) for an
// activation whose pick the record holds: then a fresh draw (a coin without
// a seed, a function reading the clock) may take another branch, unless
// the condition takes the recorded outcome (runproto.Run.Outcome), as the
// protocol says it must (Options.NoConditionReplay shows it does not
// otherwise). An activation whose pick the record did not hold when the
// follow began (its condition and its targets were on one lost node, or
// the old owner, taken for dead, picked as the takeover began) stays
// deterministic: its replay is not the protocol's (see the package
// documentation).
func (h *hold) choose(v int, act uint64) int {
	g := h.run.g
	want := pick(g, v, act)
	if !h.r.Replays(v) {
		return want
	}
	if !h.p.w.opt.NoConditionReplay {
		if d, ok := h.r.Outcome(v, act); ok {
			h.replaying = [2]uint64{uint64(v), act}
			for k, e := range g.Vertices[v].Succ {
				if uint32(e.To) == d[0] {
					return k
				}
			}
		}
	}
	if !h.p.w.recordedPick(h.run.id, v, act, h.fol.pos) {
		h.p.w.checkPickRecorded(h.run.id, v, act, h.fol.pos, h.p.id)
		h.p.w.fresh = append(h.p.w.fresh, freshPick{h.run.id, v, act, h.fol.pos, h.p.id})
		return want // not in what the follow read: nothing of an earlier pick reached another node, so any draw is the run's one
	}
	k := h.p.w.rng.IntN(len(g.Vertices[v].Succ))
	h.p.w.logf("%s: condition %s#%d drawn afresh: %d (the record's: %d)", h.p.id, g.Vertices[v].Path, act, k, want)
	return k
}

// emit queues a Signal for the destination's owner in the generation in
// force (the sends resolve it when they send), stamped with the activation
// of the destination it starts and the source's loop context.
func (h *hold) emit(from, to int, act, dstAct uint64, ctx []uint64, choice bool, out uint64) {
	t := h.r.Table()
	s := transport.Signal{Run: h.run.id, Gen: t.Gen, Src: uint32(from), Dst: uint32(to), Act: act, Kind: transport.SignalEdge, DstAct: dstAct, Ctx: ctx}
	if h.p.w.opt.NoDstAct {
		s.DstAct, s.Ctx = 0, nil
	}
	if choice {
		s.Kind = transport.SignalChoice
		h.p.w.picked = append(h.p.w.picked, pickMade{run: h.run.id, v: from, act: act, by: h.p.id, at: len(h.p.w.record), remote: true, replayed: h.replaying == [2]uint64{uint64(from), act}})
	} else {
		s.Output = binary.LittleEndian.AppendUint64(nil, out)
	}
	d := t.NodeOf(to)
	if _, ok := h.out[d]; !ok {
		h.dests = append(h.dests, d)
	}
	h.out[d] = append(h.out[d], s)
}

// recordPick is cluster/node's: a condition's pick of a task of its part
// is recorded before anything the node sends after it (one batch to
// transport.PicksNode, ahead of the others, as transport.Batcher.AddPick
// publishes), unless the run is on this node alone in one part (nothing
// goes through the record).
func (h *hold) recordPick(v, t int, act uint64) {
	w := h.p.w
	tab := h.r.Table()
	if len(tab.Nodes) < 2 && h.parts < 2 {
		return
	}
	w.picked = append(w.picked, pickMade{run: h.run.id, v: v, act: act, by: h.p.id, at: len(w.record), replayed: h.replaying == [2]uint64{uint64(v), act}})
	if w.opt.NoPickRecord {
		return
	}
	h.picks = append(h.picks, transport.Signal{Run: h.run.id, Gen: tab.Gen, Src: uint32(v), Dst: uint32(t), Act: act, Kind: transport.SignalChoice})
}

// mark is cluster/node's markSwitch: the node records that it took
// generation gen (a SignalSwitched for transport.PicksNode), now, behind
// the picks before it.
func (h *hold) mark(gen uint64) {
	h.picks = append(h.picks, transport.Signal{Run: h.run.id, Gen: gen, Act: 1, Kind: transport.SignalSwitched})
	h.flushPicks()
}

// flushPicks publishes the picks and marks waiting (not counted in Sent).
func (h *hold) flushPicks() {
	if len(h.picks) > 0 {
		h.p.seq++
		b := &transport.Batch{From: h.p.id, Seq: h.p.seq, Signals: h.picks}
		h.picks = nil
		h.p.w.publish(h.p, transport.PicksNode, b)
	}
}

// flush hands the Signals of the input to the Batcher: one batch per
// destination, counted in Sent, after the picks (recordPick).
func (h *hold) flush() {
	h.flushPicks()
	for _, d := range h.dests {
		sigs := h.out[d]
		delete(h.out, d)
		h.p.seq++
		h.r.AddSent(len(sigs))
		b := &transport.Batch{From: h.p.id, Seq: h.p.seq, Signals: sigs}
		h.p.w.publish(h.p, d, b)
	}
	h.dests = h.dests[:0]
}

// apply carries out runproto's actions.
func (h *hold) apply(acts []runproto.Action) {
	w := h.p.w
	for _, a := range acts {
		switch a.Kind {
		case runproto.Deliver:
			h.deliver(a)
		case runproto.Fence:
			w.res.Fenced++
			w.logf("%s: fenced %s→%s#%d from %s: %s", h.p.id, h.run.path(a.Sig.Src), h.run.path(a.Sig.Dst), a.Sig.Act, a.From, a.Reason)
		case runproto.Duplicate:
			w.res.Dups++
		case runproto.Wait:
			h.checkSender(a)
			w.logf("%s: wait %s→%s#%d (starts %d) gen %d from %s", h.p.id, h.run.path(a.Sig.Src), h.run.path(a.Sig.Dst), a.Sig.Act, a.Sig.DstAct, a.Sig.Gen, a.From)
		case runproto.Hold, runproto.Drop:
			w.logf("%s: %s %s→%s#%d gen %d from %s %s", h.p.id, a.Kind, h.run.path(a.Sig.Src), h.run.path(a.Sig.Dst), a.Sig.Act, a.Sig.Gen, a.From, a.Reason)
		case runproto.Switch:
			w.logf("%s: switch to gen %d", h.p.id, a.Table.Gen)
			h.mark(a.Table.Gen)
		case runproto.Open:
			h.parts++
			h.e.open(a.In, h.parts)
			h.flush()
		case runproto.Follow:
			h.fol.id, h.fol.pos, h.fol.start, h.fol.caught, h.fol.active = a.Follow, 0, len(w.record), false, true
			w.logf("%s: follow %d from the record's start (%d batches)", h.p.id, a.Follow, h.fol.start)
			h.wakeFollow()
		case runproto.StopFollow:
			h.fol.active = false
		case runproto.Report:
			h.storeEvents()                                             // cluster/node's report: the task table is flushed first
			rep := h.r.Report(h.failed || !h.e.busy() || w.opt.LieIdle) // a cancelled part is idle
			w.publish(h.p, "", &rep)
		}
	}
}

// deliver hands a Signal runproto accepted to the executor, after checking
// it against the ground truth: its sender owns its source in the
// generation in force (unless the follow took it from the record) and it
// carries what the source's activation really gave.
func (h *hold) deliver(a runproto.Action) {
	w := h.p.w
	s := a.Sig
	src, dst := int(s.Src), int(s.Dst)
	if !a.Waited { // one that waited was checked when it came (Wait)
		h.checkSender(a)
	}
	choice := s.Kind == transport.SignalChoice
	var out uint64
	if choice {
		if t := h.run.g.Vertices[src].Succ[pick(h.run.g, src, s.Act)].To; t != dst {
			w.fail("%s accepted a choice %s→%s#%d; the condition picks %s", h.p.id, h.run.path(s.Src), h.run.path(s.Dst), s.Act, h.run.path(uint32(t)))
		}
	} else {
		if len(s.Output) == 8 {
			out = binary.LittleEndian.Uint64(s.Output)
		}
		if want, ok := h.run.truth.outs[src][s.Act]; (!ok || want != out) && !h.run.free[src] {
			w.fail("%s accepted %s→%s#%d with output %x; the ground truth's is %x (present %v)", h.p.id, h.run.path(s.Src), h.run.path(s.Dst), s.Act, out, want, ok)
		}
	}
	if h.run.free[dst] && s.DstAct > h.e.done[dst]+1 {
		w.res.Ahead++ // it would have waited, maybe for ever
	}
	if h.e.part[dst] < 0 {
		w.logf("%s: delivered %s→%s#%d, a task not here", h.p.id, h.run.path(s.Src), h.run.path(s.Dst), s.Act)
		return
	}
	if h.e.part[src] == h.e.part[dst] {
		// both ends now in one part: the part's own edge does the work
		// (cluster/node: a replayed Signal has no proxy then)
		if !a.Replayed {
			w.logf("%s: live Signal %s→%s#%d inside one part ignored", h.p.id, h.run.path(s.Src), h.run.path(s.Dst), s.Act)
		}
		return
	}
	w.logf("%s: deliver %s→%s#%d from %s%s", h.p.id, h.run.path(s.Src), h.run.path(s.Dst), s.Act, a.From, map[bool]string{true: " (record)"}[a.Replayed])
	h.e.deliver(src, dst, s.Act, s.Ctx, choice, out)
}

// checkSender checks a Signal accepted from the live subscription: its
// sender owns its source in the generation in force.
func (h *hold) checkSender(a runproto.Action) {
	if a.Replayed {
		return
	}
	s := a.Sig
	if tab := h.run.tables[h.r.Gen()]; tab == nil || tab[s.Src] != a.From {
		h.p.w.fail("%s accepted %s→%s#%d (gen %d) from %s, which does not own %s in gen %d (%v)", h.p.id, h.run.path(s.Src), h.run.path(s.Dst), s.Act, s.Gen, a.From, h.run.path(s.Src), h.r.Gen(), tab)
	}
}

// wakeFollow schedules a read of the record by the follow, if one is in
// force and not scheduled yet.
func (h *hold) wakeFollow() {
	if h.gone || !h.fol.active || h.fol.armed {
		return
	}
	h.fol.armed = true
	w := h.p.w
	w.at(w.latency(), h.p, h.pumpFollow)
}

// pumpFollow reads the next batches of the record (an ordered consumer:
// in stream order, paused while disconnected).
func (h *hold) pumpFollow() {
	h.fol.armed = false
	w := h.p.w
	if h.gone || !h.fol.active || !h.p.connected || !w.natsUp {
		return
	}
	id := h.fol.id
	for k := 1 + w.rng.IntN(6); k > 0 && h.fol.pos < len(w.record); k-- {
		e := w.record[h.fol.pos]
		h.fol.pos++
		h.apply(h.r.FollowBatch(e.seq, e.to, e.b))
		if h.gone || h.fol.id != id || !h.fol.active {
			return
		}
	}
	if !h.fol.caught && h.fol.pos >= h.fol.start {
		h.fol.caught = true
		h.apply(h.r.CaughtUp(id))
	}
	if h.fol.pos < len(w.record) {
		h.wakeFollow()
	}
}
