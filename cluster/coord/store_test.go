package coord

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
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

// damagedStore writes a store of 300 entries, damages the file with hurt
// and opens it again.
func damagedStore(t *testing.T, hurt func(t *testing.T, b []byte, at int) []byte) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "raft.db")
	s, err := openBoltStore(path)
	must(t, err)
	filler := bytes.Repeat([]byte("x"), 200)
	var logs []*raft.Log
	for i := uint64(1); i <= 300; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: append([]byte(fmt.Sprintf("entry-%04d-", i)), filler...)})
	}
	must(t, s.StoreLogs(logs))
	must(t, s.SetUint64([]byte("CurrentTerm"), 3))
	must(t, s.Close())
	b, err := os.ReadFile(path)
	must(t, err)
	at := bytes.Index(b, []byte("entry-0150-"))
	if at < 0 {
		t.Fatal("entry 150 not in the file")
	}
	must(t, os.WriteFile(path, hurt(t, b, at), 0o600))
	s, err = openBoltStore(path)
	if err == nil {
		s.Close()
	}
	return err
}

// TestBoltStoreRefusesDamage: a damaged raft.db is refused at open, with
// ErrDataDir and the way to recover, whatever the damage: bytes of a
// value (bbolt's structure is intact: only the checksums tell), a page
// header, a truncated file, both meta pages. None panics.
func TestBoltStoreRefusesDamage(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		out := make([]byte, n)
		for i := range out {
			out[i] = byte(rnd.UintN(256))
		}
		return out
	}
	page := os.Getpagesize()
	for _, c := range []struct {
		name string
		hurt func(t *testing.T, b []byte, at int) []byte
	}{
		{"64 random bytes in a value", func(t *testing.T, b []byte, at int) []byte { copy(b[at:], random(64)); return b }},
		{"one bit of a value", func(t *testing.T, b []byte, at int) []byte { b[at+20] ^= 1; return b }},
		{"a leaf page's header", func(t *testing.T, b []byte, at int) []byte { copy(b[at/page*page:], random(64)); return b }},
		{"truncated", func(t *testing.T, b []byte, at int) []byte { return b[:at/page*page] }},
		{"both meta pages", func(t *testing.T, b []byte, at int) []byte { clear(b[:2*page]); return b }},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := damagedStore(t, c.hurt)
			if !errors.Is(err, ErrDataDir) || !strings.Contains(err.Error(), "without --bootstrap") {
				t.Fatalf("want ErrDataDir with the recovery, got %v", err)
			}
		})
	}
	if err := damagedStore(t, func(t *testing.T, b []byte, at int) []byte { return b }); err != nil {
		t.Fatalf("an intact store: %v", err)
	}
}

// TestBoltStoreSealsAnOlderStore: a store written before values carried
// checksums opens, and reads back what it held.
func TestBoltStoreSealsAnOlderStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	db, err := bolt.Open(path, 0o600, nil)
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error {
		logs, _ := tx.CreateBucket(bucketLogs)
		stable, _ := tx.CreateBucket(bucketStable)
		must(t, logs.Put(key(1), encodeLog(&raft.Log{Index: 1, Term: 2, Data: []byte("old")})))
		return stable.Put([]byte("CurrentTerm"), key(2))
	}))
	must(t, db.Close())
	s, err := openBoltStore(path)
	must(t, err)
	defer s.Close()
	var l raft.Log
	must(t, s.GetLog(1, &l))
	if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != 2 || string(l.Data) != "old" || l.Term != 2 {
		t.Fatalf("read back %+v, term %d %v", l, term, err)
	}
}

// BenchmarkStoreFlowEntry: a fresh store takes the entries of a first run
// of a 100K-task flow (its 16 MB flow_put, then a 0.5 MB run_submit), as a
// coordinator's first submit writes them.
func BenchmarkStoreFlowEntry(b *testing.B) {
	put, run := make([]byte, 16<<20), make([]byte, 512<<10)
	b.ReportAllocs()
	for b.Loop() {
		s, err := openBoltStore(filepath.Join(b.TempDir(), "raft.db"))
		if err != nil {
			b.Fatal(err)
		}
		for i, data := range [][]byte{put, run} {
			if err := s.StoreLogs([]*raft.Log{{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
