package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// In the compose cluster only NATS and the coordinators hold the cluster
// secret; each node mounts its own credential, which compose-build.sh
// issues, and starts with it (issue 14: every node held the secret, so any
// compromised container could become any node or a coordinator). The
// custom nodes examples/custom-node/compose.override.yml adds do the same,
// their credentials issued by the example's build.sh.
func TestComposeNodesHoldOnlyTheirOwnCredential(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	composeCreds(t, root, "docker-compose.yml", "scripts/compose-build.sh", 3, true)
	composeCreds(t, root, "examples/custom-node/compose.override.yml", "examples/custom-node/build.sh", 2, false)
}

// composeCreds checks that each of the nodes compose file (relative to
// root) runs holds only its own credential, issued by script, and finds
// want nodes; others says the file has NATS and the coordinators too.
func composeCreds(t *testing.T, root, file, script string, want int, others bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Secrets []string `yaml:"secrets"`
			Command []string `yaml:"command"`
		} `yaml:"services"`
		Secrets map[string]struct {
			File string `yaml:"file"`
		} `yaml:"secrets"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	build, err := os.ReadFile(filepath.Join(root, script))
	if err != nil {
		t.Fatal(err)
	}
	nodes := 0
	for name, s := range f.Services {
		node := slices.Contains(s.Command, "--id") && !slices.Contains(s.Command, "serve")
		if !node {
			if !others {
				t.Errorf("%s: service %s is not a node", file, name)
				continue
			}
			if name != "nats" && !slices.Contains(s.Command, "serve") {
				t.Errorf("%s: service %s: neither NATS, a coordinator nor a node", file, name)
			}
			if !slices.Contains(s.Secrets, "hetflow_secret") {
				t.Errorf("%s: service %s lacks the cluster secret: %v", file, name, s.Secrets)
			}
			continue
		}
		nodes++
		id := s.Command[slices.Index(s.Command, "--id")+1]
		cred := id + "_cred"
		if !slices.Equal(s.Secrets, []string{cred}) {
			t.Errorf("%s: node %s mounts %v, want only its own credential %s", file, id, s.Secrets, cred)
		}
		if i := slices.Index(s.Command, "--credentials-file"); i < 0 || i+1 >= len(s.Command) || s.Command[i+1] != "/run/secrets/"+cred {
			t.Errorf("%s: node %s does not start with --credentials-file /run/secrets/%s: %v", file, id, cred, s.Command)
		}
		if slices.Contains(s.Command, "--secret-file") {
			t.Errorf("%s: node %s is given the cluster secret: %v", file, id, s.Command)
		}
		if got := f.Secrets[cred].File; got != "build/docker/"+id+".cred" {
			t.Errorf("%s: secret %s is file %q, want build/docker/%s.cred", file, cred, got, id)
		}
		if !regexp.MustCompile(`\b`+regexp.QuoteMeta(id)+`\b`).Match(build) || !strings.Contains(string(build), `credentials "$n"`) {
			t.Errorf("%s does not issue %s's credential", script, id)
		}
	}
	if nodes != want {
		t.Fatalf("%s: found %d node services, want %d", file, nodes, want)
	}
}
