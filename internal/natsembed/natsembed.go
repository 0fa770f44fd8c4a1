// Package natsembed starts an in-process NATS server with JetStream on disk:
// the real server from the nats-server module, for hetflow's all-in-one dev
// mode, cmd/natsd and tests.
package natsembed

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configure a server. Port -1 picks a free port.
type Options struct {
	Host     string // default 127.0.0.1
	Port     int    // 0 = 4222, -1 = random
	StoreDir string // JetStream store (required unless NoJetStream)
	User     string // with Password: require these credentials
	Password string
	Token    string      // require this authorization token (optional)
	TLS      *tls.Config // with a certificate: clients must speak TLS (optional)
	HTTPHost string      // monitoring (optional)
	HTTPPort int
	Logs     bool // print the server's log to stderr
	// MaxPayload overrides the largest message the server accepts
	// (0 = the package's MaxPayload).
	MaxPayload  int32
	NoJetStream bool // run without JetStream (tests of a server lacking it)
}

// MaxPayload is the largest message the server accepts (NATS's own ceiling).
const MaxPayload = 64 << 20

// Server is a running NATS server.
type Server struct {
	s *server.Server
}

// ErrNotReady is returned when the server did not accept connections in time.
var ErrNotReady = errors.New("natsembed: server not ready")

// Start starts a server and waits until it accepts connections.
func Start(o Options) (*Server, error) {
	if o.StoreDir == "" && !o.NoJetStream {
		return nil, errors.New("natsembed: StoreDir is required")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = 4222
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = MaxPayload
	}
	so := &server.Options{
		Host: o.Host, Port: o.Port, JetStream: !o.NoJetStream, StoreDir: o.StoreDir,
		ServerName: "hetflow-nats", Username: o.User, Password: o.Password,
		Authorization: o.Token,
		HTTPHost:      o.HTTPHost, HTTPPort: o.HTTPPort, NoSigs: true,
		// A run's Assignment carries its whole flow; NATS's default 1 MiB
		// payload stops flows at a few thousand tasks.
		MaxPayload: o.MaxPayload,
		TLSConfig:  o.TLS,
	}
	s, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	if o.Logs {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, ErrNotReady
	}
	return &Server{s: s}, nil
}

// Port returns the port the server listens on (the one picked for Port -1).
func (s *Server) Port() int { return s.s.Addr().(*net.TCPAddr).Port }

// URL returns the client URL (nats://host:port).
func (s *Server) URL() string { return s.s.ClientURL() }

// Shutdown stops the server and waits for its goroutines.
func (s *Server) Shutdown() {
	s.s.Shutdown()
	s.s.WaitForShutdown()
}
