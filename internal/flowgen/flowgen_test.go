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

// A flow of layered modules expands to blocks×layers×width tasks, its
// blocks in a chain, the same in YAML and JSON, and Layered is unchanged by
// sharing its task writer.
func TestLayeredModules(t *testing.T) {
	for _, json := range []bool{false, true} {
		name := "m.yaml"
		if json {
			name = "m.json"
		}
		f, err := spec.Parse(name, LayeredModules(4, 5, 30, 7, json))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := f.Validate(spec.Options{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := f.ExpandedSize(); n < 4*5*30 || n > 4*5*30+2*4 {
			t.Fatalf("%s: expands to %d tasks, want 600 and at most 2 a module", name, n)
		}
		top, block := f.Flows[0].Tasks, f.Flows[1].Tasks
		if len(top) != 4 || len(block) != 150 {
			t.Fatalf("%s: %d module tasks and %d block tasks, want 4 and 150", name, len(top), len(block))
		}
		for k, task := range top {
			if k > 0 && (len(task.Succeed) != 1 || task.Succeed[0] != top[k-1].Name) {
				t.Fatalf("%s: %s runs after %v, want [%s]", name, task.Name, task.Succeed, top[k-1].Name)
			}
		}
		lf, err := spec.Parse("l", Layered(5, 30, 7, json))
		if err != nil {
			t.Fatal(err)
		}
		for i, task := range lf.Flows[0].Tasks {
			if task.Name != block[i].Name || fmt.Sprint(task.Succeed) != fmt.Sprint(block[i].Succeed) {
				t.Fatalf("%s: block task %d is %s after %v, Layered's %s after %v", name, i, block[i].Name, block[i].Succeed, task.Name, task.Succeed)
			}
		}
	}
}
