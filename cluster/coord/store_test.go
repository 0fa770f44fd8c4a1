package coord

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestBoltStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	s, err := openBoltStore(path)
	must(t, err)
	if i, _ := s.LastIndex(); i != 0 {
		t.Fatalf("empty store: last %d", i)
	}
	at := time.Unix(1700000000, 123)
	var logs []*raft.Log
	for i := uint64(1); i <= 5; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: []byte{byte(i)}, AppendedAt: at})
	}
	logs[4].Extensions = []byte("ext")
	logs[3].Data = nil
	must(t, s.StoreLogs(logs))
	must(t, s.DeleteRange(1, 2))
	must(t, s.SetUint64([]byte("term"), 7))
	must(t, s.Set([]byte("vote"), []byte("c2")))
	must(t, s.Close())

	s, err = openBoltStore(path) // durable
	must(t, err)
	defer s.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 3 || last != 5 {
		t.Fatalf("first %d last %d, want 3 5", first, last)
	}
	var l raft.Log
	must(t, s.GetLog(5, &l))
	if l.Index != 5 || l.Term != 2 || l.Type != raft.LogCommand || string(l.Data) != "\x05" || string(l.Extensions) != "ext" || !l.AppendedAt.Equal(at) {
		t.Fatalf("log 5 read back as %+v", l)
	}
	must(t, s.GetLog(4, &l))
	if l.Data != nil || l.Extensions != nil {
		t.Fatalf("log 4: %+v", l)
	}
	if err := s.GetLog(1, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("deleted log: %v", err)
	}
	if v, err := s.GetUint64([]byte("term")); err != nil || v != 7 {
		t.Fatalf("term %d %v", v, err)
	}
	if v, err := s.Get([]byte("vote")); err != nil || string(v) != "c2" {
		t.Fatalf("vote %q %v", v, err)
	}
	if _, err := s.GetUint64([]byte("nothing")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: %v (raft wants the message \"not found\")", err)
	}
	if err := decodeLog([]byte("short"), &l); !errors.Is(err, errBadLog) {
		t.Fatalf("corrupt entry: %v", err)
	}
	bad := encodeLog(&raft.Log{Index: 1, Data: []byte("abc")})
	if err := decodeLog(bad[:len(bad)-5], &l); !errors.Is(err, errBadLog) {
		t.Fatalf("truncated entry: %v", err)
	}
}
