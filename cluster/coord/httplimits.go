package coord

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Limits of the HTTP API against callers that hold connections or grow
// state without end (docs/cluster-protocol.md, Security). Every one of them
// applies before a request is authenticated, since that is what an attacker
// without the token can reach.
const (
	// DefaultMaxConns bounds the API's open connections; one over it is
	// closed at once (a client then tries another coordinator).
	DefaultMaxConns = 512
	// httpReadHeader bounds reading a request's headers, httpRead the whole
	// request (a flow of DefaultMaxFlowBytes at 300 KB/s), httpWrite a
	// handler and its answer (event streams lift it), httpIdle a keep-alive
	// connection between requests.
	httpReadHeader = 10 * time.Second
	httpRead       = 30 * time.Second
	httpWrite      = 2 * time.Minute
	httpIdle       = 30 * time.Second
)

// httpTimes are an http.Server's time limits.
type httpTimes struct{ header, read, write, idle time.Duration }

// limitListener closes connections over max at once instead of queuing
// them: a caller learns at once that this coordinator is full.
type limitListener struct {
	net.Listener
	max int

	mu   sync.Mutex
	open int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.open >= l.max {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.open++
		l.mu.Unlock()
		return &limitConn{Conn: c, l: l}, nil
	}
}

// Open is the number of connections held now.
func (l *limitListener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// methodLabel bounds the method label of the request metrics: a client
// chooses the method string, and every new one would be a new series.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

// codeLabel bounds the status code label the same way (handlers write a
// few known codes; this is a guard, not a filter).
func codeLabel(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code)
}
