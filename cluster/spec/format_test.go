package spec_test

import (
	"errors"
	"testing"

	"github.com/hetflow/hetflow/cluster/spec"
)

// ParseYAML and ParseJSON choose the format whatever the file's name says.
func TestParseFormatIgnoresTheName(t *testing.T) {
	yaml := []byte("flows:\n  - name: main\n    tasks:\n      - name: a\n        func: hash\n")
	f, err := spec.ParseYAML("flow.json", yaml)
	if err != nil {
		t.Fatalf("ParseYAML of YAML named .json: %v", err)
	}
	if f.Path != "flow.json" || f.Root() == nil || f.Root().Name != "main" || len(f.Root().Tasks) != 1 {
		t.Fatalf("ParseYAML = %+v", f)
	}
	json := []byte(`{"flows": [{"name": "main", "tasks": [{"name": "a", "func": "hash"}]}]}`)
	if _, err := spec.ParseJSON("flow.yaml", json); err != nil {
		t.Fatalf("ParseJSON of JSON named .yaml: %v", err)
	}
	var errs spec.Errors
	if _, err := spec.ParseJSON("flow.json", yaml); !errors.As(err, &errs) {
		t.Fatalf("ParseJSON of YAML: %v, want spec.Errors", err)
	}
}
