package coord

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/internal/testsupport"
)

// closedWithin reports whether the server closes c (a read ends with EOF or
// a reset) within d, reading whatever it sends first.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestHTTPMethodLabelsAreBounded: callers without the token choose the
// method string; the request metric keeps a fixed set of method labels
// whatever they send.
func TestHTTPMethodLabelsAreBounded(t *testing.T) {
	s, tok := fuzzServer(t)
	addr := s.HTTPAddr()
	for i := range 300 {
		req, _ := http.NewRequest(fmt.Sprintf("M%05d", i), "http://"+addr+"/v1/runs", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	series := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "hetflow_coord_http_requests_total{") {
			series++
			if strings.Contains(sc.Text(), `method="M0`) {
				t.Fatalf("a caller's method string became a label: %s", sc.Text())
			}
		}
	}
	if series == 0 || series > 10 {
		t.Fatalf("%d request series after 300 odd methods", series)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestHTTPConnectionsAreBoundedInTimeAndNumber: a connection that sends
// nothing, an upload that stalls and an idle keep-alive connection are all
// closed by the server after its limits; connections over MaxConns are
// closed at once, and the API answers again when the crowd is gone.
func TestHTTPConnectionsAreBoundedInTimeAndNumber(t *testing.T) {
	s, _ := fuzzServer(t, func(c *Config) {
		c.httpTimes = httpTimes{header: 300 * time.Millisecond, read: 600 * time.Millisecond, write: 5 * time.Second, idle: 300 * time.Millisecond}
	})
	addr := s.HTTPAddr()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	limit := testsupport.Scale(5 * time.Second)

	silent := dial()
	if !closedWithin(silent, limit) {
		t.Fatal("a connection that sent nothing stayed open")
	}
	stalled := dial()
	fmt.Fprintf(stalled, "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"path\":")
	if !closedWithin(stalled, limit) {
		t.Fatal("a stalled upload stayed open")
	}
	idle := dial()
	fmt.Fprintf(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if !closedWithin(idle, limit) { // the answer, then the close
		t.Fatal("an idle keep-alive connection stayed open")
	}

	// Over the limit (a server with the default time limits): held
	// connections fill it; the next is closed at once.
	s, _ = fuzzServer(t, func(c *Config) { c.MaxConns = 4 })
	addr = s.HTTPAddr()
	var held []net.Conn
	for range 4 {
		c := dial()
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\n")
		held = append(held, c)
	}
	testsupport.Eventually(t, limit, "4 connections held", func() bool { return s.conns.Open() == 4 })
	over := dial()
	start := time.Now()
	if !closedWithin(over, limit) || time.Since(start) > 2*time.Second {
		t.Fatalf("a connection over the limit was not closed at once (%v)", time.Since(start))
	}
	for _, c := range held {
		c.Close()
	}
	testsupport.Eventually(t, limit, "the API answers again", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	http.DefaultClient.CloseIdleConnections()
}
