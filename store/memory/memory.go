// Package memory is an in-memory [retrysafe.Store]: the reference
// implementation of the store contract, for tests, demos and single-process
// services that can afford to forget their records on restart.
//
// It is written to be read in one sitting by someone implementing a store
// of their own: each rule of the [retrysafe.Store] contract appears once,
// in the method it governs, with a comment naming it.
//
//   - Records are kept in a fixed number of shards, each a Go map behind
//     its own mutex, chosen by a hash of scope and key, so that requests
//     for different keys seldom wait for each other. Every call on one key
//     runs under that key's shard lock, which is what makes Claim atomic.
//   - Records are immutable: a change (takeover, renewal, completion)
//     stores a new entry. An entry keeps a record in a form the garbage
//     collector need not look into (record.go): a completed record is two
//     objects, one string and its body, whatever its header. Every read
//     decodes a fresh [retrysafe.Record] from it, whose strings and body
//     share the entry's, never modified.
//   - The store is bounded (Config.MaxRecords). When it is full, a claim
//     of a new key first evicts expired completed records and abandoned
//     processing records (lease ran out more than
//     Config.ProcessingRetention ago), never live ones, and is refused with
//     an error matching [retrysafe.ErrStoreFull] if there is still no room.
//     A janitor goroutine deletes the same records in the background;
//     expiry is enforced on read regardless.
//
// The records are still in the Go heap: each garbage collection marks two
// objects per completed record, so with hundreds of thousands of records
// the collector's work per request grows with them. The other stores keep
// records outside the Go heap.
//
// The store does not survive a restart and is not shared between
// processes: run several instances against PostgreSQL or Redis instead.
package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/waiters"
)

// Defaults for zero Config fields.
const (
	DefaultMaxRecords      = 1_000_000
	DefaultJanitorInterval = time.Minute
)

// Config configures a [Store]. The zero value is ready to use.
type Config struct {
	// MaxRecords bounds the number of stored records; zero (or a negative
	// value) means DefaultMaxRecords (1,000,000). When the store is full, a
	// claim of a new key first evicts completed records that have expired
	// and processing records retired by ProcessingRetention; if it is still
	// full, the claim fails with an error matching retrysafe.ErrStoreFull
	// and ErrFull. Live records are never evicted.
	MaxRecords int
	// JanitorInterval is how often expired completed records and retired
	// processing records are deleted in the background; zero means
	// DefaultJanitorInterval (1 minute); a negative value disables the
	// janitor.
	JanitorInterval time.Duration
	// ProcessingRetention is how long the janitor and a full store's
	// eviction keep a processing record after its lease ran out (an
	// attempt whose outcome is unknown); afterwards it is deleted and no
	// longer counts toward MaxRecords. Zero (or a negative value) means
	// admin.DefaultProcessingRetention (7 days). [Store.Sweep] takes
	// its retention from its params instead.
	ProcessingRetention time.Duration
	// Now is the janitor's clock; nil means time.Now. Store methods take
	// their time from params.Now, never from this clock.
	Now func() time.Time
}

// ErrFull is wrapped (by [retrysafe.Full], so the error also matches
// retrysafe.ErrStoreFull, and not retrysafe.ErrStoreUnavailable) by Claim
// when MaxRecords live records are stored and none can be evicted.
var ErrFull = errors.New("memory store full: MaxRecords live records stored, none expired")

// errClosed is returned, wrapped, by every method after Close.
var errClosed = errors.New("memory store closed")

// numShards is the number of shards of a store. More shards than cores
// keeps two cores from often wanting the same mutex; more than that buys
// nothing.
const numShards = 32

// id identifies a record: scope and key.
type id struct{ scope, key string }

// shard holds the records whose id hashes to it, behind its own mutex.
type shard struct {
	mu      sync.Mutex
	records map[id]entry // see put
	// peak is the most records the map has held since it was made: Go
	// maps do not shrink, so a sweep that leaves far fewer makes a new one.
	peak int
	// evictable is the earliest time at which one of the shard's records
	// may be evicted (a completed record's ExpiresAt, a processing
	// record's LeaseUntil + retention) or a time before it. A full store
	// sweeps only the shards whose time has come, so that refusing a claim
	// does not read every record again.
	evictable time.Time
	closed    bool
}

// Store is an in-memory [retrysafe.Store]. It also implements
// [admin.Pinger], [admin.Sweeper], [retrysafe.Notifier],
// [admin.Admin] and [retrysafe.NonBlocking]. Create it with [New]; the
// zero value is not usable.
type Store struct {
	max       int
	now       func() time.Time
	retention time.Duration

	seed   maphash.Seed
	shards [numShards]shard
	count  atomic.Int64 // records held in all shards (see reserve)
	subs   waiters.Registry[id]

	stop        chan struct{} // closed by Close
	janitorDone chan struct{} // closed when the janitor goroutine returns
	closeOnce   sync.Once
}

var (
	_ retrysafe.Store       = (*Store)(nil)
	_ admin.Pinger          = (*Store)(nil)
	_ admin.Sweeper         = (*Store)(nil)
	_ retrysafe.Notifier    = (*Store)(nil)
	_ admin.Admin           = (*Store)(nil)
	_ retrysafe.NonBlocking = (*Store)(nil)
)

// New returns a store configured by cfg and starts its janitor (unless
// cfg.JanitorInterval is negative). Call [Store.Close] to stop it.
func New(cfg Config) *Store {
	s := &Store{
		max:         cfg.MaxRecords,
		now:         cfg.Now,
		retention:   cfg.ProcessingRetention,
		seed:        maphash.MakeSeed(),
		stop:        make(chan struct{}),
		janitorDone: make(chan struct{}),
	}
	if s.max <= 0 {
		s.max = DefaultMaxRecords
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.retention <= 0 {
		s.retention = admin.DefaultProcessingRetention
	}
	for k := range s.shards {
		s.shards[k].records = make(map[id]entry)
	}
	interval := cmp.Or(cfg.JanitorInterval, DefaultJanitorInterval)
	if interval < 0 {
		close(s.janitorDone)
		return s
	}
	go s.janitor(interval)
	return s
}

// lock checks ctx, takes the mutex of i's shard and checks that the store
// is open. On success the caller must unlock the shard.
func (s *Store) lock(ctx context.Context, op string, i id) (*shard, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sh := &s.shards[maphash.Comparable(s.seed, i)%numShards]
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return nil, retrysafe.Unavailable(op, errClosed)
	}
	return sh, nil
}

// Claim implements [retrysafe.Store].
func (s *Store) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	for evicted := false; ; evicted = true {
		res, full, err := s.claim(ctx, p)
		if !full {
			return res, err
		}
		if evicted {
			return nil, retrysafe.Full("claim", fmt.Errorf("%w (MaxRecords=%d)", ErrFull, s.max))
		}
		// No room for a new key: make some, without holding the key's
		// shard, and try once more.
		s.evict(p.Now)
	}
}

// claim is one attempt of Claim. full reports that the key is new and the
// store has no room for it.
func (s *Store) claim(ctx context.Context, p *retrysafe.ClaimParams) (res *retrysafe.ClaimResult, full bool, err error) {
	i := id{p.Scope, p.Key}
	sh, err := s.lock(ctx, "claim", i)
	if err != nil {
		return nil, false, err
	}
	defer sh.mu.Unlock()
	// Claim is atomic: the read and the write below happen under one
	// lock, so among concurrent claims of a key exactly one wins.
	e, ok := sh.records[i]
	var found *retrysafe.ClaimResult
	var rec *retrysafe.Record
	if ok {
		found = &sh.read(e).res
		rec = found.Record
	}
	switch {
	case ok && rec.State == retrysafe.StateCompleted && !rec.Expired(p.Now):
		// A live result: replay it.
		return found, false, nil
	case ok && rec.State == retrysafe.StateProcessing && (p.Now.Before(rec.LeaseUntil) || rec.Fingerprint != p.Fingerprint):
		// In flight, or an expired lease that only the same request may
		// take over: the caller gets the record, nothing changes.
		return found, false, nil
	case ok && rec.State == retrysafe.StateProcessing && (p.NoTakeover || p.TakeoverToken != "" && p.TakeoverToken != rec.Token):
		// An expired lease the caller may not take over: its policy
		// blocks takeovers (NoTakeover), or it may take over only the
		// attempt it decided about (TakeoverToken). Nothing changes.
		return found, false, nil
	case ok && rec.State == retrysafe.StateProcessing:
		// Takeover of an expired lease: a new token, one more attempt,
		// the creation time and the checkpoint kept (so the new owner
		// can resume), the abandoned mark cleared (ProcessingRecord
		// starts without one).
		taken := p.ProcessingRecord(rec.Attempt+1, rec.CreatedAt, p.Now, p.Now.Add(p.Lease))
		taken.Checkpoint = rec.Checkpoint
		sh.put(newEntry(taken))
		return claimed(taken), false, nil
	case !ok && !s.reserve():
		return nil, true, nil
	}
	// Absent, or completed and expired (expiry is enforced on read, so it
	// counts as absent whether or not it has been swept): a new record.
	fresh := p.ProcessingRecord(1, p.Now, p.Now, p.Now.Add(p.Lease))
	sh.put(newEntry(fresh))
	sh.peak = max(sh.peak, len(sh.records))
	if due := fresh.LeaseUntil.Add(s.retention); due.Before(sh.evictable) {
		sh.evictable = due
	}
	return claimed(fresh), false, nil
}

// put stores e under its own scope and key, strings of its text, so that
// the map holds no string of the caller's (a Go map that replaces a value
// replaces its key's strings too).
func (sh *shard) put(e entry) { sh.records[e.id()] = e }

// reserve counts one more record held and reports whether that is within
// MaxRecords; when it is not, the count is left as it was. The count is
// one for the whole store, so concurrent claims in different shards never
// take it past MaxRecords.
func (s *Store) reserve() bool {
	if s.count.Add(1) > int64(s.max) {
		s.count.Add(-1)
		return false
	}
	return true
}

// Get implements [retrysafe.Store].
func (s *Store) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	sh, err := s.lock(ctx, "get", id{p.Scope, p.Key})
	if err != nil {
		return nil, err
	}
	defer sh.mu.Unlock()
	e, ok := sh.records[id{p.Scope, p.Key}]
	// An expired result counts as absent, swept or not.
	if !ok || e.expired(p.Now) {
		return nil, retrysafe.ErrNotFound
	}
	return &sh.read(e).rec, nil
}

// read returns the record e keeps, decoded. A completed record read a
// second time is kept decoded in its entry for the reads after it (a key
// replayed twice is likely replayed again; most are replayed at most
// once, and keeping each first read would grow the heap the collector
// scans by a decoded record per replayed key). A processing record
// changes too often to keep.
func (sh *shard) read(e entry) *view {
	switch {
	case !e.completed:
		return e.decode(true)
	case e.read != nil:
		return e.read
	case !e.readOnce:
		e.readOnce = true
		sh.put(e)
		return e.decode(true)
	}
	e.read = e.decode(true)
	sh.put(e)
	return e.read
}

// owned returns the processing record i of sh if token owns it. Extend,
// Complete and Release are fenced by the owner token: a process whose
// lease was taken over gets ErrLeaseLost and changes nothing. The lease
// itself is not checked: an owner whose lease ran out, but was not taken
// over, may still finish.
func (sh *shard) owned(i id, token string) (entry, error) {
	e, ok := sh.records[i]
	if !ok || e.completed || e.token() != token {
		return entry{}, retrysafe.ErrLeaseLost
	}
	return e, nil
}

// Extend implements [retrysafe.Store].
func (s *Store) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	i := id{p.Scope, p.Key}
	sh, err := s.lock(ctx, "extend", i)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	renewed, err := sh.owned(i, p.Token)
	if err != nil {
		return err
	}
	renewed.updated = nanos(p.Now)
	if p.Abandon {
		// The owner gives up: the outcome is unknown from now on, and
		// the lease runs out when it would have (Lease is ignored).
		renewed.abandoned = true
	} else {
		renewed.leaseUntil = nanos(p.Now.Add(p.Lease))
	}
	if p.Checkpoint != nil {
		// The store keeps its own copy, stamped with the write's time.
		cp := *p.Checkpoint
		cp.At = p.Now
		renewed.setCheckpoint(&cp)
		fields := renewed.fields()
		fields[fieldCheckpoint] = cp.Name
		renewed.text = newText(fields, nil)
	}
	sh.put(renewed)
	if due := at(renewed.leaseUntil).Add(s.retention); due.Before(sh.evictable) { // Extend may shorten the lease
		sh.evictable = due
	}
	return nil
}

// Complete implements [retrysafe.Store].
func (s *Store) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	i := id{p.Scope, p.Key}
	sh, err := s.lock(ctx, "complete", i)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	done, err := sh.owned(i, p.Token)
	if err != nil {
		return err
	}
	// Complete keeps Token, Attempt, Fingerprint, Route, CreatedAt,
	// LeaseUntil and the checkpoint, clears the abandoned mark (the
	// outcome is known now), and sets UpdatedAt and ExpiresAt. It keeps a
	// copy of the response (nil is kept as an empty one): the body's
	// bytes, and the header's strings in the entry's text. The caller may
	// reuse what it passed once Complete returns.
	done.completed = true
	done.abandoned = false
	done.updated = nanos(p.Now)
	done.expires = nanos(p.Now.Add(p.TTL))
	var header http.Header
	if resp := p.Response; resp != nil {
		done.status, header = resp.Status, resp.Header
		if resp.Body != nil {
			done.body = append([]byte{}, resp.Body...)
		}
	}
	done.text = newText(done.fields(), header)
	// One map write: a concurrent Get sees the processing record or the
	// whole completed one, never a part.
	sh.put(done)
	if expires := at(done.expires); expires.Before(sh.evictable) {
		sh.evictable = expires
	}
	s.subs.Notify(i)
	return nil
}

// Release implements [retrysafe.Store]: the owner gives the key up (nothing
// ran), so the next claim runs as new.
func (s *Store) Release(ctx context.Context, p *retrysafe.ReleaseParams) error {
	i := id{p.Scope, p.Key}
	sh, err := s.lock(ctx, "release", i)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if _, err := sh.owned(i, p.Token); err != nil {
		return err
	}
	s.deleteLocked(sh, i)
	return nil
}

// deleteLocked deletes record i, held in sh, and wakes its waiters.
func (s *Store) deleteLocked(sh *shard, i id) {
	delete(sh.records, i)
	s.count.Add(-1)
	s.subs.Notify(i)
}

// NonBlocking implements [retrysafe.NonBlocking]: every call takes a
// shard's mutex for a bounded amount of work and never waits for I/O.
func (s *Store) NonBlocking() bool { return true }

// Subscribe implements [retrysafe.Notifier]. The channel (buffer 1)
// receives a value when the record is completed, released, deleted or
// retired. ctx bounds the call only: the subscription lasts until the
// returned function is called (it may be called more than once) or the
// store is closed, which wakes every subscriber a last time.
func (s *Store) Subscribe(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	i := id{scope, key}
	sh, err := s.lock(ctx, "subscribe", i)
	if err != nil {
		return nil, nil, err
	}
	defer sh.mu.Unlock()
	ch, unsubscribe := s.subs.Subscribe(i)
	return ch, unsubscribe, nil
}

// Ping implements [admin.Pinger]: it fails once the store is closed.
func (s *Store) Ping(ctx context.Context) error { return s.open(ctx, "ping") }

// open checks ctx and that the store is open, for a call that reads every
// shard.
func (s *Store) open(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := &s.shards[0]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return retrysafe.Unavailable(op, errClosed)
	}
	return nil
}

// Sweep implements [admin.Sweeper]. It deletes every completed record
// with ExpiresAt <= params.Now and every processing record with
// LeaseUntil + params.ProcessingRetention <= params.Now, one shard at a
// time under the shard's lock; BatchSize is ignored.
func (s *Store) Sweep(ctx context.Context, p *admin.SweepParams) (int, error) {
	retention, err := p.Retention()
	if err != nil {
		return 0, err
	}
	if err := s.open(ctx, "sweep"); err != nil {
		return 0, err
	}
	n := 0
	for k := range s.shards {
		n += s.sweep(&s.shards[k], p.Now, retention)
	}
	return n, nil
}

// evict makes room in a full store: it sweeps, with the configured
// retention, the shards that may hold a record to evict at now.
func (s *Store) evict(now time.Time) {
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.Lock()
		due := !now.Before(sh.evictable)
		sh.mu.Unlock()
		if due {
			s.sweep(sh, now, s.retention)
		}
	}
}

// sweep deletes sh's completed records expired at now and its processing
// records whose lease ran out at least retention before now, and returns
// how many it deleted. A processing record it retires wakes its waiters,
// which then find it gone.
func (s *Store) sweep(sh *shard, now time.Time, retention time.Duration) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return 0
	}
	n := 0
	next := now.Add(1 << 62) // no record: nothing due for a long time
	for i, e := range sh.records {
		gone, due := e.expired(now), at(e.expires)
		if !e.completed {
			leaseUntil := at(e.leaseUntil)
			gone, due = !now.Before(leaseUntil.Add(retention)), leaseUntil.Add(s.retention)
		}
		if gone {
			s.deleteLocked(sh, i)
			n++
			continue
		}
		if due.Before(next) {
			next = due
		}
	}
	// The bound is computed with the eviction's retention, whatever this
	// sweep's: it tells evict when to look again.
	sh.evictable = next
	if len(sh.records) < sh.peak/4 {
		sh.records = copyMap(sh.records)
		sh.peak = len(sh.records)
	}
	return n
}

// copyMap returns a map of the size of m holding m's records.
func copyMap(m map[id]entry) map[id]entry {
	c := make(map[id]entry, len(m))
	for i, e := range m {
		c[i] = e
	}
	return c
}

func (s *Store) janitor(interval time.Duration) {
	defer close(s.janitorDone)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-ticker.C:
			now := s.now()
			for k := range s.shards {
				s.sweep(&s.shards[k], now, s.retention)
			}
		}
	}
}

// Len returns the number of records held, expired ones included (until
// the janitor, a sweep or an eviction deletes them).
func (s *Store) Len() int { return int(s.count.Load()) }

// Close stops the janitor and waits for it to return. Afterwards every
// method returns an error matching retrysafe.ErrStoreUnavailable, and
// every subscription ends after a last wake-up. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		for k := range s.shards {
			sh := &s.shards[k]
			sh.mu.Lock()
			sh.closed = true
			s.count.Add(-int64(len(sh.records)))
			sh.records = nil
			sh.mu.Unlock()
		}
		s.subs.Close()
		close(s.stop)
	})
	<-s.janitorDone
	return nil
}
