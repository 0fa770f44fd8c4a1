package runsim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/hetflow/hetflow/cluster/spec"
)

// genFlow writes a random flow file (YAML) from rng: a DAG of blocks at the
// top level — plain tasks, subflow tasks, module tasks (whose flow may hold a
// loop), do-while loops through a condition, and if/else conditions — over
// nodes (a task may be pinned to one of them with `node:`). Every flow it
// writes is well formed for the join-counter semantics of the executor: a
// task with strong predecessors is never also the target of a condition
// (except a loop's head, whose strong predecessors run once), and every
// strong predecessor of a join runs exactly once, so each activation's
// inputs do not depend on timing — except, with surplus, a join after a
// loop's body and a task that runs once or another loop's body, whose
// predecessors complete unequal numbers of times (a free join,
// runproto.FreeJoins): its counter takes their completions in rounds, so
// how often it runs does not depend on timing, but which completions
// meet in one activation does (its outputs are not checked).
func genFlow(rng *rand.Rand, nodes []string, pinOK, surplus bool) []byte {
	var b strings.Builder
	type module struct{ name, text string }
	var mods []module
	nmods := rng.IntN(3)
	for m := range nmods {
		var t strings.Builder
		name := fmt.Sprintf("sub%d", m)
		fmt.Fprintf(&t, "  - name: %s\n    tasks:\n", name)
		fmt.Fprintf(&t, "      - {name: a, func: hash}\n")
		last := "a"
		if rng.IntN(2) == 0 { // a loop inside the instance
			fmt.Fprintf(&t, "      - {name: h, func: hash, succeed: [a]}\n")
			fmt.Fprintf(&t, "      - {name: c, kind: condition, func: loop, args: {n: %d}, succeed: [h], precede: [h, x]}\n", rng.IntN(3))
			fmt.Fprintf(&t, "      - {name: x, func: hash}\n")
			last = "x"
		}
		if rng.IntN(2) == 0 {
			fmt.Fprintf(&t, "      - {name: b, func: hash, succeed: [%s]}\n", last)
			fmt.Fprintf(&t, "      - {name: d, func: hash, succeed: [%s]}\n", last)
			fmt.Fprintf(&t, "      - {name: z, func: hash, succeed: [b, d]}\n")
		} else {
			fmt.Fprintf(&t, "      - {name: z, func: hash, succeed: [%s]}\n", last)
		}
		mods = append(mods, module{name, t.String()})
	}

	b.WriteString("flows:\n  - name: top\n    tasks:\n")
	once := []string{"t0"} // tasks that run exactly once: strong predecessors for later blocks
	b.WriteString("      - {name: t0, func: hash}\n")
	blocks := 4 + rng.IntN(10)
	pinned := false
	var bodies []string // loop bodies: they complete 1 to 4 times
	for i := 1; i <= blocks; i++ {
		// one or two strong predecessors among the tasks that run once
		var preds []string
		for range 1 + rng.IntN(2) {
			p := once[rng.IntN(len(once))]
			if !slices.Contains(preds, p) {
				preds = append(preds, p)
			}
		}
		if rng.IntN(6) == 0 && i > 1 { // another source
			preds = nil
		}
		succ := ""
		if len(preds) > 0 {
			succ = ", succeed: [" + strings.Join(preds, ", ") + "]"
		}
		switch k := rng.IntN(10); {
		case k < 4:
			n := fmt.Sprintf("t%d", i)
			pin := ""
			if pinOK && !pinned && rng.IntN(4) == 0 {
				pinned = true
				pin = ", node: " + nodes[rng.IntN(len(nodes))]
			}
			fmt.Fprintf(&b, "      - {name: %s, func: hash%s%s}\n", n, succ, pin)
			once = append(once, n)
		case k < 5:
			n := fmt.Sprintf("s%d", i)
			fmt.Fprintf(&b, "      - {name: %s, kind: subflow, func: fanout, args: {n: %d}%s}\n", n, 1+rng.IntN(4), succ)
			once = append(once, n)
		case k < 7 && len(mods) > 0:
			n := fmt.Sprintf("m%d", i)
			fmt.Fprintf(&b, "      - {name: %s, kind: module, flow: %s%s}\n", n, mods[rng.IntN(len(mods))].name, succ)
			once = append(once, n)
		case k < 9:
			if succ == "" { // a loop's head needs a strong predecessor to start
				succ = ", succeed: [t0]"
			}
			h, body, c, x := fmt.Sprintf("h%d", i), fmt.Sprintf("b%d", i), fmt.Sprintf("c%d", i), fmt.Sprintf("x%d", i)
			fmt.Fprintf(&b, "      - {name: %s, func: hash%s}\n", h, succ)
			fmt.Fprintf(&b, "      - {name: %s, func: hash, succeed: [%s]}\n", body, h)
			fmt.Fprintf(&b, "      - {name: %s, kind: condition, func: loop, args: {n: %d}, succeed: [%s], precede: [%s, %s]}\n", c, rng.IntN(4), body, h, x)
			fmt.Fprintf(&b, "      - {name: %s, func: hash}\n", x)
			once = append(once, x)
			if surplus && rng.IntN(2) == 0 { // a join of the body and a task that completes a different number of times
				other := once[rng.IntN(len(once)-1)] // not x, which follows the loop
				if len(bodies) > 0 && rng.IntN(3) == 0 {
					other = bodies[rng.IntN(len(bodies))]
				}
				fmt.Fprintf(&b, "      - {name: y%d, func: hash, succeed: [%s, %s]}\n", i, body, other)
			}
			bodies = append(bodies, body)
		default:
			if succ == "" {
				succ = ", succeed: [t0]"
			}
			d, e, f := fmt.Sprintf("d%d", i), fmt.Sprintf("e%d", i), fmt.Sprintf("f%d", i)
			fmt.Fprintf(&b, "      - {name: %s, kind: condition, func: branch, args: {seed: %d}%s, precede: [%s, %s]}\n", d, rng.IntN(1000), succ, e, f)
			fmt.Fprintf(&b, "      - {name: %s, func: hash}\n", e)
			fmt.Fprintf(&b, "      - {name: %s, func: hash}\n", f)
		}
	}
	for _, m := range mods {
		b.WriteString(m.text)
	}
	return []byte(b.String())
}

// parseFlow expands a generated flow.
func parseFlow(text []byte) (*spec.Graph, error) {
	f, err := spec.ParseYAML("sim.yaml", text)
	if err != nil {
		return nil, err
	}
	return f.Expand()
}

// pick is a condition's choice for activation act: deterministic per
// (task, activation), so a task re-run on a new owner picks the same. "loop"
// picks 0 on its first n activations and 1 after (a do-while); "branch"
// picks by a hash of its seed and the activation.
func pick(g *spec.Graph, v int, act uint64) int {
	t := g.Vertices[v].Task
	switch t.Func {
	case "loop":
		if act <= uint64(argInt(t.Args, "n")) {
			return 0
		}
		return 1
	default:
		h := fnv.New64a()
		var buf [16]byte
		binary.LittleEndian.PutUint64(buf[:], uint64(argInt(t.Args, "seed")))
		binary.LittleEndian.PutUint64(buf[8:], act)
		h.Write(buf[:])
		return int(h.Sum64() % uint64(len(g.Vertices[v].Succ)))
	}
}

func argInt(args map[string]any, key string) int64 {
	switch v := args[key].(type) {
	case int64:
		return v
	case uint64:
		return int64(v)
	case float64:
		return int64(v)
	}
	return 0
}

// input is one input of an activation: a strong predecessor's completion
// (with its output) or a condition's pick (no output).
type input struct {
	src int
	act uint64
	out uint64
	ctx []uint64 // the source activation's loop context
}

// output is the effect of activation act of v: a hash of the task, the
// activation and its inputs. Two executions of one activation from the same
// inputs give the same output; any stale or missing input shows.
func output(v int, act uint64, in []input) uint64 {
	in = slices.Clone(in)
	slices.SortFunc(in, func(a, b input) int {
		if a.src != b.src {
			return a.src - b.src
		}
		if a.act != b.act {
			if a.act < b.act {
				return -1
			}
			return 1
		}
		return 0
	})
	h := fnv.New64a()
	var buf [8]byte
	put := func(x uint64) {
		binary.LittleEndian.PutUint64(buf[:], x)
		h.Write(buf[:])
	}
	put(uint64(v))
	put(act)
	for _, x := range in {
		put(uint64(x.src))
		put(x.act)
		put(x.out)
	}
	return h.Sum64()
}

// truth is what a run of the flow must do: per task its activations and
// each activation's output, from the reference executor.
type truth struct {
	acts []uint64
	outs []map[uint64]uint64 // task → activation → output
}

// reference runs g on one sequential executor (one part holding every
// task, no network) with the same rules as the simulated nodes' executor.
func reference(g *spec.Graph) (*truth, error) {
	all := make([]bool, len(g.Vertices))
	for i := range all {
		all[i] = true
	}
	tr := &truth{acts: make([]uint64, len(g.Vertices)), outs: make([]map[uint64]uint64, len(g.Vertices))}
	for i := range tr.outs {
		tr.outs[i] = map[uint64]uint64{}
	}
	var queue []job
	e := newEngine(g)
	e.schedule = func(j job) { queue = append(queue, j) }
	e.emit = func(from, to int, act, dstAct uint64, ctx []uint64, choice bool, out uint64) {
		panic("reference: an edge left the only part")
	}
	e.open(all, 0)
	steps := 0
	for len(queue) > 0 {
		j := queue[0]
		queue = queue[1:]
		if steps++; steps > 1_000_000 {
			return nil, fmt.Errorf("reference run does not end")
		}
		out := e.finish(j)
		tr.acts[j.v] = max(tr.acts[j.v], j.act)
		tr.outs[j.v][j.act] = out
	}
	if e.busy() {
		return nil, fmt.Errorf("reference run stalled with module instances open")
	}
	return tr, nil
}

// unequalJoin reports whether a free join of g (runproto.FreeJoins) has
// strong predecessors that complete unequal numbers of times in the
// reference.
func unequalJoin(g *spec.Graph, free []bool, tr *truth) bool {
	for v, ok := range free {
		ps := g.StrongPreds(v)
		for _, p := range ps {
			if ok && tr.acts[p] != tr.acts[ps[0]] {
				return true
			}
		}
	}
	return false
}
