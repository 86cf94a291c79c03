package mysql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/retrysafe/retrysafe"
)

// Claim implements [retrysafe.Store.Claim]: one CALL of the claim
// procedure that [Store.Migrate] creates ("<table>_claim",
// procedures.sql), one round trip, one result row.
//
// A record that blocks the claim (a replay, a request in flight, a
// mismatch) is answered from a plain read: nothing is written or locked.
// Otherwise the procedure runs a READ COMMITTED transaction: INSERT … ON
// DUPLICATE KEY UPDATE inserts a new record, or locks the existing row
// exclusively (waiting for a concurrent claimant's insert to commit); a
// locking read then decides between the caller's own insert, a takeover
// (one UPDATE) and a blocker. The result row is sent only after COMMIT
// succeeded. A claim that InnoDB picks as a deadlock victim was rolled back
// whole and runs again (up to 10 times).
func (s *Store) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	if p == nil {
		return nil, errors.New("mysql: claim: nil params")
	}
	if err := checkSizes("claim", p.Scope, p.Key, p.Fingerprint, p.Token, p.Route); err != nil {
		return nil, err
	}
	now, err := nanos(p.Now)
	if err != nil {
		return nil, err
	}
	until, err := nanos(p.Now.Add(p.Lease))
	if err != nil {
		return nil, err
	}
	var res *retrysafe.ClaimResult
	err = s.retryDeadlock(ctx, func() error {
		var err error
		res, err = s.claimOnce(ctx, p, now, until)
		return err
	})
	if err != nil {
		return nil, s.wrap(ctx, "claim", err)
	}
	return res, nil
}

func (s *Store) claimOnce(ctx context.Context, p *retrysafe.ClaimParams, now, until int64) (*retrysafe.ClaimResult, error) {
	st, err := s.stmt(ctx, s.q.claim)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, p.Scope, p.Key, p.Fingerprint, p.Token, now, until, p.Route, p.NoTakeover, p.TakeoverToken)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("mysql: the claim procedure returned no row")
	}
	var (
		claimed bool
		r       = row{scope: []byte(p.Scope), key: []byte(p.Key)}
	)
	if err := rows.Scan(append([]any{&claimed}, r.dest()...)...); err != nil {
		return nil, err
	}
	if rows.Next() {
		return nil, errors.New("mysql: the claim procedure returned more than one row")
	}
	// Read the procedure's final status too (Close drains it): a failure
	// after the row, which the procedure never sends, must not go
	// unnoticed.
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if claimed {
		// The record is the caller's, as the procedure wrote it, with
		// the checkpoint a takeover kept.
		rec := p.ProcessingRecord(int(r.attempt),
			fromNanos(r.created), fromNanos(sql.NullInt64{Int64: now, Valid: true}),
			fromNanos(sql.NullInt64{Int64: until, Valid: true}))
		rec.Checkpoint = r.checkpoint()
		return &retrysafe.ClaimResult{Claimed: true, Record: rec}, nil
	}
	rec, err := r.record()
	if err != nil {
		return nil, err
	}
	return &retrysafe.ClaimResult{Record: rec}, nil
}

// Get implements [retrysafe.Store.Get]: one round trip. A completed record
// whose ExpiresAt <= p.Now is reported as [retrysafe.ErrNotFound] even while
// it is still stored.
func (s *Store) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	if p == nil {
		return nil, errors.New("mysql: get: nil params")
	}
	st, err := s.stmt(ctx, s.q.get)
	if err != nil {
		return nil, s.wrap(ctx, "get", err)
	}
	rec, err := scanRecord(st.QueryRowContext(ctx, p.Scope, p.Key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, retrysafe.ErrNotFound
	}
	if err != nil {
		return nil, s.wrap(ctx, "get", err)
	}
	if rec.Expired(p.Now) {
		return nil, retrysafe.ErrNotFound
	}
	return rec, nil
}
