package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// In the compose cluster only NATS and the coordinators hold the cluster
// secret; each node mounts its own credential, which compose-build.sh
// issues, and starts with it (issue 14: every node held the secret, so any
// compromised container could become any node or a coordinator).
func TestComposeNodesHoldOnlyTheirOwnCredential(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
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
		t.Fatal(err)
	}
	build, err := os.ReadFile(filepath.Join(root, "scripts", "compose-build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	nodes := 0
	for name, s := range f.Services {
		node := slices.Contains(s.Command, "--id") && !slices.Contains(s.Command, "serve")
		if !node {
			if name != "nats" && !slices.Contains(s.Command, "serve") {
				t.Errorf("service %s: neither NATS, a coordinator nor a node", name)
			}
			if !slices.Contains(s.Secrets, "hetflow_secret") {
				t.Errorf("service %s lacks the cluster secret: %v", name, s.Secrets)
			}
			continue
		}
		nodes++
		id := s.Command[slices.Index(s.Command, "--id")+1]
		cred := id + "_cred"
		if !slices.Equal(s.Secrets, []string{cred}) {
			t.Errorf("node %s mounts %v, want only its own credential %s", id, s.Secrets, cred)
		}
		if i := slices.Index(s.Command, "--credentials-file"); i < 0 || i+1 >= len(s.Command) || s.Command[i+1] != "/run/secrets/"+cred {
			t.Errorf("node %s does not start with --credentials-file /run/secrets/%s: %v", id, cred, s.Command)
		}
		if slices.Contains(s.Command, "--secret-file") {
			t.Errorf("node %s is given the cluster secret: %v", id, s.Command)
		}
		file := f.Secrets[cred].File
		if file != "build/docker/"+id+".cred" {
			t.Errorf("secret %s is file %q, want build/docker/%s.cred", cred, file, id)
		}
		if !strings.Contains(string(build), " "+id) || !strings.Contains(string(build), `credentials "$n"`) {
			t.Errorf("scripts/compose-build.sh does not issue %s's credential", id)
		}
	}
	if nodes != 3 {
		t.Fatalf("found %d node services, want 3", nodes)
	}
}
