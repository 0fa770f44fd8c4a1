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

	"github.com/hetflow/hetflow/transport"
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
//     server recomputes it (Secret.AuthorizeNATS), so it needs no list of
//     nodes given in advance, and a node that holds its own credential can
//     neither compute another's nor the cluster secret. A node may publish
//     only on subjects that name it as the sender (NodePermissions), so a
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
)

// TermSubject is the subject node sends its TermReports on.
func TermSubject(node string) string { return "hf.coord.term." + node }

// FailSubject is the subject node sends its fail envelopes on.
func FailSubject(node string) string { return "hf.coord.fail." + node }

// SenderOf is the last token of subject: the sending node of a message on
// TermSubject, FailSubject or transport.EventSubject, which the server
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

// NATSPermissions are what a NATS user may publish and subscribe to
// (NATS subject patterns), and whether it may answer requests it received
// (a reply subject, once).
type NATSPermissions struct {
	Publish, Subscribe []string
	Responses          bool
}

// NodePermissions are what node id may do on NATS: publish Signal batches
// from itself (to any node), its task events, its term reports and fail
// envelopes, and read (never change) the two JetStream streams; subscribe
// to its own Signals, its control subjects, its pings and its replies; and
// answer pings.
func NodePermissions(id string) NATSPermissions {
	pub := []string{
		transport.SignalsFromFilter(id),
		transport.NodeEventsFilter(id),
		TermSubject(id),
		FailSubject(id),
		"$JS.API.INFO",
	}
	for _, st := range []string{transport.StreamRecord, transport.StreamEvents} {
		pub = append(pub,
			"$JS.API.STREAM.INFO."+st,
			"$JS.API.CONSUMER.CREATE."+st, "$JS.API.CONSUMER.CREATE."+st+".>",
			"$JS.API.CONSUMER.INFO."+st+".*", "$JS.API.CONSUMER.DELETE."+st+".*",
			"$JS.API.CONSUMER.MSG.NEXT."+st+".*")
	}
	sigs, _ := transport.NodeSignalsFilter(id)
	ctl, _ := transport.ControlSubject(id)
	sub := []string{sigs, ctl, transport.BroadcastSubject, PingSubject(id), NodeInboxPrefix(id) + ".>"}
	return NATSPermissions{Publish: pub, Subscribe: sub, Responses: true}
}

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
	if err := transport.ValidateID("node", id); err != nil {
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

// AuthorizeNATS is the NATS server's check of a connecting client: the
// coordinators' user with the secret's password gets every permission
// (nil), a node's user with its credential's password gets
// NodePermissions, anything else is refused.
func (s Secret) AuthorizeNATS(user, password string) (perms *NATSPermissions, ok bool) {
	if s.NATSPassword == "" {
		return nil, true // no secret: no security
	}
	if user == s.NATSUser {
		return nil, subtle.ConstantTimeCompare([]byte(password), []byte(s.NATSPassword)) == 1
	}
	id, isNode := strings.CutPrefix(user, NodeUserPrefix)
	if !isNode || len(s.NodeKey) == 0 || transport.ValidateID("node", id) != nil {
		return nil, false
	}
	if subtle.ConstantTimeCompare([]byte(password), []byte(s.nodePassword(id))) != 1 {
		return nil, false
	}
	p := NodePermissions(id)
	return &p, true
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

// ConnectOptions are the transport options a node connects with: its user,
// its password and its reply-subject prefix.
func (c NodeCredential) ConnectOptions() []transport.Option {
	return []transport.Option{transport.WithUserPassword(c.NATSUser, c.NATSPassword), transport.WithInboxPrefix(NodeInboxPrefix(c.Node))}
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
