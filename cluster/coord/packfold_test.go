package coord

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/flowgen"
	"github.com/hetflow/hetflow/transport"
)

// A finished run's fold, packed once its status was read, hands its array
// to other runs' folds: its status stays byte for byte what an unpacked fold
// of the same events renders, a late event re-renders it exactly, the delta
// since before names that row alone, and the verdict's check reads the same.
// It keeps no proof for the record check (foldProof): the check is behind it.
// (Adopted from the review of branch coordrun.)
func TestServerPackedFoldSurvivesOtherRuns(t *testing.T) {
	s, _ := fuzzServer(t)
	sf, _, err := s.Register("l.yaml", flowgen.Layered(10, 500, 1, true))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ids []string
	for range 3 {
		id, err := s.RunFlow("", sf.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	r0, _ := s.run(ids[0])
	r1, _ := s.run(ids[1])
	if &r0.Assignment[0] != &r1.Assignment[0] {
		t.Error("two runs on one placement decoded their assignment twice")
	}
	c0 := s.cacheOf(ids[0])
	if _, err := s.statusVersion(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	g := c0.g
	plain := NewFold()
	feed := func(id string, e transport.TaskEvent, also bool) {
		c := s.cacheOf(id)
		c.mu.Lock()
		if c.g == nil {
			if err := c.graph(func() Run { r, _ := s.run(id); return r }()); err != nil {
				t.Fatal(err)
			}
		}
		c.fold.Add(c.g, &e)
		c.mu.Unlock()
		if also {
			plain.Add(g, &e)
		}
	}
	for _, id := range ids {
		if _, err := s.statusVersion(ctx, id); err != nil {
			t.Fatal(err)
		}
		for v := range len(g.Vertices) {
			feed(id, transport.TaskEvent{Run: id, Gen: 1, Task: uint32(v), Node: "n1", State: transport.TaskDone, Act: 1, Executions: 1}, id == ids[0])
		}
	}
	if err := s.apply(&Command{Op: OpRunFinish, Finish: &Finish{ID: ids[0], State: proto.RunSucceeded, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	plain.Touch()
	b, err := s.statusJSON(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	r0, _ = s.run(ids[0])
	if want := append(plain.AppendJSON(nil, r0, g), '\n'); !bytes.Equal(b, want) {
		t.Fatal("status differs")
	}
	c0.mu.Lock()
	packed, proof := c0.fold.packed != nil, c0.fold.proof.plan != nil
	c0.mu.Unlock()
	if !packed {
		t.Fatal("a finished run's fold was not packed once its status was read")
	}
	if proof {
		t.Fatal("a finished run's fold keeps its record check's proof, and the graph's verdict plan with it")
	}
	// Other runs go on folding (one takes the array run 0 handed on).
	for _, id := range ids[1:] {
		feed(id, transport.TaskEvent{Run: id, Gen: 1, Task: 7, Node: "n1", State: transport.TaskFailed, Act: 2, Executions: 2}, false)
	}
	// a new run's fold taking the array
	id3, err := s.RunFlow("", sf.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for v := range len(g.Vertices) {
		feed(id3, transport.TaskEvent{Run: id3, Gen: 1, Task: uint32(v), Node: "n1", State: transport.TaskRunning, Act: 5}, false)
	}
	b2, err := s.statusJSON(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatal("run 0's status changed by another run's fold")
	}
	v, err := s.statusVersion(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	feed(ids[0], transport.TaskEvent{Run: ids[0], Gen: 1, Task: 11, Node: "n1", State: transport.TaskDone, Act: 1, Executions: 2}, true)
	b3, err := s.statusJSON(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := append(plain.AppendJSON(nil, r0, g), '\n'); !bytes.Equal(b3, want) {
		t.Fatal("status after late differs")
	}
	d, err := s.runDelta(ctx, ids[0], v)
	if err != nil || d.Full || len(d.Tasks) != 1 || d.Tasks[0].Executions != 2 {
		t.Fatalf("delta %+v %v", d, err)
	}
	c0.mu.Lock()
	owed, failed := CheckSuccess(g, c0.fold)
	c0.mu.Unlock()
	po, pf := CheckSuccess(g, plain)
	if len(owed) != len(po) || !slices.Equal(failed, pf) {
		t.Fatalf("CheckSuccess of the packed fold: %d owed, failed %v; of the plain fold: %d owed, failed %v", len(owed), failed, len(po), pf)
	}
}

// sameRow lists taskAgg's fields one by one: a field added to taskAgg and
// not to sameRow would let pack merge rows that differ in it (a wrong task
// table). This fails until both are changed together.
func TestSameRowNamesEveryField(t *testing.T) {
	if n := reflect.TypeFor[taskAgg]().NumField(); n != 10 {
		t.Fatalf("taskAgg has %d fields, sameRow was written for 10 (every one but ver): compare the new ones there and change this count", n)
	}
}
