package coord

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/testcert"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// to dir and returns their paths.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile, err := testcert.Files(dir, "hetflow test")
	must(t, err)
	return certFile, keyFile
}

// The API over TLS with a certificate made in the test: a client trusting
// it is served, a plain HTTP request and a client that does not trust it
// are refused, and a follower forwards to the leader over TLS.
func TestAPIOverTLS(t *testing.T) {
	certFile, keyFile := selfSigned(t, t.TempDir())
	srvTLS, err := proto.ServerTLS(certFile, keyFile)
	must(t, err)
	cliTLS, err := proto.ClientTLS(certFile)
	must(t, err)
	withTLS := func(c *Config) { c.TLS, c.ForwardTLS = srvTLS, cliTLS }
	c1 := startCoord(t, "c1", t.TempDir(), "", true, nil, withTLS)
	must(t, c1.WaitLeader(ctxFor(t, 20*time.Second)))
	testsupport.Eventually(t, 10*time.Second, "c1 leads", c1.Leader)
	c2 := startCoord(t, "c2", t.TempDir(), "", false, []string{c1.GossipAddr()}, withTLS)
	testsupport.Eventually(t, 20*time.Second, "two voters", func() bool { return voters(c1) == 2 })

	trusting := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cliTLS}}
	defer trusting.CloseIdleConnections()
	resp, err := trusting.Get("https://" + c1.HTTPAddr() + "/v1/leader")
	must(t, err)
	var li proto.LeaderInfo
	must(t, json.NewDecoder(resp.Body).Decode(&li))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || li.ID != "c1" {
		t.Fatalf("leader over TLS: %d %+v", resp.StatusCode, li)
	}

	// Plain HTTP to the TLS port, and TLS without trusting the certificate.
	resp, err = http.Get("http://" + c1.HTTPAddr() + "/v1/leader")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), `"c1"`) {
			t.Fatalf("plain HTTP to the TLS API: %d %s", resp.StatusCode, b)
		}
	}
	untrusting := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{}}}
	defer untrusting.CloseIdleConnections()
	if resp, err := untrusting.Get("https://" + c1.HTTPAddr() + "/v1/leader"); err == nil {
		resp.Body.Close()
		t.Fatal("a client that does not trust the certificate was served")
	}

	// Through the follower: forwarded to the leader over TLS (no node is
	// alive, so the leader refuses the flow: its 400 comes back). A new
	// voter learns who leads, and where it serves, a little after c1 counts
	// it: until then it answers 503 "no leader".
	testsupport.Eventually(t, 20*time.Second, "c2 knows the leader's API", func() bool {
		resp, err := trusting.Get("https://" + c2.HTTPAddr() + "/v1/leader")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var li proto.LeaderInfo
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&li) == nil && li.ID == "c1" && li.HTTP != ""
	})
	// A busy machine can cost the cluster its leader for a moment (an
	// election after missed heartbeats): "no leader" (503) is tried again.
	var er proto.ErrorResponse
	testsupport.Eventually(t, 20*time.Second, "a submit through c2 is answered by a leader", func() bool {
		body := strings.NewReader(`{"path": "w.yaml", "flow": "name: w\ntasks:\n  - {name: a, func: noop}\n"}`)
		resp, err = trusting.Post("https://"+c2.HTTPAddr()+"/v1/runs", "application/json", body)
		must(t, err)
		er = proto.ErrorResponse{}
		must(t, json.NewDecoder(resp.Body).Decode(&er))
		resp.Body.Close()
		return resp.StatusCode != http.StatusServiceUnavailable
	})
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(HeaderForwardedBy) != "c2" || !strings.Contains(er.Error, "no alive node") {
		t.Fatalf("submit through the follower over TLS: %d %q %+v", resp.StatusCode, resp.Header.Get(HeaderForwardedBy), er)
	}
}
