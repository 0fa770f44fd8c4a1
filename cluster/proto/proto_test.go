package proto

import (
	"bytes"
	"errors"
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
