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
	Token    string // require this authorization token (optional)
	// Authorize, when set, checks every client's user and password instead
	// of User, Password and Token: ok false refuses it, a nil Permissions
	// grants everything, others only what they list.
	Authorize func(user, password string) (p *Permissions, ok bool)
	TLS       *tls.Config // with a certificate: clients must speak TLS (optional)
	HTTPHost  string      // monitoring (optional)
	HTTPPort  int
	Logs      bool // print the server's log to stderr
	// MaxPayload overrides the largest message the server accepts
	// (0 = the package's MaxPayload).
	MaxPayload  int32
	NoJetStream bool // run without JetStream (tests of a server lacking it)
}

// Permissions are what a client may publish and subscribe to (NATS subject
// patterns), and whether it may answer a request it received (its reply
// subject, once).
type Permissions struct {
	Publish, Subscribe []string
	Responses          bool
}

// authorizer is nats-server's custom authentication over Options.Authorize;
// its users are in the server's global account (where JetStream is).
type authorizer struct {
	f   func(user, password string) (*Permissions, bool)
	srv *server.Server // set before the server starts
}

func (a *authorizer) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	p, ok := a.f(o.Username, o.Password)
	if !ok {
		return false
	}
	u := &server.User{Username: o.Username, Account: a.srv.GlobalAccount()}
	if p != nil {
		u.Permissions = &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: p.Publish},
			Subscribe: &server.SubjectPermission{Allow: p.Subscribe},
		}
		if len(p.Publish) == 0 {
			u.Permissions.Publish.Deny = []string{">"}
		}
		if len(p.Subscribe) == 0 {
			u.Permissions.Subscribe.Deny = []string{">"}
		}
		if p.Responses {
			u.Permissions.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
		}
	}
	c.RegisterUser(u)
	return true
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
	var auth *authorizer
	if o.Authorize != nil {
		auth = &authorizer{f: o.Authorize}
		so.CustomClientAuthentication = auth
		so.Username, so.Password, so.Authorization = "", "", ""
	}
	s, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	if auth != nil {
		auth.srv = s
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
