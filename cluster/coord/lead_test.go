package coord

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/member"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/transport"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of testdata/leader_*.txt")

// leadFlows are the flows the leader scenarios submit by name.
var leadFlows = map[string]string{
	"chain": `
flows:
  - name: top
    tasks:
      - {name: a, func: noop}
      - {name: b, func: noop, succeed: [a]}
      - {name: c, func: noop, succeed: [b]}
`,
	"pinned": `
flows:
  - name: top
    tasks:
      - {name: a, func: noop, node: n2}
      - {name: b, func: noop, succeed: [a]}
`,
}

// TestLeaderScenarios runs testdata/leader_*.txt against a Leader over a
// real FSM; the harness is the driver (Leader's contract): it commits the
// commands the Leader asks for to the FSM at once and answers with Applied,
// answers record checks with what "record" said, and answers a resync with
// Members and Recover. A case is
//
//	command arg=value …
//	----
//	expected output lines (the actions, nested ones indented)
//
// and ends at a blank line; lines starting with # between cases are
// comments. Commands (times in ms from a fixed epoch):
//
//	leader [keep] [norecord] [silence=MS] [started=MS] [plans]  (plans: Assignments carry plans and digests)
//	                                             a new FSM (keep: the same one, a leader change) and Leader at time 0
//	at MS                                        the clock
//	member ID STATE [boot=B] [cpus=N]            gossip's view of a node (no input yet)
//	members                                      Members, then Recover
//	submit RUN flow=NAME assign=N,N,… [timeout=MS] RunSubmit committed, then Reconcile
//	tick | reconcile
//	report NODE RUN gen=G [wave=W] [sent=S] [from=N:C,…] [idle]
//	ack NODE RUN gen=G [boot=B] [needplan]       NODE acknowledges RUN's Assignment of gen G (needplan: asks for its plan)
//	pong NODE alive|none [boot=B]
//	fail RUN NODE task=T err=TEXT
//	record RUN ok|owed=TASK|failed=TASK|unreadable   how record checks of RUN answer from now on
//	state [sent]                                 the FSM's nodes and runs (sent: the Assignment copies sent to each node)
//
// go test -run TestLeaderScenarios -rewrite rewrites the expected outputs.
func TestLeaderScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/leader_*.txt")
	if len(files) == 0 {
		t.Fatal("no scenarios")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runLeadFile(t, file) })
	}
}

type leadScenario struct {
	t       *testing.T
	at      string
	epoch   time.Time
	now     time.Time
	fsm     *FSM
	l       *Leader
	members []member.Member
	record  map[string]string
	out     []string
}

func runLeadFile(t *testing.T, file string) {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sc := &leadScenario{t: t, epoch: epoch, now: epoch}
	testsupport.Scenarios(t, file, *rewrite, func(at string, input []string) []string {
		sc.at = at
		if len(input) != 1 {
			sc.fatalf("one command per case, got %d lines", len(input))
		}
		return sc.do(input[0])
	})
}

func (sc *leadScenario) fatalf(format string, args ...any) {
	sc.t.Helper()
	sc.t.Fatalf("%s: "+format, append([]any{sc.at}, args...)...)
}

func (sc *leadScenario) ms(s string) time.Duration {
	v, err := strconv.Atoi(s)
	if err != nil {
		sc.fatalf("not a number of ms: %q", s)
	}
	return time.Duration(v) * time.Millisecond
}

func (sc *leadScenario) num(s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		sc.fatalf("not a number: %q", s)
	}
	return v
}

func (sc *leadScenario) do(line string) []string {
	f := strings.Fields(line)
	cmd, m := f[0], args(f[1:])
	sc.out = nil
	if sc.l == nil && cmd != "leader" {
		sc.fatalf("%s before leader", cmd)
	}
	now := sc.now
	switch cmd {
	case "leader":
		cfg := LeaderConfig{Started: sc.epoch}
		_, cfg.NoRecord = m["norecord"]
		if _, ok := m["plans"]; ok {
			// Each node's plan: its bytes depend on the flow, the
			// assignment and the node alone (as runproto.Compile's).
			cfg.Plans = func(r Run) (map[string]NodePlan, error) {
				out := map[string]NodePlan{}
				for _, n := range r.Nodes {
					out[n] = NewNodePlan(fmt.Appendf(nil, "%x|%s|%s", sha256.Sum256(r.Flow), strings.Join(r.Assignment, ","), n))
				}
				return out, nil
			}
		}
		if v := m["silence"]; v != "" {
			cfg.Silence = sc.ms(v)
		}
		if v := m["started"]; v != "" {
			cfg.Started = sc.epoch.Add(sc.ms(v))
		}
		sc.now, sc.members, sc.record = sc.epoch, nil, map[string]string{}
		if _, keep := m["keep"]; !keep || sc.fsm == nil {
			sc.fsm = NewFSM()
		}
		sc.l = NewLeader(cfg, sc.fsm)
		return []string{"ok"}
	case "at":
		sc.now = sc.epoch.Add(sc.ms(f[1]))
		return []string{"ok"}
	case "member":
		mm := member.Member{ID: f[1], Addr: f[1], State: f[2], Since: now,
			Meta: proto.Meta{Role: proto.RoleNode, Boot: m["boot"], CPUs: 2}}
		if v := m["cpus"]; v != "" {
			mm.Meta.CPUs = int(sc.num(v))
		}
		i := slices.IndexFunc(sc.members, func(x member.Member) bool { return x.ID == mm.ID })
		if i < 0 {
			sc.members = append(sc.members, mm)
		} else {
			sc.members[i] = mm
		}
		return []string{"ok"}
	case "members":
		sc.sync(0)
	case "submit":
		text, ok := leadFlows[m["flow"]]
		if !ok {
			sc.fatalf("no flow %q", m["flow"])
		}
		file, err := spec.Parse("flow.yaml", []byte(text))
		if err != nil {
			sc.fatalf("%v", err)
		}
		js, err := spec.Canonical(file)
		if err != nil {
			sc.fatalf("%v", err)
		}
		boots := map[string]string{}
		assign := strings.Split(m["assign"], ",")
		for _, n := range sc.fsm.Nodes() {
			if slices.Contains(assign, n.ID) {
				boots[n.ID] = n.Boot
			}
		}
		r := &Run{ID: f[1], Flow: js, FlowName: "top", State: proto.RunRunning, Submitted: now, Gen: 1, Assignment: assign, Boots: boots}
		if v := m["timeout"]; v != "" {
			r.Timeout = sc.ms(v)
		}
		if err := sc.fsm.Apply(&Command{Op: OpRunSubmit, Run: r}); err != nil {
			return []string{"error: " + err.Error()}
		}
		sc.acts(0, sc.l.Reconcile(now))
	case "tick":
		sc.acts(0, sc.l.Tick(now))
	case "reconcile":
		sc.acts(0, sc.l.Reconcile(now))
	case "report":
		r := &transport.TermReport{Node: f[1], Run: f[2], Gen: sc.num(m["gen"])}
		if v := m["wave"]; v != "" {
			r.Wave = sc.num(v)
		}
		if v := m["sent"]; v != "" {
			r.Sent = sc.num(v)
		}
		_, r.Idle = m["idle"]
		if v := m["from"]; v != "" {
			r.ReceivedFrom = map[string]uint64{}
			for _, kv := range strings.Split(v, ",") {
				k, c, _ := strings.Cut(kv, ":")
				r.ReceivedFrom[k] = sc.num(c)
				r.Received += r.ReceivedFrom[k]
			}
		}
		sc.acts(0, sc.l.Report(now, r))
	case "ack":
		a := &transport.Ack{Node: f[1], Run: f[2], Gen: sc.num(m["gen"]), Boot: m["boot"]}
		_, a.NeedPlan = m["needplan"]
		sc.acts(0, sc.l.Ack(now, a))
	case "pong":
		sc.acts(0, sc.l.Pong(now, f[1], m["boot"], f[2] == "alive"))
	case "fail":
		body, _ := json.Marshal(proto.FailBody{Task: m["task"], Error: strings.ReplaceAll(m["err"], "_", " ")})
		sc.acts(0, sc.l.Fail(now, &transport.Envelope{Kind: proto.KindFail, Run: f[1], Node: f[2], Body: body}))
	case "record":
		sc.record[f[1]] = f[2]
		return []string{"ok"}
	case "state":
		for _, n := range sc.fsm.Nodes() {
			sc.out = append(sc.out, fmt.Sprintf("node %s %s boot=%s", n.ID, n.State, n.Boot))
		}
		for _, r := range sc.fsm.Runs() {
			s := fmt.Sprintf("run %s %s gen=%d assign=%s", r.ID, r.State, r.Gen, strings.Join(r.Assignment, ","))
			if len(r.Lost) > 0 {
				s += " lost=" + strings.Join(r.Lost, ",")
			}
			if r.Error != "" {
				s += fmt.Sprintf(" error=%q", r.Error)
			}
			if gen, ok := sc.l.Tracking(r.ID); ok {
				s += fmt.Sprintf(" tracked=%d", gen)
				if _, ok := m["sent"]; ok {
					for _, n := range r.Nodes {
						s += fmt.Sprintf(" sent[%s]=%d", n, sc.l.Sent(r.ID, n))
					}
				}
			}
			sc.out = append(sc.out, s)
		}
	default:
		sc.fatalf("unknown command %q", cmd)
	}
	if len(sc.out) == 0 {
		return []string{"(nothing)"}
	}
	return sc.out
}

func args(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func (sc *leadScenario) sync(depth int) {
	sc.acts(depth, sc.l.Members(sc.now, sc.members))
	sc.acts(depth, sc.l.Recover(sc.now))
}

func (sc *leadScenario) print(depth int, format string, args ...any) {
	sc.out = append(sc.out, strings.Repeat("  ", depth)+fmt.Sprintf(format, args...))
}

// acts carries out the Leader's actions as its driver does, printing them.
func (sc *leadScenario) acts(depth int, acts []LeaderAction) {
	now := sc.now
	for _, a := range acts {
		switch a.Kind {
		case LeadSend:
			sc.print(depth, "send %s %s", a.Node, describeMsg(a.Msg))
		case LeadPing:
			sc.print(depth, "ping %s", a.Node)
		case LeadApply:
			sc.print(depth, "apply %s", describeCmd(a.Cmd))
			err := sc.fsm.Apply(a.Cmd)
			if err != nil {
				sc.print(depth+1, "-> error: %v", err)
			}
			sc.acts(depth+1, sc.l.Applied(now, a.Cmd, err))
		case LeadCheck:
			var owed []Owed
			var failed []string
			var err error
			switch ans := sc.record[a.Run.ID]; {
			case ans == "" || ans == "ok":
			case strings.HasPrefix(ans, "owed="):
				owed = []Owed{{Task: strings.TrimPrefix(ans, "owed="), Why: "never ran although its strong predecessors all did"}}
			case strings.HasPrefix(ans, "failed="):
				failed = []string{strings.TrimPrefix(ans, "failed=")}
			case ans == "unreadable":
				err = errors.New("no JetStream")
			default:
				sc.fatalf("record answer %q", ans)
			}
			sc.print(depth, "check %s gen %d -> %s", a.Run.ID, a.Run.Gen, cmp(sc.record[a.Run.ID], "ok"))
			sc.acts(depth+1, sc.l.Checked(now, a.Run.ID, a.Run.Gen, owed, failed, err))
		case LeadResync:
			sc.print(depth, "resync")
			sc.sync(depth + 1)
		case LeadRefused:
			sc.print(depth, "refused %s", attrs(a.Attrs, "run", "refused", "first"))
		case LeadConfirmed:
			sc.print(depth, "confirmed dead %s", a.Node)
		case LeadRefuted:
			sc.print(depth, "refuted %s (%s)", a.Node, attrs(a.Attrs, "heard"))
		case LeadLog:
			if a.Level >= slog.LevelWarn {
				sc.print(depth, "log %s: %s", a.Text, attrs(a.Attrs, "run", "err", "op"))
			}
		}
	}
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// attrs renders the named keys of a key/value list.
func attrs(kv []any, keys ...string) string {
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		if slices.Contains(keys, fmt.Sprint(kv[i])) {
			parts = append(parts, fmt.Sprintf("%v=%v", kv[i], kv[i+1]))
		}
	}
	return strings.Join(parts, " ")
}

func describeMsg(m transport.Message) string {
	switch m := m.(type) {
	case *transport.Assignment:
		switch {
		case m.PlanRef():
			return fmt.Sprintf("assignment %s gen %d plan by digest", m.Run, m.Gen)
		case m.PlanDigest != nil:
			return fmt.Sprintf("assignment %s gen %d with plan", m.Run, m.Gen)
		}
		return fmt.Sprintf("assignment %s gen %d", m.Run, m.Gen)
	case *transport.Cancel:
		return fmt.Sprintf("cancel %s gen %d %s", m.Run, m.Gen, m.Reason)
	case *transport.Envelope:
		if m.Kind == proto.KindProbe && len(m.Body) == 8 {
			return fmt.Sprintf("probe %s wave %d", m.Run, binary.LittleEndian.Uint64(m.Body))
		}
		return fmt.Sprintf("envelope %s %s", m.Kind, m.Run)
	}
	return fmt.Sprintf("%T", m)
}

func describeCmd(c *Command) string {
	switch c.Op {
	case OpNodeUpsert:
		return fmt.Sprintf("node-upsert %s %s", c.Node.ID, c.Node.State)
	case OpRunReassign:
		return fmt.Sprintf("run-reassign %s gen %d assign=%s", c.Reassign.ID, c.Reassign.Gen, strings.Join(c.Reassign.Assignment, ","))
	case OpRunFinish:
		return fmt.Sprintf("run-finish %s %s %q", c.Finish.ID, c.Finish.State, c.Finish.Error)
	}
	return string(c.Op)
}

// An Assignment names, per node, the process its part is for (the run's
// Boots), so that a node restarted since takes none of it; a node whose
// boot the run does not know gets "" (any process).
func TestAssignmentNamesTheBoots(t *testing.T) {
	r := Run{ID: "r", Nodes: []string{"n1", "n2", "n3"}, Boots: map[string]string{"n1": "b1", "n3": "b3"}}
	if got := assignBoots(r); !slices.Equal(got, []string{"b1", "", "b3"}) {
		t.Fatalf("boots %q", got)
	}
	if got := assignBoots(Run{Nodes: []string{"n1"}}); got != nil {
		t.Fatalf("a run without boots: %q, want none", got)
	}
}

// The leader's owners of an assignment are kept for the same array and
// nodes (the runs of a flow again share both) and made again otherwise.
func TestOwnersKeptForTheSameAssignment(t *testing.T) {
	var o ownedBy
	assign := []string{"b", "a", "a", "b"}
	nodes := []string{"a", "b"}
	first := o.of(nodes, assign)
	if want := []uint32{1, 0, 0, 1}; !slices.Equal(first, want) {
		t.Fatalf("owners %v, want %v", first, want)
	}
	if again := o.of(slices.Clone(nodes), assign); &again[0] != &first[0] {
		t.Fatal("the same assignment and nodes: owners made again")
	}
	if got, want := o.of([]string{"b", "a"}, assign), []uint32{0, 1, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("other nodes: owners %v, want %v", got, want)
	}
	same := slices.Clone(assign)
	same[0] = "a"
	if got, want := o.of(nodes, same), []uint32{0, 0, 0, 1}; !slices.Equal(got, want) {
		t.Fatalf("another array: owners %v, want %v", got, want)
	}
}
