// Package memory is an in-memory [retrysafe.Store]: the reference
// implementation of the store contract, for tests, demos and single-process
// services that can afford to forget their records on restart.
//
// Records live in one map behind one mutex. A record is immutable once
// handed out: every change (takeover, renewal, completion) makes a new
// *Record, so Claim and Get hand out the stored record itself without a
// copy (the [retrysafe.Store] contract forbids modifying it). A completed
// record is kept packed, one allocation without pointers, which the
// garbage collector marks without scanning, and made into a *Record the
// first time Claim or Get returns it (see entry).
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
	"slices"
	"sync"
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

	mu      sync.Mutex
	records table
	subs    waiters.Registry[id]
	// nextExpiry is a lower bound of ExpiresAt over the completed records:
	// while now is before it, no record has expired and an eviction scan
	// would find nothing.
	nextExpiry time.Time
	// nextLease is a lower bound of LeaseUntil over the processing
	// records: while now is before nextLease + retention, none is due for
	// retirement.
	nextLease time.Time
	closed    bool

	stop        chan struct{} // closed by Close
	janitorDone chan struct{} // closed when the janitor goroutine returns
	closeOnce   sync.Once
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
func New(cfg Config) *Store {
	s := &Store{
		max:         cmp.Or(cfg.MaxRecords, DefaultMaxRecords),
		now:         cfg.Now,
		retention:   cfg.ProcessingRetention,
		records:     newTable(),
		stop:        make(chan struct{}),
		janitorDone: make(chan struct{}),
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
		s.mu.Lock()
		s.closed = true
		s.subs.Close()
		s.records = table{}
		s.mu.Unlock()
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
			s.mu.Lock()
			if !s.closed {
				s.sweepLocked(s.now(), s.retention)
			}
			s.mu.Unlock()
		}
	}
}

// lock checks ctx, takes the mutex and checks that the store is open. On
// success the caller must unlock s.mu.
func (s *Store) lock(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return retrysafe.Unavailable(op, errClosed)
	}
	return nil
}

// Claim implements [retrysafe.Store].
func (s *Store) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	if err := s.lock(ctx, "claim"); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()

	i := id{p.Scope, p.Key}
	h := s.records.hash(i)
	at := s.records.at(h) // found once, written once
	e := at.get(i)
	if e != nil && !e.expired(p.Now) {
		if e.completed {
			return s.records.unpackAt(at, e).replay(), nil
		}
		if p.Now.Before(e.rec.LeaseUntil) || e.rec.Fingerprint != p.Fingerprint {
			return &retrysafe.ClaimResult{Record: e.rec}, nil
		}
		// Takeover of an expired lease.
		rec := p.ProcessingRecord(e.rec.Attempt+1, e.rec.CreatedAt, p.Now, p.Now.Add(p.Lease))
		s.records.putAt(at, i, &entry{rec: rec})
		return &retrysafe.ClaimResult{Claimed: true, Record: rec}, nil
	}
	if e == nil && s.records.len() >= s.max {
		s.evictLocked(p.Now)
		if s.records.len() >= s.max {
			return nil, retrysafe.Unavailable("claim", fmt.Errorf("%w (MaxRecords=%d)", ErrFull, s.max))
		}
		at = s.records.at(h) // the eviction changed the table
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
	s.records.putAt(at, i, &c.e)
	s.lowerLeaseBoundLocked(c.rec.LeaseUntil)
	return &c.res, nil
}

// lowerLeaseBoundLocked keeps nextLease a lower bound after a processing
// record's lease was set to leaseUntil.
func (s *Store) lowerLeaseBoundLocked(leaseUntil time.Time) {
	if leaseUntil.Before(s.nextLease) {
		s.nextLease = leaseUntil
	}
}

// evictLocked deletes the completed records expired at now and the
// processing records due for retirement, unless nextExpiry and nextLease
// prove there are none.
func (s *Store) evictLocked(now time.Time) {
	if now.Before(s.nextExpiry) && now.Before(s.nextLease.Add(s.retention)) {
		return
	}
	s.sweepLocked(now, s.retention)
}

// sweepLocked deletes the completed records expired at now and the
// processing records whose lease ran out at least retention before now,
// recomputes nextExpiry and nextLease and returns the number deleted.
func (s *Store) sweepLocked(now time.Time, retention time.Duration) int {
	var nextExpiry, nextLease time.Time
	n := s.records.deleteFunc(func(e *entry) bool {
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
	s.nextExpiry, s.nextLease = nextExpiry, nextLease
	s.records.compact()
	return n
}

// Get implements [retrysafe.Store].
func (s *Store) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	if err := s.lock(ctx, "get"); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	i := id{p.Scope, p.Key}
	at := s.records.at(s.records.hash(i))
	e := at.get(i)
	if e == nil || e.expired(p.Now) {
		return nil, retrysafe.ErrNotFound
	}
	return s.records.unpackAt(at, e).rec, nil
}

// owned returns the entry of the processing record i owned by token, and
// i's position in the table, or ErrLeaseLost.
func (s *Store) owned(i id, token string) (*entry, pos, error) {
	at := s.records.at(s.records.hash(i))
	e := at.get(i)
	if e == nil || e.completed || e.rec.Token != token {
		return nil, at, retrysafe.ErrLeaseLost
	}
	return e, at, nil
}

// Extend implements [retrysafe.Store].
func (s *Store) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	if err := s.lock(ctx, "extend"); err != nil {
		return err
	}
	defer s.mu.Unlock()
	e, _, err := s.owned(id{p.Scope, p.Key}, p.Token)
	if err != nil {
		return err
	}
	renewed := *e.rec
	renewed.LeaseUntil = p.Now.Add(p.Lease)
	renewed.UpdatedAt = p.Now
	e.rec = &renewed
	s.lowerLeaseBoundLocked(renewed.LeaseUntil)
	return nil
}

// Complete implements [retrysafe.Store].
func (s *Store) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	if err := s.lock(ctx, "complete"); err != nil {
		return err
	}
	defer s.mu.Unlock()
	i := id{p.Scope, p.Key}
	e, at, err := s.owned(i, p.Token)
	if err != nil {
		return err
	}
	expires := p.Now.Add(p.TTL)
	s.records.putAt(at, i, completedEntry(e.rec, p.Response, p.Now, expires, &s.records.hc, &s.records.arena))
	if expires.Before(s.nextExpiry) {
		s.nextExpiry = expires
	}
	s.notifyLocked(i)
	return nil
}

// Release implements [retrysafe.Store].
func (s *Store) Release(ctx context.Context, p *retrysafe.ReleaseParams) error {
	if err := s.lock(ctx, "release"); err != nil {
		return err
	}
	defer s.mu.Unlock()
	i := id{p.Scope, p.Key}
	_, at, err := s.owned(i, p.Token)
	if err != nil {
		return err
	}
	s.records.del(at.h, i)
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

// NonBlocking implements [retrysafe.NonBlocking]: every call takes the
// store's mutex for a bounded amount of work and never waits for I/O, so
// the engine runs it without a StoreTimeout deadline.
func (s *Store) NonBlocking() bool { return true }

// Ping implements [retrysafe.Pinger]: it fails once the store is closed.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.lock(ctx, "ping"); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

// Sweep implements [retrysafe.Sweeper]. It deletes every completed record
// with ExpiresAt <= params.Now and every processing record with
// LeaseUntil + params.ProcessingRetention <= params.Now in one pass under
// the store's lock; BatchSize is ignored.
func (s *Store) Sweep(ctx context.Context, p *retrysafe.SweepParams) (int, error) {
	retention, err := p.Retention()
	if err != nil {
		return 0, err
	}
	if err := s.lock(ctx, "sweep"); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	return s.sweepLocked(p.Now, retention), nil
}

// Len returns the number of records held, expired ones included (until
// the janitor, a sweep or an eviction deletes them).
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records.len()
}

// List implements [retrysafe.Admin]. It sorts the matching records on
// every call, so it costs O(n log n) in the number of stored records:
// fine for an operator's occasional look, not for a hot path. It lists
// expired completed records until they are swept.
func (s *Store) List(ctx context.Context, p *retrysafe.ListParams) ([]*retrysafe.Record, error) {
	if err := s.lock(ctx, "list"); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	limit := p.PageSize()
	var ids []id
	for e := range s.records.all() {
		i := e.id()
		if compareID(i, id{p.AfterScope, p.AfterKey}) <= 0 {
			continue
		}
		if rec := e.view(); !p.Matches(&rec) {
			continue
		}
		ids = append(ids, i)
	}
	slices.SortFunc(ids, compareID)
	ids = ids[:min(len(ids), limit)]
	return s.copiesLocked(ids, p.WithBodies), nil
}

// Find implements [retrysafe.Admin]. Without a scope it looks at every
// record, O(n) in the number stored. It finds expired completed records
// until they are swept.
func (s *Store) Find(ctx context.Context, p *retrysafe.FindParams) ([]*retrysafe.Record, error) {
	if err := s.lock(ctx, "find"); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var ids []id
	if p.OneScope() {
		if i := (id{p.Scope, p.Key}); s.records.get(s.records.hash(i), i) != nil {
			ids = append(ids, i)
		}
	} else {
		for e := range s.records.all() {
			if i := e.id(); i.key == p.Key {
				ids = append(ids, i)
			}
		}
		slices.SortFunc(ids, compareID)
	}
	return s.copiesLocked(ids, p.WithBodies), nil
}

// copiesLocked returns copies of the records ids, without response bodies
// unless withBodies.
func (s *Store) copiesLocked(ids []id, withBodies bool) []*retrysafe.Record {
	out := make([]*retrysafe.Record, len(ids))
	for n, i := range ids {
		e := s.records.get(s.records.hash(i), i)
		rec := e.rec
		if rec == nil {
			rec = e.decode() // not kept: an operator's look is no replay
		}
		if withBodies || rec.Response == nil {
			out[n] = rec.Clone()
			continue
		}
		c := *rec
		c.Response = &retrysafe.Response{Status: rec.Response.Status, Header: rec.Response.Header.Clone()}
		out[n] = &c
	}
	return out
}

func compareID(a, b id) int {
	return cmp.Or(cmp.Compare(a.scope, b.scope), cmp.Compare(a.key, b.key))
}

// Stats implements [retrysafe.Admin]: one pass over every record, O(n).
func (s *Store) Stats(ctx context.Context, p *retrysafe.StatsParams) (*retrysafe.Stats, error) {
	if err := s.lock(ctx, "stats"); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	// The processing records go to StatsOf as they are (immutable, no
	// response); the completed ones are counted here, as StatsOf would,
	// without making a *Record of each.
	var recs []*retrysafe.Record
	var done, failed, expired int64
	for e := range s.records.all() {
		c := e.done()
		if c == nil {
			recs = append(recs, e.rec)
			continue
		}
		done++
		if c.status >= 400 {
			failed++
		}
		if e.expired(p.Now) {
			expired++
		}
	}
	st := retrysafe.StatsOf(recs, p)
	st.Completed, st.Failed, st.Expired = done, failed, expired
	return st, nil
}

// Delete implements [retrysafe.Admin]: it removes the record whatever its
// state or owner, and signals its subscribers.
func (s *Store) Delete(ctx context.Context, scope, key string) error {
	if err := s.lock(ctx, "delete"); err != nil {
		return err
	}
	defer s.mu.Unlock()
	i := id{scope, key}
	if !s.records.del(s.records.hash(i), i) {
		return retrysafe.ErrNotFound
	}
	s.notifyLocked(i)
	return nil
}
