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

// A run's Assignment carries its flow: a 10K-task flow is over NATS's
// default 1 MiB payload, and such a run waited forever before this limit.
func TestLargeMessages(t *testing.T) {
	s, err := Start(Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("big")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("big", make([]byte, 8<<20)); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil || len(m.Data) != 8<<20 {
		t.Fatalf("8 MiB message: %v", err)
	}
}
