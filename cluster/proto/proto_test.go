package proto

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDeriveSecret(t *testing.T) {
	a, err := DeriveSecret([]byte("0123456789abcdef-secret"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := DeriveSecret([]byte("0123456789abcdef-secret"))
	c, _ := DeriveSecret([]byte("0123456789abcdef-other"))
	if a.APIToken != b.APIToken || !bytes.Equal(a.GossipKey, b.GossipKey) || a.NATSPassword != b.NATSPassword {
		t.Fatal("derivation is not deterministic")
	}
	if a.APIToken == c.APIToken || bytes.Equal(a.GossipKey, c.GossipKey) || a.NATSPassword == c.NATSPassword {
		t.Fatal("different secrets gave equal credentials")
	}
	if len(a.GossipKey) != 32 || a.APIToken == a.NATSPassword {
		t.Fatal("keys must differ per use and the gossip key be 32 bytes")
	}
	if z, err := DeriveSecret(nil); err != nil || z.APIToken != "" {
		t.Fatal("empty secret must mean no security")
	}
	if _, err := DeriveSecret([]byte("short")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short secret: %v", err)
	}
}

// A node's metadata, with its catalog hash and long fields, stays within
// memberlist's 512 bytes.
func TestMetaFitsMemberlist(t *testing.T) {
	m := Meta{Role: RoleNode, ID: strings.Repeat("n", 64), HTTP: "[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:65535",
		CPUs: 1 << 20, GPUs: 1 << 10, Boot: strings.Repeat("b", 32), Funcs: Catalog{Funcs: []FuncInfo{{Name: "x"}}}.Hash()}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 512 || len(m.Funcs) != 16 {
		t.Errorf("meta is %d bytes (hash %q): %s", len(b), m.Funcs, b)
	}
}
