package coord

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
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

// readDeclared gives back the body's bytes (at most limit+1 of them)
// whatever its declared length says and however the bytes arrive.
func TestReadDeclaredReadsTheBody(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const limit = 300 << 10
	for i := range 200 {
		n := rng.IntN(limit + 2000)
		body := make([]byte, n)
		for j := range body {
			body[j] = byte(rng.IntN(256))
		}
		declared := []int64{-1, int64(n), int64(n / 2), int64(n) * 3, 2 << 30}[i%5]
		var r io.Reader = bytes.NewReader(body)
		if i%3 == 0 {
			r = iotest.OneByteReader(r)
		} else if i%3 == 1 {
			r = iotest.HalfReader(r)
		}
		got, err := readDeclared(r, declared, limit)
		if err != nil {
			t.Fatal(err)
		}
		want := body[:min(n, limit+1)]
		if !bytes.Equal(got, want) {
			t.Fatalf("body of %d bytes declared %d: read %d bytes, want %d", n, declared, len(got), len(want))
		}
	}
}

// A request that declares gigabytes and sends two bytes costs the reader
// what it received, not what it declared (a client holding 512 such
// connections open used to pin 8 GB).
func TestReadDeclaredTrustsNoDeclaredLength(t *testing.T) {
	for _, declared := range []int64{2 << 30, 8 << 20} {
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		got, err := readDeclared(strings.NewReader("{}"), declared, 8<<20)
		runtime.ReadMemStats(&b)
		if err != nil || string(got) != "{}" {
			t.Fatalf("read %q, %v", got, err)
		}
		if alloc := b.TotalAlloc - a.TotalAlloc; alloc > 1<<20 {
			t.Fatalf("a body of 2 bytes declared %d allocated %d bytes, want at most 1 MB", declared, alloc)
		}
	}
	// A declared size is taken whole once an eighth of it is in: a large
	// body is not read through every doubling.
	body := bytes.Repeat([]byte("x"), 7<<20)
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	got, err := readDeclared(bytes.NewReader(body), int64(len(body)), 8<<20)
	runtime.ReadMemStats(&b)
	if err != nil || len(got) != len(body) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	if alloc := b.TotalAlloc - a.TotalAlloc; alloc > 12<<20 {
		t.Fatalf("a 7 MB body declared as such allocated %d bytes, want at most 12 MB", alloc)
	}
}
