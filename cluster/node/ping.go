package node

import (
	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/transport"
)

// answerPings subscribes to the node's ping subject and answers every ping
// with the process's boot id (so that a restart under the same id, which
// gossip may not show yet, is not taken for the old process alive). The leader pings a node that gossip declared dead
// before it moves the node's tasks (coord.Liveness): an answer proves the
// process alive however busy its executor is, since NATS delivers on the
// subscription's own goroutine; a closed connection (a killed process) leaves
// no responder, which the leader takes as the death.
func (n *Node) answerPings() (*transport.Subscription, error) {
	return n.conn.Subscribe(proto.PingSubject(n.id), func(m *nats.Msg) {
		if m.Reply != "" {
			_ = m.Respond([]byte(n.boot))
		}
	})
}
