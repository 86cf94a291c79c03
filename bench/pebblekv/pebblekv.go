// Package pebblekv is a measurement prototype, not a product store: the
// claim, get, extend, complete and release of [retrysafe.Store] over
// github.com/cockroachdb/pebble/v2, a pure-Go embedded LSM key-value
// engine, with every write durable (pebble.Sync). The load harness runs
// the gateway on it next to the SQLite store to answer one question: is
// an embedded KV engine made for this access pattern decisively faster
// than SQLite, durably? See docs/performance.md for the numbers and the
// decision.
//
// How it works: one pebble key per record; each call locks one of 256
// stripes (by a hash of scope and key), reads the record, decides as the
// memory store does, and writes the new record with pebble.Sync. Pebble's
// commit pipeline puts the writes that arrive while a WAL sync runs into
// the next sync, so concurrent callers share fsyncs (group commit) without
// any batching code here. The stripe lock makes each decision atomic
// within one process; nothing protects against a second process opening
// the same directory (pebble itself refuses: it locks the directory).
//
// Not implemented (why it is a prototype): admin listing and deletion,
// sweeping of expired records (they would stay on disk), the notifier
// that wakes waiting duplicates, Ping, encryption, a format version, a
// store URL. The conformance suite (store/storetest) passes on it for
// what it implements (claim, get, extend, complete, release, fencing,
// expiry, concurrency) and skips the rest.
package pebblekv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/headercodec"
)

const stripes = 256

// Store is the prototype store over one pebble database.
type Store struct {
	db    *pebble.DB
	seed  maphash.Seed
	locks [stripes]sync.Mutex
}

// Open opens (creating it if needed) the pebble database in dir.
func Open(dir string) (*Store, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, err
	}
	return &Store{db: db, seed: maphash.MakeSeed()}, nil
}

// quietLogger drops pebble's informational messages (one per WAL
// recovered, per compaction) and keeps its errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)              {}
func (quietLogger) Errorf(format string, args ...any) { log.Printf("pebble: "+format, args...) }
func (quietLogger) Fatalf(format string, args ...any) { log.Fatalf("pebble: "+format, args...) }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// dbKey is the pebble key of scope/key: the scope's length, the scope,
// the key.
func dbKey(scope, key string) []byte {
	b := make([]byte, 0, binary.MaxVarintLen64+len(scope)+len(key))
	b = binary.AppendUvarint(b, uint64(len(scope)))
	b = append(b, scope...)
	return append(b, key...)
}

// lock locks the stripe of scope/key and returns its unlock.
func (s *Store) lock(scope, key string) func() {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(scope)
	h.WriteByte(0)
	h.WriteString(key)
	m := &s.locks[h.Sum64()%stripes]
	m.Lock()
	return m.Unlock
}

// load returns the record stored at k, or nil.
func (s *Store) load(k []byte, scope, key string) (*retrysafe.Record, error) {
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, retrysafe.Unavailable("get", err)
	}
	defer closer.Close()
	rec, err := decode(v)
	if err != nil {
		return nil, err
	}
	rec.Scope, rec.Key = scope, key
	return rec, nil
}

// put writes rec at k and waits for the WAL sync that holds it.
func (s *Store) put(k []byte, rec *retrysafe.Record) error {
	if err := s.db.Set(k, encode(rec), pebble.Sync); err != nil {
		return retrysafe.Unavailable("write", err)
	}
	return nil
}

// Claim implements [retrysafe.Store].
func (s *Store) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	defer s.lock(p.Scope, p.Key)()
	k := dbKey(p.Scope, p.Key)
	rec, err := s.load(k, p.Scope, p.Key)
	if err != nil {
		return nil, err
	}
	attempt, created := 1, p.Now
	if rec != nil && !rec.Expired(p.Now) {
		if rec.State != retrysafe.StateProcessing || p.Now.Before(rec.LeaseUntil) || rec.Fingerprint != p.Fingerprint {
			return &retrysafe.ClaimResult{Record: rec}, nil
		}
		attempt, created = rec.Attempt+1, rec.CreatedAt // takeover of an expired lease
	}
	rec = p.ProcessingRecord(attempt, created, p.Now, p.Now.Add(p.Lease))
	if err := s.put(k, rec); err != nil {
		return nil, err
	}
	return &retrysafe.ClaimResult{Claimed: true, Record: rec}, nil
}

// Get implements [retrysafe.Store].
func (s *Store) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rec, err := s.load(dbKey(p.Scope, p.Key), p.Scope, p.Key)
	if err != nil {
		return nil, err
	}
	if rec == nil || rec.Expired(p.Now) {
		return nil, retrysafe.ErrNotFound
	}
	return rec, nil
}

// owned returns the processing record at k owned by token, or
// ErrLeaseLost.
func (s *Store) owned(k []byte, scope, key, token string) (*retrysafe.Record, error) {
	rec, err := s.load(k, scope, key)
	if err != nil {
		return nil, err
	}
	if rec == nil || rec.State != retrysafe.StateProcessing || rec.Token != token {
		return nil, retrysafe.ErrLeaseLost
	}
	return rec, nil
}

// Extend implements [retrysafe.Store].
func (s *Store) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer s.lock(p.Scope, p.Key)()
	k := dbKey(p.Scope, p.Key)
	rec, err := s.owned(k, p.Scope, p.Key, p.Token)
	if err != nil {
		return err
	}
	rec.LeaseUntil, rec.UpdatedAt = p.Now.Add(p.Lease), p.Now
	return s.put(k, rec)
}

// Complete implements [retrysafe.Store].
func (s *Store) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer s.lock(p.Scope, p.Key)()
	k := dbKey(p.Scope, p.Key)
	rec, err := s.owned(k, p.Scope, p.Key, p.Token)
	if err != nil {
		return err
	}
	rec.State, rec.UpdatedAt, rec.ExpiresAt = retrysafe.StateCompleted, p.Now, p.Now.Add(p.TTL)
	rec.Response = p.Response
	if rec.Response == nil {
		rec.Response = &retrysafe.Response{}
	}
	return s.put(k, rec)
}

// Release implements [retrysafe.Store].
func (s *Store) Release(ctx context.Context, p *retrysafe.ReleaseParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer s.lock(p.Scope, p.Key)()
	k := dbKey(p.Scope, p.Key)
	if _, err := s.owned(k, p.Scope, p.Key, p.Token); err != nil {
		return err
	}
	if err := s.db.Delete(k, pebble.Sync); err != nil {
		return retrysafe.Unavailable("release", err)
	}
	return nil
}

// encode is the stored form of rec (scope and key are in the pebble key):
// state, attempt, the four times in Unix nanoseconds, fingerprint, token,
// route, then for a completed record the status, the encoded header and the body.
func encode(rec *retrysafe.Record) []byte {
	b := make([]byte, 0, 96+len(rec.Fingerprint)+len(rec.Token)+len(rec.Route))
	completed := rec.State == retrysafe.StateCompleted
	if completed {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(rec.Attempt))
	for _, t := range []time.Time{rec.CreatedAt, rec.UpdatedAt, rec.LeaseUntil, rec.ExpiresAt} {
		b = binary.AppendVarint(b, nanos(t))
	}
	b = appendBytes(b, []byte(rec.Fingerprint))
	b = appendBytes(b, []byte(rec.Token))
	b = appendBytes(b, []byte(rec.Route))
	if completed && rec.Response != nil {
		b = binary.AppendVarint(b, int64(rec.Response.Status))
		b = appendBytes(b, headercodec.Encode(rec.Response.Header))
		b = appendBytes(b, rec.Response.Body)
	}
	return b
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

var errCorrupt = errors.New("pebblekv: corrupt record")

// decode is the inverse of encode; it copies what it keeps (v belongs to
// pebble).
func decode(v []byte) (*retrysafe.Record, error) {
	if len(v) == 0 {
		return nil, errCorrupt
	}
	rec := &retrysafe.Record{State: retrysafe.StateProcessing}
	completed := v[0] == 1
	if completed {
		rec.State = retrysafe.StateCompleted
	}
	v = v[1:]
	attempt, n := binary.Uvarint(v)
	if n <= 0 {
		return nil, errCorrupt
	}
	rec.Attempt, v = int(attempt), v[n:]
	var times [4]time.Time
	for i := range times {
		t, n := binary.Varint(v)
		if n <= 0 {
			return nil, errCorrupt
		}
		times[i], v = fromNanos(t), v[n:]
	}
	rec.CreatedAt, rec.UpdatedAt, rec.LeaseUntil, rec.ExpiresAt = times[0], times[1], times[2], times[3]
	var fp, token, route []byte
	var err error
	if fp, v, err = readBytes(v); err != nil {
		return nil, err
	}
	if token, v, err = readBytes(v); err != nil {
		return nil, err
	}
	if route, v, err = readBytes(v); err != nil {
		return nil, err
	}
	rec.Fingerprint, rec.Token, rec.Route = string(fp), string(token), string(route)
	if completed {
		status, n := binary.Varint(v)
		if n <= 0 {
			return nil, errCorrupt
		}
		v = v[n:]
		var hdr, body []byte
		if hdr, v, err = readBytes(v); err != nil {
			return nil, err
		}
		if body, _, err = readBytes(v); err != nil {
			return nil, err
		}
		resp := &retrysafe.Response{Status: int(status), Body: append([]byte(nil), body...)}
		if len(hdr) > 0 {
			if resp.Header, err = headercodec.Decode(hdr); err != nil {
				return nil, fmt.Errorf("pebblekv: %w", err)
			}
		}
		rec.Response = resp
	}
	return rec, nil
}

func readBytes(v []byte) (field, rest []byte, err error) {
	l, n := binary.Uvarint(v)
	if n <= 0 || uint64(len(v)-n) < l {
		return nil, nil, errCorrupt
	}
	return v[n : n+int(l)], v[n+int(l):], nil
}
