package testsupport

import (
	"fmt"
	"testing"

	"github.com/hetflow/hetflow/internal/natsembed"
)

// NATSServer is a NATS server started by NATS, for one test.
type NATSServer struct {
	t    testing.TB
	opts natsembed.Options
	s    *natsembed.Server
	url  string
}

// NATS starts an in-process NATS server with JetStream on a random loopback
// port and a store in a temporary directory; mods, applied in order, adjust
// its options. It is stopped when the test ends. Call it from the test's
// goroutine (it calls t.Fatalf if the server does not start).
func NATS(t testing.TB, mods ...func(*natsembed.Options)) *NATSServer {
	t.Helper()
	ns := &NATSServer{t: t, opts: natsembed.Options{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir()}}
	for _, m := range mods {
		m(&ns.opts)
	}
	ns.Start()
	t.Cleanup(ns.Stop) // before the temporary directory is removed
	return ns
}

// URL returns the server's client URL; it stays the same across restarts.
func (ns *NATSServer) URL() string { return ns.url }

// Start starts the server again after Stop, on the same port and store. It
// does nothing to a running server.
func (ns *NATSServer) Start() {
	ns.t.Helper()
	if ns.s != nil {
		return
	}
	s, err := natsembed.Start(ns.opts)
	if err != nil {
		ns.t.Fatalf("nats server: %v", err)
	}
	ns.s = s
	// Pin the port so that a restart comes back on the same address.
	ns.opts.Port = s.Port()
	ns.url = fmt.Sprintf("nats://%s:%d", ns.opts.Host, ns.opts.Port)
}

// Stop stops the server and waits for it; it does nothing to a stopped one.
func (ns *NATSServer) Stop() {
	if ns.s != nil {
		ns.s.Shutdown()
		ns.s = nil
	}
}

// Restart stops the server and starts it again on the same port and store.
func (ns *NATSServer) Restart() {
	ns.t.Helper()
	ns.Stop()
	ns.Start()
}
