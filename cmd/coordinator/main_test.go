package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestValidateAndDumpExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("name: demo\ntasks:\n  - name: a\n    func: hash\n  - name: b\n    func: hash\n    succeed: [a]\n"), 0o644)
	os.WriteFile(bad, []byte("name: demo\ntasks:\n  - name: a\n    func: nosuchfunc\n"), 0o644)
	if c := run([]string{"validate", good}); c != exitOK {
		t.Fatalf("validate good: %d", c)
	}
	if c := run([]string{"validate", bad}); c != exitInvalid {
		t.Fatalf("validate bad: %d", c)
	}
	if c := run([]string{"validate", filepath.Join(dir, "missing.yaml")}); c != exitInvalid {
		t.Fatalf("validate missing: %d", c)
	}
	if c := run([]string{"dump", good}); c != exitOK {
		t.Fatalf("dump: %d", c)
	}
	if c := run([]string{"nosuchcommand"}); c != exitInvalid {
		t.Fatalf("unknown command: %d", c)
	}
}
