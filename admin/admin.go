// Package admin is the operator surface of a retrysafe store: the
// abilities that the operator page, `retrysafe keys`, `retrysafe sweep`
// and the gateway's metrics use, and that a store author implements
// beside [retrysafe.Store].
//
//   - [Admin] lists, finds, deletes and counts records ([ListParams],
//     [FindParams], [StatsParams], [Stats]); [StatsOf] is the reference
//     count for stores that count in Go.
//   - [Sweeper] deletes expired records and retires abandoned ones
//     ([SweepParams]).
//   - [Batcher] reports a group-committing store's batches ([BatchStats]).
//   - [Pinger] and [ReadyChecker] tell the gateway's /readyz whether the
//     backend answers.
//
// Look an ability up with [retrysafe.As], which finds it below wrappers
// such as store/sealed:
//
//	if a, ok := retrysafe.As[admin.Admin](store); ok { … }
//
// The engine uses none of them: an application needs this package only
// to run such a tool itself (a sweep of its SQLite store, say), and expiry
// is enforced on read whether or not anything sweeps. The abilities the
// engine looks up, retrysafe.Notifier and retrysafe.NonBlocking, are in
// the root.
package admin

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/retrysafe/retrysafe"
)

// Pinger is implemented by stores that can check that their backend answers.
// The gateway's /readyz uses it unless the store implements [ReadyChecker].
type Pinger interface {
	Ping(ctx context.Context) error
}

// ReadyChecker is implemented by stores whose client retries a failed call
// internally, so that Ping on a backend that refuses connections fails only
// after the retries ran out. CheckReady reports whether the backend answers
// now: it returns an error wrapping [retrysafe.ErrStoreUnavailable] at
// once when the backend refuses, without the retries and backoff that the
// store's other calls keep, and otherwise waits, within ctx, for the
// backend to answer.
// The gateway's /readyz prefers it to [Pinger]. (The Redis store implements
// it: go-redis retries a refused dial and then the command, about 1.7 s with
// its defaults.)
type ReadyChecker interface {
	CheckReady(ctx context.Context) error
}

// BatchStats counts the work of a store that groups the calls of
// concurrent callers into batches, each one transaction and one commit
// (group commit). Items/Batches is the mean batch size.
type BatchStats struct {
	// Batches is the number of batches run.
	Batches int64
	// Items is the number of calls those batches held.
	Items int64
	// Single is the number of batches that held one call.
	Single int64
	// Alone is the number of calls a batch left undecided and that then
	// ran on their own (a second call on a key already in the batch, a
	// row another transaction held, a batch that failed, …).
	Alone int64
}

// Batcher is implemented by stores that group concurrent calls into
// batches (the SQLite and PostgreSQL stores). The gateway exports the
// counts as metrics.
type Batcher interface {
	BatchStats() BatchStats
}

// DefaultProcessingRetention is how long a processing record whose lease
// has run out is kept before it is retired, when nothing else is configured
// ([SweepParams.ProcessingRetention], the Redis store's
// Config.ProcessingRetention, `retrysafe serve --processing-retention`).
// Such a record is what an attempt with an unknown outcome leaves behind (a
// crashed owner, an upstream that timed out); a week lets an operator
// investigate it, and a retry with the same request takes it over meanwhile.
const DefaultProcessingRetention = 7 * 24 * time.Hour

// SweepParams are the arguments of [Sweeper.Sweep].
type SweepParams struct {
	Now time.Time
	// BatchSize bounds the records deleted per statement; zero means the
	// store's default.
	BatchSize int
	// ProcessingRetention is how long a processing record is kept after
	// its lease ran out: the sweep retires (deletes) processing records
	// with LeaseUntil + ProcessingRetention <= Now. Zero means
	// [DefaultProcessingRetention]; a negative value is an error. It
	// should be far longer than any lease, so that only abandoned records
	// (their owner gone, their outcome unknown) are retired.
	ProcessingRetention time.Duration
}

// Retention returns p.ProcessingRetention, or [DefaultProcessingRetention]
// when it is zero, and an error when it is negative.
func (p *SweepParams) Retention() (time.Duration, error) {
	switch {
	case p.ProcessingRetention < 0:
		return 0, fmt.Errorf("retrysafe: negative SweepParams.ProcessingRetention %s", p.ProcessingRetention)
	case p.ProcessingRetention == 0:
		return DefaultProcessingRetention, nil
	}
	return p.ProcessingRetention, nil
}

// Sweeper is implemented by stores that need expired records deleted in the
// background. Sweeping only reclaims space: expiry is enforced on read
// whether or not a sweeper runs. One call deletes every completed record
// with ExpiresAt <= Now and retires every processing record with
// LeaseUntil + ProcessingRetention <= Now (see [SweepParams]), in batches of
// BatchSize, each its own short statement or transaction, and returns how
// many it deleted in all. A processing record whose lease is live, or ran
// out less than ProcessingRetention ago, is never deleted. The delete is
// conditional on the record as it stands (one statement or one locked
// step): a record extended, taken over or completed meanwhile is kept.
type Sweeper interface {
	Sweep(ctx context.Context, params *SweepParams) (int, error)
}

// ListParams are the arguments of [Admin.List].
type ListParams struct {
	// Scope selects the records of one scope when it is not empty or when
	// ScopeSet is true; ScopeSet selects the empty scope (callers without
	// credentials). With neither, every scope is listed.
	Scope    string
	ScopeSet bool
	// After is a cursor: list records ordered by (Scope, Key) strictly after
	// this pair. Zero value starts at the beginning.
	AfterScope, AfterKey string
	// Limit is the most records returned; zero or less means
	// [DefaultListLimit] (see [ListParams.PageSize]).
	Limit int
	// WithBodies includes stored response bodies; otherwise Response.Body
	// is nil.
	WithBodies bool

	// Filters: a zero field does not filter. They narrow the page without
	// changing its order or the meaning of the cursor, so a page of Limit
	// records that pass them is followed by the next (see
	// [ListParams.Matches], which states them in Go).

	// State selects the records in this state.
	State retrysafe.State
	// KeyPrefix selects the records whose key starts with it (byte-wise;
	// it is not a pattern).
	KeyPrefix string
	// UpdatedFrom and UpdatedTo select the records with UpdatedFrom <=
	// UpdatedAt < UpdatedTo (either bound may be zero: open).
	UpdatedFrom, UpdatedTo time.Time
	// LeaseExpiredBy, when not zero, selects the processing records whose
	// lease ran out by then (LeaseUntil <= LeaseExpiredBy) or that their
	// owner abandoned (Record.Abandoned): the attempts whose outcome is
	// unknown.
	LeaseExpiredBy time.Time
	// Route selects the records whose Route equals it (exactly).
	Route string
}

// Matches reports whether rec passes p's scope selection and filters
// (not the cursor): the definition every store's List follows.
func (p *ListParams) Matches(rec *retrysafe.Record) bool {
	switch {
	case p.OneScope() && rec.Scope != p.Scope,
		p.State != "" && rec.State != p.State,
		len(rec.Key) < len(p.KeyPrefix) || rec.Key[:len(p.KeyPrefix)] != p.KeyPrefix,
		!p.UpdatedFrom.IsZero() && rec.UpdatedAt.Before(p.UpdatedFrom),
		!p.UpdatedTo.IsZero() && !rec.UpdatedAt.Before(p.UpdatedTo),
		!p.LeaseExpiredBy.IsZero() && (rec.State != retrysafe.StateProcessing || !rec.Abandoned && p.LeaseExpiredBy.Before(rec.LeaseUntil)),
		p.Route != "" && rec.Route != p.Route:
		return false
	}
	return true
}

// KeyPrefixEnd returns the least string greater than every key that starts
// with p.KeyPrefix, for SQL stores to bound an index range scan (key >=
// KeyPrefix AND key < end). ok is false when there is no such bound that is
// valid UTF-8 (an empty prefix, or one that ends in a non-ASCII byte or in
// DEL); such stores then test the prefix alone. Keys the engine accepts are
// printable ASCII, so a prefix of one always has a bound.
func (p *ListParams) KeyPrefixEnd() (end string, ok bool) {
	n := len(p.KeyPrefix)
	if n == 0 || p.KeyPrefix[n-1] >= 0x7f {
		return "", false
	}
	return p.KeyPrefix[:n-1] + string(rune(p.KeyPrefix[n-1]+1)), true
}

// Filtered reports whether p has a filter beyond the scope selection.
func (p *ListParams) Filtered() bool {
	return p.State != "" || p.KeyPrefix != "" || !p.UpdatedFrom.IsZero() || !p.UpdatedTo.IsZero() || !p.LeaseExpiredBy.IsZero() || p.Route != ""
}

// DefaultListLimit is the page size of [Admin.List] when ListParams.Limit
// is zero or less.
const DefaultListLimit = 100

// PageSize returns p.Limit, or [DefaultListLimit] when it is zero or less.
func (p *ListParams) PageSize() int {
	if p.Limit <= 0 {
		return DefaultListLimit
	}
	return p.Limit
}

// OneScope reports whether p selects the records of one scope, p.Scope:
// when p.Scope is not empty or p.ScopeSet is true.
func (p *ListParams) OneScope() bool { return p.Scope != "" || p.ScopeSet }

// FindParams are the arguments of [Admin.Find].
type FindParams struct {
	Key string
	// Scope selects one scope when it is not empty or when ScopeSet is
	// true (as in [ListParams]); with neither, Find looks in every scope.
	Scope    string
	ScopeSet bool
	// WithBodies includes stored response bodies; otherwise Response.Body
	// is nil.
	WithBodies bool
}

// OneScope reports whether p selects one scope, p.Scope: when p.Scope is
// not empty or p.ScopeSet is true.
func (p *FindParams) OneScope() bool { return p.Scope != "" || p.ScopeSet }

// StatsParams are the arguments of [Admin.Stats].
type StatsParams struct {
	// Now decides which leases have run out and which results expired.
	Now time.Time
	// Unknown is how many lease-expired processing records Stats returns
	// in Stats.Unknown; zero or less means [DefaultStatsUnknown].
	Unknown int
}

// DefaultStatsUnknown is how many records [Admin.Stats] returns in
// Stats.Unknown when StatsParams.Unknown is zero or less.
const DefaultStatsUnknown = 20

// UnknownLimit returns p.Unknown, or [DefaultStatsUnknown] when it is zero
// or less.
func (p *StatsParams) UnknownLimit() int {
	if p.Unknown <= 0 {
		return DefaultStatsUnknown
	}
	return p.Unknown
}

// Stats is what [Admin.Stats] returns: an operator's overview of a store.
// Records are counted as stored (expired ones included until swept).
type Stats struct {
	// Processing and Completed count the records in each state.
	Processing, Completed int64
	// LeaseExpired counts the processing records whose lease ran out by
	// Now (LeaseUntil <= Now) or that their owner abandoned
	// ([StatusUnknown]): attempts whose outcome is unknown, and those
	// the completer found not done since ([StatusAwaitingRetry]: a store
	// counts by lease, not by checkpoint). They are part of Processing.
	LeaseExpired int64
	// Failed counts the completed records of [StatusFailed] (a
	// stored status of 400 or more, not expired); Expired those whose
	// result expired by Now (ExpiresAt <= Now; [StatusExpired]),
	// whatever their status. Both are part of Completed.
	Failed, Expired int64
	// OldestInFlight is the processing record with a live lease (LeaseUntil
	// > Now) created first (ties broken by scope, then key), or nil.
	OldestInFlight *retrysafe.Record
	// Unknown are up to StatsParams.Unknown processing records of
	// [StatusUnknown] or [StatusAwaitingRetry] (lease ran out by Now,
	// or abandoned), by LeaseUntil (the longest expired first), then
	// scope, then key.
	Unknown []*retrysafe.Record
}

// StatsOf computes [Stats] from every record of a store, as
// [Admin.Stats] defines it: the reference for stores that count in Go
// (memory, Redis). It keeps recs' processing records in the result as they
// are (they hold no response) and reorders nothing in recs.
func StatsOf(recs []*retrysafe.Record, p *StatsParams) *Stats {
	st := &Stats{Unknown: []*retrysafe.Record{}}
	byID := func(a, b *retrysafe.Record) int {
		return cmp.Or(cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Key, b.Key))
	}
	for _, rec := range recs {
		if rec.State == retrysafe.StateCompleted {
			st.Completed++
		} else {
			st.Processing++
		}
		switch StatusOf(rec, p.Now) {
		case StatusFailed:
			st.Failed++
		case StatusExpired:
			st.Expired++
		case StatusUnknown, StatusAwaitingRetry:
			st.LeaseExpired++
			st.Unknown = append(st.Unknown, rec)
		case StatusProcessing:
			if o := st.OldestInFlight; o == nil || cmp.Or(rec.CreatedAt.Compare(o.CreatedAt), byID(rec, o)) < 0 {
				st.OldestInFlight = rec
			}
		}
	}
	slices.SortFunc(st.Unknown, func(a, b *retrysafe.Record) int {
		return cmp.Or(a.LeaseUntil.Compare(b.LeaseUntil), byID(a, b))
	})
	st.Unknown = st.Unknown[:min(len(st.Unknown), p.UnknownLimit())]
	return st
}

// Admin is implemented by stores that support inspection for operators
// (`retrysafe keys`, the operator page). It returns records as stored,
// completed records past ExpiresAt included until a sweep (or the
// backend's own expiry) deletes them.
//
//   - List returns up to Limit records ordered by (Scope, Key) in byte
//     order, strictly after the (AfterScope, AfterKey) cursor, in one
//     scope or in all, that pass the filters (see [ListParams] and
//     [ListParams.Matches]). SQL stores turn the filters into WHERE
//     clauses of a keyset query, so a page never reads the whole table
//     when one scope is selected (the primary key leads with the scope).
//   - Find returns the records whose key is params.Key, ordered by scope:
//     in every scope, or in the one selected (then at most one record).
//     None found is an empty result, not an error.
//   - Delete removes a record unconditionally (not fenced); it returns
//     [retrysafe.ErrNotFound] when there was none.
//   - Stats counts the records by state and returns the oldest in-flight
//     record and the unknown outcomes (see [Stats]); records in it carry
//     no response body. Counting reads every record's state (an index
//     scan on SQL stores): it is meant for an operator's page, refreshed
//     every few seconds, not for the request path.
type Admin interface {
	List(ctx context.Context, params *ListParams) ([]*retrysafe.Record, error)
	Find(ctx context.Context, params *FindParams) ([]*retrysafe.Record, error)
	Delete(ctx context.Context, scope, key string) error
	Stats(ctx context.Context, params *StatsParams) (*Stats, error)
}
