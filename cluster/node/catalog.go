package node

import (
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/transport"
)

// Catalog is the node's function catalog: its registry's functions.
func (n *Node) Catalog() proto.Catalog { return n.reg.Catalog() }

// AdvertisedMeta is Meta with the hash of the node's catalog (Meta.Funcs),
// what a node binary gives the membership ring; ServeCatalog answers for
// the catalog itself.
func (n *Node) AdvertisedMeta() proto.Meta {
	m := n.Meta()
	m.Funcs = n.Catalog().Hash()
	return m
}

// ServeCatalog answers catalog requests (proto.CatalogSubject) with the
// node's catalog as JSON, until the subscription is closed or the
// connection ends. The coordinator fetches it when a node's Meta.Funcs is
// new to it, to validate flows against what the live nodes have and place
// each task on a node that has its function.
func (n *Node) ServeCatalog() (*transport.Subscription, error) {
	body, err := json.Marshal(n.Catalog().Sorted())
	if err != nil {
		return nil, err
	}
	return n.conn.Subscribe(proto.CatalogSubject(n.id), func(m *nats.Msg) {
		if m.Reply != "" {
			_ = m.Respond(body)
		}
	})
}
