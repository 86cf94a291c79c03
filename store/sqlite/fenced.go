package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/fencedtx"
)

// Extend renews the lease of the processing record owned by params.Token:
// LeaseUntil = params.Now + params.Lease. With params.Abandon it marks the
// record abandoned and leaves LeaseUntil as it is; with params.Checkpoint
// it stores that checkpoint (At = params.Now) in the same write. It
// returns [retrysafe.ErrLeaseLost] when the record is absent, completed,
// or owned by another token. One fenced UPDATE; the lease itself is not
// checked.
func (s *Store) Extend(ctx context.Context, params *retrysafe.ExtendParams) error {
	args, err := extendArgs("extend", params)
	if err != nil {
		return err
	}
	return s.write(ctx, "extend", func(b *batchTx) error {
		return fenced(b.stmt(s.q.extend).Exec(args...))
	})
}

// CheckpointTx is [Store.Extend] with a checkpoint inside the caller's
// transaction tx on the same database, as [Store.CompleteTx] is Complete:
// the business writes of a step and the checkpoint that records it commit,
// or roll back, together. params.Checkpoint must be set; the lease is
// renewed to params.Now + params.Lease as by Extend (Lease must be
// positive unless params.Abandon). It returns [retrysafe.ErrLeaseLost]
// when params.Token no longer owns a processing record, leaving tx usable.
// The same rules for tx as for CompleteTx hold (BEGIN IMMEDIATE; no other
// write of the Store from its goroutine while it is open).
func (s *Store) CheckpointTx(ctx context.Context, tx *sql.Tx, params *retrysafe.ExtendParams) error {
	if tx == nil {
		return errors.New("sqlite: checkpoint: nil *sql.Tx")
	}
	if err := fencedtx.CheckpointParams("sqlite", params); err != nil {
		return err
	}
	args, err := extendArgs("checkpoint", params)
	if err != nil {
		return err
	}
	return s.translate(ctx, "checkpoint", fenced(tx.ExecContext(ctx, s.q.extend, args...)))
}

// extendArgs encodes an extension's arguments for the extend statement.
func extendArgs(op string, params *retrysafe.ExtendParams) ([]any, error) {
	if params == nil {
		return nil, errors.New("sqlite: " + op + ": nil params")
	}
	if params.Now.IsZero() {
		return nil, errors.New("sqlite: " + op + ": params.Now is zero")
	}
	var name, data any // NULL: no checkpoint, the stored one stays
	if cp := params.Checkpoint; cp != nil {
		if err := checkCheckpoint(cp); err != nil {
			return nil, fmt.Errorf("sqlite: %s: %w", op, err)
		}
		name, data = cp.Name, encodeBody(cp.Data)
	}
	return []any{params.Scope, params.Key, params.Token,
		toNanos(params.Now.Add(params.Lease)), toNanos(params.Now), params.Abandon, name, data}, nil
}

// checkCheckpoint refuses a checkpoint the store cannot take: a name of 1
// to 64 printable ASCII bytes, as the engine writes, and data of at most
// retrysafe.CheckpointStoreLimit bytes (the engine's MaxCheckpointData and
// a wrapper's overhead). CheckpointTx's callers reach the store without
// the engine.
func checkCheckpoint(cp *retrysafe.Checkpoint) error {
	if len(cp.Name) == 0 || len(cp.Name) > 64 {
		return fmt.Errorf("checkpoint name %q: want 1 to 64 bytes", cp.Name)
	}
	for i := range len(cp.Name) {
		if c := cp.Name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("checkpoint name %q: byte %d is not printable ASCII", cp.Name, i)
		}
	}
	if len(cp.Data) > retrysafe.CheckpointStoreLimit {
		return fmt.Errorf("checkpoint %q: %d bytes of data, at most %d allowed", cp.Name, len(cp.Data), retrysafe.CheckpointStoreLimit)
	}
	return nil
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
