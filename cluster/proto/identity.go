package proto

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Per-process identities on NATS.
//
// Every process authenticates to the NATS server as itself, and the server
// (cmd/natsd, the all-in-one cluster's embedded one) grants it only what it
// may send:
//
//   - a coordinator holds the cluster secret and connects as the user
//     "hetflow" with the password derived from it: it may publish and
//     subscribe everywhere;
//   - a node connects as "node:<id>" with a password that is an HMAC of its
//     id under a key derived from the cluster secret (NodeCredential). The
//     server recomputes it (natsauth.Authorize), so it needs no list of
//     nodes given in advance, and a node that holds its own credential can
//     neither compute another's nor the cluster secret. A node may publish
//     only on subjects that name it as the sender (natsauth.Permissions), so a
//     receiver takes the sender from the subject, never from the body.
//
// ErrCredential: a node credential file that cannot be used.
var ErrCredential = errors.New("cluster: bad node credential")

// NodeUserPrefix starts the NATS user name of every node: "node:<id>".
const NodeUserPrefix = "node:"

// Subjects of what nodes send the leader. The sender's id is the last token
// and the server lets a node publish only its own.
const (
	SubjectTerm = "hf.coord.term.*" // transport.TermReport from nodes: TermSubject
	SubjectFail = "hf.coord.fail.*" // transport.Envelope{Kind: KindFail} from nodes: FailSubject
	SubjectAck  = "hf.coord.ack.*"  // transport.Ack from nodes: AckSubject
)

// TermSubject is the subject node sends its TermReports on.
func TermSubject(node string) string { return "hf.coord.term." + node }

// FailSubject is the subject node sends its fail envelopes on.
func FailSubject(node string) string { return "hf.coord.fail." + node }

// AckSubject is the subject node acknowledges Assignments on.
func AckSubject(node string) string { return "hf.coord.ack." + node }

// SenderOf is the last token of subject: the sending node of a message on
// TermSubject, FailSubject, AckSubject or transport.EventSubject, which the server
// enforces.
func SenderOf(subject string) string {
	if i := strings.LastIndexByte(subject, '.'); i >= 0 {
		return subject[i+1:]
	}
	return subject
}

// NodeInboxPrefix is the reply-subject prefix of a node's connection
// (transport.WithInboxPrefix): the only replies it may subscribe to.
func NodeInboxPrefix(node string) string { return "_INBOX_node." + node }

// NodeCredential is what a node needs to join a cluster without the
// cluster secret: its NATS user and password, the gossip key, and a hash
// of the API token (it checks the token on its /metrics, and cannot call
// the coordinators' API with it).
type NodeCredential struct {
	Node         string `json:"node"`
	NATSUser     string `json:"nats_user"`
	NATSPassword string `json:"nats_password"`
	GossipKey    string `json:"gossip_key"`                 // hex, 32 bytes
	APITokenHash string `json:"api_token_sha256,omitempty"` // hex SHA-256 of the API token
}

// NodeCredential issues node id's credential. The Secret must come from
// DeriveSecret.
func (s Secret) NodeCredential(id string) (NodeCredential, error) {
	if err := validNodeID(id); err != nil {
		return NodeCredential{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if len(s.NodeKey) == 0 {
		return NodeCredential{}, fmt.Errorf("%w: node credentials are issued from a cluster secret", ErrInvalid)
	}
	c := NodeCredential{Node: id, NATSUser: NodeUserPrefix + id, NATSPassword: s.nodePassword(id),
		GossipKey: hex.EncodeToString(s.GossipKey)}
	if s.APIToken != "" {
		c.APITokenHash = TokenHash(s.APIToken)
	}
	return c, nil
}

func (s Secret) nodePassword(id string) string {
	m := hmac.New(sha256.New, s.NodeKey)
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// TokenHash is the hex SHA-256 of an API token.
func TokenHash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// AdminPassword reports whether password is the coordinators' NATS
// password (user NATSUser); always false without a secret.
func (s Secret) AdminPassword(password string) bool {
	return s.NATSPassword != "" && subtle.ConstantTimeCompare([]byte(password), []byte(s.NATSPassword)) == 1
}

// NodePassword reports whether password is node id's NATS password, the
// one its credential holds; always false without a secret.
func (s Secret) NodePassword(id, password string) bool {
	if len(s.NodeKey) == 0 || validNodeID(id) != nil {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(password), []byte(s.nodePassword(id))) == 1
}

// WriteNodeCredential writes c to path (mode 0600), failing if it exists.
func WriteNodeCredential(path string, c NodeCredential) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	_, err = f.Write(append(b, '\n'))
	return errors.Join(err, f.Close())
}

// ReadNodeCredential reads a node credential file and checks it is for
// node id.
func ReadNodeCredential(path, id string) (NodeCredential, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return NodeCredential{}, fmt.Errorf("%w: %v", ErrCredential, err)
	}
	var c NodeCredential
	if err := json.Unmarshal(b, &c); err != nil {
		return NodeCredential{}, fmt.Errorf("%w: %s: %v", ErrCredential, path, err)
	}
	switch key, kerr := hex.DecodeString(c.GossipKey); {
	case c.Node != id:
		return NodeCredential{}, fmt.Errorf("%w: %s is node %q's, not %q's", ErrCredential, path, c.Node, id)
	case c.NATSUser != NodeUserPrefix+id || c.NATSPassword == "":
		return NodeCredential{}, fmt.Errorf("%w: %s: no NATS user %q with a password", ErrCredential, path, NodeUserPrefix+id)
	case kerr != nil || len(key) != 32:
		return NodeCredential{}, fmt.Errorf("%w: %s: gossip_key is not 32 bytes of hex", ErrCredential, path)
	}
	return c, nil
}

// GossipKeyBytes is c's gossip key (ReadNodeCredential checked it).
func (c NodeCredential) GossipKeyBytes() []byte {
	b, _ := hex.DecodeString(c.GossipKey)
	return b
}

// CheckToken reports whether token is the API token whose hash c holds
// (always, when c holds none: a cluster without a secret).
func (c NodeCredential) CheckToken(token string) bool {
	if c.APITokenHash == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(TokenHash(token)), []byte(c.APITokenHash)) == 1
}

// maxIDLen is transport.MaxIDLen: this package does not import transport,
// so that the API client (package cluster) pulls in no NATS code;
// TestValidNodeIDIsTransports keeps the two rules one.
const maxIDLen = 128

// validNodeID is transport.ValidateID("node", id).
func validNodeID(id string) error {
	switch {
	case id == "":
		return errors.New("node id is empty")
	case len(id) > maxIDLen:
		return fmt.Errorf("node id %.32q... is %d bytes, limit %d", id, len(id), maxIDLen)
	case id == "all":
		return fmt.Errorf("node id %q is reserved for broadcast", id)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c == 0x7f || c == '.' || c == '*' || c == '>' {
			return fmt.Errorf("node id %q has %q at byte %d (no spaces, control characters, '.', '*' or '>')", id, c, i)
		}
	}
	return nil
}
