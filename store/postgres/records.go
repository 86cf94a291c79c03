package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/fencedtx"
)

// Claim implements [retrysafe.Store.Claim]. Concurrent calls (with
// Complete, Release and Extend) share one statement and one commit; a lone
// call is one round trip. See the package documentation.
func (s *Store) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	if p == nil {
		return nil, errors.New("postgres: claim: nil params")
	}
	now, err := mustNanos(p.Now)
	if err != nil {
		return nil, err
	}
	until, err := mustNanos(p.Now.Add(p.Lease))
	if err != nil {
		return nil, err
	}
	res, err := s.submit(ctx, "claim", &batchOp{kind: opClaim, scope: p.Scope, key: p.Key, fingerprint: p.Fingerprint,
		token: p.Token, now: now, until: until, route: p.Route, noTakeover: p.NoTakeover, takeoverToken: p.TakeoverToken})
	if err != nil {
		return nil, err
	}
	switch res.outcome {
	case outClaimed, outBlocked:
		return &retrysafe.ClaimResult{Claimed: res.outcome == outClaimed, Record: res.rec}, nil
	}
	return nil, unexpected("claim", res.outcome)
}

// fenced turns the outcome of a fenced operation into its error.
func fenced(name string, res batchResult) error {
	switch res.outcome {
	case outDone:
		return nil
	case outLost:
		return retrysafe.ErrLeaseLost
	}
	return unexpected(name, res.outcome)
}

func unexpected(name string, o outcome) error {
	return retrysafe.Unavailable(name, fmt.Errorf("postgres: batch function answered %q", o))
}

// Get implements [retrysafe.Store.Get]: one round trip. A completed record
// whose ExpiresAt <= p.Now is reported as [retrysafe.ErrNotFound] even while
// it is still stored.
func (s *Store) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	if p == nil {
		return nil, errors.New("postgres: get: nil params")
	}
	rec, err := scanRecord(s.pool.QueryRow(ctx, s.sql.get, p.Scope, p.Key), nil)
	if errors.Is(err, pgx.ErrNoRows) {
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

// Extend implements [retrysafe.Store.Extend]: fenced, batched like Claim.
// It sets LeaseUntil to p.Now+p.Lease and UpdatedAt to p.Now; with
// p.Abandon it marks the record abandoned and leaves LeaseUntil as it is;
// with p.Checkpoint it stores that checkpoint (At = p.Now) in the same
// write.
func (s *Store) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	op, err := extendOp("extend", p)
	if err != nil {
		return err
	}
	res, err := s.submit(ctx, "extend", op)
	if err != nil {
		return err
	}
	return fenced("extend", res)
}

// CheckpointTx is [Store.Extend] with a checkpoint inside the caller's
// transaction tx, as [Store.CompleteTx] is Complete: the business writes
// of a step and the checkpoint that records it commit, or roll back,
// together. p.Checkpoint must be set; the lease is renewed to p.Now +
// p.Lease as by Extend (Lease must be positive unless p.Abandon). It
// returns [retrysafe.ErrLeaseLost] when p.Token no longer owns a
// processing record, leaving tx usable; any other error has aborted tx.
// The UPDATE holds the record's row until tx ends, so the owner's own
// batched Extend or Complete of that record waits for tx: finish tx first.
func (s *Store) CheckpointTx(ctx context.Context, tx pgx.Tx, p *retrysafe.ExtendParams) error {
	if tx == nil {
		return errors.New("postgres: checkpoint: nil transaction")
	}
	if err := fencedtx.CheckpointParams("postgres", p); err != nil {
		return err
	}
	op, err := extendOp("checkpoint", p)
	if err != nil {
		return err
	}
	res, err := s.runOne(ctx, tx, op)
	if err != nil {
		return s.wrap(ctx, "checkpoint", err)
	}
	return fenced("checkpoint", res)
}

// extendOp encodes an extension's arguments.
func extendOp(name string, p *retrysafe.ExtendParams) (*batchOp, error) {
	if p == nil {
		return nil, errors.New("postgres: " + name + ": nil params")
	}
	now, err := mustNanos(p.Now)
	if err != nil {
		return nil, err
	}
	until, err := mustNanos(p.Now.Add(p.Lease))
	if err != nil {
		return nil, err
	}
	op := &batchOp{kind: opExtend, scope: p.Scope, key: p.Key, token: p.Token, now: now, until: until, abandon: p.Abandon}
	if cp := p.Checkpoint; cp != nil {
		if err := checkCheckpoint(cp); err != nil {
			return nil, fmt.Errorf("postgres: %s: %w", name, err)
		}
		op.hasCheckpoint, op.cpName, op.cpData = true, cp.Name, cp.Data
		if op.cpData == nil {
			op.cpData = []byte{} // NULL is no data at all; empty data is a checkpoint's
		}
	}
	return op, nil
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

// Complete implements [retrysafe.Store.Complete]: fenced, batched like
// Claim; it notifies waiters in the same transaction (only records someone
// subscribed to).
func (s *Store) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	if p == nil {
		return errors.New("postgres: complete: nil params")
	}
	op, err := completeOp(p)
	if err != nil {
		return err
	}
	op.payload = notifyPayload(p.Scope, p.Key)
	res, err := s.submit(ctx, "complete", op)
	if err != nil {
		return err
	}
	return fenced("complete", res)
}

// completeOp encodes a completion's arguments.
func completeOp(p *retrysafe.CompleteParams) (*batchOp, error) {
	now, err := mustNanos(p.Now)
	if err != nil {
		return nil, err
	}
	expires, err := mustNanos(p.Now.Add(p.TTL))
	if err != nil {
		return nil, err
	}
	op := &batchOp{kind: opComplete, scope: p.Scope, key: p.Key, token: p.Token, now: now, until: expires}
	if r := p.Response; r != nil {
		st := int32(r.Status)
		op.status = &st
		op.header = encodeHeader(r.Header)
		op.body = r.Body // nil is stored as NULL and read back as nil
	}
	return op, nil
}

// CompleteTx completes the record inside the caller's transaction tx, fenced
// by p.Token like [Store.Complete]: the completion and the caller's business
// writes commit together or not at all. If tx rolls back the record stays
// processing under the caller's token; the engine (or the caller) should
// then release it or let its lease run out, so a retry runs again.
//
// Waiters are notified when tx commits (NOTIFY is transactional). tx must be
// on the database that holds the store's table; its isolation level does
// not matter for this statement, but under REPEATABLE READ or SERIALIZABLE a
// concurrent takeover makes it fail with a serialization error (reported as
// store unavailable) rather than [retrysafe.ErrLeaseLost].
//
// An ErrLeaseLost from CompleteTx leaves tx usable; the caller decides
// whether to roll back. Any other error has aborted tx.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, p *retrysafe.CompleteParams) error {
	if tx == nil {
		return errors.New("postgres: complete: nil transaction")
	}
	return s.complete(ctx, tx, p)
}

// complete is a completion in a statement of its own, on q.
func (s *Store) complete(ctx context.Context, q querier, p *retrysafe.CompleteParams) error {
	if p == nil {
		return errors.New("postgres: complete: nil params")
	}
	op, err := completeOp(p)
	if err != nil {
		return err
	}
	op.payload = notifyPayload(p.Scope, p.Key)
	res, err := s.runOne(ctx, q, op)
	if err != nil {
		return s.wrap(ctx, "complete", err)
	}
	return fenced("complete", res)
}

// Release implements [retrysafe.Store.Release]: fenced, batched like
// Claim; it notifies waiters in the same transaction (only records someone
// subscribed to).
func (s *Store) Release(ctx context.Context, p *retrysafe.ReleaseParams) error {
	if p == nil {
		return errors.New("postgres: release: nil params")
	}
	res, err := s.submit(ctx, "release", &batchOp{kind: opRelease, scope: p.Scope, key: p.Key, token: p.Token,
		payload: notifyPayload(p.Scope, p.Key)})
	if err != nil {
		return err
	}
	return fenced("release", res)
}

// notifyPayload names a record in notifications without revealing its key:
// the first 128 bits of SHA-256(scope, NUL, key), hex.
func notifyPayload(scope, key string) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// scanRecord reads one row of recordColumns, between the destinations of
// the columns before them (prefix) and after them (suffix). The record is
// nil when the row holds none (a NULL scope: a batch's row for an
// operation other than a claim).
func scanRecord(row pgx.Row, prefix []any, suffix ...any) (*retrysafe.Record, error) {
	var (
		scope, key, fp, state, token, route *string
		attempt, status                     *int32
		created, updated, leaseUntil, expAt *int64
		header, body                        []byte
		abandoned                           *bool
		cpName                              *string
		cpData                              []byte
		cpAt                                *int64
	)
	dest := append(append(prefix[:len(prefix):len(prefix)], &scope, &key, &fp, &state, &token, &attempt,
		&created, &updated, &leaseUntil, &expAt, &status, &header, &body, &route,
		&abandoned, &cpName, &cpData, &cpAt), suffix...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if scope == nil {
		return nil, nil
	}
	if key == nil || fp == nil || state == nil || token == nil || attempt == nil || created == nil || updated == nil {
		return nil, fmt.Errorf("postgres: a record of scope %q without its key, fingerprint, state, token, attempt or times", *scope)
	}
	rec := &retrysafe.Record{
		Scope: *scope, Key: *key, Fingerprint: *fp, State: retrysafe.State(*state), Token: *token,
		Attempt:   int(*attempt),
		CreatedAt: fromNanos(created), UpdatedAt: fromNanos(updated), LeaseUntil: fromNanos(leaseUntil), ExpiresAt: fromNanos(expAt),
	}
	if route != nil {
		rec.Route = *route
	}
	if abandoned != nil {
		rec.Abandoned = *abandoned
	}
	if cpName != nil {
		rec.Checkpoint = &retrysafe.Checkpoint{Name: *cpName, Data: cpData, At: fromNanos(cpAt)}
	}
	if status != nil {
		h, err := decodeHeader(header)
		if err != nil {
			return nil, fmt.Errorf("%w (scope %q)", err, rec.Scope)
		}
		rec.Response = &retrysafe.Response{Status: int(*status), Header: h, Body: body}
	}
	return rec, nil
}
