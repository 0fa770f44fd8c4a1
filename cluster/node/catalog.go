package node

import (
	"context"
	"encoding/json"
	"time"

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
	sub, err := n.conn.Subscribe(proto.CatalogSubject(n.id), func(m *nats.Msg) {
		if m.Reply != "" {
			_ = m.Respond(body)
		}
	})
	if err != nil {
		return nil, err
	}
	// The server has the subscription before the node advertises its
	// catalog's hash: a coordinator that sees the hash and asks at once
	// finds a responder (it found none under load, and refused the flow's
	// functions as unknown).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.conn.Sync(ctx); err != nil {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		_ = sub.Close(cctx)
		ccancel()
		return nil, err
	}
	return sub, nil
}
