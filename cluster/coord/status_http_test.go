package coord

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testsupport"
	"github.com/hetflow/hetflow/transport"
)

// get is one API call that reports instead of failing the test (it may run
// on a goroutine of its own).
func get(ctx context.Context, addr, path string, out any) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && out != nil && resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(b, out)
	}
	return resp.StatusCode, b, err
}

// The status forms beside the full one: the summary, the delta since a
// version (applied, it gives the full status) and the long poll, which
// answers when the status changed (an event, the run's end) or at its
// deadline; a finished run's status is kept rendered and still takes a
// late event.
func TestStatusForms(t *testing.T) {
	url := testsupport.NATS(t).URL()
	c := leadingCoord(t, url, nil)
	n1 := startFakeNode(t, "n1", url, []string{c.GossipAddr()}, 2, 0, func(n *fakeNode) { n.busy = true })
	testsupport.Eventually(t, 10*time.Second, "n1 alive", func() bool { return nodeState(c, "n1") == proto.NodeAlive })
	addr := c.HTTPAddr()
	ctx := ctxFor(t, 60*time.Second)
	id, err := c.Submit("f.yaml", []byte("name: f\ntasks:\n  - {name: a, func: noop}\n  - {name: b, func: hash, succeed: [a]}\n"))
	must(t, err)
	path := "/v1/runs/" + id
	summary := func(q string) proto.RunProgress {
		t.Helper()
		var p proto.RunProgress
		if code, b, err := get(ctx, addr, path+"?view=summary"+q, &p); err != nil || code != http.StatusOK {
			t.Fatalf("summary%s: %d %s %v", q, code, b, err)
		}
		return p
	}
	full := func() (proto.RunStatus, []byte) {
		t.Helper()
		var st proto.RunStatus
		code, b, err := get(ctx, addr, path, &st)
		if err != nil || code != http.StatusOK {
			t.Fatalf("status: %d %s %v", code, b, err)
		}
		var enc bytes.Buffer
		must(t, json.NewEncoder(&enc).Encode(st))
		if !bytes.Equal(enc.Bytes(), b) {
			t.Fatalf("the status is not encoding/json's:\n got %s\nwant %s", b, enc.Bytes())
		}
		return st, b
	}
	testsupport.Eventually(t, 10*time.Second, "both tasks done", func() bool { return summary("").Counts.Done == 2 })
	p := summary("")
	st, _ := full()
	if want := st.Progress(); p.Counts != want.Counts || p.Finished != 2 || p.Activations != 2 || p.Executions != 2 || p.State != proto.RunRunning {
		t.Fatalf("summary %+v, want the tallies of %+v", p, st)
	}

	// Nothing changes: the long poll answers at its deadline, same version.
	if q := summary("&wait=200ms&version=" + p.Version); q.Version != p.Version {
		t.Fatalf("nothing changed, yet the version went %s → %s", p.Version, q.Version)
	}
	var d proto.RunDelta
	if code, b, err := get(ctx, addr, path+"?since="+p.Version, &d); err != nil || code != http.StatusOK || d.Full || len(d.Tasks) != 0 || d.Version != p.Version {
		t.Fatalf("delta of nothing: %d %s %v", code, b, err)
	}

	// An event: a long-polled delta answers with the row it changed.
	type answer struct {
		d   proto.RunDelta
		p   proto.RunProgress
		err error
	}
	got := make(chan answer, 1)
	go func() {
		var a answer
		code, b, err := get(ctx, addr, path+"?wait=10s&since="+p.Version, &a.d)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s", code, b)
		}
		a.err = err
		got <- a
	}()
	ev := transport.TaskEvent{Run: id, Gen: 1, Task: 0, Node: "n1", State: transport.TaskDone, Act: 2, Executions: 2}
	must(t, n1.nc.PublishEvents(ctx, ev))
	a := <-got
	must(t, a.err)
	if a.d.Full || len(a.d.Tasks) != 1 || a.d.Tasks[0].Name != "a" || a.d.Tasks[0].Activations != 2 || a.d.Version == p.Version {
		t.Fatalf("delta after a's second activation: %+v", a.d)
	}
	st.Apply(a.d)
	now, _ := full()
	if !jsonEqual(t, st, now) {
		t.Fatalf("status with the delta applied %+v, want %+v", st, now)
	}

	// The run ends: a long-polled summary answers with its state.
	v2 := a.d.Version
	go func() {
		var a answer
		code, b, err := get(ctx, addr, path+"?view=summary&wait=10s&version="+v2, &a.p)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s", code, b)
		}
		a.err = err
		got <- a
	}()
	testsupport.Eventually(t, 10*time.Second, "the long poll waits", func() bool { return c.longPolls.Load() == 1 })
	_, err = c.Cancel(ctx, id)
	must(t, err)
	if a := <-got; a.err != nil || a.p.State != proto.RunCancelled || a.p.Counts.Done != 2 {
		t.Fatalf("long poll across the cancel: %+v %v", a.p, a.err)
	}
	cc := c.cacheOf(id)
	cc.mu.Lock()
	rendered, graph := cc.body != nil, cc.g != nil
	cc.mu.Unlock()
	if rendered || graph {
		t.Fatalf("the run's end, read as a summary: table rendered %v, graph still held %v; want neither", rendered, graph)
	}
	final, b1 := full()
	_, b2 := full()
	cc.mu.Lock()
	kept, graph := cc.body != nil && bytes.Equal(cc.body.b, b1), cc.g != nil
	cc.mu.Unlock()
	if !bytes.Equal(b1, b2) || !kept || graph {
		t.Fatalf("a finished run's status: kept %v, graph still held %v, reads equal %v", kept, graph, bytes.Equal(b1, b2))
	}
	// A late report after the end still shows (the graph is expanded again).
	must(t, n1.nc.PublishEvents(ctx, transport.TaskEvent{Run: id, Gen: 1, Task: 1, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 3}))
	testsupport.Eventually(t, 10*time.Second, "the late report folded", func() bool {
		st, _ := full()
		return st.Tasks[1].Executions == 3
	})
	if final.Tasks[1].Executions != 1 {
		t.Fatalf("before the late report: %+v", final.Tasks[1])
	}

	// Bad forms, and a run that is not there.
	for _, q := range []string{"?view=tasks", "?wait=soon&version=x", "?view=summary&since=x"} {
		if code, _, err := get(ctx, addr, path+q, nil); err != nil || code != http.StatusBadRequest {
			t.Errorf("%s: %d %v, want 400", q, code, err)
		}
	}
	if code, _, err := get(ctx, addr, "/v1/runs/r0000000000000-000000?view=summary&wait=1s&version=x", nil); err != nil || code != http.StatusNotFound {
		t.Errorf("no such run: %d %v, want 404", code, err)
	}
}

func jsonEqual(t *testing.T, a, b any) bool {
	x, err := json.Marshal(a)
	must(t, err)
	y, err := json.Marshal(b)
	must(t, err)
	return bytes.Equal(x, y)
}

// A long poll the client gives up on, and one the server's Close ends,
// leave nothing running (goleak checks the package).
func TestStatusLongPollEnds(t *testing.T) {
	url := testsupport.NATS(t).URL()
	c := leadingCoord(t, url, nil)
	startFakeNode(t, "n1", url, []string{c.GossipAddr()}, 2, 0, func(n *fakeNode) { n.busy = true })
	testsupport.Eventually(t, 10*time.Second, "n1 alive", func() bool { return nodeState(c, "n1") == proto.NodeAlive })
	id, err := c.Submit("f.yaml", []byte("name: f\ntasks:\n  - {name: a, func: noop}\n"))
	must(t, err)
	ctx := ctxFor(t, 30*time.Second)
	var p proto.RunProgress
	testsupport.Eventually(t, 10*time.Second, "a done", func() bool {
		_, _, err := get(ctx, c.HTTPAddr(), "/v1/runs/"+id+"?view=summary", &p)
		return err == nil && p.Counts.Done == 1
	})
	gone, cancel := context.WithCancel(ctx)
	errs := make(chan error, 2)
	go func() {
		_, _, err := get(gone, c.HTTPAddr(), "/v1/runs/"+id+"?view=summary&wait=10s&version="+p.Version, nil)
		errs <- err
	}()
	go func() {
		_, _, err := get(ctx, c.HTTPAddr(), "/v1/runs/"+id+"?view=summary&wait=10s&version="+p.Version, nil)
		errs <- err
	}()
	testsupport.Eventually(t, 10*time.Second, "two long polls waiting", func() bool {
		return c.longPolls.Load() == 2
	})
	cancel()
	if err := <-errs; err == nil {
		t.Fatal("the long poll given up answered")
	}
	must(t, c.Close())
	<-errs // answered or cut: either way it returned
}
