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
// Every claim is one atomic statement, INSERT … ON CONFLICT DO UPDATE …
// WHERE <claimable> RETURNING: a new key is inserted, an expired completed
// record is replaced, and a processing record whose lease ran out is taken
// over when the fingerprint matches. When that statement returns no row the
// existing record blocked the claim (a replay, a request in flight, a
// mismatch), and a read of it in the same transaction (which holds the
// write lock) returns the record that blocked the claim (never a
// check-then-insert). The claim is one of this Store's group-committed
// writes: Claim returns once the transaction that holds it has committed
// (see the package documentation).
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
	}
	var res *retrysafe.ClaimResult
	err := s.write(ctx, "claim", func(b *batchTx) error {
		// A new key or a takeover is one statement.
		var (
			attempt int
			created int64
		)
		err := b.stmt(s.q.claim).QueryRow(args...).Scan(&attempt, &created)
		if err == nil {
			// The rest of the record is params', as the upsert set it:
			// returning two columns instead of the row keeps the
			// writer's statement short.
			res = &retrysafe.ClaimResult{Claimed: true, Record: params.ProcessingRecord(attempt,
				fromNanos(created), fromNanos(toNanos(params.Now)), fromNanos(toNanos(params.Now.Add(params.Lease))))}
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		// Blocked: the blocker is read in the same transaction, which
		// has held the write lock since the batch began (BEGIN
		// IMMEDIATE), so the record read is the one that blocked the
		// claim, even if an earlier write of this batch wrote it: a
		// claim of a key claimed earlier in the batch sees that
		// claim's record, as if the two were serialised, which they
		// are.
		rec, err := scanRecord(b.stmt(s.q.get).QueryRow(params.Scope, params.Key))
		if errors.Is(err, sql.ErrNoRows) {
			// Impossible under the write lock: the upsert either
			// inserted or found a row.
			return errors.New("claim blocked by a record that does not exist")
		}
		if err != nil {
			return err
		}
		res = &retrysafe.ClaimResult{Claimed: false, Record: rec}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
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
