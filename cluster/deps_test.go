package cluster_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A program that imports cluster for its Client compiles HTTP and JSON,
// not a coordinator, nodes or an embedded NATS server: package cluster
// depends on the standard library and cluster/proto only (the all-in-one
// cluster lives in cluster/devcluster).
func TestClientImportsOnlyHTTPAndJSON(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("no go command on PATH to list the imports with")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	allowed := map[string]bool{
		"github.com/hetflow/hetflow/cluster":       true,
		"github.com/hetflow/hetflow/cluster/proto": true,
		// the status reader's byte scanning; the standard library only
		"github.com/hetflow/hetflow/internal/jsonscan": true,
	}
	seen := 0
	for _, d := range deps {
		if strings.HasPrefix(d, "vendor/") { // the standard library's own vendored packages
			continue
		}
		seen++
		for _, bad := range []string{"nats-server", "hashicorp/raft", "hashicorp/memberlist", "nats.go", "cluster/coord", "cluster/node", "localexec"} {
			if strings.Contains(d, bad) {
				t.Errorf("package cluster pulls in %s", d)
			}
		}
		if !allowed[d] {
			t.Errorf("package cluster depends on %s; want the standard library, cluster/proto and internal/jsonscan only", d)
		}
	}
	if seen != len(allowed) {
		t.Errorf("go list found %v; want exactly %d packages of ours", deps, len(allowed))
	}
}
