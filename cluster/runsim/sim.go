package runsim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/node/runproto"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/transport"
)

// Run simulates one seed: a random flow on a random cluster under faults
// drawn from the seed. verbose keeps the whole trace (else its tail is kept
// for a violation). The same seed gives the same result, step by step.
func Run(seed uint64, verbose bool) Result { return RunWith(seed, verbose, Default) }

// Options choose the behaviour the simulated nodes have where it differs
// from cluster/node today (fixes proposed, not yet there).
type Options struct {
	// ReadRecordAtStart: a node that starts holding a run reads the record
	// of the Signals addressed to it for that run (as it does after a
	// reconnect) when it may have lost one: the run is of a later
	// generation, was not made for this process (its Assignment names
	// another boot or none), or the process has been disconnected since
	// it started, as cluster/node does (Node.mayHaveLostLocked). Without
	// it, Signals core NATS lost while the node was disconnected, before
	// its Assignment came, are never read, and the run never terminates
	// (seeds 305, 508 without it).
	ReadRecordAtStart bool
	// ResendFail: a node whose task failed for good sends the fail
	// envelope again with every heartbeat until the run is released.
	// cluster/node sends it once: when core NATS loses it the leader never
	// hears of the failure (and, before runproto's Fail, declared success;
	// NoFailInput shows that).
	ResendFail bool
	// NoFailInput: the node does not tell runproto of the failure
	// (runproto.Run.Fail), as before it existed: its reports stay idle.
	NoFailInput bool
	// NoConditionReplay: a condition run again after a loss does not take
	// the outcome the record holds for its activation (as before
	// runproto.Run.Outcome): where the record holds one, it draws afresh.
	NoConditionReplay bool
	// NoDstAct: Signals do not say which activation of their destination
	// they start (transport.Signal.DstAct 0, as before wire version 2):
	// receivers number activations in arrival order.
	NoDstAct bool
	// JoinSurplus: the generated flows may hold joins whose strong
	// predecessors complete unequal numbers of times (a loop's body
	// joined with a task that runs once, or with another loop's body):
	// they take the completions in rounds, as on one node
	// (runproto.FreeJoins). Not in Default, so
	// that the draws the seed regressions name stay as they were
	// (TestJoinSurplus runs it).
	JoinSurplus bool
	// NoFreeJoins: runproto is not told of the flow's free joins
	// (Config.Free nil), as before: their Signals wait for the join's
	// previous activation, and a surplus waits for ever.
	NoFreeJoins bool
	// NoBootCheck: a node takes an Assignment made for an earlier process
	// under its id (transport.Assignment.Boots, as before wire version 3):
	// a restarted process starts that part afresh, without its
	// predecessor's record, until the leader moves it.
	NoBootCheck bool
	// NoPickRecord: a condition that picks a task of its own part records
	// nothing (as before transport.Batcher.AddPick): only a remote pick's
	// Choice Signal reaches the record, so a node that runs the condition
	// again after a loss draws afresh although the branch's Signals reached
	// other nodes.
	NoPickRecord bool
	// NoSwitchMarks: a condition run again after a loss decides once the
	// follow has caught up with what the record held when it began, not
	// waiting for every node's mark of the generation
	// (runproto.Run.Settled): a pick the old owner, taken for dead, made as
	// the takeover began can reach a node still in the old generation
	// behind the follow's start.
	NoSwitchMarks bool
	// ResumeAtTakeover: a frozen node whose tasks the leader moves resumes
	// within 2 ms of the move, and the move's Assignment reaches half the
	// nodes 10–80 ms late: the worst moment for an old owner to go on
	// running its part (a freeze otherwise ends at a time drawn with it).
	ResumeAtTakeover bool
	// RunAgain: a run after the first is, one time in two, a run again of
	// the first run's flow, placed by the first run's seed (the server's
	// cached placement): on the same live nodes its plans are the first
	// run's, and the leader names them by digest to the nodes that
	// acknowledged them (coord.LeaderConfig.Plans). Not in Default, so that
	// the draws the seed regressions name stay close to what they were
	// (TestPlanByDigest runs it). A later generation's Assignment to a node
	// that acknowledged its plan goes by digest in Default too: of the
	// named seeds, only 66 with NoPickRecord took other steps (198 → 217),
	// and it still shows its violation.
	RunAgain bool
	// LosePlans: a node that gets an Assignment naming its plan by digest
	// has, one time in two, lost every plan it held (as a node whose graph
	// cache evicted them): it asks for the plan (an Ack with NeedPlan).
	LosePlans bool

	// Planted bugs, to show that the simulation catches them
	// (TestPlantedLeaderBugs):
	//
	// SkipCheck: the leader's record check passes every verdict
	// (CheckSuccess bypassed).
	SkipCheck bool
	// Silence is the Liveness silence after which an unheard candidate is
	// dead (0: coord.DefaultSilence). A nanosecond confirms a death at the
	// first tick after gossip's suspicion, before any ping is answered.
	Silence time.Duration
	// LieIdle: nodes report idle while activations run or wait (the
	// detector can then terminate a run with work owed; the record check
	// must refuse, and a refused verdict is not a violation).
	LieIdle bool
	// IgnoreAcks: the leader is not told of the nodes' Assignment acks
	// (coord.Leader.Ack never called), as a leader that takes only reports
	// would: it re-sends to nodes that acked.
	IgnoreAcks bool
}

// Default is what Run simulates.
var Default = Options{ReadRecordAtStart: true, ResendFail: true}

// RunWith is Run with options.
func RunWith(seed uint64, verbose bool, opt Options) Result {
	w := &world{
		seed: seed, opt: opt, rng: rand.New(rand.NewPCG(seed, 0x68657466)), verbose: verbose,
		cpus: map[string]int{}, procs: map[string]*proc{}, boots: map[string]int{}, ringBoot: map[string]int{}, ring: map[string]string{},
		natsUp: true, chans: map[[2]string]time.Duration{}, fsm: coord.NewFSM(), accepted: map[*transport.Batch]bool{},
	}
	w.res.Seed = seed
	n := 2 + w.rng.IntN(4)
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		w.nodeIDs = append(w.nodeIDs, id)
		w.cpus[id] = 1 + w.rng.IntN(4)
		w.ring[id] = proto.NodeAlive
		w.newProc(id)
		w.ringBoot[id] = 1
	}
	// One to three runs, each its own random flow, submitted at times in
	// the first second and a half.
	for i := range 1 + w.rng.IntN(3) {
		sr := &simRun{id: fmt.Sprintf("r%013x-%06x", i+1, i+1), tables: map[uint64][]string{}}
		sr.placeID = sr.id
		if opt.RunAgain && i > 0 && w.rng.IntN(2) == 0 {
			sr.flow, sr.placeID = w.runs[0].flow, w.runs[0].id
		} else {
			sr.flow = genFlow(w.rng, w.nodeIDs, w.rng.IntN(6) == 0, opt.JoinSurplus)
		}
		g, err := parseFlow(sr.flow)
		if err != nil {
			w.fail("generated flow does not expand: %v\n%s", err, sr.flow)
			return w.result()
		}
		sr.g = g
		if sr.truth, err = reference(g); err != nil {
			w.fail("%v\n%s", err, sr.flow)
			return w.result()
		}
		sr.free = runproto.FreeJoins(g)
		w.res.Shaped = w.res.Shaped || unequalJoin(g, sr.free, sr.truth)
		w.runs = append(w.runs, sr)
		w.logf("%s: flow (%d tasks, %d nodes):\n%s", sr.id, len(g.Vertices), n, sr.flow)
	}
	w.planFaults()

	// The cluster is up: an earlier leader verified every node (each
	// answered a ping as itself, coord.Liveness) and recorded it alive; this
	// leader syncs the ring into the FSM, the runs are submitted, and the
	// leader loop takes them from there. (A restarted node is verified
	// afresh: suspect, given no work, until its new boot answers a ping.)
	for _, id := range w.nodeIDs {
		if err := w.fsm.Apply(&coord.Command{Op: coord.OpNodeUpsert, Node: &coord.Node{ID: id, Address: id, State: proto.NodeAlive,
			CPUs: w.cpus[id], Boot: fmt.Sprint(w.ringBoot[id]), Updated: w.clock()}}); err != nil {
			w.fail("node upsert: %v", err)
			return w.result()
		}
	}
	w.startLeader()
	for i, sr := range w.runs {
		at := time.Duration(0)
		if i > 0 {
			at = w.dur(0, 1500*time.Millisecond)
		}
		w.at(at, nil, func() { w.submitRetry(sr) })
	}
	w.loop()
	return w.result()
}

// submitRetry submits a run to the leader, or again 100 ms later while no
// coordinator leads (the client tries the servers until one answers).
func (w *world) submitRetry(sr *simRun) {
	if w.lead == nil {
		w.at(100*time.Millisecond, nil, func() { w.submitRetry(sr) })
		return
	}
	if err := w.submit(sr); err != nil {
		// refused (no alive node the plan can use): the client is told;
		// nothing runs
		w.logf("submit %s refused: %v", sr.id, err)
		sr.finished = w.now
		w.allFinished()
		return
	}
	w.lead.reconcile() // the submit's kick
}

func (w *world) result() Result {
	r := &w.res
	r.Violation = w.viol
	r.Steps = w.step
	r.SimTime = w.now
	r.Faults = w.faults
	r.Leader = LeaderStats{Refused: w.ls.refused, Refuted: w.ls.refuted, Confirmed: w.ls.confirmed,
		Copies: w.ls.copies, Deliveries: len(w.ls.deliveries), ByDigest: w.ls.byDigest, NeedPlan: w.ls.needPlan}
	for _, sr := range w.runs {
		rr := RunResult{ID: sr.id}
		if run, ok := w.fsm.Run(sr.id); ok {
			rr.Gens = run.Gen
			if proto.Finished(run.State) {
				rr.State, rr.Error = run.State, run.Error
			}
		} else if sr.finished > 0 {
			rr.State = "refused"
		}
		rr.TaskFailed = sr.failedTask != ""
		r.Runs = append(r.Runs, rr)
	}
	if w.viol != nil || w.verbose {
		r.Trace = w.trace
	}
	// executions of an activation after its first, anywhere
	type key struct {
		run *simRun
		k   [2]uint64
	}
	seen := map[key]bool{}
	for _, h := range w.holds {
		for k, c := range h.exec {
			if seen[key{h.run, k}] {
				r.Reexec += c
			} else {
				seen[key{h.run, k}] = true
				r.Reexec += c - 1
			}
		}
	}
	return *r
}

// planFaults draws the faults of the seed: each at a time in the fault
// window, with its duration; the window ends when the last one's effect
// (a detection, a restart) is over. After it the cluster is quiet and the
// run must finish within quietBound.
func (w *world) planFaults() {
	window := w.dur(200*time.Millisecond, 3*time.Second)
	w.lossP = []float64{0, 0, 0.05, 0.2}[w.rng.IntN(4)]
	w.dupP = []float64{0, 0, 0.05, 0.2}[w.rng.IntN(4)]
	end := time.Duration(0)
	if w.lossP > 0 || w.dupP > 0 {
		end = window
		w.faults = append(w.faults, fmt.Sprintf("loss %.2f dup %.2f until %v", w.lossP, w.dupP, window))
	}
	nf := w.rng.IntN(5)
	for range nf {
		at := w.dur(0, window)
		detect := w.dur(400*time.Millisecond, 1500*time.Millisecond)
		id := w.nodeIDs[w.rng.IntN(len(w.nodeIDs))]
		var desc string
		var fn func()
		var last time.Duration
		switch k := w.rng.IntN(7); k {
		case 0: // kill, maybe restart
			restart := time.Duration(-1)
			if w.rng.IntN(2) == 0 {
				restart = w.dur(200*time.Millisecond, 3*time.Second)
			}
			desc = fmt.Sprintf("kill %s at %v (restart after %v)", id, at, restart)
			last = at + max(detect, restart+time.Second)
			fn = func() { w.kill(id, detect, restart) }
		case 1: // freeze (SIGSTOP … SIGCONT); past the silence it is dead
			d := w.dur(100*time.Millisecond, 8*time.Second)
			desc = fmt.Sprintf("freeze %s at %v for %v", id, at, d)
			last = at + d
			fn = func() { w.freeze(id, d, detect) }
		case 2: // a live node taken for dead by gossip for a while (it
			// answers pings: it must keep its tasks, even past the silence)
			d := w.dur(300*time.Millisecond, 6*time.Second)
			desc = fmt.Sprintf("suspect %s at %v for %v", id, at, d)
			last = at + d
			fn = func() {
				w.logf("FAULT: %s falsely suspected for %v", id, d)
				w.declareDead(id)
				w.at(d, nil, func() {
					if w.procs[id] != nil {
						w.setRing(id, proto.NodeAlive)
					}
				})
			}
		case 3: // leader change
			d := w.dur(200*time.Millisecond, 3*time.Second)
			desc = fmt.Sprintf("leader change at %v (%v without)", at, d)
			last = at + d
			fn = func() {
				if w.lead != nil {
					w.stopLeader(d)
				}
			}
		case 4: // NATS server restart
			d := w.dur(50*time.Millisecond, 2*time.Second)
			desc = fmt.Sprintf("NATS restart at %v for %v", at, d)
			last = at + d + 300*time.Millisecond
			fn = func() {
				if w.natsUp {
					w.troubledAt("")
					w.natsRestart(d)
					w.at(d+300*time.Millisecond, nil, func() { w.troubledAt("") }) // every client is back by then
				}
			}
		case 6: // a task fails for good
			sr := w.runs[w.rng.IntN(len(w.runs))]
			desc = fmt.Sprintf("a task of %s fails at %v", sr.id, at)
			last = at
			fn = func() {
				w.logf("FAULT: the next task of %s to run fails for good", sr.id)
				sr.failNext = true
			}
		default: // one client's reconnect
			d := w.dur(20*time.Millisecond, time.Second)
			desc = fmt.Sprintf("disconnect %s at %v for %v", id, at, d)
			last = at + d
			fn = func() {
				p := w.procs[id]
				if p == nil || !p.connected {
					return
				}
				w.logf("FAULT: %s disconnected for %v", id, d)
				p.connected, p.lossy = false, true
				w.troubledAt(id)
				w.at(d, p, func() { w.troubledAt(id); p.reconnect() })
			}
		}
		w.faults = append(w.faults, desc)
		end = max(end, last)
		w.at(at, nil, fn)
	}
	w.faultEnd = end
}

// kill ends a node's process; memberlist declares it dead after detect
// unless it is back by then (a new boot: the leader sees the restart).
func (w *world) kill(id string, detect, restart time.Duration) {
	p := w.procs[id]
	if p == nil {
		return
	}
	alive := 0
	for _, x := range w.nodeIDs {
		if w.procs[x] != nil {
			alive++
		}
	}
	if alive <= 1 {
		return // keep one node: no node at all is not a fault this model draws
	}
	w.logf("FAULT: kill %s", id)
	for _, h := range p.runs {
		h.gone = true
	}
	w.procs[id] = nil
	w.troubledAt(id)
	w.at(detect, nil, func() {
		if w.procs[id] == nil {
			w.declareDead(id)
		}
	})
	if restart >= 0 {
		w.at(restart, nil, func() {
			if w.procs[id] != nil {
				return
			}
			np := w.newProc(id)
			w.troubledAt(id)
			w.logf("%s restarted (boot %d)", id, np.boot)
			// memberlist shows the new incarnation after a while
			w.at(w.dur(10*time.Millisecond, time.Second), nil, func() {
				if w.procs[id] != np {
					return
				}
				w.ringBoot[id] = np.boot
				w.logf("ring: %s boot %d", id, np.boot)
				if w.ring[id] == proto.NodeAlive {
					if w.lead != nil {
						w.lead.memberKick() // same name, new incarnation
					}
				} else {
					w.setRing(id, proto.NodeAlive)
				}
			})
		})
	}
}

// freeze stops a process for d: its events wait; past detect memberlist
// declares it dead, and alive again when it resumes.
func (w *world) freeze(id string, d, detect time.Duration) {
	p := w.procs[id]
	if p == nil || p.frozen {
		return
	}
	w.logf("FAULT: freeze %s for %v", id, d)
	p.frozen = true
	w.troubledAt(id)
	if d > detect {
		w.at(detect, nil, func() {
			if w.procs[id] == p && p.frozen {
				w.declareDead(id)
			}
		})
	}
	w.at(d, nil, func() { w.resume(id, p) })
}

// resume ends p's freeze: its waiting events run, memberlist sees it alive.
func (w *world) resume(id string, p *proc) {
	if w.procs[id] != p || !p.frozen {
		return
	}
	w.logf("%s resumes", id)
	w.troubledAt(id)
	p.frozen = false
	bl := p.backlog
	p.backlog = nil
	for _, f := range bl {
		w.at(0, p, f)
	}
	w.setRing(id, proto.NodeAlive)
}

// onFinish checks a run's verdict: a success must have every activation
// the ground truth has, executed once on its task's final owner; a failure
// is allowed only when the fault model made the run unrecoverable.
func (w *world) onFinish(id string) {
	sr := w.run(id)
	if sr == nil || sr.finished > 0 {
		return
	}
	run, ok := w.fsm.Run(id)
	if !ok || !proto.Finished(run.State) {
		return
	}
	sr.finished = w.now
	defer w.allFinished()
	w.logf("verdict %s: %s %s (gen %d)", id, run.State, run.Error, run.Gen)
	if sr.failedTask != "" && run.State == proto.RunSucceeded {
		w.fail("%s succeeded, but task %q failed for good", id, sr.failedTask)
		return
	}
	if run.State != proto.RunSucceeded {
		r := RunResult{State: run.State, Error: run.Error}
		// the task that failed for good: its fail envelope ("task X: …"),
		// or the record's failed event at the verdict ("task X failed")
		byTask := sr.failedTask != "" && (strings.HasPrefix(run.Error, "task "+sr.failedTask+":") || run.Error == "task "+sr.failedTask+" failed")
		// refused verdicts, five in a row: only a planted lie causes them
		planted := w.opt.LieIdle && strings.HasPrefix(run.Error, "internal error:")
		if !r.Unrecoverable() && !byTask && !planted {
			w.fail("run %s %s: %s — not a failure the faults can cause", id, run.State, run.Error)
		}
		return
	}
	for v := range sr.g.Vertices {
		owner := run.Assignment[v]
		var h *hold
		for _, x := range w.holds {
			if x.p.id == owner && x.run == sr {
				h = x
			}
		}
		path := sr.g.Vertices[v].Path
		if h == nil || h.r.Gen() != run.Gen {
			w.fail("%s succeeded, but %s, the final owner of %q, does not hold gen %d", id, owner, path, run.Gen)
			return
		}
		for a := uint64(1); a <= sr.truth.acts[v]; a++ {
			if c := h.exec[[2]uint64{uint64(v), a}]; c != 1 {
				w.fail("%s succeeded with activation %d of %q executed %d times on its final owner %s (holding %d); the ground truth has %d activations", id, a, path, c, owner, h.n, sr.truth.acts[v])
				return
			}
		}
	}
}

// declareDead is memberlist declaring a node dead.
func (w *world) declareDead(id string) {
	if w.ring[id] != proto.NodeDead {
		w.ringDeadAt(id)
	}
	w.setRing(id, proto.NodeDead)
}

// allFinished notes when every run has ended.
func (w *world) allFinished() {
	for _, sr := range w.runs {
		if sr.finished == 0 {
			return
		}
	}
	if w.finished == 0 {
		w.finished = w.now
	}
}
