// Package e2e starts hetflow's real binaries — natsd, three coordinators,
// three nodes — on loopback ports and drives them through the CLI, as a
// user would. The compose tier (compose_test.go) runs the same through
// docker-compose.yml.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// bin holds the binaries built once for the package's tests.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hetflow-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	for _, b := range []string{"coordinator", "node", "natsd"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b), "../cmd/"+b)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", b, ":", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
