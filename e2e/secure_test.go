package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/internal/testcert"
	"github.com/hetflow/hetflow/internal/testsupport"
)

// exited waits (with a deadline) for a process that must stop on its own
// and returns its exit code and log.
func exited(t *testing.T, p *proc, d time.Duration) (int, string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s still runs after %v; it should have given up", p.name, d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.ProcessState.ExitCode(), p.log.String()
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A cluster of the real binaries with one secret file: natsd requires its
// credentials, the coordinator and the node hold it. A node or coordinator
// without it, or with another secret, stops at once with exit 4 and says
// why; the CLI without the token (or with another) exits 4; with the token
// it runs a flow. /metrics of the coordinator and of the node need the
// token, /healthz does not.
func TestLoopbackSecuredCluster(t *testing.T) {
	dir := t.TempDir()
	secret, other := filepath.Join(dir, "secret"), filepath.Join(dir, "other")
	if err := os.WriteFile(secret, []byte("0f1e2d3c4b5a69788796a5b4c3d2e1f0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte("not the cluster's secret at all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokOut, code := cli(t, "token", "--secret-file", secret)
	if code != 0 {
		t.Fatalf("token: exit %d", code)
	}
	token := strings.TrimSpace(tokOut)
	tokenFile, wrongToken := filepath.Join(dir, "token"), filepath.Join(dir, "wrong-token")
	os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
	os.WriteFile(wrongToken, []byte("0000\n"), 0o600)

	natsURL := "nats://" + addr(freePort(t))
	start(t, "natsd", "natsd", "--addr", strings.TrimPrefix(natsURL, "nats://"), "--store", filepath.Join(dir, "nats"), "--secret-file", secret)
	g, h, r := addr(freePort(t)), addr(freePort(t)), addr(freePort(t))
	server := "http://" + h
	start(t, "c1", "coordinator", "serve", "--id", "c1", "--data", filepath.Join(dir, "c1"), "--raft", r, "--http", h,
		"--gossip", g, "--nats", natsURL, "--bootstrap", "--secret-file", secret)
	testsupport.Eventually(t, 30*time.Second, "c1 healthy", func() bool { _, code := poll(t, "health", "--server", server); return code == 0 })
	nodeHTTP, n2HTTP := addr(freePort(t)), addr(freePort(t))
	start(t, "n1", "node", "--id", "n1", "--nats", natsURL, "--gossip", addr(freePort(t)), "--join", g,
		"--http", nodeHTTP, "--cpus", "2", "--secret-file", secret)
	// n2 holds only its own credential (the recommended way; n1's
	// --secret-file still works).
	n2Cred := filepath.Join(dir, "n2.cred")
	if out, code := cli(t, "credentials", "n2", "--secret-file", secret, "--out", n2Cred); code != 0 {
		t.Fatalf("credentials n2: exit %d: %s", code, out)
	}
	start(t, "n2", "node", "--id", "n2", "--nats", natsURL, "--gossip", addr(freePort(t)), "--join", g,
		"--http", n2HTTP, "--cpus", "2", "--credentials-file", n2Cred)

	// Outsiders give up at once with exit 4, naming the refusal.
	for _, c := range []struct {
		name string
		args []string
	}{
		{"node without the secret", []string{"node", "--id", "x1", "--nats", natsURL, "--gossip", addr(freePort(t)), "--join", g}},
		{"node with another secret", []string{"node", "--id", "x2", "--nats", natsURL, "--gossip", addr(freePort(t)), "--join", g, "--secret-file", other}},
		{"coordinator with another secret", []string{"coordinator", "serve", "--id", "c9", "--data", filepath.Join(dir, "c9"),
			"--raft", addr(freePort(t)), "--http", addr(freePort(t)), "--gossip", addr(freePort(t)), "--nats", natsURL, "--join", g, "--secret-file", other}},
	} {
		p := start(t, c.name, c.args...)
		code, log := exited(t, p, 60*time.Second)
		if code != 4 || !strings.Contains(log, "not authorised") {
			t.Fatalf("%s: exit %d, want 4 naming the refusal; log:\n%s", c.name, code, log)
		}
	}
	// Another node's credential is no use: it names its node.
	p := start(t, "node with n2's credential", "node", "--id", "x3", "--nats", natsURL, "--gossip", addr(freePort(t)), "--join", g,
		"--credentials-file", n2Cred)
	if code, log := exited(t, p, 60*time.Second); code != 2 || !strings.Contains(log, `node "n2"'s`) {
		t.Fatalf("node x3 with n2's credential: exit %d, want 2 naming it; log:\n%s", code, log)
	}

	// The CLI: no token, a wrong one, then the right one.
	testsupport.Eventually(t, 30*time.Second, "n1 and n2 alive", func() bool {
		out, code := poll(t, "nodes", "--json", "--server", server, "--token-file", tokenFile)
		return code == 0 && strings.Count(out, `"state":"alive"`) == 2
	})
	flow := filepath.Join(dir, "f.yaml")
	os.WriteFile(flow, []byte("name: f\ntasks:\n  - {name: a, func: hash, node: n1}\n  - {name: b, func: hash, node: n2, succeed: [a]}\n  - {name: c, func: hash, node: n1, succeed: [b]}\n"), 0o644)
	if _, code := cli(t, "submit", flow, "--server", server); code != 4 {
		t.Fatalf("submit without a token: exit %d, want 4", code)
	}
	if _, code := cli(t, "runs", "--server", server, "--token-file", wrongToken); code != 4 {
		t.Fatalf("runs with a wrong token: exit %d, want 4", code)
	}
	if out, code := cli(t, "runs", "--json", "--server", server, "--token-file", tokenFile); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("refused submits made runs: exit %d: %s", code, out)
	}
	out, code := cli(t, "submit", flow, "--wait", "--json", "--server", server, "--token-file", tokenFile)
	if code != 0 || !strings.Contains(out, `"state":"succeeded"`) {
		t.Fatalf("submit with the token: exit %d: %s", code, out)
	}

	// HTTP: /healthz open and quiet, /metrics behind the token.
	if code, body := get(t, server+"/healthz", ""); code != 200 || strings.Contains(body, "c1") {
		t.Fatalf("healthz without a token: %d %s", code, body)
	}
	for _, u := range []string{server + "/metrics", "http://" + nodeHTTP + "/metrics", "http://" + n2HTTP + "/metrics"} {
		if code, _ := get(t, u, ""); code != http.StatusUnauthorized {
			t.Fatalf("%s without a token: %d", u, code)
		}
		if code, body := get(t, u, token); code != 200 || !strings.Contains(body, "hetflow_") {
			t.Fatalf("%s with the token: %d", u, code)
		}
	}
	if _, body := get(t, "http://"+nodeHTTP+"/metrics", token); !strings.Contains(body, `hetflow_messages_dropped_total{reason="malformed"} 0`) {
		t.Fatalf("the node exports no dropped-message counter:\n%s", body)
	} else if !strings.Contains(body, `hetflow_node_record_reads_total{kind="behind"}`) || !strings.Contains(body, `hetflow_node_record_reads_total{kind="readback"}`) {
		t.Fatalf("the node exports no record-read counters:\n%s", body)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile, err := testcert.Files(dir, "hetflow e2e")
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TLS everywhere it is offered: natsd --tls-cert/--tls-key, the
// coordinator's API (serve --tls-cert/--tls-key) and both the coordinator
// and a node trusting NATS with --nats-ca. The CLI reaches the API over
// https with --ca-file and refuses it without (exit 3: it cannot be reached
// safely); a flow runs.
func TestLoopbackAPIOverTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir)
	natsAddr := addr(freePort(t))
	start(t, "natsd", "natsd", "--addr", natsAddr, "--store", filepath.Join(dir, "nats"), "--tls-cert", certFile, "--tls-key", keyFile)
	h, g := addr(freePort(t)), addr(freePort(t))
	server := "https://" + h
	start(t, "c1", "coordinator", "serve", "--id", "c1", "--data", filepath.Join(dir, "c1"), "--raft", addr(freePort(t)),
		"--http", h, "--gossip", g, "--nats", "nats://"+natsAddr, "--nats-ca", certFile, "--bootstrap", "--tls-cert", certFile, "--tls-key", keyFile)
	start(t, "n1", "node", "--id", "n1", "--nats", "nats://"+natsAddr, "--nats-ca", certFile, "--gossip", addr(freePort(t)), "--join", g, "--cpus", "2")
	testsupport.Eventually(t, 30*time.Second, "c1 healthy over TLS", func() bool {
		_, code := poll(t, "health", "--server", server, "--ca-file", certFile)
		return code == 0
	})
	if out, code := cli(t, "peers", "--json", "--server", server, "--ca-file", certFile); code != 0 || !strings.Contains(out, `"id":"c1"`) {
		t.Fatalf("peers over TLS: exit %d: %s", code, out)
	}
	if _, code := cli(t, "health", "--server", server); code != 3 {
		t.Fatalf("health without trusting the certificate: exit %d, want 3", code)
	}
	if _, code := cli(t, "runs", "--server", "http://"+h, "--ca-file", certFile); code == 0 {
		t.Fatal("plain HTTP to the TLS API answered")
	}
	if _, code := cli(t, "serve", "--id", "c2", "--data", filepath.Join(dir, "c2"), "--tls-cert", certFile); code != 2 {
		t.Fatalf("--tls-cert without --tls-key: exit %d, want 2", code)
	}
	testsupport.Eventually(t, 30*time.Second, "n1 alive", func() bool {
		out, code := poll(t, "nodes", "--json", "--server", server, "--ca-file", certFile)
		return code == 0 && strings.Contains(out, `"state":"alive"`)
	})
	flow := filepath.Join(dir, "f.yaml")
	os.WriteFile(flow, []byte("name: f\ntasks:\n  - {name: a, func: hash}\n  - {name: b, func: hash, succeed: [a]}\n"), 0o644)
	if out, code := cli(t, "submit", flow, "--wait", "--json", "--server", server, "--ca-file", certFile); code != 0 || !strings.Contains(out, `"state":"succeeded"`) {
		t.Fatalf("a flow with TLS on NATS and the API: exit %d: %s", code, out)
	}
}
