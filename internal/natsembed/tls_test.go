package natsembed

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hetflow/hetflow/internal/testcert"
)

// A server with TLS (a self-signed certificate made here) and credentials:
// a client trusting the certificate with the credentials is served; one
// without TLS trust, or without the credentials, is refused.
func TestTLS(t *testing.T) {
	der, key, err := testcert.New("natsembed test")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	srv := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	cli := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}

	s, err := Start(Options{Port: -1, StoreDir: t.TempDir(), User: "u", Password: "p", TLS: srv})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	nc, err := nats.Connect(s.URL(), nats.UserInfo("u", "p"), nats.Secure(cli), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatalf("trusting client: %v", err)
	}
	if !nc.TLSRequired() {
		t.Fatal("the server does not require TLS")
	}
	js, _ := nc.JetStream()
	if _, err := js.AccountInfo(); err != nil {
		t.Fatalf("JetStream over TLS: %v", err)
	}
	nc.Close()
	for name, opts := range map[string][]nats.Option{
		"no TLS trust":   {nats.UserInfo("u", "p")},
		"no credentials": {nats.Secure(cli)},
	} {
		if nc, err := nats.Connect(s.URL(), append(opts, nats.Timeout(2*time.Second), nats.NoReconnect())...); err == nil {
			nc.Close()
			t.Fatalf("%s: connected", name)
		}
	}
}
