package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/fencedtx"
)

// Extend implements [retrysafe.Store.Extend]: one UPDATE fenced by the
// owner token and state 'processing' (group-committed with concurrent
// operations, see [Store.BatchStats]). It sets LeaseUntil to p.Now+p.Lease
// and UpdatedAt to p.Now; with p.Abandon it marks the record abandoned and
// leaves LeaseUntil as it is; with p.Checkpoint it stores that checkpoint
// (At = p.Now) in the same UPDATE.
func (s *Store) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	args, err := extendArgs("extend", p)
	if err != nil {
		return err
	}
	res, err := s.submit(ctx, "extend", &batchOp{kind: opExtend, scope: p.Scope, key: p.Key, token: p.Token,
		now: args[2].(int64), until: args[1].(int64), args: args})
	if err == nil && res.lost {
		err = retrysafe.ErrLeaseLost
	}
	return err
}

// CheckpointTx is [Store.Extend] with a checkpoint inside the caller's
// transaction tx, as [Store.CompleteTx] is Complete: the business writes
// of a step and the checkpoint that records it commit, or roll back,
// together. p.Checkpoint must be set; the lease is renewed to p.Now +
// p.Lease as by Extend (Lease must be positive unless p.Abandon). The
// same rules for tx hold as for CompleteTx: the UPDATE locks the record's
// row until tx ends, so the owner's own Extend or Complete of the record
// waits for tx. An [retrysafe.ErrLeaseLost] leaves tx usable.
func (s *Store) CheckpointTx(ctx context.Context, tx *sql.Tx, p *retrysafe.ExtendParams) error {
	if tx == nil {
		return errors.New("mysql: checkpoint: nil *sql.Tx")
	}
	if err := fencedtx.CheckpointParams("mysql", p); err != nil {
		return err
	}
	args, err := extendArgs("checkpoint", p)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, s.q.extend, args...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	return s.wrap(ctx, "checkpoint", fencedResult(n, err))
}

// extendArgs encodes an extension's arguments for the extend statement.
func extendArgs(op string, p *retrysafe.ExtendParams) ([]any, error) {
	if p == nil {
		return nil, errors.New("mysql: " + op + ": nil params")
	}
	now, err := nanos(p.Now)
	if err != nil {
		return nil, err
	}
	until, err := nanos(p.Now.Add(p.Lease))
	if err != nil {
		return nil, err
	}
	var (
		has  bool
		name string
		data []byte
	)
	if cp := p.Checkpoint; cp != nil {
		if err := checkCheckpoint(cp); err != nil {
			return nil, fmt.Errorf("mysql: %s: %w", op, err)
		}
		has, name, data = true, cp.Name, encodeBody(cp.Data)
	}
	return []any{p.Abandon, until, now, p.Abandon, has, name, has, data, has, now, p.Scope, p.Key, p.Token}, nil
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

// Complete implements [retrysafe.Store.Complete]: one UPDATE fenced by the
// owner token and state 'processing', which stores the response and marks
// the record completed, expiring at p.Now+p.TTL (group-committed with
// concurrent operations, see [Store.BatchStats]). It returns after the
// COMMIT that holds it. Subscribers in this
// process are notified.
func (s *Store) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	args, err := completeArgs(p)
	if err != nil {
		return err
	}
	op := &batchOp{kind: opComplete, scope: p.Scope, key: p.Key, token: p.Token, now: args[0].(int64), until: args[1].(int64),
		args: args, status: args[2].(int), header: args[3].([]byte), body: args[4].([]byte)}
	res, err := s.submit(ctx, "complete", op)
	if err != nil {
		return err
	}
	if res.lost {
		return retrysafe.ErrLeaseLost
	}
	s.subs.notify(p.Scope, p.Key)
	return nil
}

// CompleteTx completes the record inside the caller's transaction tx,
// fenced by p.Token like [Store.Complete]: the completion and the caller's
// business writes commit together or not at all. If tx rolls back the
// record stays processing under the caller's token; the engine (or the
// caller) should then release it or let its lease run out, so a retry runs
// again.
//
// tx must be on the database that holds the store's table (the statement
// names the table without a database): begin it on [Store.DB] or on a
// *sql.DB of the same database. The UPDATE locks the record's row until tx ends: a duplicate
// meanwhile is answered from a plain read (the record is processing) and
// does not wait, but a takeover of the record waits for tx. Under any
// isolation level the UPDATE sees the newest committed row, so the fencing
// holds. Subscribers are not notified (the commit is the caller's): waiters
// see the completion on their fallback poll.
//
// An [retrysafe.ErrLeaseLost] from CompleteTx leaves tx usable; the caller
// decides whether to roll back.
func (s *Store) CompleteTx(ctx context.Context, tx *sql.Tx, p *retrysafe.CompleteParams) error {
	if tx == nil {
		return errors.New("mysql: complete: nil *sql.Tx")
	}
	args, err := completeArgs(p)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, s.q.complete, args...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	return s.wrap(ctx, "complete", fencedResult(n, err))
}

// completeArgs encodes a completion's arguments for the complete statement.
// A nil Response is stored as an empty one.
func completeArgs(p *retrysafe.CompleteParams) ([]any, error) {
	if p == nil {
		return nil, errors.New("mysql: complete: nil params")
	}
	now, err := nanos(p.Now)
	if err != nil {
		return nil, err
	}
	expires, err := nanos(p.Now.Add(p.TTL))
	if err != nil {
		return nil, err
	}
	resp := p.Response
	if resp == nil {
		resp = &retrysafe.Response{}
	}
	return []any{now, expires, resp.Status, encodeHeader(resp.Header), encodeBody(resp.Body), p.Scope, p.Key, p.Token}, nil
}

// Release implements [retrysafe.Store.Release]: one DELETE fenced by the
// owner token and state 'processing' (group-committed with concurrent
// operations). Subscribers in this process are
// notified.
func (s *Store) Release(ctx context.Context, p *retrysafe.ReleaseParams) error {
	if p == nil {
		return errors.New("mysql: release: nil params")
	}
	res, err := s.submit(ctx, "release", &batchOp{kind: opRelease, scope: p.Scope, key: p.Key, token: p.Token})
	if err != nil {
		return err
	}
	if res.lost {
		return retrysafe.ErrLeaseLost
	}
	s.subs.notify(p.Scope, p.Key)
	return nil
}

// fencedResult turns a fenced statement's affected-row count into
// ErrLeaseLost when it matched no row.
func fencedResult(n int64, err error) error {
	if err != nil {
		return err
	}
	if n == 0 {
		return retrysafe.ErrLeaseLost
	}
	return nil
}
