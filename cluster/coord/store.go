package coord

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// boltStore is raft's LogStore and StableStore on go.etcd.io/bbolt: one
// file, a bucket of log entries keyed by big-endian index and a bucket of
// stable values. (raft-boltdb's store sits on the old boltdb/bolt, which the
// race detector's pointer checks reject; raft-boltdb/v2 does not build with
// raft 1.8.)
type boltStore struct {
	db *bolt.DB
}

var (
	bucketLogs   = []byte("logs")
	bucketStable = []byte("stable")
	// errKeyNotFound is what raft expects (it compares the message).
	errKeyNotFound = errors.New("not found")
)

func openBoltStore(path string) (*boltStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("coord: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketLogs); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketStable)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("coord: init %s: %w", path, err)
	}
	return &boltStore{db: db}, nil
}

func (s *boltStore) Close() error { return s.db.Close() }

func key(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }

func (s *boltStore) FirstIndex() (uint64, error) { return s.edge(true) }
func (s *boltStore) LastIndex() (uint64, error)  { return s.edge(false) }

func (s *boltStore) edge(first bool) (idx uint64, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		k, _ := c.Last()
		if first {
			k, _ = c.First()
		}
		if k != nil {
			idx = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return idx, err
}

func (s *boltStore) GetLog(index uint64, l *raft.Log) error {
	return s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketLogs).Get(key(index))
		if v == nil {
			return raft.ErrLogNotFound
		}
		return decodeLog(v, l)
	})
}

func (s *boltStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *boltStore) StoreLogs(logs []*raft.Log) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLogs)
		for _, l := range logs {
			if err := b.Put(key(l.Index), encodeLog(l)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *boltStore) DeleteRange(lo, hi uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		for k, _ := c.Seek(key(lo)); k != nil && binary.BigEndian.Uint64(k) <= hi; k, _ = c.Next() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *boltStore) Set(k, v []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketStable).Put(k, v) })
}

func (s *boltStore) Get(k []byte) (v []byte, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketStable).Get(k); b != nil {
			v = append([]byte(nil), b...)
			return nil
		}
		return errKeyNotFound
	})
	return v, err
}

func (s *boltStore) SetUint64(k []byte, v uint64) error { return s.Set(k, key(v)) }

func (s *boltStore) GetUint64(k []byte) (uint64, error) {
	v, err := s.Get(k)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("coord: stable value %q is %d bytes, want 8", k, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// A log entry: index, term (8 bytes each), type (1), appended-at in unix ns
// (8), then data and extensions, each with a 4-byte length.
func encodeLog(l *raft.Log) []byte {
	b := make([]byte, 0, 33+len(l.Data)+len(l.Extensions))
	b = binary.BigEndian.AppendUint64(b, l.Index)
	b = binary.BigEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.Extensions)))
	return append(b, l.Extensions...)
}

var errBadLog = errors.New("coord: corrupt raft log entry")

func decodeLog(b []byte, l *raft.Log) error {
	if len(b) < 33 {
		return errBadLog
	}
	l.Index = binary.BigEndian.Uint64(b)
	l.Term = binary.BigEndian.Uint64(b[8:])
	l.Type = raft.LogType(b[16])
	if at := int64(binary.BigEndian.Uint64(b[17:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	} else {
		l.AppendedAt = time.Time{}
	}
	rest := b[25:]
	var parts [2][]byte
	for i := range parts {
		if len(rest) < 4 {
			return errBadLog
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return errBadLog
		}
		if n > 0 {
			parts[i] = append([]byte(nil), rest[:n]...)
		}
		rest = rest[n:]
	}
	l.Data, l.Extensions = parts[0], parts[1]
	return nil
}

var (
	_ raft.LogStore    = (*boltStore)(nil)
	_ raft.StableStore = (*boltStore)(nil)
)
