package transport

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// Each fuzz target: decoding never panics; an error always matches ErrMalformed;
// a message that decodes re-encodes to bytes that decode to the same encoding.

func fuzzSeeds(f *testing.F, t Type) {
	for _, m := range sampleMessages() {
		if m.Type() == t || t == 0 {
			f.Add(Encode(m))
		}
	}
	if t == TypeBatch || t == 0 {
		// a batch of fan entries (the Batcher's), and one of no Signals
		// that names a run (refused)
		b := &Batch{From: "n1", Seq: 7}
		for d := range uint32(5) {
			b.Signals = append(b.Signals, Signal{Run: "r1", Gen: 2, Src: 1, Dst: d, Act: 3, Kind: SignalEdge, Output: []byte("o")})
		}
		f.Add(Encode(b))
		fan := appendStr(appendUint(appendStr(appendHeader(nil, TypeBatch, batchFields), "n1"), 7), "r1")
		fan = appendArrayHeader(fan, 1)
		fan = b.Signals[0].appendFan(appendArrayHeader(fan, entryFields), []uint32{0, 1, 2, 3, 4})
		f.Add(fan)
		f.Add(appendArrayHeader(appendStr(appendUint(appendStr(appendHeader(nil, TypeBatch, batchFields), "n1"), 7), "r1"), 0))
	}
	f.Add([]byte{})
	f.Add([]byte{0x90})
	f.Add([]byte{0x92, byte(t), 1})
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
}

func fuzzRoundTrip[T any, P interface {
	*T
	Message
	Decode([]byte, Limits) error
}](t *testing.T, data []byte) {
	lim := Limits{MaxMessage: 1 << 20, MaxBatch: 1 << 10, MaxOutput: 1 << 16, MaxText: 1 << 12, MaxTasks: 1 << 12, MaxBody: 1 << 16}
	var m T
	p := P(&m)
	if err := p.Decode(data, lim); err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("error does not match ErrMalformed: %v", err)
		}
		return
	}
	enc := p.AppendWire(nil)
	var m2 T
	if err := P(&m2).Decode(enc, lim); err != nil {
		t.Fatalf("re-encoding of a decoded message does not decode: %v\n in  %x\n out %x", err, data, enc)
	}
	if enc2 := P(&m2).AppendWire(nil); !bytes.Equal(enc, enc2) {
		t.Fatalf("round trip changed the message:\n %x\n %x", enc, enc2)
	}
}

func FuzzDecodeSignal(f *testing.F) {
	fuzzSeeds(f, TypeSignal)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRoundTrip[Signal](t, data) })
}

func FuzzDecodeBatch(f *testing.F) {
	fuzzSeeds(f, TypeBatch)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRoundTrip[Batch](t, data) })
}

func FuzzDecodeTaskEvent(f *testing.F) {
	fuzzSeeds(f, TypeTaskEvent)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRoundTrip[TaskEvent](t, data) })
}

func FuzzDecodeTaskReport(f *testing.F) {
	fuzzSeeds(f, TypeTaskReport)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRoundTrip[TaskReport](t, data) })
}

func FuzzDecodeAssignment(f *testing.F) {
	fuzzSeeds(f, TypeAssignment)
	// owners past a one-byte fixint (a run on more than 128 nodes), alone
	// and mixed with small ones, and one naming no node: the owner table's
	// byte-a-time way and the general one, and the fall from one to the
	// other mid-table
	nodes := make([]string, 200)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("n%d", i)
	}
	for _, owner := range [][]uint32{{128, 150, 199}, {0, 130, 5, 199, 127, 128, 1}, {3, 127, 128}, {1, 2, 250}} {
		f.Add(Encode(&Assignment{Run: "r1", Gen: 2, Nodes: nodes, Owner: owner}))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzRoundTrip[Assignment](t, data)
		// Decoded like a table (SubscribeControl's way), the same owners
		// or the same refusal: like an equal table, one of another owner,
		// one of another length.
		lim := Limits{MaxMessage: 1 << 20, MaxBatch: 1 << 10, MaxOutput: 1 << 16, MaxText: 1 << 12, MaxTasks: 1 << 12, MaxBody: 1 << 16}
		var a Assignment
		err := a.Decode(data, lim)
		other := slices.Clone(a.Owner)
		if len(other) > 0 {
			other[len(other)/2]++
		}
		for _, like := range [][]uint32{slices.Clone(a.Owner), other, append(slices.Clone(a.Owner), 0)} {
			var b Assignment
			berr := b.decodeLike(data, lim, like)
			if (err == nil) != (berr == nil) || err == nil && !slices.Equal(a.Owner, b.Owner) {
				t.Fatalf("decoded like %v: %v %v; decoded alone: %v %v", like, b.Owner, berr, a.Owner, err)
			}
		}
	})
}

func FuzzDecodePlan(f *testing.F) {
	fuzzSeeds(f, TypePlan)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRoundTrip[Plan](t, data) })
}

// FuzzDecodeControl drives the decoders of the small control messages:
// Cancel, TermReport, Envelope and Ack.
func FuzzDecodeControl(f *testing.F) {
	fuzzSeeds(f, TypeCancel)
	fuzzSeeds(f, TypeTermReport)
	fuzzSeeds(f, TypeEnvelope)
	fuzzSeeds(f, TypeAck)
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzRoundTrip[Cancel](t, data)
		fuzzRoundTrip[TermReport](t, data)
		fuzzRoundTrip[Envelope](t, data)
		fuzzRoundTrip[Ack](t, data)
	})
}

// FuzzDecode drives the generic decoder over every type.
func FuzzDecode(f *testing.F) {
	fuzzSeeds(f, 0)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data, Limits{MaxMessage: 1 << 20})
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not match ErrMalformed: %v", err)
			}
			return
		}
		enc := Encode(m)
		m2, err := Decode(enc, Limits{})
		if err != nil || !bytes.Equal(Encode(m2), enc) {
			t.Fatalf("round trip of %T failed: %v", m, err)
		}
	})
}
