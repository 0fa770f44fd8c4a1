package flowgen

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/hetflow/hetflow/cluster/spec"
)

// A layered flow has layers×width tasks, each after two distinct tasks of
// the layer before, the same in YAML and JSON and for the same seed.
func TestLayered(t *testing.T) {
	for _, json := range []bool{false, true} {
		name := "l.yaml"
		if json {
			name = "l.json"
		}
		text := Layered(20, 30, 7, json)
		if !bytes.Equal(text, Layered(20, 30, 7, json)) {
			t.Fatalf("%s: not deterministic", name)
		}
		if bytes.Equal(text, Layered(20, 30, 8, json)) {
			t.Fatalf("%s: the seed changes nothing", name)
		}
		f, err := spec.Parse(name, text)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := f.Validate(spec.Options{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tasks := f.Flows[0].Tasks
		if len(tasks) != 600 {
			t.Fatalf("%s: %d tasks, want 600", name, len(tasks))
		}
		for k, task := range tasks {
			l := k / 30
			if l == 0 {
				if len(task.Succeed) != 0 {
					t.Fatalf("%s: %s of layer 0 has predecessors %v", name, task.Name, task.Succeed)
				}
				continue
			}
			if len(task.Succeed) != 2 || task.Succeed[0] == task.Succeed[1] {
				t.Fatalf("%s: %s: predecessors %v, want two distinct", name, task.Name, task.Succeed)
			}
			for _, p := range task.Succeed {
				var pl, pi int
				if _, err := fmt.Sscanf(p, "L%d_%d", &pl, &pi); err != nil || pl != l-1 {
					t.Fatalf("%s: %s runs after %s, not of the layer before", name, task.Name, p)
				}
			}
		}
	}
}
