package spec_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/spec"
)

// TestDump compares the DOT output of a few flows with golden files
// (testdata/dot/NAME.dot; go test -update rewrites them).
func TestDump(t *testing.T) {
	for _, path := range []string{"examples/listing3-module.yaml", "examples/listing5-dowhile.yaml", "testdata/valid/every-field.yaml"} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := spec.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := spec.Dump(&buf, f); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata/dot", strings.TrimSuffix(filepath.Base(path), ".yaml")+".dot")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if buf.String() != string(want) {
				t.Errorf("DOT differs from %s:\n%s", golden, buf.String())
			}
		})
	}
}

func TestDumpRefusesInvalid(t *testing.T) {
	f := mustParse(t, "bad.yaml", "name: x\ntasks:\n  - {name: a, func: noop, precede: [a]}\n")
	var buf bytes.Buffer
	if err := spec.Dump(&buf, f); err == nil {
		t.Error("dumped a flow with a strong cycle")
	}
}
