// Package coord is the hetflow coordinator: the raft-replicated control plane
// of docs/cluster-protocol.md. Three coordinators hold the same FSM (nodes,
// runs with their assignment and generation, the flow registry, settings);
// the leader partitions
// submitted flows, sends Assignments to the nodes over NATS, detects
// termination, and ends runs; any coordinator answers the HTTP API, followers
// by forwarding to the leader.
//
// # Running a coordinator
//
//	s, err := coord.New(coord.Config{
//		ID: "c1", DataDir: "/var/lib/hetflow/c1",
//		RaftAddr: "0.0.0.0:7000", HTTPAddr: "0.0.0.0:7070", GossipAddr: "0.0.0.0:7946",
//		Advertise: "c1", Bootstrap: true,          // exactly one server bootstraps
//		Join: []string{"c2:7946"},                 // the others join gossip seeds
//		NATSURL: "nats://nats:4222", Secret: secret,
//	})
//	err = s.Start(ctx)      // raft, NATS, API, gossip; returns without waiting for a leader
//	err = s.WaitLeader(ctx) // until raft knows a leader
//	defer s.Close()         // joins every goroutine
//
// Bootstrap is a no-op when DataDir already holds raft state, so a restarted
// coordinator keeps its flags. The leader adds every coordinator it sees alive
// in the gossip ring (metadata role coordinator with a raft address) as a
// voter; RemovePeer (DELETE /v1/peers/{id}) removes one that is gone for good.
// The raft log and stable store are one bbolt file (raft.db) in DataDir, next
// to raft's file snapshots.
//
// # The pieces, each usable alone
//
//   - FSM: the pure state machine. Commands are JSON (Command, with the time
//     inside), applied one per raft entry; Snapshot/Restore write the whole
//     state as JSON. Its registry keeps each flow's canonical JSON once,
//     under FlowID (its SHA-256), put by OpFlowPut; a run names its flow
//     and keeps its parameters' values, and FSM.RunFlow is what it executes.
//     testdata/fsm_*.txt are its scenarios.
//   - Detector: the four-counter termination detector of one run generation
//     (counters balanced per sender, lost senders ignored); TermReports and
//     time in, probe waves and the verdict out.
//   - Plan: partitions an expanded flow over the alive nodes (module
//     instances and loops whole, pins and GPU affinity) under a cost model
//     (Placement, TaskCost: a window of levels is spread only when its
//     work is worth the hops and cross-node edges); PlanReassign places a
//     running run's tasks again after a node loss.
//   - Fold: a run's TaskEvents, and its nodes' TaskReports whole
//     (AddReport), folded into the API's status object.
//   - CheckSuccess: a success verdict checked against the folded record
//     (nothing still running, every source ran, no task left behind strong
//     predecessors that all ran): what "succeeded" must mean.
//   - Liveness: which nodes are alive and which dead. A member is alive
//     (placeable) only once it answered a ping over NATS as itself, with
//     the boot id gossip advertises (only its credential may take its ping
//     subject): until then suspect, pinged, given no work. Gossip's deaths
//     are candidates, pinged over NATS; an answer refutes one (slow is not
//     dead), no responder, an answer from a process of another boot, or a
//     silence confirms it.
//     testdata/liveness.txt holds its scenarios.
//   - Leader: the leader loop's decisions (below), pure: gossip's members,
//     TermReports, fail envelopes, ping answers, ticks and the outcomes of
//     the commands and record checks it asked for in, with the time;
//     messages, pings, commands, record checks and what to log and count
//     out. It reads the FSM through a View and owns the runs' Detectors and
//     the Liveness. leader.go is the I/O around it; cluster/runsim drives
//     the same type. testdata/leader_*.txt are its scenarios.
//
// # The leader loop
//
// While a server leads it (Leader's decisions, leader.go's I/O): writes node membership into the FSM (gossip's
// deaths only once Liveness confirms them, pinging candidates on
// proto.PingSubject; members suspect until a ping's answer verifies them);
// adds coordinator voters; for every running run sends the Assignment once to
// each node, and again (500ms after, then doubling to 4s) only to a node that
// has neither acknowledged it (transport.Ack on hf.coord.ack.<node>, sent on
// receipt, before the node builds) nor reported for the generation; feeds
// TermReports (hf.coord.term.<node>, the sender the subject's) to the run's Detector and sends probes; ends the
// run on termination (succeeded, once CheckSuccess finds no work owed; a
// refused verdict is counted in hetflow_verdicts_refused_total and probed
// again, and five in a row fail the run), a fail envelope (hf.coord.fail.<node>, from a node of the run: failed,
// "task X: error"), its timeout (failed, "timed out after D") or a user cancel
// (cancelled), then sends Cancel to its nodes, and again to any node that
// still reports for an ended run; prunes finished runs older than the
// retention (and purges their streams). A new leader picks up every running
// run from the FSM. When a node of a running run is dead (or left), it moves
// that node's tasks to live nodes (PlanReassign: live tasks pinned where they
// are, the lost node's groups placed by the partitioner) under a new
// generation (RunReassign), or fails the run when a task cannot move; a node
// reporting an older generation it is no longer part of gets Cancel
// (docs/cluster-protocol.md, Recovery).
//
// # HTTP API
//
// POST /v1/runs, GET /v1/runs, GET /v1/runs/{id}, POST /v1/runs/{id}/cancel,
// POST /v1/flows (Server.Register), GET /v1/flows, POST /v1/flows/{id}/runs
// (Server.RunFlow), GET /v1/nodes, GET /v1/peers, DELETE /v1/peers/{id}, GET /v1/leader,
// GET /healthz, GET /metrics, JSON shapes of cluster/proto. With a secret,
// every call but /healthz (/metrics included) needs "Authorization: Bearer
// <token>"; /healthz without it answers only {"status":"ok"}. A flow over
// Config.MaxFlowBytes or expanding to over Config.MaxTasks tasks is refused
// (400) before it is expanded or committed. Term and fail messages the
// leader cannot decode are dropped and counted
// (hetflow_messages_dropped_total{subject,reason}, Server.Dropped).
// Submit, register, a run by flow id, status, cancel and peer removal run on
// the leader; a follower
// forwards them (X-Hetflow-Forwarded-By) or answers 503 with no leader.
package coord
