package runproto

import (
	"fmt"
	"testing"

	"github.com/hetflow/hetflow/cluster/spec"
)

// TestFreeJoins: a join of a task that runs once and a loop's body is
// free, as is one of two loops' bodies; a join of tasks that run once, one
// inside a loop of its predecessors (nestedFlow's j) and a loop's head are
// not.
func TestFreeJoins(t *testing.T) {
	for _, tc := range []struct {
		flow string
		free []string
	}{
		{`
name: f
tasks:
  - {name: a, func: hash}
  - {name: init, func: hash}
  - {name: body, func: hash, succeed: [init]}
  - {name: cond, kind: condition, func: loop, args: {n: 3}, succeed: [body], precede: [body, done]}
  - {name: done, func: hash}
  - {name: j, func: hash, succeed: [a, body]}
  - {name: b2, func: hash, succeed: [a]}
  - {name: c2, kind: condition, func: loop, args: {n: 1}, succeed: [b2], precede: [b2, x2]}
  - {name: x2, func: hash}
  - {name: k, func: hash, succeed: [body, b2]}
  - {name: once, func: hash, succeed: [a, init]}
`, []string{"j", "k"}},
		{nestedFlow, nil},
	} {
		f, err := spec.Parse("f.yaml", []byte(tc.flow))
		if err != nil {
			t.Fatal(err)
		}
		g, err := f.Expand()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for v, free := range FreeJoins(g) {
			if free {
				got = append(got, g.Vertices[v].Path)
			}
		}
		if len(got) != len(tc.free) || (len(got) > 0 && fmt.Sprint(got) != fmt.Sprint(tc.free)) {
			t.Errorf("free joins %v, want %v", got, tc.free)
		}
	}
}
