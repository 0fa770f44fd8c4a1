// Package node is hetflow's node agent: it takes its part of a run from the
// leader, runs it on a localexec executor (CPU and GPU domains), trades
// cross-node edge completions and condition outcomes with the other nodes
// over NATS, and reports progress and termination counters. The protocol it
// speaks is docs/cluster-protocol.md; the wire types are package transport's.
//
// # Driving it
//
//	n, err := node.New(node.Config{ID: "n1", Conn: conn, CPUs: 4, GPUs: 1})
//	err = n.Start(ctx)   // subscribes: from now on it takes Assignments
//	meta := n.AdvertisedMeta() // what to advertise in the membership ring (Meta, with the catalog's hash)
//	sub, err := n.ServeCatalog() // answer for the function catalog (close it after Close)
//	...
//	err = n.Drain(ctx)   // SIGTERM: no new runs, wait for held ones, leave, Close
//	// or n.Close():        cancel everything held, join every goroutine
//
// The node does not join memberlist itself (give Config.Membership for
// Drain to leave it) and does not close its Conn. Stats gives its counters.
//
// # A run on one node
//
// An Assignment (control subject) names the run, its generation, the nodes
// and each task's owner (the table Signals are routed and fenced by), and
// carries the plan of this node's part (transport.Plan, compiled by the
// leader from the run's expanded graph: runproto.Compile), never the flow:
// the node neither parses, validates nor expands a flow file. The plan
// holds the vertices the node owns (kind, function, args, domain and
// device, retries, timeout, module task and members, in- and out-edges)
// and their neighbours on other nodes (path, name, kind: what a proxy, an
// input's name and a Signal's loop context need), with the loop contexts
// and free joins of the whole graph. The node checks each task of its own
// against its registry (function known, of the task's kind and domain, the
// args it takes), makes the plan back into a graph of the run's size
// (runproto.OpenPlan) and keeps it by the plan's digest (the SHA-256 the
// Assignment gives it, checked against the bytes when first compiled), or,
// without one, by the plan's bytes, found by a seeded hash and compared
// whole before it is taken (graphcache.go; a run placed as an earlier one
// shares it: Stats.PlansReused). An Assignment that names its plan by
// digest alone runs the plan of that digest held here; where none is held,
// the node takes nothing and asks the leader for it (an Ack with NeedPlan:
// Stats.PlansNeeded), which sends the Assignment again with its plan.
// The node ignores an Assignment it already runs (same Run and Gen) or has
// released; one of a newer generation for a run it holds is a reassignment
// (see Recovery). It builds one localexec taskflow from the vertices it
// owns (or takes the one an earlier run of the same plan built and left
// reset: reuse.go, Stats.BuildsReused):
//
//   - static → Emplace, condition → EmplaceCondition, multicondition →
//     EmplaceMultiCondition, each running the registry function;
//   - subflow → EmplaceSubflow: the function's Result.Children become
//     children (named "parent/child" in events) and a hidden last child that
//     completes the parent once all have run;
//   - module → ComposedOf(instance) then a hidden "#done" task: the
//     instance's scope (Graph.Scope, nested modules recursively) is its own
//     taskflow. An instance must sit wholly on its module task's node (the
//     partitioner's hard group); otherwise the assignment is refused;
//   - domain gpu of a function with a device implementation
//     (funcs.Entry.Graph; saxpy's: copy in, kernel, copy out) → EmplaceGPU
//     on its device (the work built into the task's GPU graph once, then
//     relaunched) then a hidden CPU "#done" task that reads the output
//     (GPUWork.Output; saxpy's is the same 8 bytes as its CPU body) and does
//     the bookkeeping. A gpu function without one runs its registry body on
//     a CPU worker. A GPU task on a device the node lacks is refused.
//
// A refusal is a fail envelope (proto.FailSubject) naming the task and the
// reason; it is repeated for each copy of the Assignment that comes (the
// node acked it already: a copy comes from a new leader).
//
// Each task body is a wrapper: it counts the vertex's activation (from 1,
// per run), gathers Inputs (latest outputs of its strong predecessors, local
// ones from memory, those of other nodes and parts from the traversal last
// delivered on the edge), computes its loop context (runproto.Loops), hands
// over the previous
// activation's Result.State (neither Inputs nor State for a function
// registered NoInputs: funcs.Entry), and calls the function (bound once
// per vertex at build, funcs.Bound; the Call from a pool, taken back
// overwritten once it returns, for a function registered Transient)
// under the run's context
// (cancelled on Cancel) and the task's `timeout:`, again on an error up to
// `retries:` times (panics are recovered and not retried). Then it records
// the state (not for a NoInputs function: nothing reads it) and the output
// (not for a vertex whose strong successors are all built here with
// NoInputs functions, vNoReaders: nothing reads it either) and records the
// task done in the run's table (Output only for tasks without successors). A final failure emits a failed event and a fail
// envelope and cancels the local run.
//
// # Cross-node edges
//
// Local edges are localexec edges and never touch NATS. For an edge v→u
// with u elsewhere and v not a condition (a strong edge), v's completion
// itself hands a transport.Signal (Edge, with the output) per distinct
// remote target to the Batcher, all of one node's in one AddAll, which
// writes them as one fan entry (the output once; the receiver's decoder
// gives them back one by one and the receiver puts back the multiplicity). For a condition, a send proxy task
// sits at the edge's own index among its successors, so indices keep their
// meaning: the completion pushes the activation into the edge's FIFO (v may
// run again before the proxy does), and the proxy, when the condition picks
// it, pops it and hands a Choice Signal to the Batcher. For an edge v→u with
// v elsewhere there is no task: u awaits the k strong edges v→u from
// outside its graph (localexec Task.Await), and a delivered Signal fills
// the edge's input slot and counts k completions into u's join counter
// (OpenRun.Release), or, from a condition, runs u as a pick does. Inside
// a module instance an External receive proxy precedes u instead: static
// (strong edge) or a condition returning 0 (weak edge). A batch's Signals are fenced one
// by one — refused unless the sender owns the source in the generation in
// force; one of a newer generation waits for that generation's Assignment —
// and the rest go to the run's dedup set together; they are counted (duplicates
// too, see Recovery), and the new ones delivered: a part's releases with
// one OpenRun.Release, its picks and proxies with one ScheduleAll; the
// edge's slot (or its proxy) records v's output for u's Inputs. Each Signal says which activation of u it starts
// (DstAct, with v's loop context: runproto.Loops); one whose causal past
// has not happened here (u's previous activation, or a local task's
// activation its context names, not completed) waits in the run's
// runproto.Run and is let in by that completion (complete counts it:
// vstate.done, runproto's Config.Done and Completed); a free join's
// (runproto.FreeJoins, Config.Free: predecessors not all in its loop) do
// not wait for u's previous activation: its Signals feed its join counter
// as they come, as on one node.
// Signals of a run whose Assignment has not arrived yet are kept (a batch's
// as one stretch, taken whole when its run starts) and delivered when it
// does; the buffer is bounded in runs (256), in Signals
// per run and in all, and in time (Config.EarlyTTL, read from Config.Now):
// a run that has not started within the TTL, or the oldest when the buffer
// is full, is evicted and its Signals counted (Stats.SignalsEvicted). None
// is lost: a run that starts reads its record once if the node may have
// lost one of its Signals (an eviction, a disconnect, a slow consumer's
// drop or an undecodable batch since the node subscribed, a later
// generation, or an Assignment not made for this process: mayHaveLostLocked;
// Stats.StartReads). A multicondition that picks one remote task
// twice in an activation sends one Signal (as localexec runs a local one
// once).
//
// # The protocol's state machine
//
// What a run's share of the protocol decides (the generation in force and
// its owner table, fencing, the Signals held for a newer generation, dedup
// verdicts, counting, idleness, the follow's bookkeeping) is a
// runproto.Run, one per run, driven under the node's lock: an input
// (Assignment, batch, batch of the record, catch-up, probe, heartbeat) goes
// in, actions come out, and the node carries them out (queue and schedule
// proxies, open a part, start or stop the follow, report). The node's
// goroutines do the I/O and the execution. The rules are runproto's
// documentation and its testdata/ scenarios; the sections here describe
// them as the node carries them out.
//
// # Termination and reports
//
// Each part of a run is a localexec open run; the node counts Sent (Signals
// given to the Batcher) and Received (physical Signals processed after
// fencing, each once: new ones; for a source that moved to a new owner,
// which re-sends what the lost node had sent, every physical Signal, new or
// duplicate, by sender, batch number and index; what the takeover follow
// takes, by stream position), the latter split by sender in ReceivedFrom. It sends a TermReport
// to proto.TermSubject(id) when the run goes idle (the idle callback only nudges
// the run's goroutine), on every probe (Wave = the probe's), and every
// Heartbeat while it holds the run. The Assignment itself it acknowledges
// on receipt, before building the run (a transport.Ack on
// proto.AckSubject(id)), and again for each copy that comes once it holds
// the run, so that the leader sends it once, not again while the node
// builds (coord.Leader.Ack). Before each report it flushes the Batcher and waits until its
// task reports are stored, so a leader that sees every node idle finds every
// event in JetStream. Received is read before Idle and Sent after it (the
// parts' idleness is read under the node's lock, so no counted Signal is
// still to be scheduled): a counted Signal has been scheduled, so the run
// is either not idle or its consequences are counted. Cancel (any reason, "finished" included)
// cancels what still runs, waits for it, frees GPU memory, stops the run's
// state machine and forgets it (its dedup set with it); a late Assignment
// of a released run is ignored.
//
// # Recovery
//
// When the leader moves the tasks of a lost node under a newer generation,
// a node of the run keeps what it runs and all its state: it switches its
// owner table (sends resolve the destination's node when they send,
// so Signals to moved tasks go to their new owners), stamps what it sends
// with the new generation, and, if tasks moved here, builds them as one more
// part of the run (another open run, only those tasks local; edges between
// its parts go through the node's own signal subject and count like any
// other). The newer generation's Assignment carries the plan of every task
// the node owns in it: the node adds the moved ones (and their neighbours)
// to the run's part, which it replaces whole (a task reads the one or the
// other, the same for its vertex), so no node ever needs the whole flow.
// It then follows the run's record
// (transport.FollowSignals) from the start and for as long as it holds the
// run, taking every Signal addressed to a node that is not in the generation
// whose destination it now owns: those sent to the lost node before the
// loss and those sent by nodes not yet told of it. It is not idle until the
// follow has caught up with what was stored when it began. A later loss
// that moves more tasks here restarts the follow; Signals taken already are
// skipped, so each is counted once. The moved tasks run again from their
// inputs, in activation order (Signals wait for their causal past, see
// Cross-node edges); their receivers drop the Signals they already had. A
// moved condition waits for the follow to catch up and to read every
// node's mark that it took the generation (runproto's Settled; each node
// marks a switch with Batcher.AddSwitched), and takes the branch the record
// holds for its activation (runproto's Outcome), so replay takes the same
// branches: a pick of a task on the condition's own node is recorded before
// the branch runs (recordPick, Batcher.AddPick), a remote pick is its Choice
// Signal. A node whose
// tasks were moved away (it was taken for dead) keeps reporting its old
// generation until the leader answers with Cancel, and releases the run.
//
// # Events
//
// A run's per-task state lives in arrays (events.go: a row per vertex,
// subflow children by name); what changed goes to JetStream as one
// transport.TaskReport per (run, generation) every EventLinger (500 ms),
// on every flush (before each TermReport), when the publisher serves the
// kick a run's table of more than 32K rows sends once it has 32K rows
// first changed since its last cut (cutRows; any cut restarts the count,
// and the publisher serves it when it gets a core: a long run of short
// tasks may so be stored while it goes on), and at once on a failure or a
// task still running RunningAfter after it began (the run's loop scans
// the activations in flight every scanEvery, less often in runs of more
// than scanSlots vertices: flight.go). A
// task changed several times between two reports is sent once, with its
// latest values. The worker that ends an activation writes its vertex's
// row under the row's own lock and marks it in the table's dirty bitmap
// (no node-wide lock per task; events.go says how a cut misses nothing).
// A vertex is named by its index only (the coordinator maps
// it to its path), a subflow child by "parent/child" with the parent's
// index; Act is the activation, Executions the function's executions of
// that task on this node in this run (retries count).
package node
