package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// The chaos test runs a mixed flow, pinned to all three nodes, on a fresh
// loopback cluster per seed while faults drawn from the seed hit it: the
// leader coordinator killed (and started again on its data), natsd stopped
// and started again on its store, n2 or n3 killed (and started again,
// empty), n2 or n3 frozen (SIGSTOP past failure detection, then SIGCONT).
// After each run it checks: the run ended (succeeded with a one-process
// run's outputs, or failed with a reason); no task pinned to n1, which no
// fault touches, ran more often than it was activated; every process still up stops
// cleanly on SIGTERM; the nodes' goroutines came back to where they were.
//
//	HETFLOW_CHAOS_SEEDS   how many seeds (default 3), or a list "7,11,42"
//	HETFLOW_CHAOS_FAULTS  fault kinds drawn from (default all: leader,nats,node-kill,node-stop)
//	HETFLOW_CHAOS_OUT     a file that gets one JSON line per seed and, at the
//	                      end, a Markdown summary next to it (FILE.md)
//
// `make chaos SEEDS=200` runs many.

// chaosFlow: the tasks pinned to n1 are the ones checked for re-runs (no
// node fault hits n1); the others are placed by the leader and may move
// when n2 or n3 is lost, so a node fault is recoverable.
const chaosFlow = `name: chaos
tasks:
  - {name: a, func: hash, node: n1}
  - {name: w1, func: sleep, args: {ms: 400}, succeed: [a]}
  - {name: body, func: sleep, args: {ms: 150}, succeed: [w1]}
  - {name: cond, kind: condition, func: loop, args: {n: 6}, succeed: [body], precede: [body, fork]}
  - {name: fork, kind: multicondition, func: pick, args: {choices: [0, 2]}, precede: [left, mid, right], node: n1}
  - {name: left, func: hash}
  - {name: mid, func: hash, node: n1}
  - {name: right, func: sleep, args: {ms: 300}, node: n1}
  - {name: side, func: spin, args: {us: 2000}, succeed: [a]}
  - {name: side2, func: hash, succeed: [side]}
  - {name: end, func: hash, succeed: [side2, left], node: n1}
  - {name: end2, func: hash, succeed: [right]}
`

var chaosKinds = []string{"leader", "nats", "node-kill", "node-stop"}

type chaosFault struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	AtMS   int64  `json:"at_ms"` // after the submit
}

type chaosResult struct {
	Seed        uint64       `json:"seed"`
	Faults      []chaosFault `json:"faults"`
	State       string       `json:"state"`
	Error       string       `json:"error,omitempty"`
	RunMS       int64        `json:"run_ms"`                 // submit → run ended
	DetectionMS []int64      `json:"detection_ms,omitempty"` // node fault → the leader's view says dead
	FailoverMS  []int64      `json:"failover_ms,omitempty"`  // leader killed → a new leader answers
	Reexecuted  uint64       `json:"reexecuted"`             // Σ executions − activations
}

func chaosSeeds(t *testing.T) []uint64 {
	v := os.Getenv("HETFLOW_CHAOS_SEEDS")
	if v == "" {
		v = "3"
	}
	if !strings.Contains(v, ",") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("HETFLOW_CHAOS_SEEDS=%q: want a count or a list of seeds", v)
		}
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(i + 1)
		}
		return out
	}
	var out []uint64
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			t.Fatalf("HETFLOW_CHAOS_SEEDS=%q: %v", v, err)
		}
		out = append(out, n)
	}
	return out
}

func chaosFaultKinds(t *testing.T) []string {
	v := os.Getenv("HETFLOW_CHAOS_FAULTS")
	if v == "" {
		return chaosKinds
	}
	var out []string
	for _, k := range strings.Split(v, ",") {
		if !slices.Contains(chaosKinds, k) {
			t.Fatalf("HETFLOW_CHAOS_FAULTS: unknown fault %q (known: %v)", k, chaosKinds)
		}
		out = append(out, k)
	}
	return out
}

func TestLoopbackChaos(t *testing.T) {
	seeds, kinds := chaosSeeds(t), chaosFaultKinds(t)
	path := writeFlow(t, "chaos.yaml", chaosFlow)
	ref := reference(t, path)
	var results []chaosResult
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := chaosSeed(t, seed, kinds, path, ref)
			line, _ := json.Marshal(r)
			t.Logf("%s", line)
			results = append(results, r)
			if out := os.Getenv("HETFLOW_CHAOS_OUT"); out != "" {
				f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				if err == nil {
					fmt.Fprintf(f, "%s\n", line)
					f.Close()
				}
			}
		})
	}
	if out := os.Getenv("HETFLOW_CHAOS_OUT"); out != "" {
		if err := os.WriteFile(out+".md", []byte(chaosSummary(results)), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func chaosSeed(t *testing.T, seed uint64, kinds []string, path string, ref map[string]string) chaosResult {
	rng := rand.New(rand.NewPCG(seed, 0x6865746677))
	c := startCluster(t)
	res := chaosResult{Seed: seed}

	// The schedule: one or two faults, 200–1500 ms after the submit, on
	// distinct targets.
	n := 1 + rng.IntN(2)
	distinct := map[string]bool{} // the targets the kinds can hit: one node fault at most
	for _, k := range kinds {
		distinct[strings.TrimSuffix(strings.TrimSuffix(k, "-kill"), "-stop")] = true
	}
	n = min(n, len(distinct)) // with node faults alone, a second would never be drawn
	used := map[string]bool{}
	for len(res.Faults) < n {
		k := kinds[rng.IntN(len(kinds))]
		target := ""
		switch k {
		case "leader":
			target = "leader"
		case "nats":
			target = "natsd"
		default:
			target = fmt.Sprintf("n%d", 2+rng.IntN(2)) // n1 holds the pinned, checked tasks
		}
		if used[target] || (strings.HasPrefix(k, "node") && used["node"]) {
			continue // one node fault per run: two nodes lost of three leaves too little to check
		}
		used[target] = true
		if strings.HasPrefix(k, "node") {
			used["node"] = true
		}
		res.Faults = append(res.Faults, chaosFault{Kind: k, Target: target, AtMS: 200 + rng.Int64N(1300)})
	}
	slices.SortFunc(res.Faults, func(a, b chaosFault) int { return int(a.AtMS - b.AtMS) })

	base := map[string]int{}
	for i, u := range c.nodeHTTP {
		base[fmt.Sprintf("n%d", i+1)] = gauge(u, "go_goroutines")
	}

	submitted := time.Now()
	id := submit(t, c.servers, path)
	touched := map[string]bool{} // nodes a fault hit
	var wg sync.WaitGroup
	var mu sync.Mutex
	for fi, f := range res.Faults {
		time.Sleep(time.Until(submitted.Add(time.Duration(f.AtMS) * time.Millisecond))) // the schedule
		switch f.Kind {
		case "leader":
			old := leaderOf(c.https[0])
			for i, p := range c.coords {
				if p.name != old && !strings.HasPrefix(p.name, old+"'") {
					continue
				}
				killed := time.Now()
				p.stop(syscall.SIGKILL, 10*time.Second)
				var rest []string
				for j, u := range c.https {
					if j != i {
						rest = append(rest, u)
					}
				}
				testsupport.Eventually(t, 15*time.Second, "a new leader", func() bool {
					for _, u := range rest {
						if l := leaderOf(u); l != "" && l != old {
							return true
						}
					}
					return false
				})
				res.FailoverMS = append(res.FailoverMS, time.Since(killed).Milliseconds())
				c.coords[i] = start(t, p.name+"'", p.args...)
			}
		case "nats":
			c.nats.stop(syscall.SIGTERM, 10*time.Second)
			time.Sleep(500 * time.Millisecond) // the outage (fault injection)
			c.nats = start(t, "natsd'", c.natsArgs...)
			t.Cleanup(c.stopAllButNATS)
		case "node-kill", "node-stop":
			// hit a node that holds part of the run, when the status shows one
			if busy := busyNodes(t, c.servers, id); len(busy) > 0 && !touched[busy[0]] {
				f.Target = busy[rng.IntN(len(busy))]
				res.Faults[fi].Target = f.Target
			}
			i := int(f.Target[1] - '1')
			p := c.nodes[i]
			touched[f.Target] = true
			faulted := time.Now()
			if f.Kind == "node-kill" {
				p.stop(syscall.SIGKILL, 10*time.Second)
			} else {
				_ = p.cmd.Process.Signal(syscall.SIGSTOP)
			}
			wg.Add(1)
			go func() { // detection, then the node back
				defer wg.Done()
				deadline := time.Now().Add(20 * time.Second)
				for time.Now().Before(deadline) {
					if nodeState(c.https, f.Target) == proto.NodeDead {
						mu.Lock()
						res.DetectionMS = append(res.DetectionMS, time.Since(faulted).Milliseconds())
						mu.Unlock()
						break
					}
					time.Sleep(25 * time.Millisecond) // polling interval
				}
				if f.Kind == "node-stop" {
					_ = p.cmd.Process.Signal(syscall.SIGCONT)
				}
			}()
			if f.Kind == "node-kill" {
				wg.Wait()
				c.nodes[i] = start(t, p.name+"'", p.args...)
			}
		}
	}
	st := waitStatus(t, c.servers, id, 3*time.Minute, "the run ended", ended)
	wg.Wait()
	res.RunMS = time.Since(submitted).Milliseconds()
	res.State, res.Error = st.State, st.Error

	switch st.State {
	case proto.RunSucceeded:
		got := summary(st)
		for name, want := range ref {
			g := got[name]
			// executions may exceed activations only on a node a fault hit
			if !sameOutcome(g, want) {
				t.Errorf("task %s: %q, one process %q", name, g, want)
			}
		}
	case proto.RunFailed:
		if st.Error == "" {
			t.Errorf("run failed without a reason: %+v", st)
		}
	default:
		t.Errorf("run ended %s: %+v", st.State, st)
	}
	for _, tk := range st.Tasks {
		if tk.Executions > tk.Activations {
			res.Reexecuted += tk.Executions - tk.Activations
			if pin := pinOf(chaosFlow, tk.Name); pin != "" && !touched[pin] {
				t.Errorf("task %s on %s, which no fault touched, ran %d times for %d activations", tk.Name, pin, tk.Executions, tk.Activations)
			}
		}
	}
	// goroutines of the nodes no fault touched come back
	for i, u := range c.nodeHTTP {
		id := fmt.Sprintf("n%d", i+1)
		if touched[id] || base[id] <= 0 {
			continue
		}
		testsupport.Eventually(t, 20*time.Second, id+"'s goroutines back to where they were", func() bool {
			return gauge(u, "hetflow_node_runs_active") == 0 && gauge(u, "go_goroutines") <= base[id]+10
		})
	}
	// every process up stops cleanly
	for _, p := range append(append([]*proc(nil), c.nodes...), c.coords...) {
		select {
		case <-p.done:
			continue
		default:
		}
		p.stop(syscall.SIGTERM, 30*time.Second)
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("%s exited %d on SIGTERM", p.name, code)
		}
	}
	return res
}

// sameOutcome compares summary lines but the executions count, which a
// re-run after a lost node may raise.
func sameOutcome(got, want string) bool {
	strip := func(s string) string {
		f := strings.Fields(s)
		var out []string
		for _, x := range f {
			if !strings.HasPrefix(x, "e=") {
				out = append(out, x)
			}
		}
		return strings.Join(out, " ")
	}
	return strip(got) == strip(want)
}

// pinOf is the node a flow text pins task name to.
func pinOf(flow, name string) string {
	for _, line := range strings.Split(flow, "\n") {
		if strings.Contains(line, "{name: "+name+",") {
			if i := strings.Index(line, "node: "); i >= 0 {
				return strings.TrimRight(line[i+len("node: "):], "} ")
			}
		}
	}
	return ""
}

// nodeState asks the coordinators for a node's state ("" when none answers).
func nodeState(https []string, id string) string {
	hc := http.Client{Timeout: 300 * time.Millisecond}
	for _, u := range https {
		resp, err := hc.Get(u + "/v1/nodes")
		if err != nil {
			continue
		}
		var ns []proto.NodeInfo
		err = json.NewDecoder(resp.Body).Decode(&ns)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for _, n := range ns {
			if n.ID == id {
				return n.State
			}
		}
		return ""
	}
	return ""
}

// gauge reads one unlabelled metric as an int (-1 when unreadable or
// absent).
func gauge(url, name string) int {
	if v, ok := metric(url, name); ok {
		return v
	}
	return -1
}

// metric reads one series (a name, with its labels if any) from url's
// /metrics as an int: ok is false when it is absent (v 0) or the page
// cannot be read (v -1).
func metric(url, series string) (v int, ok bool) {
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		return -1, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1, false
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, found := strings.CutPrefix(line, series+" "); found {
			if f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return int(f), true
			}
		}
	}
	return 0, false
}

func chaosSummary(rs []chaosResult) string {
	var det, fo, run []int64
	var reexec []int64
	states := map[string]int{}
	for _, r := range rs {
		det = append(det, r.DetectionMS...)
		fo = append(fo, r.FailoverMS...)
		run = append(run, r.RunMS)
		reexec = append(reexec, int64(r.Reexecuted))
		states[r.State]++
	}
	q := func(xs []int64) string {
		if len(xs) == 0 {
			return "–"
		}
		s := slices.Clone(xs)
		slices.Sort(s)
		return fmt.Sprintf("%d / %d / %d", s[len(s)/2], s[(len(s)*9)/10], s[len(s)-1])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| over %d seeds | median / p90 / max |\n|---|---|\n", len(rs))
	fmt.Fprintf(&b, "| node failure detection (ms, %d faults) | %s |\n", len(det), q(det))
	fmt.Fprintf(&b, "| leader failover (ms, %d faults) | %s |\n", len(fo), q(fo))
	fmt.Fprintf(&b, "| submit to run end with faults (ms; undisturbed ≈ 1,850) | %s |\n", q(run))
	fmt.Fprintf(&b, "| re-executed tasks per run | %s |\n", q(reexec))
	fmt.Fprintf(&b, "\nRun states: %v\n", states)
	return b.String()
}

// busyNodes lists, sorted, the nodes other than n1 that ran or run a task of
// the run so far.
func busyNodes(t *testing.T, servers, id string) []string {
	out, code := poll(t, "status", "--json", "--server", servers, id)
	var st proto.RunStatus
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		return nil
	}
	seen := map[string]bool{}
	for _, tk := range st.Tasks {
		if tk.Node != "" && tk.Node != "n1" {
			seen[tk.Node] = true
		}
	}
	var ns []string
	for n := range seen {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}
