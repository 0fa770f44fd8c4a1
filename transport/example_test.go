package transport_test

import (
	"errors"
	"fmt"

	"github.com/hetflow/hetflow/transport"
)

func ExampleSignal() {
	s := transport.Signal{Run: "run1", Gen: 2, Src: 4, Dst: 9, Act: 1, Kind: transport.SignalEdge, Output: []byte("out")}
	data := transport.Encode(&s)
	back, err := transport.DecodeSignal(data, transport.Limits{})
	fmt.Println(len(data), err, back.Run, back.Src, back.Dst, back.Act, string(back.Output))

	_, err = transport.DecodeSignal(data[:len(data)-1], transport.Limits{})
	fmt.Println(errors.Is(err, transport.ErrMalformed))
	// Output:
	// 20 <nil> run1 4 9 1 out
	// true
}

func ExampleDeduper() {
	d := transport.NewDeduper()
	s := transport.Signal{Run: "run1", Gen: 1, Src: 4, Dst: 9, Act: 1, Kind: transport.SignalEdge}
	fmt.Println(d.Admit(&s), d.Admit(&s))

	// The node takes a new assignment (generation 2): stragglers of 1 are fenced,
	// and a task re-run under 2 repeats rather than adds its edges.
	d.SetGen("run1", 2)
	s.Act = 2
	fmt.Println(d.Admit(&s))
	s.Gen, s.Act = 2, 1
	fmt.Println(d.Admit(&s))
	// Output:
	// accept duplicate
	// fenced
	// duplicate
}
