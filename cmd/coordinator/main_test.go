package main

import (
	"bytes"
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

// TestServeRefusesABadDataDirectory: a data directory that is a file, or
// that holds a damaged raft.db, is invalid input (exit 2), not an
// unreachable cluster (3).
func TestServeRefusesABadDataDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	damaged := filepath.Join(dir, "damaged")
	os.MkdirAll(damaged, 0o750)
	os.WriteFile(filepath.Join(damaged, "raft.db"), bytes.Repeat([]byte("not a bbolt file "), 2000), 0o600)
	for _, data := range []string{file, damaged} {
		args := []string{"serve", "--id", "c1", "--data", data, "--raft", "127.0.0.1:0", "--http", "127.0.0.1:0",
			"--gossip", "127.0.0.1:0", "--nats", "nats://127.0.0.1:1", "--bootstrap"}
		if c := run(args); c != exitInvalid {
			t.Fatalf("serve --data %s: exit %d, want %d", data, c, exitInvalid)
		}
	}
}
