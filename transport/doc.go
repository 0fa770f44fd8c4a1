// Package transport carries hetflow's cross-node traffic over NATS: the
// connection, the subject names, the msgpack wire messages, batching per
// destination node, receiver-side deduplication and generation fencing, and the
// JetStream streams that hold the durable record of a run. It imports nothing from
// the rest of hetflow; cluster/ builds nodes and coordinators on it.
//
// # Connect
//
// Connect dials NATS and returns a *Conn once connected, retrying until its
// context ends. Credentials come from the cluster secret (WithUserPassword or
// WithToken); a refusal returns ErrAuth at once. After that the Conn reconnects
// forever with exponential backoff (WithReconnectBackoff); WithDisconnectHandler
// and WithReconnectHandler report the link's state, and Stats counts it. Close
// drains the connection and waits for the client's goroutines; close Batchers
// first.
//
//	c, err := transport.Connect(ctx, "nats://127.0.0.1:4222",
//		transport.WithName("n1"), transport.WithUserPassword(user, pass))
//	defer c.Close()
//
// # Subjects
//
// Ids that become subject tokens (runs, nodes) pass ValidateID: 1 to 128 bytes,
// no spaces, control characters, '.', '*' or '>' (ErrInvalidID otherwise).
//
//	hf.run.<run>.node.<to>.<from>  signal batches from one node to another in one run
//	hf.evt.<run>.<node>            task events a node publishes for a run
//	hf.evn.<run>.<node>            its notice that they are stored (no body)
//	hf.ctl.<node>, hf.ctl.all  control messages to one node, to all
//
// SignalSubject, EventSubject, ControlSubject and the *Filter functions build them.
// What a node sends names it as the subject's last token: a secured server lets a
// node publish only its own (cluster/natsauth.NodePermissions), so receivers take the
// sender from the subject. A batch whose From, or an event whose Node, is not the
// subject's is dropped and counted (Stats.Mismatched).
//
// # Messages
//
// Every message is a msgpack array [type, version, fields...] written and read by
// hand-rolled code (no reflection): Signal (one cross-node edge completion, with
// the producer's output, or one condition outcome), Batch (many Signals for one
// node), TaskEvent (per-task progress, for status), Assignment (a run's partition
// under a generation), Cancel, TermReport (counters for distributed termination
// detection), Envelope (any kind cluster adds), EventBatch (several
// TaskEvents stored as one JetStream message) and TaskReport (what changed in a
// node's tasks of one run: per task its index and new values, the run and node
// written once, a run of consecutive tasks alike as one range entry; what
// nodes store now, in place of TaskEvents). Tasks travel as their uint32
// index in the flow spec. Encode or AppendWire writes a message; Decode, the
// Decode* functions and the Decode methods read one under Limits and return an
// error matching ErrMalformed (and ErrOversized past a limit) for anything
// truncated, unknown or out of range, never a panic. The encoding is standard
// msgpack (a generic msgpack decoder reads the same fields), written and read by
// hand: no reflection on the hot path.
//
// # Batcher
//
// A Batcher (Conn.NewBatcher) collects Signals per (run, destination node) and
// publishes each destination's batch when it holds WithMaxSignals Signals or
// WithMaxBytes bytes, when WithLinger has passed since its first Signal, or on
// Flush. Signals to one destination leave in order. WithAck sends through
// JetStream, and Flush then waits until the record stream has stored them. The
// linger timer comes from a Clock, so tests fire it by hand.
//
//	b, _ := c.NewBatcher("n1")
//	err = b.Add(ctx, "n2", &transport.Signal{Run: run, Gen: gen, Src: 4, Dst: 9,
//		Act: 1, Kind: transport.SignalEdge, Output: out})
//	err = b.Flush(ctx) // a task finished: do not wait for the linger
//	defer b.Close(ctx)
//
// # Dedup and fencing
//
// Conn.SubscribeSignals delivers the batches addressed to a node, decoded and
// passed through a Deduper: a Signal older than the run's current generation
// (SetGen, raised by the node when it takes a new Assignment) is Fenced; a Signal
// whose (Run, Src, Dst, Act) was accepted before, under any generation, is a
// Duplicate. Malformed batches, oversized ones and ones whose Signals name another
// run than the subject are dropped and counted in Conn.Stats; the Deduper counts
// its verdicts in DedupStats. EndRun frees a run's state.
//
//	d := transport.NewDeduper()
//	sub, _ := c.SubscribeSignals("n2", d, func(from string, sigs []transport.Signal) { ... })
//	defer sub.Close(ctx)
//
// # Durable streams
//
// EnsureStreams creates the record stream (StreamRecord), which captures every
// signal batch straight off its core subject, and the event stream
// (StreamEvents), on the file store. A node writes its task reports with a
// ReportWriter (NewReportWriter), and a ReportSend stores each message as
// the writer ends it (PublishWritten stores writers already finished);
// PublishReports records whole TaskReports (tests and tools), PublishEvents
// TaskEvents. Each waits for the acks and then sends the notice that the
// events are stored (EventNoticeSubject; a ReportSend's at Wait), which
// wakes a coordinator's waiting status reads. ReplaySignals reads a run's record from the start until caught
// up, so a node taking over tasks after a failure rebuilds their inbound edges and
// condition outcomes (Deduper.AdmitReplayed drops what it already has, without
// fencing the older generations that history was sent under). FollowSignals
// does the same and keeps following the record afterwards (an ordered
// consumer, with a call once it has caught up), which is how cluster/node
// takes over the tasks of a lost node: it also sees what senders not yet
// told of the loss still send to it. ReplayEvents lets any coordinator rebuild a run's status; PurgeRun
// forgets a run. Core NATS is at most once: after a reconnect, replaying the
// record through the Deduper recovers what the outage lost.
package transport
