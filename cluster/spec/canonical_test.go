package spec_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
)

// TestCanonicalExpandsAlike: the graph the leader compiles from a user's
// file is the graph every node expands from that file's canonical JSON
// (which is its indented JSON compacted)
// (coord partitions the first and ships the second): same vertices, in the
// same order, with the same tasks and edges.
func TestCanonicalExpandsAlike(t *testing.T) {
	files, _ := filepath.Glob("examples/*.yaml")
	more, _ := filepath.Glob("testdata/valid/*")
	files = append(files, more...)
	if len(files) == 0 {
		t.Fatal("no flow files")
	}
	compared := 0
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := spec.Parse(p, data)
		if err != nil {
			continue // a testdata file for another purpose
		}
		g, err := f.Compile(spec.Options{Funcs: funcs.Default()})
		if err != nil {
			continue
		}
		canon, err := spec.Canonical(f)
		if err != nil {
			t.Fatal(err)
		}
		// the indented JSON without its layout, byte for byte
		ind, err := spec.Marshal(f, spec.FormatJSON)
		if err != nil {
			t.Fatal(err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, ind); err != nil {
			t.Fatalf("%s: indented JSON: %v", p, err)
		}
		if !bytes.Equal(canon, compact.Bytes()) {
			t.Fatalf("%s: canonical JSON is not the indented JSON compacted:\n%s\nwant\n%s", p, canon, compact.Bytes())
		}
		cf, err := spec.ParseJSON("run.json", canon)
		if err != nil {
			t.Fatalf("%s: canonical JSON does not parse: %v", p, err)
		}
		cg, err := cf.Expand()
		if err != nil {
			t.Fatalf("%s: canonical JSON does not expand: %v", p, err)
		}
		if len(g.Vertices) != len(cg.Vertices) {
			t.Fatalf("%s: %d vertices compiled, %d from the canonical JSON", p, len(g.Vertices), len(cg.Vertices))
		}
		compared++
		for i := range g.Vertices {
			a, b := g.Vertices[i], cg.Vertices[i]
			a.Task, b.Task = spec.Task{}, spec.Task{} // compared below, without positions
			ta, tb := g.Vertices[i].Task, cg.Vertices[i].Task
			spec.StripTask(&ta)
			spec.StripTask(&tb)
			if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(ta, tb) {
				t.Fatalf("%s: vertex %d differs:\n%+v %+v\n%+v %+v", p, i, a, ta, b, tb)
			}
		}
	}
	if compared < 7 {
		t.Fatalf("only %d flow files compared", compared)
	}
}
