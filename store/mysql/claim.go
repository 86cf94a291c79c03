package mysql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/groupcommit"
)

// Claim implements [retrysafe.Store.Claim].
//
// It first reads the record with one plain primary-key SELECT (no lock,
// no transaction; the reads of concurrent Claims share one SELECT of all
// their keys, see sharedRead). A record that blocks the claim (completed
// and unexpired, processing with a live lease, or processing with an
// expired lease and another fingerprint, or one the claim may not take
// over: p.NoTakeover, or a p.TakeoverToken other than its token) is
// returned as it is: a replay or a conflict is one read that writes
// nothing and waits for no lock, not even for a caller's uncommitted
// CompleteTx. It is exactly what the claim procedure's own first read
// would answer.
//
// Otherwise the claim is written, group-committed with concurrent
// operations (see [Store.BatchStats]): a lone claim of a key the read
// found absent is one INSERT, autocommitted (a duplicate key, a record
// committed since the read, sends it on to the claim procedure); any
// other lone claim is one CALL of the claim procedure that [Store.Migrate]
// creates ("<table>_claim", procedures.sql); claims sent while another
// batch runs go together, with completions, releases and extensions,
// into one transaction with one COMMIT (batch.go). The claim procedure
// runs a READ COMMITTED transaction: INSERT … ON DUPLICATE KEY UPDATE
// inserts a new record, or locks the existing row exclusively (waiting
// for a concurrent claimant's insert to commit); a locking read then
// decides between the caller's own insert, a takeover (one UPDATE) and a
// blocker. A batch inserts the records of absent keys with one such
// INSERT and leaves every other claim to the claim procedure. Either way a claim
// is reported won only after the COMMIT that holds it. A claim that
// InnoDB picks as a deadlock victim was rolled back whole and runs again
// (up to 10 times).
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
	rec, err := s.sharedRead(ctx, p.Scope, p.Key)
	absent := errors.Is(err, sql.ErrNoRows)
	switch {
	case err == nil:
		if blocksClaim(rec, p) {
			return &retrysafe.ClaimResult{Record: rec}, nil
		}
	case !absent:
		return nil, s.wrap(ctx, "claim", err)
	}
	res, err := s.submit(ctx, "claim", &batchOp{kind: opClaim, scope: p.Scope, key: p.Key, token: p.Token, now: now, until: until, claim: p, absent: absent})
	if err != nil {
		return nil, err
	}
	return res.claim, nil
}

// blocksClaim reports whether rec, read at p.Now, makes a claim with p
// fail without writing: the claim procedure's answer from its first,
// plain read.
func blocksClaim(rec *retrysafe.Record, p *retrysafe.ClaimParams) bool {
	switch rec.State {
	case retrysafe.StateCompleted:
		return !rec.Expired(p.Now)
	case retrysafe.StateProcessing:
		return !rec.LeaseExpired(p.Now) || rec.Fingerprint != p.Fingerprint ||
			p.NoTakeover || (p.TakeoverToken != "" && rec.Token != p.TakeoverToken)
	}
	return false
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

// Get implements [retrysafe.Store.Get]: one primary-key SELECT, one round
// trip. A completed record whose ExpiresAt <= p.Now is reported as
// [retrysafe.ErrNotFound] even while it is still stored.
func (s *Store) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	if p == nil {
		return nil, errors.New("mysql: get: nil params")
	}
	rec, err := s.read(ctx, p.Scope, p.Key)
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

// read returns the record of scope/key as stored, with one plain
// primary-key SELECT on a prepared statement; sql.ErrNoRows when there is
// none.
func (s *Store) read(ctx context.Context, scope, key string) (*retrysafe.Record, error) {
	st, err := s.stmt(ctx, s.q.get)
	if err != nil {
		return nil, err
	}
	return scanRecord(st.QueryRowContext(ctx, scope, key))
}

// sharedRead is read for Claim: the plain reads of concurrent Claims share
// one SELECT of all their keys (runReads), sent as the store's group
// commit sends operations: a lone read at once, reads that queue while
// others run together. A shared read is a plain read all the same: no
// lock, no transaction, the newest committed version of each row.
func (s *Store) sharedRead(ctx context.Context, scope, key string) (*retrysafe.Record, error) {
	rec, err := s.reads.Do(ctx, scopeKey{scope, key})
	if errors.Is(err, groupcommit.ErrClosed) {
		err = errClosed
	}
	if err == nil && rec == nil {
		err = sql.ErrNoRows
	}
	return rec, err
}

// runReads is the read committer's batch function: one SELECT of every
// key wanted (a key wanted twice is read again for its second caller, who
// gets a Record of its own), or read's prepared statement for one key.
// A nil record is none.
func (s *Store) runReads(b *groupcommit.Batch[scopeKey, *retrysafe.Record]) error {
	var (
		keys  []scopeKey
		items = make(map[scopeKey]int) // the item that reads a key in the SELECT
	)
	for i := range b.Len() {
		if !b.Start(i) {
			continue
		}
		k := b.Input(i)
		if _, dup := items[k]; dup {
			rec, err := s.readOrNil(b.Context(), k)
			b.Set(i, rec, err)
			continue
		}
		items[k] = i
		keys = append(keys, k)
	}
	switch len(keys) {
	case 0:
		return nil
	case 1:
		rec, err := s.readOrNil(b.Context(), keys[0])
		b.Set(items[keys[0]], rec, err)
		return nil
	}
	rows, err := s.db.QueryContext(b.Context(), "SELECT "+recordColumns+" FROM "+s.q.table+" WHERE "+keysWhere(keys))
	if err != nil {
		return err
	}
	defer rows.Close()
	found := make(map[scopeKey]*retrysafe.Record, len(keys))
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return err
		}
		found[scopeKey{rec.Scope, rec.Key}] = rec
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		b.Set(items[k], found[k], nil)
	}
	return nil
}

// readOrNil is read of k, a nil record for none.
func (s *Store) readOrNil(ctx context.Context, k scopeKey) (*retrysafe.Record, error) {
	rec, err := s.read(ctx, k.scope, k.key)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return rec, err
}
