package spec_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// testResources is the cluster the testdata is validated against, unless a
// file's first line says otherwise: "# resources: n1=4/0 n2=8/2" (CPUs/GPUs).
func testResources(t *testing.T, data []byte) *spec.Resources {
	res := &spec.Resources{Nodes: map[string]spec.NodeRes{"n1": {CPUs: 4, GPUs: 0}, "n2": {CPUs: 4, GPUs: 2}}}
	first, _, _ := strings.Cut(string(data), "\n")
	rest, ok := strings.CutPrefix(first, "# resources:")
	if !ok {
		return res
	}
	res = &spec.Resources{Nodes: map[string]spec.NodeRes{}}
	for _, f := range strings.Fields(rest) {
		id, cg, _ := strings.Cut(f, "=")
		c, g, _ := strings.Cut(cg, "/")
		cpus, err1 := strconv.Atoi(c)
		gpus, err2 := strconv.Atoi(g)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad resources line %q", first)
		}
		res.Nodes[id] = spec.NodeRes{CPUs: cpus, GPUs: gpus}
	}
	return res
}

func load(t *testing.T, path string) (*spec.File, error) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(filepath.Base(path), data)
	if err != nil {
		return nil, err
	}
	var cat spec.Catalog = funcs.Default()
	if strings.HasPrefix(string(data), "# funcs: any") {
		cat = spec.CatalogFunc(func(string) bool { return true })
	}
	return f, f.Validate(spec.Options{Funcs: cat, Resources: testResources(t, data)})
}

func files(t *testing.T, dir string) []string {
	var out []string
	for _, pat := range []string{"*.yaml", "*.json"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	if len(out) == 0 {
		t.Fatalf("no files in %s", dir)
	}
	return out
}

// TestInvalid checks each file under testdata/invalid against its golden
// error text (testdata/invalid/NAME.golden; go test -update rewrites them).
func TestInvalid(t *testing.T) {
	for _, path := range files(t, "testdata/invalid") {
		t.Run(filepath.Base(path), func(t *testing.T) {
			_, err := load(t, path)
			if err == nil {
				t.Fatal("file accepted, want errors")
			}
			if !errors.Is(err, spec.ErrInvalid) {
				t.Errorf("error does not match ErrInvalid: %v", err)
			}
			var es spec.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error is not a spec.Errors: %T", err)
			}
			for _, e := range es {
				if e.Kind == nil || !errors.Is(e, e.Kind) {
					t.Errorf("%v: no kind", e)
				}
				if e.File != filepath.Base(path) {
					t.Errorf("%v: file %q", e, e.File)
				}
			}
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(path, filepath.Ext(path)) + filepath.Ext(path) + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("errors differ from %s\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
		})
	}
}

// TestValid checks that every valid file and bundled example validates,
// expands, and survives a round trip through YAML and JSON unchanged.
func TestValid(t *testing.T) {
	paths := files(t, "testdata/valid")
	paths = append(paths, files(t, "examples")...)
	for _, path := range paths {
		t.Run(path, func(t *testing.T) {
			f, err := load(t, path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Expand(); err != nil {
				t.Fatal(err)
			}
			roundTrip(t, f)
		})
	}
}

func roundTrip(t *testing.T, f *spec.File) {
	t.Helper()
	want := f
	spec.StripPositions(want)
	for _, format := range []spec.Format{spec.FormatYAML, spec.FormatJSON} {
		data, err := spec.Marshal(f, format)
		if err != nil {
			t.Fatalf("marshal %v: %v", format, err)
		}
		g, err := spec.ParseFormat(f.Path, data, format)
		if err != nil {
			t.Fatalf("reparse %v: %v\n%s", format, err, data)
		}
		spec.StripPositions(g)
		if !reflect.DeepEqual(g.Flows, want.Flows) {
			t.Fatalf("round trip through %v changed the file:\n%s\ngot  %#v\nwant %#v", format, data, g.Flows, want.Flows)
		}
	}
}
