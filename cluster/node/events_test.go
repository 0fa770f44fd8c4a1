package node

import (
	"reflect"
	"testing"

	"github.com/hetflow/hetflow/transport"
)

func TestCoalesceKeepsTheLatestPerTask(t *testing.T) {
	ev := func(run string, task uint32, name string, act uint64) transport.TaskEvent {
		return transport.TaskEvent{Run: run, Task: task, Name: name, Act: act}
	}
	in := []transport.TaskEvent{
		ev("r", 1, "body", 1), ev("r", 2, "cond", 1), ev("r", 1, "body", 2),
		ev("r", 3, "fan/0", 1), ev("r", 3, "fan/1", 1), ev("r", 3, "fan", 1),
		ev("q", 1, "body", 1), ev("r", 2, "cond", 2),
	}
	want := []transport.TaskEvent{
		ev("r", 1, "body", 2), ev("r", 3, "fan/0", 1), ev("r", 3, "fan/1", 1), ev("r", 3, "fan", 1),
		ev("q", 1, "body", 1), ev("r", 2, "cond", 2),
	}
	if got := coalesce(in); !reflect.DeepEqual(got, want) {
		t.Fatalf("coalesce:\n got %v\nwant %v", got, want)
	}
	distinct := want[1:4]
	if got := coalesce(distinct); &got[0] != &distinct[0] {
		t.Fatal("distinct events should come back as they are")
	}
}
