package transport

import "fmt"

// EventBatch is several TaskEvents stored as one JetStream message: a node
// publishes the events of one (run, node) subject together, so the event
// stream costs one stored message and one ack per batch instead of one per
// task activation. Readers (ReplayEvents) accept batches and single
// TaskEvent messages alike.
type EventBatch struct {
	Events []TaskEvent
}

// Type implements Message.
func (*EventBatch) Type() Type { return TypeEventBatch }

// AppendWire implements Message.
func (eb *EventBatch) AppendWire(b []byte) []byte {
	b = appendHeader(b, TypeEventBatch, 1)
	b = appendArrayHeader(b, len(eb.Events))
	for i := range eb.Events {
		b = appendArrayHeader(b, taskEventFields)
		b = eb.Events[i].appendFields(b)
	}
	return b
}

// Decode decodes an EventBatch into eb (reusing its slice). Outputs alias
// data. A batch holds at most Limits.MaxBatch events.
func (eb *EventBatch) Decode(data []byte, lim Limits) error {
	var r reader
	if err := r.init(data, lim, TypeEventBatch, 1); err != nil {
		return err
	}
	n, err := r.arrayLen("events", r.lim.MaxBatch)
	if err != nil {
		return err
	}
	if n > len(r.b)-r.off { // every event takes bytes: refuse a count the data cannot hold before allocating
		return r.errf("events: %d claimed in %d bytes", n, len(r.b)-r.off)
	}
	if cap(eb.Events) < n {
		eb.Events = make([]TaskEvent, n)
	}
	eb.Events = eb.Events[:n]
	for i := range eb.Events {
		if err := r.fields(fmt.Sprintf("event %d", i), taskEventFields); err != nil {
			return err
		}
		eb.Events[i] = TaskEvent{}
		if err := eb.Events[i].decodeFields(&r); err != nil {
			return err
		}
	}
	return r.end()
}

// EachEvent decodes one stored event message, a TaskReport, an EventBatch
// or a single TaskEvent, and calls fn for each of its events in order (a
// report's deltas as the TaskEvents they stand for; the event and its
// Output are valid only during the call). A malformed message is an error
// matching ErrMalformed and calls fn for none of it.
func EachEvent(data []byte, lim Limits, fn func(*TaskEvent) error) error {
	t, err := PeekType(data)
	if err != nil {
		return err
	}
	switch t {
	case TypeTaskReport:
		var tr TaskReport
		var e TaskEvent
		return tr.eachDelta(data, lim, func(d *TaskDelta) error {
			tr.event(&e, d)
			return fn(&e)
		})
	case TypeEventBatch:
		var eb EventBatch
		if err := eb.Decode(data, lim); err != nil {
			return err
		}
		for i := range eb.Events {
			if err := fn(&eb.Events[i]); err != nil {
				return err
			}
		}
		return nil
	}
	var e TaskEvent
	if err := e.Decode(data, lim); err != nil {
		return err
	}
	return fn(&e)
}
