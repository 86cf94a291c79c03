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
// A duplicate (the key is completed and unexpired, processing under a live
// lease, or processing with an expired lease but another fingerprint) is
// answered by a plain read, which with WAL neither takes nor waits for the
// write lock: the record blocked the claim when it was read. Only when the
// key is absent or claimable does Claim write.
//
// Every claim that writes is one atomic statement, INSERT … ON CONFLICT DO UPDATE …
// WHERE <claimable> RETURNING: a new key is inserted, an expired completed
// record is replaced, and a processing record whose lease ran out is taken
// over when the fingerprint matches. When that statement returns no row the
// existing record blocked the claim, and a read of it in the same
// transaction (which holds the write lock) returns the record that blocked
// the claim (never a check-then-insert). The write is one of this Store's
// group-committed writes: Claim returns once the transaction that holds it
// has committed (see the package documentation).
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
	// Read-only fast path for duplicates (replays, in-flight conflicts,
	// mismatches): a record that blocks the claim at the time of a plain
	// read is a correct answer, and with WAL the read neither takes nor
	// waits for the write lock. Anything else (absent, or claimable) goes
	// to the atomic upsert below; the read never decides to write.
	if rec, err := s.blocker(ctx, params); err != nil || rec != nil {
		if err != nil {
			return nil, err
		}
		return &retrysafe.ClaimResult{Claimed: false, Record: rec}, nil
	}

	var res *retrysafe.ClaimResult
	err := s.write(ctx, "claim", func(b *batchTx) error {
		// A new key or a takeover is one statement.
		rec, err := scanRecord(b.stmt(s.q.claim).QueryRow(args...))
		if err == nil {
			res = &retrysafe.ClaimResult{Claimed: true, Record: rec}
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		// Blocked: the blocker is read in the same transaction, which
		// has held the write lock since the batch's first write, so
		// the record read is the one that blocked the claim (even if it
		// changed since the fast path, or was written by an earlier
		// write of this batch: a claim of a key claimed earlier in the
		// batch sees that claim's record, as if the two were
		// serialised, which they are).
		rec, err = scanRecord(b.stmt(s.q.get).QueryRow(params.Scope, params.Key))
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

// blocker returns the record for params' key when it exists and blocks the
// claim at params.Now, or nil when the claim may proceed, retrying busy
// errors.
func (s *Store) blocker(ctx context.Context, params *retrysafe.ClaimParams) (*retrysafe.Record, error) {
	var rec *retrysafe.Record
	err := s.retry(ctx, "claim", func() error {
		var err error
		rec, err = s.readBlocker(ctx, params)
		return err
	})
	return rec, err
}

// readBlocker is one attempt of blocker. The condition mirrors the
// upsert's DO UPDATE … WHERE (see claimable).
func (s *Store) readBlocker(ctx context.Context, params *retrysafe.ClaimParams) (*retrysafe.Record, error) {
	get, err := s.stmt(ctx, s.q.get)
	if err != nil {
		return nil, err
	}
	rec, err := scanRecord(get.QueryRowContext(ctx, params.Scope, params.Key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil || claimable(rec, params) {
		return nil, err
	}
	return rec, nil
}

// claimable reports whether a claim with params may replace or take over
// rec: the same condition as the upsert's DO UPDATE … WHERE.
func claimable(rec *retrysafe.Record, params *retrysafe.ClaimParams) bool {
	switch rec.State {
	case retrysafe.StateCompleted:
		return !params.Now.Before(rec.ExpiresAt)
	case retrysafe.StateProcessing:
		return !params.Now.Before(rec.LeaseUntil) && rec.Fingerprint == params.Fingerprint
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
	if rec.State == retrysafe.StateCompleted && !params.Now.Before(rec.ExpiresAt) {
		return nil, retrysafe.ErrNotFound
	}
	return rec, nil
}
