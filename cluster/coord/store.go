package coord

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// boltStore is raft's LogStore and StableStore on go.etcd.io/bbolt: one
// file, a bucket of log entries keyed by big-endian index and a bucket of
// stable values. Every value ends with its CRC-32C: bbolt checks its pages'
// structure, not their contents, and a damaged entry would otherwise be
// applied (or served) as if it were the leader's. The whole file is read
// and checked at open (openBoltStore); a damaged one is refused with
// ErrDataDir and the way to recover. (raft-boltdb's store sits on the old boltdb/bolt, which the
// race detector's pointer checks reject; raft-boltdb/v2 does not build with
// raft 1.8.)
type boltStore struct {
	db *bolt.DB
}

var (
	bucketLogs   = []byte("logs")
	bucketStable = []byte("stable")
	bucketMeta   = []byte("meta")
	keyFormat    = []byte("format")
	formatCRC    = []byte("crc32c-v1") // values end with their CRC-32C
	// errKeyNotFound is what raft expects (it compares the message).
	errKeyNotFound = errors.New("not found")

	// ErrDataDir is matched by a Start refused because of its data
	// directory: not writable, in use by another process, or holding a
	// damaged raft.db (the error says how to recover). The CLI exits 2.
	ErrDataDir = errors.New("coord: unusable data directory")

	errChecksum = errors.New("checksum mismatch")
	castagnoli  = crc32.MakeTable(crc32.Castagnoli)
)

// recoverHint is how to bring back a coordinator whose raft.db is damaged.
const recoverHint = "to recover, stop this coordinator, move its data directory aside and start it again " +
	"with the same --id and addresses but without --bootstrap: the leader re-sends it the log and the latest " +
	"snapshot (keep the moved directory if no other coordinator holds the cluster's data)"

func corrupt(path string, err error) error {
	return fmt.Errorf("%w: %s is damaged (%v); %s", ErrDataDir, path, err, recoverHint)
}

// seal appends v's checksum; unseal checks and strips it.
func seal(v []byte) []byte { return binary.BigEndian.AppendUint32(v, crc32.Checksum(v, castagnoli)) }

func unseal(v []byte) ([]byte, error) {
	if len(v) < 4 {
		return nil, errChecksum
	}
	body := v[:len(v)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(v[len(v)-4:]) {
		return nil, errChecksum
	}
	return body, nil
}

// initialMmap is the store's first memory map (address space, not file
// size). bbolt maps the file anew each time it outgrows the map, doubling
// it, and every remap first copies the values of the write transaction out
// of the map: a first 16 MB flow entry into a fresh store was copied three
// times over (BenchmarkStoreFlowEntry: 108 MB allocated).
const initialMmap = 256 << 20

// openBoltStore opens (or creates) the store and checks every value in it.
// bbolt panics on some damaged pages: a panic here is a damaged file too.
func openBoltStore(path string) (s *boltStore, err error) {
	var db *bolt.DB
	defer func() {
		if p := recover(); p != nil {
			err = corrupt(path, fmt.Errorf("bbolt: %v", p))
		}
		if err != nil && db != nil {
			func() {
				defer func() { _ = recover() }()
				db.Close()
			}()
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, InitialMmapSize: initialMmap})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s is locked: another coordinator uses %s", ErrDataDir, path, filepath.Dir(path))
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, corrupt(path, err)
	case err != nil:
		return nil, fmt.Errorf("%w: open %s: %w", ErrDataDir, path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		logs, err := tx.CreateBucketIfNotExists(bucketLogs)
		if err != nil {
			return err
		}
		stable, err := tx.CreateBucketIfNotExists(bucketStable)
		if err != nil {
			return err
		}
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		switch f := meta.Get(keyFormat); {
		case bytes.Equal(f, formatCRC):
			return nil
		case f != nil:
			return fmt.Errorf("unknown format %q", f)
		}
		// A store of an older version: seal every value once.
		for _, b := range []*bolt.Bucket{logs, stable} {
			var keys, vals [][]byte
			if err := b.ForEach(func(k, v []byte) error {
				keys, vals = append(keys, bytes.Clone(k)), append(vals, seal(bytes.Clone(v)))
				return nil
			}); err != nil {
				return err
			}
			for i, k := range keys {
				if err := b.Put(k, vals[i]); err != nil {
					return err
				}
			}
		}
		return meta.Put(keyFormat, formatCRC)
	})
	if err != nil {
		return nil, corrupt(path, err)
	}
	if err := db.View(verify); err != nil {
		return nil, corrupt(path, err)
	}
	return &boltStore{db: db}, nil
}

// verify reads every value and checks its checksum, and that each log
// entry decodes under its own index.
func verify(tx *bolt.Tx) error {
	var l raft.Log
	if err := tx.Bucket(bucketLogs).ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("log key %x", k)
		}
		i := binary.BigEndian.Uint64(k)
		body, err := unseal(v)
		if err != nil {
			return fmt.Errorf("log entry %d: %w", i, err)
		}
		if err := decodeLog(body, &l); err != nil || l.Index != i {
			return fmt.Errorf("log entry %d: %v (index %d)", i, err, l.Index)
		}
		return nil
	}); err != nil {
		return err
	}
	return tx.Bucket(bucketStable).ForEach(func(k, v []byte) error {
		if _, err := unseal(v); err != nil {
			return fmt.Errorf("stable value %q: %w", k, err)
		}
		return nil
	})
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
		body, err := unseal(v)
		if err != nil {
			return fmt.Errorf("%w %d: %w", errBadLog, index, err)
		}
		return decodeLog(body, l)
	})
}

func (s *boltStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *boltStore) StoreLogs(logs []*raft.Log) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLogs)
		for _, l := range logs {
			if err := b.Put(key(l.Index), seal(encodeLog(l))); err != nil {
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
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketStable).Put(k, seal(bytes.Clone(v))) })
}

func (s *boltStore) Get(k []byte) (v []byte, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketStable).Get(k); b != nil {
			body, err := unseal(b)
			if err != nil {
				return fmt.Errorf("coord: stable value %q: %w", k, err)
			}
			v = bytes.Clone(body)
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
	b := make([]byte, 0, 33+len(l.Data)+len(l.Extensions)+4) // and seal's checksum
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
