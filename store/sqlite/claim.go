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
// The decision is one atomic statement, INSERT … ON CONFLICT DO UPDATE …
// WHERE <claimable> RETURNING: a new key is inserted, an expired completed
// record is replaced, and a processing record whose lease ran out is taken
// over when the fingerprint matches. When that statement returns no row the
// existing record blocked the claim; the store then runs the same statement
// again followed by a read of the blocking record inside one transaction
// that holds the write lock from its first statement, so the record
// returned is the one that blocked the claim (never a check-then-insert).
func (s *Store) Claim(ctx context.Context, params *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	if params == nil {
		return nil, errors.New("sqlite: claim: nil params")
	}
	if params.Now.IsZero() {
		return nil, errors.New("sqlite: claim: params.Now is zero")
	}
	args := []any{
		params.Scope, params.Key, params.Fingerprint, params.Token,
		toNanos(params.Now), toNanos(params.Now.Add(params.Lease)),
	}
	var res *retrysafe.ClaimResult
	err := s.write(ctx, "claim", func() error {
		claim, err := s.stmt(ctx, s.q.claim)
		if err != nil {
			return err
		}
		// Fast path: a new key or a takeover is one statement.
		rec, err := scanRecord(claim.QueryRowContext(ctx, args...))
		if err == nil {
			res = &retrysafe.ClaimResult{Claimed: true, Record: rec}
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		get, err := s.stmt(ctx, s.q.get)
		if err != nil {
			return err
		}
		// Blocked: claim again and read the blocker in one transaction.
		// Its first statement is the upsert, a write, so the transaction
		// holds the write lock from its first statement on (whether or
		// not the *sql.DB begins IMMEDIATE) and the record read is the
		// one that blocked the claim, even if it changed (completed,
		// released, expired) since the fast path.
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		rec, err = scanRecord(tx.StmtContext(ctx, claim).QueryRowContext(ctx, args...))
		switch {
		case err == nil:
			res = &retrysafe.ClaimResult{Claimed: true, Record: rec}
		case errors.Is(err, sql.ErrNoRows):
			rec, err = scanRecord(tx.StmtContext(ctx, get).QueryRowContext(ctx, params.Scope, params.Key))
			if errors.Is(err, sql.ErrNoRows) {
				// Impossible under the write lock: the upsert either
				// inserted or found a row.
				return errors.New("claim blocked by a record that does not exist")
			}
			if err != nil {
				return err
			}
			res = &retrysafe.ClaimResult{Claimed: false, Record: rec}
		default:
			return err
		}
		return tx.Commit()
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
	if rec.State == retrysafe.StateCompleted && !params.Now.Before(rec.ExpiresAt) {
		return nil, retrysafe.ErrNotFound
	}
	return rec, nil
}
