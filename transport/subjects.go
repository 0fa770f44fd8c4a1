package transport

import (
	"fmt"
	"strings"
)

// Subject layout. Every id that becomes a subject token passes ValidateID.
//
//	hf.run.<run>.node.<to>.<from>  signal batches from one node to another in one
//	                               run (core NATS; captured by the record stream,
//	                               StreamRecord); the sender is the last token
//	hf.run.<run>.node.all.<from>   the picks of the conditions of one node
//	                               (PicksNode): no node subscribes to them, only
//	                               the record holds them, for a follow to read
//	hf.evt.<run>.<node>        TaskEvents a node publishes for a run (StreamEvents)
//	hf.evn.<run>.<node>        a node's notice that TaskEvents of a run it published
//	                           are stored (core NATS, no body)
//
// A subject that carries what a node sends names the node as its last
// token; a secured NATS server lets a node publish only subjects naming it
// (cluster/natsauth.NodePermissions), so receivers take the sender from the
// subject, never from the message.
//
//	hf.ctl.<node>              control messages to one node (core NATS)
//	hf.ctl.all                 control messages to every node (core NATS)
const (
	subjectRoot = "hf"
	// StreamRecord is the JetStream stream holding every signal batch: the durable
	// record of inbound edges and condition outcomes.
	StreamRecord = "HF_RECORD"
	// StreamEvents is the JetStream stream holding every TaskEvent.
	StreamEvents = "HF_EVENTS"

	recordSubjects = subjectRoot + ".run.*.node.*.*"
	eventSubjects  = subjectRoot + ".evt.*.*"
	// BroadcastSubject reaches every node's control subscription.
	BroadcastSubject = subjectRoot + ".ctl.all"
	// PicksNode is the destination token of the batches that record a
	// node's condition picks (Batcher.AddPick). It is the node id reserved
	// for broadcast, so no node has it and no node's Signal subscription
	// matches it; the record stream stores the batches like any other.
	PicksNode = "all"
)

// MaxIDLen is the longest id ValidateID accepts, in bytes.
const MaxIDLen = 128

// ValidateID checks that id can be one subject token: 1..MaxIDLen bytes, no ASCII
// control characters or spaces, no '.', '*' or '>'. what names the id in the error
// ("run", "node").
func ValidateID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: %s id is empty", ErrInvalidID, what)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: %s id %.32q... is %d bytes, limit %d", ErrInvalidID, what, id, len(id), MaxIDLen)
	}
	if i := badIDByte(id); i >= 0 {
		return fmt.Errorf("%w: %s id %q has %q at byte %d (no spaces, control characters, '.', '*' or '>')",
			ErrInvalidID, what, id, id[i], i)
	}
	if what == "node" && id == "all" {
		return fmt.Errorf("%w: node id %q is reserved for broadcast", ErrInvalidID, id)
	}
	return nil
}

func badIDByte[T string | []byte](id T) int {
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c <= ' ', c == 0x7f, c == '.', c == '*', c == '>':
			return i
		}
	}
	return -1
}

func validIDBytes(id []byte) bool {
	return len(id) > 0 && len(id) <= MaxIDLen && badIDByte(id) < 0
}

// SignalSubject is the subject carrying signal batches of run from node
// from to node to.
func SignalSubject(run, to, from string) (string, error) {
	if err := ValidateID("run", run); err != nil {
		return "", err
	}
	if err := ValidateID("node", to); err != nil {
		return "", err
	}
	if err := ValidateID("node", from); err != nil {
		return "", err
	}
	return subjectRoot + ".run." + run + ".node." + to + "." + from, nil
}

// picksSubject is where from's condition picks in run go (PicksNode).
func picksSubject(run, from string) (string, error) {
	if err := ValidateID("run", run); err != nil {
		return "", err
	}
	if err := ValidateID("node", from); err != nil {
		return "", err
	}
	return subjectRoot + ".run." + run + ".node." + PicksNode + "." + from, nil
}

// RunSignalsFilter matches the signal batches of run to every node.
func RunSignalsFilter(run string) (string, error) {
	if err := ValidateID("run", run); err != nil {
		return "", err
	}
	return subjectRoot + ".run." + run + ".node.*.*", nil
}

// runNodeSignalsFilter matches the signal batches of run to node.
func runNodeSignalsFilter(run, node string) (string, error) {
	if err := ValidateID("run", run); err != nil {
		return "", err
	}
	if err := ValidateID("node", node); err != nil {
		return "", err
	}
	return subjectRoot + ".run." + run + ".node." + node + ".*", nil
}

// NodeSignalsFilter matches the signal batches of every run to node.
func NodeSignalsFilter(node string) (string, error) {
	if err := ValidateID("node", node); err != nil {
		return "", err
	}
	return subjectRoot + ".run.*.node." + node + ".*", nil
}

// SignalsFromFilter matches the signal batches node sends, of every run to
// every node (what a secured server lets it publish). node must be valid.
func SignalsFromFilter(node string) string { return subjectRoot + ".run.*.node.*." + node }

// NodeEventsFilter matches the TaskEvents node publishes for every run
// (what a secured server lets it publish). node must be valid.
func NodeEventsFilter(node string) string { return subjectRoot + ".evt.*." + node }

// EventSubject is the subject node publishes run's TaskEvents on.
func EventSubject(run, node string) (string, error) {
	if err := ValidateID("run", run); err != nil {
		return "", err
	}
	if err := ValidateID("node", node); err != nil {
		return "", err
	}
	return subjectRoot + ".evt." + run + "." + node, nil
}

// RunEventsFilter matches the TaskEvents of run from every node.
func RunEventsFilter(run string) (string, error) {
	if err := ValidateID("run", run); err != nil {
		return "", err
	}
	return subjectRoot + ".evt." + run + ".*", nil
}

// NodeEventNoticesFilter matches the notices of stored events node
// publishes for every run (what a secured server lets it publish). node
// must be valid.
func NodeEventNoticesFilter(node string) string { return subjectRoot + ".evn.*." + node }

// EventNoticeSubject is the subject node tells of run's TaskEvents on once
// they are stored (a message with no body, sent after the acks by
// ReportSend.Wait and PublishEvents).
func EventNoticeSubject(run, node string) (string, error) {
	if err := ValidateID("run", run); err != nil {
		return "", err
	}
	if err := ValidateID("node", node); err != nil {
		return "", err
	}
	return subjectRoot + ".evn." + run + "." + node, nil
}

// RunEventNoticesFilter matches the notices of run's stored TaskEvents from
// every node. A reader woken by new events subscribes to them, not to the
// events themselves, which it reads from the stream anyway: on the events'
// subjects it would be sent each of them a second time (a 100K-task run's
// report is ~800 KB).
func RunEventNoticesFilter(run string) (string, error) {
	if err := ValidateID("run", run); err != nil {
		return "", err
	}
	return subjectRoot + ".evn." + run + ".*", nil
}

// ControlSubject is the subject control messages to node travel on.
func ControlSubject(node string) (string, error) {
	if err := ValidateID("node", node); err != nil {
		return "", err
	}
	return subjectRoot + ".ctl." + node, nil
}

// parseSignalSubject returns the run, destination and sender tokens of a
// signal subject.
func parseSignalSubject(subj string) (run, to, from string, ok bool) {
	const pre = subjectRoot + ".run."
	rest, found := strings.CutPrefix(subj, pre)
	if !found {
		return "", "", "", false
	}
	run, rest, found = strings.Cut(rest, ".node.")
	if !found {
		return "", "", "", false
	}
	to, from, found = strings.Cut(rest, ".")
	if !found || run == "" || to == "" || from == "" || strings.IndexByte(from, '.') >= 0 || strings.IndexByte(run, '.') >= 0 {
		return "", "", "", false
	}
	return run, to, from, true
}

// eventSender returns the node token of an event subject ("" when subj is
// not one).
func eventSender(subj string) string {
	rest, found := strings.CutPrefix(subj, subjectRoot+".evt.")
	if !found {
		return ""
	}
	_, node, found := strings.Cut(rest, ".")
	if !found || strings.IndexByte(node, '.') >= 0 {
		return ""
	}
	return node
}
