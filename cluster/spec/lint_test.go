package spec

import (
	"strings"
	"testing"
)

func TestWarningsBranchJoin(t *testing.T) {
	for _, c := range []struct {
		name, flow string
		want       []string // substrings, one warning each
	}{
		{"a join behind both branches", `
name: pit
tasks:
  - {name: init, func: noop}
  - {name: cond, kind: condition, func: loop, succeed: [init], precede: [yes, no]}
  - {name: yes, func: noop}
  - {name: no, func: noop}
  - {name: join, func: noop, succeed: [yes, no]}
`, []string{`task "join": joins two branches of condition "cond" with strong edges (from no (branch no) and yes (branch yes))`}},
		{"deeper on each branch", `
name: pit
tasks:
  - {name: cond, kind: condition, func: loop, precede: [a, b]}
  - {name: a, func: noop}
  - {name: a2, func: noop, succeed: [a]}
  - {name: b, func: noop}
  - {name: join, func: noop, succeed: [a2, b]}
`, []string{`task "join"`}},
		{"a join of work before the condition is fine", `
name: ok
tasks:
  - {name: x, func: noop}
  - {name: y, func: noop}
  - {name: join, func: noop, succeed: [x, y]}
  - {name: cond, kind: condition, func: loop, succeed: [join], precede: [join2, done]}
  - {name: join2, func: noop}
  - {name: done, func: noop}
`, nil},
		{"a do-while loop is fine", `
name: ok
tasks:
  - {name: init, func: noop}
  - {name: body, func: noop, succeed: [init]}
  - {name: cond, kind: condition, func: loop, succeed: [body], precede: [body, done]}
  - {name: done, func: noop}
`, nil},
		{"one branch joining work from outside is fine", `
name: ok
tasks:
  - {name: side, func: noop}
  - {name: cond, kind: condition, func: loop, precede: [a, b]}
  - {name: a, func: noop}
  - {name: b, func: noop}
  - {name: join, func: noop, succeed: [a, side]}
`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := Parse("f.yaml", []byte(c.flow))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Validate(Options{}); err != nil {
				t.Fatal(err)
			}
			ws := f.Warnings()
			if len(ws) != len(c.want) {
				t.Fatalf("warnings %v, want %d", ws, len(c.want))
			}
			for i, w := range ws {
				if !strings.Contains(w.String(), c.want[i]) {
					t.Errorf("warning %q, want %q", w, c.want[i])
				}
			}
		})
	}
}
