package natsembed

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartAuthAndJetStream(t *testing.T) {
	s, err := Start(Options{Port: -1, StoreDir: t.TempDir(), User: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if _, err := nats.Connect(s.URL(), nats.Timeout(time.Second)); err == nil {
		t.Fatal("connected without credentials")
	}
	nc, err := nats.Connect(s.URL(), nats.UserInfo("u", "p"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := nc.JetStream()
	if _, err := js.AccountInfo(); err != nil {
		t.Fatalf("JetStream: %v", err)
	}
	if _, err := Start(Options{Port: -1}); err == nil {
		t.Fatal("no store dir accepted")
	}
}
