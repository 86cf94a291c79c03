package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/retrysafe/retrysafe"
)

// Claim claims params.Key in params.Scope for params.Token (see
// [retrysafe.Store] for the rules).
//
// A new key is one statement, INSERT … ON CONFLICT DO NOTHING, which
// inserts exactly when no record of that scope and key exists. When it
// inserts nothing, the existing record is read in the same transaction
// (which holds the write lock, so it is the record that blocked the insert;
// never a check-then-insert): a replay, a request in flight or a mismatch
// is answered with it. Only a record that may be taken over (completed and
// expired, or processing with its lease run out and the same fingerprint)
// goes on to INSERT … ON CONFLICT DO UPDATE … WHERE <claimable> RETURNING,
// whose WHERE decides in SQL: it replaces the expired completed record or
// takes the lease over. The claim is one of this Store's group-committed
// writes: Claim returns once the transaction that holds it has committed
// (see the package documentation).
//
// Before, every claim began with that upsert: it inserts a new key too, but
// its RETURNING, which SQLite buffers in an ephemeral table, doubles the
// statement's CPU (about 10 against 5 µs per new key), and a duplicate
// paid it before its read (docs/performance.md).
//
// Duplicates go through the writer too. A read-first fast path (answering
// a duplicate from a plain read, without the write lock) made replays a
// little cheaper (11 against 14 µs at the store, 1.7 against 1.6 times
// the plain proxy's throughput through the gateway) but cost every new
// key a read transaction, which on a busy WAL database re-reads the pages
// the writer changed (25–35 µs of CPU): new keys are the common case, so
// they get the short path (docs/performance.md).
func (s *Store) Claim(ctx context.Context, params *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	if params == nil {
		return nil, errors.New("sqlite: claim: nil params")
	}
	if params.Now.IsZero() {
		return nil, errors.New("sqlite: claim: params.Now is zero")
	}
	args := []any{
		params.Scope, params.Key, params.Fingerprint, params.Token,
		toNanos(params.Now), toNanos(params.Now.Add(params.Lease)), params.Route,
		params.NoTakeover, params.TakeoverToken,
	}
	var res *retrysafe.ClaimResult
	err := s.write(ctx, "claim", func(b *batchTx) error {
		// A new key, the common case, is one plain insert, which
		// inserts exactly when the upsert below would (no row of
		// this scope and key), without its RETURNING.
		r, err := b.stmt(s.q.claimNew).Exec(args[:7]...)
		if err != nil {
			return err
		}
		if n, err := r.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			res = &retrysafe.ClaimResult{Claimed: true, Record: params.ProcessingRecord(1,
				fromNanos(toNanos(params.Now)), fromNanos(toNanos(params.Now)), fromNanos(toNanos(params.Now.Add(params.Lease))))}
			return nil
		}
		// The key exists. Its record is read in the same transaction,
		// which has held the write lock since the batch began (BEGIN
		// IMMEDIATE), so it is the record that blocked the insert, even
		// if an earlier write of this batch wrote it: a claim of a key
		// claimed earlier in the batch sees that claim's record, as if
		// the two were serialised, which they are. Most such claims are
		// replays or requests in flight, answered by this read alone.
		rec, err := scanRecord(b.stmt(s.q.get).QueryRow(params.Scope, params.Key))
		if errors.Is(err, sql.ErrNoRows) {
			// Impossible under the write lock: the insert found a row.
			return errors.New("claim blocked by a record that does not exist")
		}
		if err != nil {
			return err
		}
		if !claimable(rec, params) {
			res = &retrysafe.ClaimResult{Claimed: false, Record: rec}
			return nil
		}
		// An expired completed record, or a lease that ran out with the
		// same fingerprint: the upsert, whose WHERE decides in SQL, takes
		// it over (it matches no row only if claimable and that WHERE
		// disagreed, and then the record read stands).
		var (
			attempt int
			created int64
		)
		err = b.stmt(s.q.claim).QueryRow(args...).Scan(&attempt, &created)
		if errors.Is(err, sql.ErrNoRows) {
			res = &retrysafe.ClaimResult{Claimed: false, Record: rec}
			return nil
		}
		if err != nil {
			return err
		}
		// The rest of the record is params', as the upsert set it:
		// returning two columns instead of the row keeps the writer's
		// statement short.
		res = &retrysafe.ClaimResult{Claimed: true, Record: params.ProcessingRecord(attempt,
			fromNanos(created), fromNanos(toNanos(params.Now)), fromNanos(toNanos(params.Now.Add(params.Lease))))}
		if rec.State == retrysafe.StateProcessing {
			// A takeover keeps the checkpoint, as read above under the
			// same lock: the new owner resumes from it.
			res.Record.Checkpoint = rec.Checkpoint
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// claimable reports whether the claim upsert's WHERE holds for rec at
// params.Now: a completed record that expired, or a processing record
// whose lease ran out, claimed with the same fingerprint, and neither
// NoTakeover nor a TakeoverToken other than its token. Times compare
// as the stored integer nanoseconds; a completed record without an
// expiry (NULL, never written by this store) is not claimable, as in SQL.
func claimable(rec *retrysafe.Record, params *retrysafe.ClaimParams) bool {
	now := toNanos(params.Now)
	switch rec.State {
	case retrysafe.StateCompleted:
		return !rec.ExpiresAt.IsZero() && toNanos(rec.ExpiresAt) <= now
	case retrysafe.StateProcessing:
		return toNanos(rec.LeaseUntil) <= now && rec.Fingerprint == params.Fingerprint &&
			!params.NoTakeover && (params.TakeoverToken == "" || rec.Token == params.TakeoverToken)
	}
	return false
}

// Get returns the record for params.Key in params.Scope, or
// [retrysafe.ErrNotFound] when there is none or it is completed and expired
// at params.Now. A processing record is returned whatever its lease.
func (s *Store) Get(ctx context.Context, params *retrysafe.GetParams) (*retrysafe.Record, error) {
	if params == nil {
		return nil, errors.New("sqlite: get: nil params")
	}
	var rec *retrysafe.Record
	err := s.retry(ctx, "get", func() error {
		var err error
		get, err := s.stmt(ctx, s.q.get)
		if err != nil {
			return err
		}
		rec, err = scanRecord(get.QueryRowContext(ctx, params.Scope, params.Key))
		if errors.Is(err, sql.ErrNoRows) {
			return retrysafe.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if rec.Expired(params.Now) {
		return nil, retrysafe.ErrNotFound
	}
	return rec, nil
}
