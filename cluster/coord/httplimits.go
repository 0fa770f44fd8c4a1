package coord

import (
	"bytes"
	"io"
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

// readDeclared reads r up to limit+1 bytes (one more than the limit, so
// that the caller sees a body over it). declared is the body's declared
// length (Content-Length; -1 when unknown). The buffer grows with the
// bytes that arrive, never ahead of them by more than declaredTrust times:
// it starts at most readStart bytes and doubles, and once an eighth of a
// declared size is in, it takes the declared size at once (the 100K-task
// DAG's 7 MB body costs 9 MB of buffers, not io.ReadAll's 16). A client
// that declares gigabytes and sends a few bytes holds readStart, not the
// declared size, for as long as it waits.
func readDeclared(r io.Reader, declared, limit int64) ([]byte, error) {
	want := limit + 1
	if declared >= 0 && declared < want {
		want = declared
	}
	buf := make([]byte, 0, min(want, readStart)+bytes.MinRead)
	r = io.LimitReader(r, limit+1)
	for {
		if cap(buf)-len(buf) < bytes.MinRead {
			c := 2 * cap(buf)
			if n := int(want) + bytes.MinRead; int64(len(buf))*declaredTrust >= want && n > c {
				c = n
			}
			nb := make([]byte, len(buf), c)
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// readStart is the most readDeclared sets aside before a body's bytes
// arrive; declaredTrust is how many times the bytes received a declared
// length must be within before readDeclared takes it whole.
const (
	readStart     = 64 << 10
	declaredTrust = 8
)
