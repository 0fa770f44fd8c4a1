package cluster_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster"
	"github.com/hetflow/hetflow/cluster/coord"
	"github.com/hetflow/hetflow/cluster/devcluster"
	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/flowgen"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// deepModules nests modules depth levels deep: f0 holds a module of f1, ...,
// the last holds one hash task.
func deepModules(depth int) []byte {
	var b bytes.Buffer
	b.WriteString("flows:\n")
	for i := 0; i < depth; i++ {
		fmt.Fprintf(&b, "  - name: f%d\n    tasks:\n      - {name: m, kind: module, flow: f%d}\n", i, i+1)
	}
	fmt.Fprintf(&b, "  - name: f%d\n    tasks:\n      - {name: leaf, func: hash}\n", depth)
	return b.Bytes()
}

func problems(t *testing.T, err error) string {
	t.Helper()
	var inv *cluster.InvalidError
	if !errors.As(err, &inv) || !errors.Is(err, cluster.ErrInvalid) {
		t.Fatalf("want an invalid-flow error, got %v", err)
	}
	return strings.Join(inv.Problems, "\n")
}

// Bad input through a real dev cluster: every case is answered with an error
// that names the problem, or runs to its documented end; none crashes a
// process or hangs (each call is bounded by the test's context), and the
// cluster runs a normal flow afterwards.
func TestBadInputThroughTheCoordinator(t *testing.T) {
	ctx := timeout(t, 3*time.Minute)
	d, err := devcluster.Start(ctx, devcluster.Config{Nodes: 2, SimGPUs: -1})
	must(t, err)
	t.Cleanup(func() { must(t, d.Close()) })
	c := d.Client()
	var made int // runs the cases below start

	t.Run("1M tasks in one file", func(t *testing.T) {
		big := flowgen.Flat(1_000_000)
		// Through HTTP: the body is over the API's bound, refused unread.
		_, err := c.Submit(ctx, "big.yaml", big)
		if p := problems(t, err); !strings.Contains(p, fmt.Sprintf("a flow file of at most %d bytes", coord.DefaultMaxFlowBytes)) {
			t.Fatalf("1M tasks over HTTP: %s", p)
		}
		// Through the Go API: refused on its size before parsing.
		_, err = d.Coordinator().Submit("big.yaml", big)
		var inv *coord.InvalidError
		if !errors.As(err, &inv) || len(inv.Problems) != 1 {
			t.Fatalf("1M tasks through Submit: %v", err)
		}
		want := fmt.Sprintf("big.yaml: flow file is %d bytes, over this cluster's limit of %d (coordinator --max-flow-bytes)", len(big), coord.DefaultMaxFlowBytes)
		if inv.Problems[0] != want {
			t.Fatalf("1M tasks: %q\nwant %q", inv.Problems[0], want)
		}
	})
	t.Run("1M tasks by modules", func(t *testing.T) {
		_, err := c.Submit(ctx, "wide.yaml", flowgen.WideModules(1000, 999))
		want := fmt.Sprintf(`wide.yaml: flow "top" expands to 1000000 tasks, over this cluster's limit of %d a run (coordinator --max-tasks)`, coord.DefaultMaxTasks)
		if p := problems(t, err); p != want {
			t.Fatalf("module-expanded 1M tasks: %q\nwant %q", p, want)
		}
		// Ten levels of ten modules: far past what Expand would build.
		var b bytes.Buffer
		b.WriteString("flows:\n")
		for lvl := 0; lvl < 10; lvl++ {
			fmt.Fprintf(&b, "  - name: f%d\n    tasks:\n", lvl)
			for i := 0; i < 10; i++ {
				fmt.Fprintf(&b, "      - {name: m%d, kind: module, flow: f%d}\n", i, lvl+1)
			}
		}
		b.WriteString("  - name: f10\n    tasks:\n      - {name: leaf, func: noop}\n")
		_, err = c.Submit(ctx, "bomb.yaml", b.Bytes())
		if p := problems(t, err); !strings.Contains(p, "expands to over 1048576 tasks") {
			t.Fatalf("module bomb: %s", p)
		}
	})
	t.Run("modules nested 1000 deep", func(t *testing.T) {
		id, err := c.Submit(ctx, "deep.yaml", deepModules(1000))
		must(t, err)
		made++
		st, err := c.Wait(ctx, id, nil)
		must(t, err)
		leaf := strings.Repeat("m/", 1000) + "leaf"
		var found bool
		for _, ts := range st.Tasks {
			if ts.Name == leaf {
				found = ts.State == proto.TaskDone && len(ts.Output) == 64
			}
		}
		if st.State != proto.RunSucceeded || !found {
			t.Fatalf("deep modules: state %s, leaf done with a hash: %v (%d tasks)", st.State, found, len(st.Tasks))
		}
	})
	t.Run("no source task", func(t *testing.T) {
		flow := "name: nosrc\ntasks:\n  - {name: body, func: noop, succeed: [cond]}\n  - {name: cond, kind: condition, func: loop, args: {n: 2}, succeed: [body], precede: [body, done]}\n  - {name: done, func: noop}\n"
		_, err := c.Submit(ctx, "nosrc.yaml", []byte(flow))
		if p := problems(t, err); !strings.Contains(p, "no task without predecessors") {
			t.Fatalf("no source: %s", p)
		}
	})
	t.Run("a loop that never exits", func(t *testing.T) {
		flow := "name: forever\ntimeout: 2s\ntasks:\n  - {name: init, func: noop, node: n1}\n  - {name: body, func: noop, succeed: [init], node: n2}\n" +
			"  - {name: cond, kind: condition, func: coin, args: {p: 1, seed: 1}, succeed: [body], precede: [body, done], node: n1}\n  - {name: done, func: noop}\n"
		id, err := c.Submit(ctx, "forever.yaml", []byte(flow))
		must(t, err)
		made++
		st, err := c.Wait(ctx, id, nil)
		if !errors.Is(err, cluster.ErrRunFailed) || st.State != proto.RunFailed || st.Error != "timed out after 2s" {
			t.Fatalf("endless loop: %+v %v", st, err)
		}
		for _, n := range d.Nodes() {
			testsupport.Eventually(t, 20*time.Second, n.ID()+" lets the run go", func() bool { return n.Stats().RunsActive == 0 })
		}
	})
	t.Run("garbage bodies", func(t *testing.T) {
		for _, body := range []string{"", "{", "[]", "null", "5", `{"flow": 5}`, `{"path": "x.yaml", "flow": "\u0000\u0001 not a flow"}`,
			`{"flow": "name: a\ntasks: 7"}`, `{"flow": "x"} {"flow": "y"}`, "\xff\xfe garbage", strings.Repeat("[", 100000)} {
			resp, err := http.Post(d.URL()+"/v1/runs", "application/json", strings.NewReader(body))
			must(t, err)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var er proto.ErrorResponse
			if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(raw, &er) != nil || er.Error == "" {
				t.Fatalf("body %.40q: %d %s", body, resp.StatusCode, raw)
			}
		}
	})
	// Nothing broke.
	runs, err := c.Runs(ctx)
	must(t, err)
	id, err := c.Submit(ctx, "two.yaml", []byte(twoNodeFlow))
	must(t, err)
	if st, err := c.Wait(ctx, id, nil); err != nil || st.State != proto.RunSucceeded {
		t.Fatalf("a normal run after the bad input: %+v %v", st, err)
	}
	if len(runs) != made {
		t.Fatalf("bad input made runs: %d, want %d: %+v", len(runs), made, runs)
	}
}
