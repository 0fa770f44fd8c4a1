package natsembed

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A server with TLS (a self-signed certificate made here) and credentials:
// a client trusting the certificate with the credentials is served; one
// without TLS trust, or without the credentials, is refused.
func TestTLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "natsembed test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
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
