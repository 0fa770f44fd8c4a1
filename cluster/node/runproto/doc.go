// Package runproto is a node's share of the run protocol
// (docs/cluster-protocol.md) as a pure state machine: inputs in, actions
// out, no I/O, no goroutines, no locks, no clock. cluster/node drives one
// Run per run it holds, under its lock, and does what the actions say
// (deliver to the executor, open a part, follow the record, report); a
// simulation can drive it without NATS. It is to the node what Detector and
// FSM are to the coordinator.
//
// # State
//
// A Run holds, across the run's generations: the generation in force and
// its owner table (Table: vertex → node; read without a lock by the tasks
// that send), which vertices moved owner in a generation this node saw, the
// Signals held for a generation not assigned yet (bounded), the run's dedup
// set (a transport.Deduper of this run only), the physical Signals of moved
// sources counted, the counters of the termination reports (Sent, Received,
// ReceivedFrom), the latest probe wave, and the takeover follow's
// bookkeeping: which follow is in force, whether it has caught up, the
// stream positions taken; the Signals waiting for their causal past
// (activation order) and the condition outcomes the follow read.
//
// # Inputs and actions
//
//	New(Config)              the run's first Assignment (any generation)
//	Assign(*Assignment)      a later one: Switch, Open, Signals held, Follow, Report
//	Batch(from, seq, i, sigs)  Signals of the live subscription (or of a replay
//	                         of this node's own subject): per Signal one of
//	                         Deliver, Hold, Fence, Duplicate, Drop, Wait
//	FollowBatch(seq, to, b)  a batch of the record read by the follow:
//	                         Deliver, Wait or Duplicate (Replayed) per Signal
//	                         taken; the picks of conditions that run again
//	                         here are noted (Outcome)
//	Completed(v)             an activation of v completed: Deliver the
//	                         Signals that waited for it
//	StartFollow()            a node new to the run after a loss: Follow
//	CaughtUp(id)             follow id has read what the record held: Report
//	Probe(wave), Tick(), Idle()  Report
//	AddSent(k)               Signals handed to the Batcher (any goroutine)
//	Fail()                   a task failed for good: never idle again; Report
//	Report(partsIdle)        the TermReport
//	Stop()                   StopFollow; later inputs do nothing
//
// The actions of one input come in the order the node carries them out (an
// Open before the Signals delivered to its tasks); the slice and the
// Signals it points at are valid until the next input.
//
// # Rules
//
// Fencing by ownership: a Signal is accepted only if its batch's sender owns
// its source in the generation in force; one stamped with a newer generation
// is held until that Assignment, then decided again. Dedup by (Src, Dst,
// Act), with no generation fence: a live sender's Signals of an older
// generation are still good after a loss. Counting (what the leader
// balances per sender): each physical Signal its sender counted in Sent is
// counted once: a Signal of a source that never moved when new; one of a
// moved source (re-sent by its new owner) once per PhysID, new or not; one
// taken by the follow once per PhysID too (each stream position is taken
// once; a batch the record stored twice counts once). Idle: the node's
// parts are idle and the follow, if any, has caught up with what the
// record held when it began; a follow is in force, not caught up, from the Assign (or
// StartFollow) that asks for it.
//
// Activation order: a Signal says which activation of its destination it
// starts (transport.Signal.DstAct, numbered by the sender with Loops) and
// the loop context of its source's activation. It is delivered only once
// its causal past, as far as this node runs it, has happened here: the
// destination's activation DstAct-1 has completed (Config.Done), and each
// local task its context names has completed the activation it names.
// Until then it waits (counted), and Completed lets it in. That only lags
// on a node that runs again what a lost node ran, whose inputs come at once
// from the record and live senders: a moved task runs activation k on
// activation k's inputs, as the original did. The run is not idle while a
// Signal waits. A free join (FreeJoins, Config.Free: its strong
// predecessors are not all in its own loop, so they may complete unequal
// numbers of times) takes their completions in rounds, as its join counter
// does on one node, whichever predecessor gave them: its Signals do not
// wait for its previous activation, which a surplus would wait for for
// ever. Condition
// replay: for the vertices that run again here (Replays: opened by a
// takeover, or a node that joined after a loss) the follow notes every
// Choice Signal of the record (Outcome), so a condition takes the branch it
// took before once the follow has caught up.
//
// The scenario tests in testdata/ drive a Run line by line (see
// TestScenarios for the format).
package runproto
