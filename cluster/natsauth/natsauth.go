// Package natsauth is what the NATS server lets each process of a cluster
// do: the check of a connecting client (Authorize), a node's permissions
// (Permissions) and the options a node connects with (ConnectOptions).
//
// Every process authenticates to the NATS server as itself. A coordinator
// holds the cluster secret and connects as the user "hetflow": it may
// publish and subscribe everywhere. A node connects as "node:<id>" with the
// password of its credential (proto.NodeCredential), an HMAC of its id that
// the server recomputes from the secret, so it needs no list of nodes given
// in advance; it may publish only on subjects that name it as the sender,
// so a receiver takes the sender from the subject, never from the body.
// docs/cluster-protocol.md §Security has the trust model.
//
// It is apart from cluster/proto so that the API client (package cluster),
// which needs proto's types, pulls in no NATS code.
package natsauth

import (
	"strings"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/transport"
)

// Permissions are what a NATS user may publish and subscribe to (NATS
// subject patterns), and whether it may answer requests it received (a
// reply subject, once).
type Permissions struct {
	Publish, Subscribe []string
	Responses          bool
}

// NodePermissions are what node id may do on NATS: publish Signal batches
// from itself (to any node), its task events and the notices that they are
// stored, its term reports, fail envelopes and Assignment acks, and read (never change) the two JetStream streams; subscribe
// to its own Signals, its control subjects, its pings, the coordinators'
// requests for its function catalog and its replies; and answer requests.
func NodePermissions(id string) Permissions {
	pub := []string{
		transport.SignalsFromFilter(id),
		transport.NodeEventsFilter(id),
		transport.NodeEventNoticesFilter(id),
		proto.TermSubject(id),
		proto.FailSubject(id),
		proto.AckSubject(id),
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
	sub := []string{sigs, ctl, transport.BroadcastSubject, proto.PingSubject(id), proto.CatalogSubject(id), proto.NodeInboxPrefix(id) + ".>"}
	return Permissions{Publish: pub, Subscribe: sub, Responses: true}
}

// Authorize is the NATS server's check of a connecting client against the
// cluster secret s: the coordinators' user with the secret's password gets
// every permission (nil), a node's user with its credential's password gets
// NodePermissions, anything else is refused. Without a secret everyone is
// let in (a cluster without security).
func Authorize(s proto.Secret, user, password string) (perms *Permissions, ok bool) {
	if s.NATSPassword == "" {
		return nil, true
	}
	if user == s.NATSUser {
		return nil, s.AdminPassword(password)
	}
	id, isNode := strings.CutPrefix(user, proto.NodeUserPrefix)
	if !isNode || transport.ValidateID("node", id) != nil || !s.NodePassword(id, password) {
		return nil, false
	}
	p := NodePermissions(id)
	return &p, true
}

// ConnectOptions are the transport options a node connects with: its user,
// its password and its reply-subject prefix.
func ConnectOptions(c proto.NodeCredential) []transport.Option {
	return []transport.Option{transport.WithUserPassword(c.NATSUser, c.NATSPassword), transport.WithInboxPrefix(proto.NodeInboxPrefix(c.Node))}
}
