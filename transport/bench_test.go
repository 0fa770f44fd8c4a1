package transport

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/hetflow/hetflow/internal/htdg"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// Reflection baselines: the same fields, encoded by msgpack's reflection path (as
// arrays, so the bytes are comparable in size).
type reflSignal struct {
	//lint:ignore U1000 msgpack reads the field's tag (encode as an array)
	_msgpack struct{} `msgpack:",as_array"`
	Run      string
	Gen      uint64
	Src, Dst uint32
	Act      uint64
	Kind     uint8
	Output   []byte
}

type reflBatch struct {
	//lint:ignore U1000 msgpack reads the field's tag (encode as an array)
	_msgpack struct{} `msgpack:",as_array"`
	From     string
	Seq      uint64
	Signals  []reflSignal
}

func benchSignal(i int) Signal {
	return Signal{Run: "run-0123456789", Gen: 3, Src: uint32(i), Dst: uint32(i + 1), Act: uint64(i + 1),
		Kind: SignalEdge, Output: bytes.Repeat([]byte{0x5a}, 32)}
}

func toRefl(s Signal) reflSignal {
	return reflSignal{Run: s.Run, Gen: s.Gen, Src: s.Src, Dst: s.Dst, Act: s.Act, Kind: uint8(s.Kind), Output: s.Output}
}

func BenchmarkSignal(b *testing.B) {
	s := benchSignal(1000)
	rs := toRefl(s)
	data := Encode(&s)
	rdata, _ := msgpack.Marshal(&rs)
	b.Run("encode/hand", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 256)
		for b.Loop() {
			buf = s.AppendWire(buf[:0])
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encode/reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := msgpack.Marshal(&rs); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(rdata)))
	})
	b.Run("decode/hand", func(b *testing.B) {
		b.ReportAllocs()
		var out Signal
		for b.Loop() {
			if err := out.Decode(data, Limits{}); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(data)))
	})
	b.Run("decode/reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out reflSignal
			if err := msgpack.Unmarshal(rdata, &out); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(rdata)))
	})
}

func BenchmarkBatch64(b *testing.B) {
	bt := Batch{From: "node-1", Seq: 7}
	rb := reflBatch{From: "node-1", Seq: 7}
	for i := 0; i < 64; i++ {
		bt.Signals = append(bt.Signals, benchSignal(i))
		rb.Signals = append(rb.Signals, toRefl(bt.Signals[i]))
	}
	data := Encode(&bt)
	rdata, _ := msgpack.Marshal(&rb)
	b.Run("encode/hand", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 8192)
		for b.Loop() {
			buf = bt.AppendWire(buf[:0])
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encode/reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := msgpack.Marshal(&rb); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(rdata)))
	})
	b.Run("decode/hand", func(b *testing.B) {
		b.ReportAllocs()
		var out Batch // reused, as the receiver does
		for b.Loop() {
			if err := out.Decode(data, Limits{}); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(data)))
	})
	b.Run("decode/reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out reflBatch
			if err := msgpack.Unmarshal(rdata, &out); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(rdata)))
	})
}

func BenchmarkDedupAdmit(b *testing.B) {
	d := NewDeduper()
	s := Signal{Run: "r", Gen: 1, Src: 1, Dst: 2, Kind: SignalEdge}
	b.ReportAllocs()
	for b.Loop() {
		s.Act++
		if d.Admit(&s) != Accept {
			b.Fatal("rejected")
		}
	}
}

// BenchmarkDedupManyEdges admits one activation each of 10,000 edges (a
// receiver's first run of a dense part: 100 sources × 100 destinations) in
// batches of 512, a fresh run each time; ns/op is per Signal. "fans": a
// source's edges together, as its fan entry decodes; "shuffled": in a
// random order; "fanin": 10,000 sources of one edge each to one
// destination (a fan-in, each Signal from a source activation of its own).
func BenchmarkDedupManyEdges(b *testing.B) {
	const k = 100
	for _, order := range []string{"fans", "shuffled", "fanin"} {
		b.Run(order, func(b *testing.B) {
			sigs := make([]Signal, k*k)
			ptrs := make([]*Signal, len(sigs))
			for i := range sigs {
				sigs[i] = Signal{Run: "r", Gen: 1, Src: uint32(i / k), Dst: uint32(k + i%k), Act: 1, Kind: SignalEdge}
				if order == "fanin" {
					sigs[i].Src, sigs[i].Dst = uint32(i), k*k
				}
				ptrs[i] = &sigs[i]
			}
			if order == "shuffled" {
				rng := rand.New(rand.NewPCG(1, 2))
				rng.Shuffle(len(ptrs), func(i, j int) { ptrs[i], ptrs[j] = ptrs[j], ptrs[i] })
			}
			var vd []Verdict
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += len(sigs) {
				d := NewDeduper()
				for j := 0; j < len(ptrs); j += 512 {
					vd = d.AdmitReplayedAll(ptrs[j:min(j+512, len(ptrs))], vd)
				}
			}
		})
	}
}

// BenchmarkEdges pushes b.N Signals from node n1 to node n2 through a real embedded
// NATS server on loopback: Batcher on one connection, SubscribeSignals with a
// Deduper on another, timed until the last one is delivered.
func BenchmarkEdges(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []BatchOption
		fan  int // edges per source activation (AddAll; 0: Add one by one)
	}{
		{"batched", []BatchOption{WithMaxSignals(256)}, 0},
		{"batched-ack", []BatchOption{WithMaxSignals(256), WithAck()}, 0},
		{"unbatched", []BatchOption{WithMaxSignals(1)}, 0},
		{"fan100", []BatchOption{WithMaxSignals(256)}, 100},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ts := testsupport.NATS(b)
			tx := connect(b, ts.URL())
			rx := connect(b, ts.URL())
			ctx := testCtx(b)
			must(b, tx.EnsureStreams(ctx, StreamConfig{}))
			var got atomic.Int64
			want := int64(b.N)
			done := make(chan struct{})
			sub, err := rx.SubscribeSignals("n2", NewDeduper(), func(_ string, sigs []Signal) {
				if got.Add(int64(len(sigs))) == want {
					close(done)
				}
			})
			must(b, err)
			defer sub.Close(ctx)
			for _, ns := range sub.subs {
				must(b, ns.SetPendingLimits(-1, -1))
			}
			must(b, rx.Sync(ctx))
			bt, err := tx.NewBatcher("n1", tc.opts...)
			must(b, err)
			s := benchSignal(0)
			s.Run = "r1"
			var fan []Signal
			var ptrs []*Signal
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := htdg.CPUTime()
			start := time.Now()
			for i := 0; i < b.N; {
				if tc.fan == 0 {
					s.Act = uint64(i + 1)
					if err := bt.Add(ctx, "n2", &s); err != nil {
						b.Fatal(err)
					}
					i++
					continue
				}
				k := min(tc.fan, b.N-i)
				fan, ptrs = fan[:0], ptrs[:0]
				for d := range k {
					c := s
					c.Act, c.Dst = uint64(i/tc.fan+1), uint32(d)
					fan = append(fan, c)
				}
				for j := range fan {
					ptrs = append(ptrs, &fan[j])
				}
				if err := bt.AddAll(ctx, "n2", ptrs); err != nil {
					b.Fatal(err)
				}
				i += k
			}
			must(b, bt.Flush(ctx))
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				b.Fatalf("delivered %d of %d; rx %+v", got.Load(), want, rx.Stats())
			}
			el := time.Since(start)
			cpu := htdg.CPUTime() - cpu0
			b.StopTimer()
			b.ReportMetric(float64(b.N)/el.Seconds(), "edges/s")
			// the process's CPU (sender, NATS server, receiver) per edge
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/edge")
			must(b, bt.Close(ctx))
		})
	}
}

func percentiles(b *testing.B, lat []time.Duration, scale float64, unit string) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())*scale/1e3, "p50-"+unit)
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())*scale/1e3, "p99-"+unit)
}

// BenchmarkRequestReply: loopback request/reply latency through the server.
func BenchmarkRequestReply(b *testing.B) {
	ts := testsupport.NATS(b)
	srv := connect(b, ts.URL())
	cli := connect(b, ts.URL())
	sub, err := srv.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	must(b, err)
	defer sub.Close(context.Background())
	must(b, srv.Sync(testCtx(b)))
	ctx := testCtx(b)
	payload := make([]byte, 64)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		if _, err := cli.Request(ctx, "echo", payload); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	percentiles(b, lat, 1, "µs")
}

// BenchmarkSignalLatency: one Signal from n1 to n2 and one back (each flushed at
// once); reported as one-way latency, half the round trip, through Batcher,
// server, decode and Deduper.
func BenchmarkSignalLatency(b *testing.B) {
	ts := testsupport.NATS(b)
	a := connect(b, ts.URL())
	z := connect(b, ts.URL())
	ctx := testCtx(b)
	back, err := z.NewBatcher("n2", WithLinger(0))
	must(b, err)
	pong, err := z.SubscribeSignals("n2", NewDeduper(), func(_ string, sigs []Signal) {
		for _, s := range sigs {
			r := Signal{Run: s.Run, Gen: s.Gen, Src: s.Dst, Dst: s.Src, Act: s.Act, Kind: SignalEdge, Output: s.Output}
			if err := back.Add(ctx, "n1", &r); err != nil {
				panic(fmt.Sprint("pong: ", err))
			}
		}
		_ = back.Flush(ctx)
	})
	must(b, err)
	got := make(chan struct{}, 1)
	ping, err := a.SubscribeSignals("n1", NewDeduper(), func(string, []Signal) { got <- struct{}{} })
	must(b, err)
	must(b, a.Sync(ctx))
	must(b, z.Sync(ctx))
	out, err := a.NewBatcher("n1", WithLinger(0))
	must(b, err)
	s := benchSignal(0)
	s.Run = "r1"
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		s.Act++
		t0 := time.Now()
		must(b, out.Add(ctx, "n2", &s))
		must(b, out.Flush(ctx))
		<-got
		lat = append(lat, time.Since(t0))
	}
	percentiles(b, lat, 0.5, "µs-oneway")
	must(b, out.Close(ctx))
	must(b, ping.Close(ctx))
	must(b, pong.Close(ctx))
	must(b, back.Close(ctx))
}
