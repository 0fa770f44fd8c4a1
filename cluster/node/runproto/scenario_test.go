package runproto

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/transport"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of testdata/*.txt")

// TestScenarios runs testdata/*.txt: one node's share of one run, driven
// by inputs, each followed by the actions it must produce. A case is
//
//	command arg=value …
//	[input lines]
//	----
//	expected output lines
//
// and ends at a blank line; lines starting with # between cases are
// comments. Commands:
//
//	new self=N gen=G nodes=A,B owner=A,B,… [maxheld=K] [free=V,…]
//	                                                    owner: vertex v's node; free: the free joins (Config.Free)
//	assign gen=G nodes=… owner=…                        the run's Assignment
//	batch from=N seq=S [first=I]                        a batch from the live subscription
//	whole from=N seq=S                                  a whole batch (BatchAll: one taken whole before is skipped)
//	follow to=N from=M seq=S [bseq=B]                   a batch of the record at stream position S, addressed to N
//	                                                    (B: the batch's own number, default S)
//	startfollow | caught id=F | probe W | tick | sent K | stop | fail
//	completed V                                         an activation of V completed here
//	outcome V@ACT                                       the record's outcome of condition V's activation
//	settled                                             whether every node's mark of the generation was read
//	report [idle]                                       the TermReport (idle: the parts are)
//	state                                               gen, held Signals, follow, counters
//
// A Signal input line is SRC>DST@ACT gGEN [run=R] [choice|switched] [out=TEXT]
// [starts=K] (K: the destination activation it starts, DstAct).
// go test -run TestScenarios -rewrite rewrites the expected outputs.
func TestScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no scenarios")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runFile(t, file) })
	}
}

type scenario struct {
	t    *testing.T
	at   string
	r    *Run
	run  string
	done map[int]uint64 // completions per vertex (completed)
}

func runFile(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out []string
	sc := &scenario{t: t, run: "r1"}
	for i := 0; i < len(lines); {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out = append(out, line)
			i++
			continue
		}
		start := i
		sc.at = fmt.Sprintf("%s:%d", file, i+1)
		var input []string
		for i < len(lines) && lines[i] != "----" {
			input = append(input, lines[i])
			i++
		}
		if i == len(lines) {
			t.Fatalf("%s: no ----", sc.at)
		}
		i++ // ----
		var want []string
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			want = append(want, lines[i])
			i++
		}
		got := sc.do(input)
		sc.checkMarks()
		out = append(out, lines[start:start+len(input)]...)
		out = append(out, "----")
		out = append(out, got...)
		if !*rewrite && !slices.Equal(got, want) {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", sc.at, input[0], strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkMarks checks that the Run's count of waits marks (Waits reads the
// marks only while it is not 0) is the number of marks set, and that a
// destination with waiting Signals is marked.
func (sc *scenario) checkMarks() {
	r := sc.r
	if r == nil || r.waits == nil {
		return
	}
	set := 0
	for v := range r.waits {
		if r.waits[v].Load() {
			set++
		}
	}
	if n := int(r.nwaits.Load()); n != set {
		sc.fatalf("%d waits marks set, counted %d", set, n)
	}
	for v, ws := range r.waiting {
		if len(ws) > 0 && !r.Waits(v) {
			sc.fatalf("%d Signals wait for %d, which Waits does not report", len(ws), v)
		}
	}
}

func (sc *scenario) fatalf(format string, args ...any) {
	sc.t.Helper()
	sc.t.Fatalf("%s: "+format, append([]any{sc.at}, args...)...)
}

func args(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func (sc *scenario) num(m map[string]string, k string) uint64 {
	if m[k] == "" {
		return 0
	}
	n, err := strconv.ParseUint(m[k], 10, 64)
	if err != nil {
		sc.fatalf("%s=%q: %v", k, m[k], err)
	}
	return n
}

// placement reads nodes=A,B owner=A,B,A.
func (sc *scenario) placement(m map[string]string) ([]string, []uint32) {
	nodes := strings.Split(m["nodes"], ",")
	var owner []uint32
	for _, o := range strings.Split(m["owner"], ",") {
		i := slices.Index(nodes, o)
		if i < 0 {
			i = len(nodes) + 7 // a node the assignment does not name
		}
		owner = append(owner, uint32(i))
	}
	return nodes, owner
}

// signals reads Signal input lines.
func (sc *scenario) signals(lines []string) []transport.Signal {
	var sigs []transport.Signal
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 2 {
			sc.fatalf("signal line %q", l)
		}
		var src, dst uint32
		var act uint64
		if _, err := fmt.Sscanf(f[0], "%d>%d@%d", &src, &dst, &act); err != nil {
			sc.fatalf("signal %q: %v", f[0], err)
		}
		gen, err := strconv.ParseUint(strings.TrimPrefix(f[1], "g"), 10, 64)
		if err != nil {
			sc.fatalf("signal gen %q", f[1])
		}
		s := transport.Signal{Run: sc.run, Gen: gen, Src: src, Dst: dst, Act: act, Kind: transport.SignalEdge}
		for _, o := range f[2:] {
			switch k, v, _ := strings.Cut(o, "="); k {
			case "choice":
				s.Kind = transport.SignalChoice
			case "switched":
				s.Kind = transport.SignalSwitched
			case "run":
				s.Run = v
			case "out":
				s.Output = []byte(v)
			case "starts":
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					sc.fatalf("signal option %q", o)
				}
				s.DstAct = n
			default:
				sc.fatalf("signal option %q", o)
			}
		}
		sigs = append(sigs, s)
	}
	return sigs
}

func (sc *scenario) do(input []string) []string {
	f := strings.Fields(input[0])
	cmd, m := f[0], args(f[1:])
	r := sc.r
	if r == nil && cmd != "new" {
		sc.fatalf("%s before new", cmd)
	}
	switch cmd {
	case "new":
		nodes, owner := sc.placement(m)
		var err error
		sc.done = map[int]uint64{}
		var free []bool
		if m["free"] != "" {
			free = make([]bool, len(owner))
			for _, f := range strings.Split(m["free"], ",") {
				v, err := strconv.Atoi(f)
				if err != nil || v < 0 || v >= len(free) {
					sc.fatalf("free %q", f)
				}
				free[v] = true
			}
		}
		sc.r, err = New(Config{Self: m["self"], Run: sc.run, Gen: sc.num(m, "gen"), Nodes: nodes, Owner: owner, MaxHeld: int(sc.num(m, "maxheld")),
			Done: func(v int) uint64 { return sc.done[v] }, Free: free})
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		return []string{"ok"}
	case "assign":
		nodes, owner := sc.placement(m)
		acts, mv, err := r.Assign(&transport.Assignment{Run: sc.run, Gen: sc.num(m, "gen"), Nodes: nodes, Owner: owner})
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		if acts == nil {
			return []string{"ignored"}
		}
		return append([]string{fmt.Sprintf("moved from=%d kept=%d taken=%d given=%d", mv.Prev, mv.Kept, mv.Taken, mv.Given)}, show(acts)...)
	case "batch":
		return show(r.Batch(m["from"], sc.num(m, "seq"), int(sc.num(m, "first")), sc.signals(input[1:])))
	case "whole":
		acts, seen := r.BatchAll(m["from"], sc.num(m, "seq"), sc.signals(input[1:]))
		if seen {
			return []string{"seen: skipped"}
		}
		return show(acts)
	case "follow":
		bseq := sc.num(m, "seq")
		if _, ok := m["bseq"]; ok {
			bseq = sc.num(m, "bseq")
		}
		b := &transport.Batch{From: m["from"], Seq: bseq, Signals: sc.signals(input[1:])}
		return show(r.FollowBatch(sc.num(m, "seq"), m["to"], b))
	case "startfollow":
		return show(r.StartFollow())
	case "caught":
		return show(r.CaughtUp(sc.num(m, "id")))
	case "probe":
		w, _ := strconv.ParseUint(f[1], 10, 64)
		return show(r.Probe(w))
	case "tick":
		return show(r.Tick())
	case "sent":
		k, _ := strconv.Atoi(f[1])
		r.AddSent(k)
		return []string{"ok"}
	case "stop":
		return show(r.Stop())
	case "completed":
		v, err := strconv.Atoi(f[1])
		if err != nil {
			sc.fatalf("completed %q", f[1])
		}
		sc.done[v]++
		if !r.Waits(v) {
			return []string{"nothing (none waits)"}
		}
		return show(r.Completed(v))
	case "outcome":
		var v int
		var act uint64
		if _, err := fmt.Sscanf(f[1], "%d@%d", &v, &act); err != nil {
			sc.fatalf("outcome %q: %v", f[1], err)
		}
		d, ok := r.Outcome(v, act)
		if !ok {
			return []string{fmt.Sprintf("replays=%t none", r.Replays(v))}
		}
		return []string{fmt.Sprintf("replays=%t picked %v", r.Replays(v), d)}
	case "settled":
		return []string{fmt.Sprintf("settled=%t caught=%t", r.Settled(), r.Caught())}
	case "fail":
		return show(r.Fail())
	case "report":
		rep := r.Report(len(f) > 1 && f[1] == "idle")
		return []string{fmt.Sprintf("report gen=%d wave=%d sent=%d received=%d idle=%t from=%s", rep.Gen, rep.Wave, rep.Sent, rep.Received, rep.Idle, counts(rep.ReceivedFrom))}
	case "state":
		sent, received, from := r.Counts()
		st := fmt.Sprintf("gen=%d held=%d follow=%d caught=%t stopped=%t sent=%d received=%d from=%s", r.Gen(), r.Held(), r.FollowID(), r.Caught(), r.Stopped(), sent, received, counts(from))
		if w := r.Waiting(); w > 0 {
			st += fmt.Sprintf(" waiting=%d", w)
		}
		return []string{st}
	}
	sc.fatalf("unknown command %q", cmd)
	return nil
}

func counts(m map[string]uint64) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	var b strings.Builder
	b.WriteString("{")
	for i, k := range ks {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%s:%d", k, m[k])
	}
	b.WriteString("}")
	return b.String()
}

func show(acts []Action) []string {
	if len(acts) == 0 {
		return []string{"nothing"}
	}
	var out []string
	for _, a := range acts {
		var b strings.Builder
		b.WriteString(a.Kind.String())
		switch a.Kind {
		case Deliver, Hold, Fence, Duplicate, Drop, Wait:
			s := a.Sig
			fmt.Fprintf(&b, " %d>%d@%d g%d from %s", s.Src, s.Dst, s.Act, s.Gen, a.From)
			if s.DstAct > 0 {
				fmt.Fprintf(&b, " starts=%d", s.DstAct)
			}
			if s.Kind != transport.SignalEdge {
				b.WriteString(" " + s.Kind.String())
			}
			if len(s.Output) > 0 {
				fmt.Fprintf(&b, " out=%s", s.Output)
			}
			if a.Replayed {
				b.WriteString(" replayed")
			}
			if a.Reason != "" {
				fmt.Fprintf(&b, " (%s)", a.Reason)
			}
		case Switch:
			owners := make([]string, len(a.Table.Owner))
			for v := range owners {
				owners[v] = a.Table.NodeOf(v)
			}
			fmt.Fprintf(&b, " gen=%d owner=%s", a.Table.Gen, strings.Join(owners, ","))
		case Open:
			var vs []string
			for v, in := range a.In {
				if in {
					vs = append(vs, strconv.Itoa(v))
				}
			}
			fmt.Fprintf(&b, " %s", strings.Join(vs, ","))
		case Follow:
			fmt.Fprintf(&b, " %d", a.Follow)
		}
		out = append(out, b.String())
	}
	return out
}
