package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/retrysafe/retrysafe"
)

// Extend renews the lease of the processing record owned by params.Token:
// LeaseUntil = params.Now + params.Lease. It returns [retrysafe.ErrLeaseLost]
// when the record is absent, completed, or owned by another token. One
// fenced UPDATE; the lease itself is not checked.
func (s *Store) Extend(ctx context.Context, params *retrysafe.ExtendParams) error {
	if params == nil {
		return errors.New("sqlite: extend: nil params")
	}
	if params.Now.IsZero() {
		return errors.New("sqlite: extend: params.Now is zero")
	}
	return s.write(ctx, "extend", func(b *batchTx) error {
		return fenced(b.stmt(s.q.extend).Exec(params.Scope, params.Key, params.Token,
			toNanos(params.Now.Add(params.Lease)), toNanos(params.Now)))
	})
}

// Complete stores params.Response in the processing record owned by
// params.Token and marks it completed, expiring at params.Now +
// params.TTL. It returns [retrysafe.ErrLeaseLost] when the token does not
// own a processing record. One fenced UPDATE. A nil Response is stored as
// an empty one (status 0, no headers, no body).
func (s *Store) Complete(ctx context.Context, params *retrysafe.CompleteParams) error {
	args, err := completeArgs(params)
	if err != nil {
		return err
	}
	err = s.write(ctx, "complete", func(b *batchTx) error {
		return fenced(b.stmt(s.q.complete).Exec(args...))
	})
	if err == nil {
		s.subs.notify(params.Scope, params.Key)
	}
	return err
}

// CompleteTx is [Store.Complete] inside the caller's transaction tx on the
// same database: the handler's business writes and the completion commit,
// or roll back, together. After a rollback the record is still processing
// under the caller's token, so the engine can release it (or its lease can
// run out) and a retry runs the operation again.
//
// Begin tx with BEGIN IMMEDIATE (the default for a *sql.DB opened with
// [DSN], such as [Store.DB] of a Store from [Open]): a deferred transaction
// that has already read may fail its first write with SQLITE_BUSY, and
// inside a transaction that cannot be retried. While tx is open it holds
// the database's write lock: the goroutine that owns tx must not call the
// Store's other writing methods (Claim, Extend, Complete, Release) before
// it commits or rolls back, or they wait for that lock until BusyTimeout
// and fail (meanwhile the Store's writes from every goroutine wait behind
// the writer's batch, which waits for tx). CompleteTx does not notify
// subscribers (the commit is the caller's); waiters in this process see the
// completion on their fallback poll.
func (s *Store) CompleteTx(ctx context.Context, tx *sql.Tx, params *retrysafe.CompleteParams) error {
	if tx == nil {
		return errors.New("sqlite: complete: nil *sql.Tx")
	}
	args, err := completeArgs(params)
	if err != nil {
		return err
	}
	return s.translate(ctx, "complete", fenced(tx.ExecContext(ctx, s.q.complete, args...)))
}

func completeArgs(params *retrysafe.CompleteParams) ([]any, error) {
	if params == nil {
		return nil, errors.New("sqlite: complete: nil params")
	}
	if params.Now.IsZero() {
		return nil, errors.New("sqlite: complete: params.Now is zero")
	}
	resp := params.Response
	if resp == nil {
		resp = &retrysafe.Response{}
	}
	return []any{
		params.Scope, params.Key, params.Token,
		toNanos(params.Now), toNanos(params.Now.Add(params.TTL)),
		resp.Status, encodeHeaders(resp.Header), encodeBody(resp.Body),
	}, nil
}

// Release deletes the processing record owned by params.Token, so a retry
// runs the operation anew. It returns [retrysafe.ErrLeaseLost] when the
// token does not own a processing record. One fenced DELETE.
func (s *Store) Release(ctx context.Context, params *retrysafe.ReleaseParams) error {
	if params == nil {
		return errors.New("sqlite: release: nil params")
	}
	err := s.write(ctx, "release", func(b *batchTx) error {
		return fenced(b.stmt(s.q.release).Exec(params.Scope, params.Key, params.Token))
	})
	if err == nil {
		s.subs.notify(params.Scope, params.Key)
	}
	return err
}

// fenced turns a fenced statement's result into ErrLeaseLost when it
// matched no row.
func fenced(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return retrysafe.ErrLeaseLost
	}
	return nil
}
