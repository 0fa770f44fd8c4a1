package runproto

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/hetflow/hetflow/transport"
)

// DefaultMaxHeld bounds the Signals a run holds for a generation it has not
// been assigned yet (Config.MaxHeld 0).
const DefaultMaxHeld = 1 << 16

// Table is one generation's placement: vertex v runs on Nodes[Owner[v]].
// A Table is never changed once made: a node's task goroutines read the one
// in force without a lock (Switch hands it over).
type Table struct {
	Gen   uint64
	Nodes []string
	Owner []uint32
}

// NodeOf is the node that runs v.
func (t *Table) NodeOf(v int) string { return t.Nodes[t.Owner[v]] }

// Has reports whether node is one of the generation's nodes.
func (t *Table) Has(node string) bool {
	for _, n := range t.Nodes {
		if n == node {
			return true
		}
	}
	return false
}

// OwnerError is a placement whose Owner of Vertex names no node.
type OwnerError struct {
	Vertex int
	Owner  uint32
}

func (e *OwnerError) Error() string {
	return fmt.Sprintf("task %d: owner %d names no node of the assignment", e.Vertex, e.Owner)
}

// check reports an Owner that names no node (an *OwnerError), or a
// placement of another size.
func (t *Table) check(vertices int) error {
	if vertices >= 0 && len(t.Owner) != vertices {
		return fmt.Errorf("the assignment places %d tasks, the flow has %d", len(t.Owner), vertices)
	}
	for v, o := range t.Owner {
		if int(o) >= len(t.Nodes) {
			return &OwnerError{v, o}
		}
	}
	return nil
}

// PhysID names one Signal as it crossed the wire: its batch (sender, batch
// number) and place in it. Gen keeps a restarted sender's batch numbers,
// which start again at 1, apart: it is only ever given later generations.
type PhysID struct {
	From  string
	Gen   uint64
	Seq   uint64
	Index int
}

// pos is a place in the run's record: a batch's stream sequence and a
// Signal's index in it.
type pos struct {
	seq uint64
	i   int
}

type held struct {
	id       PhysID
	s        transport.Signal
	replayed bool
}

// Kind says what an Action asks of the node.
type Kind uint8

// The actions. Those about one Signal (Deliver to Drop) come one per Signal
// in the order of the input; the others come in the order the node must
// carry them out.
const (
	// Deliver: Sig is new; queue it on the receive proxy of its edge
	// (Sig.Src, Sig.Dst) and schedule the proxy. Replayed: it was taken
	// from the record by the follow (a missing proxy is no error then: the
	// edge may now be inside one part).
	Deliver Kind = iota + 1
	// Hold: Sig is of a generation newer than the one in force; it is kept
	// (copied) until that generation's Assignment.
	Hold
	// Fence: Sig's sender does not own its source in the generation in
	// force; it is refused.
	Fence
	// Duplicate: Sig was delivered before; it is dropped (and counted or
	// not: see Batch).
	Duplicate
	// Drop: Sig names no task of the run, or the hold buffer is full, or
	// it waited for an activation of a task that moved away.
	Drop
	// Wait: Sig starts activation Sig.DstAct of its destination, whose
	// activation DstAct-1 has not completed here yet; it is kept (copied,
	// and counted already) and delivered by the Completed that lets it in.
	Wait
	// Switch: Table is the generation in force now; the node's sends
	// resolve their destinations and stamp their Gen from it.
	Switch
	// Open: the vertices In moved here; build them as one more part of
	// the run (clearing what this node had seen of them as remote inputs)
	// before carrying out the actions after this one.
	Open
	// Follow: (re)start following the run's record from its start; Follow
	// names this follow in CaughtUp. A follow already running is stopped.
	Follow
	// StopFollow: stop the follow (the run is stopping).
	StopFollow
	// Report: send a TermReport now (built by Report).
	Report
)

var kindNames = [...]string{"?", "deliver", "hold", "fence", "duplicate", "drop", "wait", "switch", "open", "follow", "stop-follow", "report"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "?"
}

// Action is one thing the node has to do after an input.
type Action struct {
	Kind     Kind
	Sig      *transport.Signal // Deliver to Wait; valid until the next input
	From     string            // Deliver to Wait: the sender
	Replayed bool              // Deliver, Duplicate, Wait: taken by the follow
	Waited   bool              // Deliver: a Signal that waited (Completed); it was fenced when it came
	Reason   string            // Fence, Drop: why (for the log)
	Table    *Table            // Switch
	In       []bool            // Open
	Follow   uint64            // Follow
}

// Config is what a node knows about its part of a run when it first takes
// it: the run's first Assignment it sees (of any generation).
type Config struct {
	Self  string
	Run   string
	Gen   uint64
	Nodes []string
	Owner []uint32
	// MaxHeld bounds the Signals held for a newer generation (0:
	// DefaultMaxHeld).
	MaxHeld int
	// Done reads how many activations of local vertex v have completed
	// here (any goroutine may be completing one: it is read with the
	// node's lock held, and the node calls Completed after each completion
	// of a vertex Waits names). nil: none ever wait (every Signal is
	// delivered as it comes).
	Done func(v int) uint64
	// Loops reads a Signal's loop context (nil: its context is not
	// waited for). With Done.
	Loops *Loops
	// Free marks the joins whose Signals do not wait for the join's
	// previous activation (FreeJoins; nil: none). With Done.
	Free []bool
	// Spare is what an ended Run of the same plan handed on (Release):
	// its per-vertex arrays, cleared, taken when they are of this run's
	// size instead of making new ones (a run again of a big flow made and
	// dropped them every run).
	Spare Spare
}

// Spare holds an ended Run's per-vertex arrays, cleared, for the next Run
// (Config.Spare). Whoever holds it owns them: the Run they came from has
// them no longer.
type Spare struct {
	waits []atomic.Bool
	moved []bool
}

// Release hands r's per-vertex arrays on, cleared. Its node forgot the
// run, so no Signal, probe or report reaches it; two paths may still call
// r, under the node's lock, after Release: an Assignment the node found
// before it forgot the run (its update), and the caught-up callback of a
// follow that was still starting when the run stopped (teardown does not
// wait for one). That is safe by the rule Stop states: every method that
// touches waits or moved checks stopped first and does nothing after
// Stop. r's arrays are nil from here on, so a use that broke the rule
// would read no waiting Signal and, where it would write, panic on the
// nil array rather than write the next run's state.
//
// Only a stopped Run hands its arrays on (Stop: it takes no Signal after
// it); another keeps them and gives none.
func (r *Run) Release() Spare {
	if !r.stopped {
		return Spare{}
	}
	sp := Spare{waits: r.waits, moved: r.moved}
	r.waits, r.moved = nil, nil
	clear(sp.waits)
	clear(sp.moved)
	return sp
}

// Run is one node's share of the run protocol for one run, across its
// generations (see the package documentation). Its methods are not safe for
// concurrent use, except AddSent and Table, which may be called from any
// goroutine.
type Run struct {
	self, id string
	n        int // vertices
	tab      atomic.Pointer[Table]
	gen      uint64

	// moved marks the vertices whose owner changed in a generation this
	// node saw; nil on a node that joined the run after a loss (it cannot
	// tell, and counts every physical Signal).
	moved []bool
	phys  map[PhysID]struct{} // physical Signals counted: of moved sources, and taken by the follow
	dedup *transport.Deduper  // this run only

	held    []held
	maxHeld int

	// Signals kept until their destination's previous activation has
	// completed (Signal.DstAct), per destination, in arrival order; waits
	// marks the destinations with some (read by any goroutine).
	done    func(v int) uint64
	loops   *Loops
	waiting map[int][]held
	nwait   int
	waits   []atomic.Bool
	nwaits  atomic.Int32 // marks set in waits (setWaits): Waits reads none while 0
	free    []bool       // Config.Free

	// Condition outcomes the follow read in the record (a Choice Signal of
	// a source this node owns now): (source, activation) → destinations.
	// replay marks the vertices that run again here what ran elsewhere
	// (opened after a loss), whose conditions take the recorded outcome.
	outcomes map[[2]uint64]outcome
	replay   []bool
	// marks is the newest generation each node's mark in the record says it
	// switched to (transport.SignalSwitched, read by the follow): a
	// condition run again here decides once every node of the generation in
	// force has marked it (Settled).
	marks map[string]uint64

	sent     atomic.Uint64
	received uint64
	from     map[string]uint64
	wave     uint64

	failed  bool   // a task failed for good: never idle again
	follow  uint64 // the follow in force (0: none ever)
	caught  bool   // the follow has caught up (true when there is none)
	taken   map[pos]struct{}
	stopped bool

	// batches are the batches taken whole (BatchAll) and decided for good:
	// read again, from the record, they are skipped.
	batches map[batchID]int // → its Signals

	acts []Action
	ok   []*transport.Signal // scratch: the Signals that passed the fence
	idx  []int               // scratch: their places in their batch (PhysID.Index)
	vd   []transport.Verdict
}

// New starts a node's share of a run from its first Assignment.
func New(c Config) (*Run, error) {
	t := &Table{Gen: c.Gen, Nodes: c.Nodes, Owner: c.Owner}
	if err := t.check(-1); err != nil {
		return nil, err
	}
	r := &Run{
		self: c.Self, id: c.Run, n: len(c.Owner), gen: c.Gen,
		dedup: transport.NewDeduper(), maxHeld: c.MaxHeld,
		from: map[string]uint64{}, caught: true, done: c.Done, loops: c.Loops,
	}
	if r.done != nil {
		r.free = c.Free
		if r.waits = c.Spare.waits; r.waits == nil || len(r.waits) != r.n {
			r.waits = make([]atomic.Bool, r.n)
		}
	}
	if r.maxHeld <= 0 {
		r.maxHeld = DefaultMaxHeld
	}
	if c.Gen == 1 {
		if r.moved = c.Spare.moved; r.moved == nil || len(r.moved) != r.n {
			r.moved = make([]bool, r.n)
		}
	}
	r.tab.Store(t)
	r.dedup.SetGen(c.Run, c.Gen)
	r.dedup.Bound(c.Run, r.n) // accept refuses the Signals of other sources first
	return r, nil
}

// Table is the generation in force (any goroutine).
func (r *Run) Table() *Table { return r.tab.Load() }

// Gen is the generation in force.
func (r *Run) Gen() uint64 { return r.gen }

// Local reports whether v runs on this node in the generation in force.
func (r *Run) Local(v int) bool { return r.tab.Load().NodeOf(v) == r.self }

// Mine marks the vertices this node runs in the generation in force.
func (r *Run) Mine() []bool {
	t := r.tab.Load()
	self := make([]bool, len(t.Nodes)) // by node index: a string compare once a node, not once a vertex
	for i, n := range t.Nodes {
		self[i] = n == r.self
	}
	in := make([]bool, r.n)
	for v := range in {
		in[v] = self[t.Owner[v]]
	}
	return in
}

// Held is how many Signals wait for a newer generation's Assignment.
func (r *Run) Held() int { return len(r.held) }

// Caught reports whether the follow, if any, has caught up.
func (r *Run) Caught() bool { return r.caught }

// FollowID names the follow in force (0: none was started).
func (r *Run) FollowID() uint64 { return r.follow }

// Stopped reports whether Stop was called.
func (r *Run) Stopped() bool { return r.stopped }

// AddSent counts k Signals of the run handed to the Batcher (any
// goroutine: the producing tasks count their own sends).
func (r *Run) AddSent(k int) { r.sent.Add(uint64(k)) }

// Counts are the counters a TermReport carries.
func (r *Run) Counts() (sent, received uint64, from map[string]uint64) {
	from = make(map[string]uint64, len(r.from))
	for k, v := range r.from {
		from[k] = v
	}
	return r.sent.Load(), r.received, from
}

// Report builds the TermReport of the run. partsIdle is whether every open
// part of the run was idle, observed after every Signal counted so far was
// delivered (under the lock that serialises this Run's inputs: then no
// Signal is counted and not yet scheduled) and before this call: Received
// is thus read before Idle, and Sent, read here, after it. A Signal counted
// as received has been scheduled, so either the run is not idle or its
// consequences, Signals included, are counted. The run is idle when its
// parts are, the follow has caught up and no Signal waits.
func (r *Run) Report(partsIdle bool) transport.TermReport {
	from := make(map[string]uint64, len(r.from))
	for k, v := range r.from {
		from[k] = v
	}
	rep := transport.TermReport{
		Run: r.id, Gen: r.gen, Node: r.self, Wave: r.wave,
		Received: r.received, Idle: partsIdle && r.caught && !r.failed && r.nwait == 0, ReceivedFrom: from,
	}
	rep.Sent = r.sent.Load()
	return rep
}

// Probe takes a termination probe: the reports carry its wave from now on
// (a lower one than seen already changes nothing), and one is due now.
func (r *Run) Probe(wave uint64) []Action {
	r.wave = max(r.wave, wave)
	return r.reset(Action{Kind: Report})
}

// Tick is the heartbeat: a report is due.
func (r *Run) Tick() []Action {
	if r.stopped {
		return nil
	}
	return r.reset(Action{Kind: Report})
}

// Idle says that a part of the run went idle: a report is due.
func (r *Run) Idle() []Action { return r.Tick() }

func (r *Run) reset(as ...Action) []Action {
	clear(r.acts)
	r.acts = append(r.acts[:0], as...)
	return r.acts
}

// Fail says that a task of the run failed for good here (the node sends its
// fail envelope and cancels its parts): the run is never idle again, so
// this node's reports can lead to no success verdict, whatever became of
// the envelope — core NATS may lose it, or deliver it after an idle
// report. A report is due.
func (r *Run) Fail() []Action {
	if r.stopped || r.failed {
		return nil
	}
	r.failed = true
	return r.reset(Action{Kind: Report})
}

// Failed reports whether Fail was called.
func (r *Run) Failed() bool { return r.failed }

// Stop ends the run's protocol: later inputs do nothing. The rule that
// makes Release safe: after Stop no method touches waits or moved (each
// that would checks stopped first: Assign, StartFollow, Completed,
// CaughtUp, Batch, BatchAll, FollowBatch), since they may be the next
// run's by then.
func (r *Run) Stop() []Action {
	if r.stopped {
		return nil
	}
	r.stopped = true
	r.held = nil
	r.waiting, r.nwait = nil, 0
	if r.follow != 0 {
		return r.reset(Action{Kind: StopFollow})
	}
	return r.reset()
}

// Moved is how Assign changed this node's tasks (for the log).
type Moved struct {
	Prev               uint64
	Kept, Taken, Given int // tasks kept, taken over here, moved away from here
}

// Assign takes an Assignment of the run. One of the generation in force or
// older, or one that does not name this node, changes nothing. A newer one
// switches the owner table (Switch) and, if tasks moved here, asks for them
// to be opened as one more part (Open) and for the run's record to be
// followed (Follow); the Signals held for it are then decided again (they
// may wait for a still newer one). A placement that does not fit the run is
// an error, and nothing changes.
func (r *Run) Assign(a *transport.Assignment) ([]Action, Moved, error) {
	if r.stopped || a.Gen <= r.gen || !(&Table{Nodes: a.Nodes}).Has(r.self) {
		return nil, Moved{}, nil
	}
	t := &Table{Gen: a.Gen, Nodes: a.Nodes, Owner: a.Owner}
	if err := t.check(r.n); err != nil {
		return nil, Moved{}, err
	}
	old := r.tab.Load()
	in := make([]bool, r.n)
	m := Moved{Prev: r.gen}
	for v := range in {
		if r.moved != nil && old.NodeOf(v) != t.NodeOf(v) {
			r.moved[v] = true
		}
		was, now := old.NodeOf(v) == r.self, t.NodeOf(v) == r.self
		switch {
		case now && !was:
			in[v] = true
			m.Taken++
		case now:
			m.Kept++
		case was:
			m.Given++
		}
	}
	r.tab.Store(t)
	r.gen = a.Gen
	r.dedup.SetGen(r.id, a.Gen)
	acts := r.reset(Action{Kind: Switch, Table: t})
	for _, v := range sortedWaiting(r.waiting) {
		if t.NodeOf(v) == r.self {
			continue
		}
		for i := range r.waiting[v] {
			h := &r.waiting[v][i]
			acts = append(acts, Action{Kind: Drop, Sig: &h.s, From: h.id.From, Replayed: h.replayed, Reason: "its destination moved away"})
		}
		r.nwait -= len(r.waiting[v])
		delete(r.waiting, v)
		r.setWaits(v, false)
	}
	if m.Taken > 0 {
		r.markReplay(in)
		acts = append(acts, Action{Kind: Open, In: in})
		// Not idle from now until the new follow has caught up.
		r.follow++
		r.caught = false
		if r.taken == nil {
			r.taken = map[pos]struct{}{}
		}
	}
	r.acts = acts
	// Signals that came stamped with this generation before it did.
	hs := r.held
	r.held = nil
	for i := range hs {
		h := &hs[i]
		r.accept(h.id.From, h.id.Seq, h.id.Index, []*transport.Signal{&h.s})
	}
	if m.Taken > 0 {
		r.acts = append(r.acts, Action{Kind: Follow, Follow: r.follow})
	}
	r.acts = append(r.acts, Action{Kind: Report}) // report the new generation now
	return r.acts, m, nil
}

// StartFollow (re)starts the follow of the run's record on a node that
// joined the run after a loss (all its tasks were some lost node's). It
// returns the Follow action, or nil after Stop.
func (r *Run) StartFollow() []Action {
	if r.stopped {
		return nil
	}
	r.follow++
	r.caught = false
	if r.taken == nil {
		r.taken = map[pos]struct{}{}
	}
	r.markReplay(r.Mine())
	return r.reset(Action{Kind: Follow, Follow: r.follow})
}

func (r *Run) markReplay(in []bool) {
	if r.replay == nil {
		r.replay = make([]bool, r.n)
	}
	for v, ok := range in {
		r.replay[v] = r.replay[v] || ok
	}
}

// Replays reports whether v runs again here what ran elsewhere (it was
// opened after a loss): a condition's activation then takes the outcome the
// record holds for it (Outcome), once the follow has caught up (Caught).
func (r *Run) Replays(v int) bool { return r.replay != nil && v < len(r.replay) && r.replay[v] }

// Settled reports whether the follow has read, for every node of the
// generation in force, its mark that it switched to that generation (or a
// later one): from its mark on, a node fences the Signals of an old owner
// of the moved tasks, and whatever it accepted from one before is in the
// record ahead of the mark. So once Settled (and Caught), no pick that
// will have effects can still come to the record behind the follow: a
// condition run again here can decide (Outcome, or a fresh draw where the
// record holds none). It is true in the first generation, where nothing
// runs again.
func (r *Run) Settled() bool {
	tab := r.tab.Load()
	if tab.Gen <= 1 {
		return true
	}
	for _, n := range tab.Nodes {
		if r.marks[n] < tab.Gen {
			return false
		}
	}
	return true
}

// outcome is what the record says an activation of a condition picked:
// the destinations of its picks of the newest generation that picked it.
type outcome struct {
	gen uint64
	dst []uint32
}

// Outcome is the destinations the record's Choice Signals say activation
// act of condition v picked (read by the follow), and whether there is
// any. Where owners of two generations picked it (an old owner taken for
// dead that went on running, and the node that ran it again), the newest
// generation's picks stand: an old owner's late pick was fenced by every
// node that had marked the newer generation, and the newer owner decided
// after reading those marks.
func (r *Run) Outcome(v int, act uint64) ([]uint32, bool) {
	o, ok := r.outcomes[[2]uint64{uint64(v), act}]
	return o.dst, ok
}

// Waits reports whether a Signal waits for an activation of v to complete
// (any goroutine: the node then calls Completed after v's next
// completion).
//
// It reads v's mark only while some task's is set (nwaits): a run whose
// Signals never wait (every run on one node, every first activation)
// reads none of them, a word a vertex that a large run's activations
// would each take from memory. setWaits counts a mark before it sets it,
// and the caller of blocker reads v's count after; a completion counts
// before it reads nwaits: so one of the two sees the other, as with the
// mark alone.
func (r *Run) Waits(v int) bool {
	return r.nwaits.Load() != 0 && r.waits != nil && v < len(r.waits) && r.waits[v].Load()
}

// setWaits sets or clears v's mark in waits and counts the marks set.
func (r *Run) setWaits(v int, on bool) {
	if r.waits[v].Load() == on {
		return
	}
	if on {
		r.nwaits.Add(1)
		r.waits[v].Store(true)
		return
	}
	r.waits[v].Store(false)
	r.nwaits.Add(-1)
}

// Waiting is how many Signals wait for their destination's previous
// activation.
func (r *Run) Waiting() int { return r.nwait }

// Completed says that an activation of local vertex v completed (Done
// counts it already): the Signals waiting for it are delivered, in the
// order they came (Deliver, Replayed as when they came).
func (r *Run) Completed(v int) []Action {
	r.reset()
	if r.stopped || r.waiting == nil {
		return nil
	}
	ws := r.waiting[v]
	if len(ws) == 0 {
		return nil
	}
	delete(r.waiting, v)
	r.setWaits(v, false)
	var out []held
	for _, h := range ws {
		if u := r.blocker(&h.s); u >= 0 {
			r.park(u, h) // still waits, maybe for another task now
			continue
		}
		out = append(out, h)
	}
	r.nwait -= len(out)
	for i := range out {
		h := &out[i]
		r.acts = append(r.acts, Action{Kind: Deliver, Sig: &h.s, From: h.id.From, Replayed: h.replayed, Waited: true})
	}
	return r.acts
}

// gate turns the Deliver of a Signal whose causal past has not happened
// here yet into a Wait: the Signal is kept until it has. Its past, as far
// as this node runs it: the activation of its destination before the one
// it starts (DstAct; not for a free join, FreeJoins), and, for each task of its loop context that runs
// here, the activation the context names. Both only lag on a node that
// runs again what ran elsewhere: a Signal from the record, or from a live
// sender that had those activations from the lost node, comes before this
// node re-ran them.
func (r *Run) gate(a *Action) {
	if r.done == nil {
		return
	}
	u := r.blocker(a.Sig)
	if u < 0 {
		return
	}
	c := *a.Sig
	c.Output = clone(c.Output)
	c.Ctx = append([]uint64(nil), c.Ctx...)
	r.park(u, held{id: PhysID{From: a.From}, s: c, replayed: a.Replayed})
	r.nwait++
	a.Kind = Wait
}

// blocker is a local task whose activation s's past needs and that has not
// completed here yet, or -1. It marks the task waited for before it reads
// its count (a completion counts first and looks after: one of the two
// sees the other); park keeps the mark, or the caller clears it.
func (r *Run) blocker(s *transport.Signal) int {
	tab := r.tab.Load()
	local := func(v int) bool { return v >= 0 && v < r.n && tab.NodeOf(v) == r.self }
	check := func(v int, need uint64) bool { // v has completed need activations
		r.setWaits(v, true)
		if r.done(v) >= need {
			if len(r.waiting[v]) == 0 {
				r.setWaits(v, false)
			}
			return true
		}
		return false
	}
	if d := int(s.Dst); s.DstAct > 1 && local(d) && !r.isFree(d) && !check(d, s.DstAct-1) {
		return d
	}
	if r.loops != nil {
		for j, k := range s.Ctx {
			if u := r.loops.Head(int(s.Src), j); k > 0 && local(u) && !check(u, k) {
				return u
			}
		}
	}
	return -1
}

// SetPlan replaces the loop contexts and free joins of Config (a newer
// generation's plan moved tasks here: the node's part grew). Call it
// before Assign of that generation: the Signals held for the moved tasks
// are numbered by them.
func (r *Run) SetPlan(loops *Loops, free []bool) {
	r.loops = loops
	if r.done != nil {
		r.free = free
	}
}

// isFree reports whether v is a free join (Config.Free): its Signals do not
// wait for its previous activation.
func (r *Run) isFree(v int) bool { return v < len(r.free) && r.free[v] }

// park keeps h waiting for a completion of v.
func (r *Run) park(v int, h held) {
	if r.waiting == nil {
		r.waiting = map[int][]held{}
	}
	r.waiting[v] = append(r.waiting[v], h)
	r.setWaits(v, true)
}

// CaughtUp says that follow id has read everything the record held when it
// began. It counts only for the follow in force; then a report is due.
func (r *Run) CaughtUp(id uint64) []Action {
	if r.stopped || id != r.follow || r.caught {
		return nil
	}
	r.caught = true
	return r.reset(Action{Kind: Report})
}

// Batch takes Signals of the run from the live subscription (or a replay of
// this node's own subject in the record): sigs are the Signals at index
// first, first+1, … of batch seq of sender from.
//
// Each Signal of a newer generation is held; one naming no task is dropped;
// one whose sender does not own its source in the generation in force is
// fenced; the rest are looked up in the run's dedup set together, and a new
// one is delivered.
//
// Counting: what the leader balances is physical Signals, each one its
// sender counted in Sent counted here once. A Signal of a source that never
// moved is sent once, so it counts when new; a duplicate of one is a batch
// published again (after a NATS outage this node reads its own record back)
// and counting it would unbalance the run. The new owner of a moved source
// runs it again and re-sends what its old owner had sent: those duplicates
// were counted by their sender, so they count here, once per physical
// Signal (PhysID), however often it is read.
func (r *Run) Batch(from string, seq uint64, first int, sigs []transport.Signal) []Action {
	r.reset()
	if r.stopped {
		return nil
	}
	// Room for the batch at once: grown by append, the scratch would move
	// its actions (pointers: a write barrier each while the collector
	// marks) at every doubling, in every run.
	r.acts = slices.Grow(r.acts, len(sigs))
	r.idx = slices.Grow(r.idx[:0], len(sigs))
	r.vd = slices.Grow(r.vd[:0], len(sigs))
	ptrs := slices.Grow(r.ok[:0], len(sigs))
	for i := range sigs {
		ptrs = append(ptrs, &sigs[i])
	}
	r.ok = ptrs
	r.accept(from, seq, first, ptrs)
	clear(r.ok) // keep no Signal of the batch alive past the next input
	return r.acts
}

// batchID names a batch as its sender published it: sender, the generation
// of its first Signal (as PhysID, it keeps a restarted sender's numbers
// apart) and batch number.
type batchID struct {
	from     string
	gen, seq uint64
}

// holdFull is the reason of a Drop for a full hold buffer: the one verdict
// a later reading of the batch may change.
const holdFull = "hold buffer full"

// BatchAll is Batch for a whole batch (every Signal of batch seq of sender
// from, first 0), which the run remembers: the same batch taken whole again
// — the node reads its record back after an outage and when a run starts,
// and finds there what the live subscription delivered already — is
// skipped, no action and nothing counted. Reading it again would decide
// each of its Signals as before: a duplicate (counted or not as Batch
// says: a Signal of a source that never moved is not, one of a moved source
// once per physical Signal, which it was), fenced (a sender does not regain
// a source), dropped, held again (a copy that would be a duplicate), or
// waiting already. The exception is a Signal dropped for a full hold
// buffer, which a later reading may hold: a batch with one is not
// remembered. A batch taken in pieces (Signals kept before the run's
// Assignment, some evicted) goes through Batch and is not remembered.
// seen reports a batch skipped.
func (r *Run) BatchAll(from string, seq uint64, sigs []transport.Signal) (acts []Action, seen bool) {
	if len(sigs) == 0 || r.stopped {
		return r.Batch(from, seq, 0, sigs), false
	}
	id := batchID{from, sigs[0].Gen, seq}
	if _, ok := r.batches[id]; ok {
		return r.reset(), true
	}
	acts = r.Batch(from, seq, 0, sigs)
	for i := range acts {
		if acts[i].Kind == Drop && acts[i].Reason == holdFull {
			return acts, false
		}
	}
	if r.batches == nil {
		r.batches = map[batchID]int{}
	}
	r.batches[id] = len(sigs)
	return acts, false
}

// SeenBatch reports whether BatchAll took the batch (sender from, batch
// number seq, its first Signal of generation gen) whole before — BatchAll
// would skip it — and how many Signals it held.
func (r *Run) SeenBatch(from string, gen, seq uint64) (signals int, ok bool) {
	signals, ok = r.batches[batchID{from, gen, seq}]
	return signals, ok
}

// accept decides sigs (see Batch), appending to r.acts.
func (r *Run) accept(from string, seq uint64, first int, sigs []*transport.Signal) {
	tab := r.tab.Load()
	// The Signals that pass the fence, compacted to the front of sigs
	// (which may be r.ok itself) and their places to r.idx (a PhysID is
	// made for the few that need one: Signals held, of moved sources).
	ok, idx := sigs[:0], r.idx[:0]
	base := len(r.acts)
	for i, s := range sigs {
		switch {
		case s.Kind == transport.SignalSwitched:
			r.acts = append(r.acts, Action{Kind: Drop, Sig: s, From: from, Reason: "a mark of a switch is for the record alone"})
			continue
		case s.Gen > r.gen:
			if len(r.held) >= r.maxHeld {
				r.acts = append(r.acts, Action{Kind: Drop, Sig: s, From: from, Reason: holdFull})
				continue
			}
			c := *s
			c.Output = clone(s.Output)
			r.held = append(r.held, held{id: PhysID{from, s.Gen, seq, first + i}, s: c})
			r.acts = append(r.acts, Action{Kind: Hold, Sig: s, From: from})
			continue
		case int(s.Src) >= r.n || int(s.Dst) >= r.n:
			r.acts = append(r.acts, Action{Kind: Drop, Sig: s, From: from, Reason: "no task of the run"})
			continue
		}
		if owner := tab.NodeOf(int(s.Src)); owner != from {
			r.acts = append(r.acts, Action{Kind: Fence, Sig: s, From: from, Reason: "sender does not own the source: " + owner + " does"})
			continue
		}
		// Keep the order of the input: the verdict fills this place.
		r.acts = append(r.acts, Action{Sig: s, From: from})
		ok, idx = append(ok, s), append(idx, first+i)
	}
	r.idx = idx
	if len(ok) == 0 {
		return
	}
	r.vd = r.dedup.AdmitReplayedAll(ok, r.vd)
	counted, k := 0, 0
	for i := base; i < len(r.acts); i++ {
		a := &r.acts[i]
		if a.Kind != 0 {
			continue
		}
		s, v, at := ok[k], r.vd[k], r.idx[k]
		k++
		moved := r.moved == nil || r.moved[s.Src]
		if moved && v != transport.Ended {
			if !r.seenPhys(PhysID{from, s.Gen, seq, at}) {
				counted++
			}
		} else if v == transport.Accept {
			counted++
		}
		if v == transport.Accept {
			a.Kind = Deliver
			r.gate(a)
		} else {
			a.Kind = Duplicate
		}
	}
	r.count(from, counted)
	clear(ok)
}

// FollowBatch takes one batch of the run's record, read by a follow: b was
// addressed to node to and stored at stream sequence seq. The Signals
// addressed to a node not in the generation in force whose destination this
// node owns now are taken: each stream position once (a restarted follow
// reads the record again from its start), counted for its sender whether
// new or not but once per physical Signal (PhysID: a batch stored twice is
// one batch its sender counted once), and delivered when new (Deliver or
// Duplicate, Replayed).
func (r *Run) FollowBatch(seq uint64, to string, b *transport.Batch) []Action {
	r.reset()
	tab := r.tab.Load()
	if r.stopped || r.taken == nil {
		return nil
	}
	r.noteOutcomes(tab, b)
	if to == transport.PicksNode {
		// picks and marks (Batcher.AddPick, AddSwitched) start nothing:
		// outcomes and marks are noted
		for i := range b.Signals {
			if s := &b.Signals[i]; s.Kind == transport.SignalSwitched && s.Run == r.id && s.Gen > r.marks[b.From] {
				if r.marks == nil {
					r.marks = map[string]uint64{}
				}
				r.marks[b.From] = s.Gen
			}
		}
		return nil
	}
	if tab.Has(to) {
		return nil
	}
	for i := range b.Signals {
		s := &b.Signals[i]
		if s.Kind == transport.SignalSwitched || s.Run != r.id || int(s.Dst) >= r.n || int(s.Src) >= r.n || tab.NodeOf(int(s.Dst)) != r.self {
			continue // a mark outside a batch of marks is no Signal (the Batcher never writes one)
		}
		k := pos{seq, i}
		if _, ok := r.taken[k]; ok {
			continue
		}
		r.taken[k] = struct{}{}
		// Counted once per physical Signal, not per stream position: a
		// batch the record stored twice (a publish retried after its ack
		// was lost) was counted once in its sender's Sent.
		if id := (PhysID{b.From, s.Gen, b.Seq, i}); !r.seenPhys(id) {
			r.count(b.From, 1)
		}
		// Fenced like a live Signal: a sender that no longer owns the
		// source (a node taken for dead that went on running its old part)
		// is refused; the source's new owner runs it again and sends anew.
		if tab.NodeOf(int(s.Src)) != b.From {
			r.acts = append(r.acts, Action{Kind: Fence, Sig: s, From: b.From, Replayed: true, Reason: "taken from the record, but its sender does not own its source in the generation in force"})
			continue
		}
		a := Action{Kind: Duplicate, Sig: s, From: b.From, Replayed: true}
		if r.dedup.AdmitReplayed(s) == transport.Accept {
			a.Kind = Deliver
			r.gate(&a)
		}
		r.acts = append(r.acts, a)
	}
	return r.acts
}

// noteOutcomes records the picks of the conditions this node runs again:
// a Choice Signal of the record whose source runs here now, wherever it
// was addressed (a remote successor's node, or PicksNode for a pick the
// condition's node recorded before it started a branch of its own), says
// which branch that activation took.
func (r *Run) noteOutcomes(tab *Table, b *transport.Batch) {
	for i := range b.Signals {
		s := &b.Signals[i]
		if s.Kind != transport.SignalChoice || s.Run != r.id || int(s.Src) >= r.n || int(s.Dst) >= r.n || !r.Replays(int(s.Src)) || tab.NodeOf(int(s.Src)) != r.self {
			continue
		}
		if r.outcomes == nil {
			r.outcomes = map[[2]uint64]outcome{}
		}
		k := [2]uint64{uint64(s.Src), s.Act}
		switch o, ok := r.outcomes[k]; {
		case !ok || s.Gen > o.gen:
			r.outcomes[k] = outcome{gen: s.Gen, dst: []uint32{s.Dst}}
		case s.Gen == o.gen && !slices.Contains(o.dst, s.Dst):
			o.dst = append(o.dst, s.Dst)
			r.outcomes[k] = o
		}
	}
}

func sortedWaiting(m map[int][]held) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// seenPhys reports whether the physical Signal id was counted already, and
// marks it counted.
func (r *Run) seenPhys(id PhysID) bool {
	if _, ok := r.phys[id]; ok {
		return true
	}
	if r.phys == nil {
		r.phys = map[PhysID]struct{}{}
	}
	r.phys[id] = struct{}{}
	return false
}

// count counts k Signals processed after fencing, from sender.
func (r *Run) count(from string, k int) {
	if k == 0 {
		return
	}
	r.from[from] += uint64(k)
	r.received += uint64(k)
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
