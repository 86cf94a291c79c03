// Package memory is an in-memory [retrysafe.Store]: the reference
// implementation of the store contract, for tests, demos and single-process
// services that can afford to forget their records on restart.
//
// Records live in shards, each a hash table behind a mutex of its own (see
// shard), so that concurrent requests for different keys seldom wait for
// each other. A record is immutable once
// handed out: every change (takeover, renewal, completion) makes a new
// *Record, so Claim and Get hand out the stored record itself without a
// copy (the [retrysafe.Store] contract forbids modifying it). A completed
// record is kept packed, in memory without pointers, which the garbage
// collector marks without scanning; Claim and Get make a *Record of it for
// the first caller, and make and keep one for the second and later ones
// (see entry and table.replayAt).
// The store is bounded (Config.MaxRecords): when full it evicts expired
// records and abandoned ones (processing records whose lease ran out more
// than Config.ProcessingRetention ago), never live ones, and refuses new
// claims with an error matching [retrysafe.ErrStoreUnavailable]. A janitor
// goroutine deletes the same records in the background; expiry is enforced
// on read regardless.
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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe"
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
	// full, the claim fails with an error matching
	// retrysafe.ErrStoreUnavailable and ErrFull. Live records are never
	// evicted.
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
	// retrysafe.DefaultProcessingRetention (7 days). [Store.Sweep] takes
	// its retention from its params instead.
	ProcessingRetention time.Duration
	// Now is the janitor's clock; nil means time.Now. Store methods take
	// their time from params.Now, never from this clock.
	Now func() time.Time
}

// ErrFull is wrapped (inside a retrysafe.StoreError, so it also matches
// retrysafe.ErrStoreUnavailable) by Claim when MaxRecords live records are
// stored and none has expired.
var ErrFull = errors.New("memory store full: MaxRecords live records stored, none expired")

// errClosed is returned, wrapped, by every method after Close.
var errClosed = errors.New("memory store closed")

type id struct{ scope, key string }

// Store is an in-memory [retrysafe.Store]. It also implements
// [retrysafe.Pinger], [retrysafe.Sweeper], [retrysafe.Notifier],
// [retrysafe.Admin] and [retrysafe.NonBlocking]. Create it with [New]; the zero value is not usable.
type Store struct {
	max       int
	now       func() time.Time
	retention time.Duration

	seed   maphash.Seed // of every shard's table (see shardOf)
	shards []shard      // a power of two of them
	n      atomic.Int64 // records held, in all shards (see reserve)
	hc     headerCache  // the shards' (see completedEntry, table.replayAt)
	subs   waiters.Registry[id]

	stop        chan struct{} // closed by Close
	janitorDone chan struct{} // closed when the janitor goroutine returns
	closeOnce   sync.Once
}

// shard holds the records whose hash falls to it (see Store.shardOf),
// behind its own mutex. Calls for keys of different shards do not wait
// for each other: with one mutex for the store, two cores running new
// keys spent 13 % of their CPU on it (docs/performance.md, "Eighth
// round").
type shard struct {
	mu      sync.Mutex
	records table
	// nextExpiry is a lower bound of ExpiresAt over the shard's completed
	// records: while now is before it, none has expired and an eviction
	// scan would find nothing.
	nextExpiry time.Time
	// nextLease is a lower bound of LeaseUntil over the shard's processing
	// records: while now is before nextLease + retention, none is due for
	// retirement.
	nextLease time.Time
	closed    bool
	_         [64]byte // the next shard's mutex on another cache line
}

// numShards is the number of shards of a store.
const numShards = 32

// shardOf returns the shard of the record whose hash is h. It takes bits
// that the shard's table does not look at first: the table indexes its
// directory by the top bits and a subtable's slots by the low ones.
func (s *Store) shardOf(h uint64) *shard {
	return &s.shards[h>>32&uint64(len(s.shards)-1)]
}

// reserve counts one more record held, and reports whether that is within
// MaxRecords; when not, the count is as before.
func (s *Store) reserve() bool {
	if s.n.Add(1) > int64(s.max) {
		s.n.Add(-1)
		return false
	}
	return true
}

var (
	_ retrysafe.Store       = (*Store)(nil)
	_ retrysafe.Pinger      = (*Store)(nil)
	_ retrysafe.Sweeper     = (*Store)(nil)
	_ retrysafe.Notifier    = (*Store)(nil)
	_ retrysafe.Admin       = (*Store)(nil)
	_ retrysafe.NonBlocking = (*Store)(nil)
)

// New returns a store configured by cfg and starts its janitor (unless
// cfg.JanitorInterval is negative). Call [Store.Close] to stop it.
func New(cfg Config) *Store { return newSharded(cfg, numShards) }

// newSharded is New with the number of shards, a power of two.
func newSharded(cfg Config, shards int) *Store {
	s := &Store{
		max:         cmp.Or(cfg.MaxRecords, DefaultMaxRecords),
		now:         cfg.Now,
		retention:   cfg.ProcessingRetention,
		seed:        maphash.MakeSeed(),
		shards:      make([]shard, shards),
		stop:        make(chan struct{}),
		janitorDone: make(chan struct{}),
	}
	for k := range s.shards {
		s.shards[k].records = newTableSeed(s.seed)
		s.shards[k].records.hc = &s.hc
	}
	if s.max < 0 {
		s.max = DefaultMaxRecords
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.retention <= 0 {
		s.retention = retrysafe.DefaultProcessingRetention
	}
	interval := cmp.Or(cfg.JanitorInterval, DefaultJanitorInterval)
	if interval < 0 {
		close(s.janitorDone)
		return s
	}
	go s.janitor(interval)
	return s
}

// Close stops the janitor and waits for it to return. Afterwards every
// method returns an error matching retrysafe.ErrStoreUnavailable, and
// every subscription ends after a last wake-up. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		for k := range s.shards {
			sh := &s.shards[k]
			sh.mu.Lock()
			sh.closed = true
			s.n.Add(-int64(sh.records.len()))
			sh.records = table{}
			sh.mu.Unlock()
		}
		s.subs.Close()
		close(s.stop)
	})
	<-s.janitorDone
	return nil
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
			s.sweepAll(s.now(), s.retention, nil)
		}
	}
}

// sweepAll sweeps every shard but skip (which the caller holds, or nil),
// one at a time, and returns the number of records deleted.
func (s *Store) sweepAll(now time.Time, retention time.Duration, skip *shard) int {
	n := 0
	for k := range s.shards {
		sh := &s.shards[k]
		if sh == skip {
			continue
		}
		sh.mu.Lock()
		if !sh.closed {
			n += s.sweepLocked(sh, now, retention)
		}
		sh.mu.Unlock()
	}
	return n
}

// lock checks ctx, takes the mutex of the shard of i and checks that the
// store is open. It returns the shard and i's hash; on success the caller
// must unlock the shard's mu.
func (s *Store) lock(ctx context.Context, op string, i id) (*shard, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	h := hashID(s.seed, i)
	sh := s.shardOf(h)
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return nil, 0, retrysafe.Unavailable(op, errClosed)
	}
	return sh, h, nil
}

// lockAll checks ctx and that the store is open, for a call that looks at
// every shard (each under its own lock, one at a time: see each).
func (s *Store) lockAll(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := &s.shards[0]
	sh.mu.Lock()
	closed := sh.closed
	sh.mu.Unlock()
	if closed {
		return retrysafe.Unavailable(op, errClosed)
	}
	return nil
}

// each calls f for every shard in turn, under the shard's lock, until f
// returns false. A shard closed meanwhile is skipped.
func (s *Store) each(f func(*shard) bool) {
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.Lock()
		more := sh.closed || f(sh)
		sh.mu.Unlock()
		if !more {
			return
		}
	}
}

// Claim implements [retrysafe.Store].
func (s *Store) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	i := id{p.Scope, p.Key}
	for evicted := false; ; evicted = true {
		sh, h, err := s.lock(ctx, "claim", i)
		if err != nil {
			return nil, err
		}
		res, err := s.claimLocked(sh, h, i, p, evicted)
		sh.mu.Unlock()
		if res != nil || err != nil {
			return res, err
		}
		// Full, with nothing to evict in sh: the other shards may hold
		// records to evict. Sweep them, without holding sh, then try
		// again once.
		s.sweepAll(p.Now, s.retention, sh)
	}
}

// claimLocked is Claim under sh's lock, sh the shard of i (hash h). It
// returns nil and no error when the store is full and sh had nothing to
// evict, unless evicted (the other shards were swept already): then the
// error is ErrFull.
func (s *Store) claimLocked(sh *shard, h uint64, i id, p *retrysafe.ClaimParams, evicted bool) (*retrysafe.ClaimResult, error) {
	at := sh.records.at(h) // found once, written once
	e := at.get(i)
	if e != nil && !e.expired(p.Now) {
		if e.completed {
			return &sh.records.replayAt(at, e).res, nil
		}
		if p.Now.Before(e.rec.LeaseUntil) || e.rec.Fingerprint != p.Fingerprint {
			return &retrysafe.ClaimResult{Record: e.rec}, nil
		}
		// Takeover of an expired lease.
		rec := p.ProcessingRecord(e.rec.Attempt+1, e.rec.CreatedAt, p.Now, p.Now.Add(p.Lease))
		sh.records.putAt(at, i, &entry{rec: rec})
		return &retrysafe.ClaimResult{Claimed: true, Record: rec}, nil
	}
	if e == nil && !s.reserve() {
		s.evictLocked(sh, p.Now)
		if !s.reserve() {
			if !evicted {
				return nil, nil
			}
			return nil, retrysafe.Unavailable("claim", fmt.Errorf("%w (MaxRecords=%d)", ErrFull, s.max))
		}
		at = sh.records.at(h) // the eviction changed the table
	}
	// The record, its entry and the result that returns it, in one
	// allocation.
	c := &struct {
		res retrysafe.ClaimResult
		rec retrysafe.Record
		e   entry
	}{}
	c.rec = *p.ProcessingRecord(1, p.Now, p.Now, p.Now.Add(p.Lease))
	c.res = retrysafe.ClaimResult{Claimed: true, Record: &c.rec}
	c.e.rec = &c.rec
	sh.records.putAt(at, i, &c.e)
	sh.lowerLeaseBoundLocked(c.rec.LeaseUntil)
	return &c.res, nil
}

// lowerLeaseBoundLocked keeps nextLease a lower bound after a processing
// record's lease was set to leaseUntil.
func (sh *shard) lowerLeaseBoundLocked(leaseUntil time.Time) {
	if leaseUntil.Before(sh.nextLease) {
		sh.nextLease = leaseUntil
	}
}

// evictLocked deletes sh's completed records expired at now and its
// processing records due for retirement, unless nextExpiry and nextLease
// prove there are none.
func (s *Store) evictLocked(sh *shard, now time.Time) {
	if now.Before(sh.nextExpiry) && now.Before(sh.nextLease.Add(s.retention)) {
		return
	}
	s.sweepLocked(sh, now, s.retention)
}

// sweepLocked deletes sh's completed records expired at now and its
// processing records whose lease ran out at least retention before now,
// recomputes nextExpiry and nextLease and returns the number deleted.
func (s *Store) sweepLocked(sh *shard, now time.Time, retention time.Duration) int {
	var nextExpiry, nextLease time.Time
	n := sh.records.deleteFunc(func(e *entry) bool {
		c := e.done()
		if c == nil {
			leaseUntil := e.rec.LeaseUntil
			if !now.Before(leaseUntil.Add(retention)) {
				s.notifyLocked(e.id())
				return true
			}
			if nextLease.IsZero() || leaseUntil.Before(nextLease) {
				nextLease = leaseUntil
			}
			return false
		}
		expires := e.expiresAt()
		if !now.Before(expires) {
			return true
		}
		if nextExpiry.IsZero() || expires.Before(nextExpiry) {
			nextExpiry = expires
		}
		return false
	})
	// With no record of a kind left, no bound applies until one is
	// stored: Complete lowers nextExpiry, Claim and Extend nextLease.
	if nextExpiry.IsZero() {
		nextExpiry = now.Add(1 << 62)
	}
	if nextLease.IsZero() {
		nextLease = now.Add(1 << 62)
	}
	sh.nextExpiry, sh.nextLease = nextExpiry, nextLease
	sh.records.compact()
	s.n.Add(-int64(n))
	return n
}

// Get implements [retrysafe.Store].
func (s *Store) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	i := id{p.Scope, p.Key}
	sh, h, err := s.lock(ctx, "get", i)
	if err != nil {
		return nil, err
	}
	defer sh.mu.Unlock()
	at := sh.records.at(h)
	e := at.get(i)
	if e == nil || e.expired(p.Now) {
		return nil, retrysafe.ErrNotFound
	}
	if !e.completed {
		return e.rec, nil
	}
	return &sh.records.replayAt(at, e).rec, nil
}

// owned returns the entry of the processing record i (hash h) owned by
// token, and i's position in sh's table, or ErrLeaseLost.
func (sh *shard) owned(h uint64, i id, token string) (*entry, pos, error) {
	at := sh.records.at(h)
	e := at.get(i)
	if e == nil || e.completed || e.rec.Token != token {
		return nil, at, retrysafe.ErrLeaseLost
	}
	return e, at, nil
}

// Extend implements [retrysafe.Store].
func (s *Store) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	i := id{p.Scope, p.Key}
	sh, h, err := s.lock(ctx, "extend", i)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	e, _, err := sh.owned(h, i, p.Token)
	if err != nil {
		return err
	}
	renewed := *e.rec
	renewed.LeaseUntil = p.Now.Add(p.Lease)
	renewed.UpdatedAt = p.Now
	e.rec = &renewed
	sh.lowerLeaseBoundLocked(renewed.LeaseUntil)
	return nil
}

// Complete implements [retrysafe.Store].
func (s *Store) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	i := id{p.Scope, p.Key}
	sh, h, err := s.lock(ctx, "complete", i)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	e, at, err := sh.owned(h, i, p.Token)
	if err != nil {
		return err
	}
	expires := p.Now.Add(p.TTL)
	sh.records.putAt(at, i, completedEntry(e.rec, p.Response, p.Now, expires, &s.hc, &sh.records.arena))
	if expires.Before(sh.nextExpiry) {
		sh.nextExpiry = expires
	}
	s.notifyLocked(i)
	return nil
}

// Release implements [retrysafe.Store].
func (s *Store) Release(ctx context.Context, p *retrysafe.ReleaseParams) error {
	i := id{p.Scope, p.Key}
	sh, h, err := s.lock(ctx, "release", i)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if _, _, err := sh.owned(h, i, p.Token); err != nil {
		return err
	}
	sh.records.del(h, i)
	s.n.Add(-1)
	s.notifyLocked(i)
	return nil
}

// CopiesResponse tells the engine that Complete copies
// CompleteParams.Response and its body before it returns, keeping at most
// its header map (only a record that cannot be packed keeps it; see
// entry), so the middleware may reuse the body's buffer afterwards
// instead of making a copy for the store. It returns s: the engine relies
// on the promise only when s itself is the configured store, not a type
// that embeds it.
func (s *Store) CopiesResponse() retrysafe.Store { return s }

// NonBlocking implements [retrysafe.NonBlocking]: every call takes a
// shard's mutex for a bounded amount of work and never waits for I/O, so
// the engine runs it without a StoreTimeout deadline.
func (s *Store) NonBlocking() bool { return true }

// Ping implements [retrysafe.Pinger]: it fails once the store is closed.
func (s *Store) Ping(ctx context.Context) error { return s.lockAll(ctx, "ping") }

// Sweep implements [retrysafe.Sweeper]. It deletes every completed record
// with ExpiresAt <= params.Now and every processing record with
// LeaseUntil + params.ProcessingRetention <= params.Now in one pass over
// each shard, under the shard's lock; BatchSize is ignored.
func (s *Store) Sweep(ctx context.Context, p *retrysafe.SweepParams) (int, error) {
	retention, err := p.Retention()
	if err != nil {
		return 0, err
	}
	if err := s.lockAll(ctx, "sweep"); err != nil {
		return 0, err
	}
	return s.sweepAll(p.Now, retention, nil), nil
}

// Len returns the number of records held, expired ones included (until
// the janitor, a sweep or an eviction deletes them).
func (s *Store) Len() int {
	n := 0
	s.each(func(sh *shard) bool {
		n += sh.records.len()
		return true
	})
	return n
}

// List implements [retrysafe.Admin]. It sorts the matching records on
// every call, so it costs O(n log n) in the number of stored records:
// fine for an operator's occasional look, not for a hot path. It lists
// expired completed records until they are swept. Each shard is read
// under its own lock: a record written during the call may or may not be
// listed.
func (s *Store) List(ctx context.Context, p *retrysafe.ListParams) ([]*retrysafe.Record, error) {
	if err := s.lockAll(ctx, "list"); err != nil {
		return nil, err
	}
	limit := p.PageSize()
	after := id{p.AfterScope, p.AfterKey}
	var out []copied
	s.each(func(sh *shard) bool {
		var ids []id
		for e := range sh.records.all() {
			i := e.id()
			if compareID(i, after) <= 0 {
				continue
			}
			if rec := e.view(); !p.Matches(&rec) {
				continue
			}
			ids = append(ids, i)
		}
		// The page holds at most limit records of this shard.
		slices.SortFunc(ids, compareID)
		out = sh.appendCopies(out, ids[:min(len(ids), limit)], p.WithBodies)
		return true
	})
	slices.SortFunc(out, func(a, b copied) int { return compareID(a.id, b.id) })
	return records(out[:min(len(out), limit)]), nil
}

// Find implements [retrysafe.Admin]. Without a scope it looks at every
// record, O(n) in the number stored. It finds expired completed records
// until they are swept.
func (s *Store) Find(ctx context.Context, p *retrysafe.FindParams) ([]*retrysafe.Record, error) {
	if p.OneScope() {
		i := id{p.Scope, p.Key}
		sh, h, err := s.lock(ctx, "find", i)
		if err != nil {
			return nil, err
		}
		defer sh.mu.Unlock()
		if sh.records.get(h, i) == nil {
			return records(nil), nil // empty, not nil, as every other answer
		}
		return records(sh.appendCopies(nil, []id{i}, p.WithBodies)), nil
	}
	if err := s.lockAll(ctx, "find"); err != nil {
		return nil, err
	}
	var out []copied
	s.each(func(sh *shard) bool {
		var ids []id
		for e := range sh.records.all() {
			if i := e.id(); i.key == p.Key {
				ids = append(ids, i)
			}
		}
		out = sh.appendCopies(out, ids, p.WithBodies)
		return true
	})
	slices.SortFunc(out, func(a, b copied) int { return compareID(a.id, b.id) })
	return records(out), nil
}

// copied is a copy of a record, with its id.
type copied struct {
	id  id
	rec *retrysafe.Record
}

// records returns the records of cs.
func records(cs []copied) []*retrysafe.Record {
	out := make([]*retrysafe.Record, len(cs))
	for n, c := range cs {
		out[n] = c.rec
	}
	return out
}

// appendCopies appends to out copies of the records ids, all in sh,
// without response bodies unless withBodies.
func (sh *shard) appendCopies(out []copied, ids []id, withBodies bool) []copied {
	for _, i := range ids {
		e := sh.records.get(sh.records.hash(i), i)
		rec := e.rec
		if rec == nil {
			rec = &e.decodedOnce(nil).rec // not kept: an operator's look is no replay
		}
		if withBodies || rec.Response == nil {
			out = append(out, copied{i, rec.Clone()})
			continue
		}
		c := *rec
		c.Response = &retrysafe.Response{Status: rec.Response.Status, Header: rec.Response.Header.Clone()}
		out = append(out, copied{i, &c})
	}
	return out
}

func compareID(a, b id) int {
	return cmp.Or(cmp.Compare(a.scope, b.scope), cmp.Compare(a.key, b.key))
}

// Stats implements [retrysafe.Admin]: one pass over every record, O(n),
// each shard under its own lock.
func (s *Store) Stats(ctx context.Context, p *retrysafe.StatsParams) (*retrysafe.Stats, error) {
	if err := s.lockAll(ctx, "stats"); err != nil {
		return nil, err
	}
	// The processing records go to StatsOf as they are (immutable, no
	// response); the completed ones are counted here, as StatsOf would,
	// without making a *Record of each.
	var recs []*retrysafe.Record
	var done, failed, expired int64
	s.each(func(sh *shard) bool {
		for e := range sh.records.all() {
			c := e.done()
			if c == nil {
				recs = append(recs, e.rec)
				continue
			}
			done++
			if e.expired(p.Now) {
				expired++
			} else if c.status >= 400 {
				failed++
			}
		}
		return true
	})
	st := retrysafe.StatsOf(recs, p)
	st.Completed, st.Failed, st.Expired = done, failed, expired
	return st, nil
}

// Delete implements [retrysafe.Admin]: it removes the record whatever its
// state or owner, and signals its subscribers.
func (s *Store) Delete(ctx context.Context, scope, key string) error {
	i := id{scope, key}
	sh, h, err := s.lock(ctx, "delete", i)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if !sh.records.del(h, i) {
		return retrysafe.ErrNotFound
	}
	s.n.Add(-1)
	s.notifyLocked(i)
	return nil
}
