package retrysafe

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Disposition says what the engine does with a claimed record once the
// operation's code has returned.
type Disposition int

const (
	// DispositionComplete stores the result (the default).
	DispositionComplete Disposition = iota
	// DispositionCompleted means the operation completed the record itself,
	// for example with a store's CompleteTx in its own transaction; the
	// engine writes nothing.
	DispositionCompleted
	// DispositionRelease deletes the record: nothing ran, a retry runs anew.
	DispositionRelease
	// DispositionAbandon marks the record abandoned (Record.Abandoned) and
	// leaves it processing until its lease runs out: the outcome is unknown
	// (for example an upstream timed out after the request was sent), so a
	// retry gets 409 outcome-unknown at once and must not run before the
	// lease ends (or, under Config.OnUnknown block or a Resolver, before
	// the record is resolved).
	DispositionAbandon
)

// Operation describes the idempotent operation in progress. Handlers behind
// the middleware, and functions run by [Do], find it in their context with
// [OperationFromContext].
type Operation struct {
	rec  *Record // the claimed processing record (read-only): scope, key, token, fingerprint, attempt
	ttl  time.Duration
	now  func() time.Time
	e    *engine                 // for Checkpoint; nil in a zero Operation
	lose context.CancelCauseFunc // ends the operation's context when its lease is lost

	mu          sync.Mutex
	disposition Disposition
	note        *Checkpoint // what AbandonWith recorded; nil after Abandon

	hb heartbeat // the lease renewals while the operation runs (engine.run)
}

// newOperation returns the Operation of the claimed record rec.
func newOperation(rec *Record, ttl time.Duration, now func() time.Time) *Operation {
	if now == nil {
		now = time.Now
	}
	return &Operation{rec: rec, ttl: ttl, now: now}
}

// record returns the operation's record; a zero Operation has an empty one.
func (o *Operation) record() *Record {
	if o.rec == nil {
		return &noRecord
	}
	return o.rec
}

var noRecord Record

// Scope returns the operation's scope (the caller's identity hash).
func (o *Operation) Scope() string { return o.record().Scope }

// Key returns the operation's idempotency key.
func (o *Operation) Key() string { return o.record().Key }

// Fingerprint returns the request fingerprint the record was claimed with.
func (o *Operation) Fingerprint() string { return o.record().Fingerprint }

// Attempt returns 1 for the first execution and n for the n-th, after n-1
// takeovers of expired leases. An attempt above 1 means an earlier execution
// may have had side effects: check business state before acting again.
func (o *Operation) Attempt() int { return o.record().Attempt }

// CompleteParams returns the parameters to complete this operation's record
// with resp, fenced by the operation's owner token. Use it with a store's
// CompleteTx to commit the completion in the same transaction as the
// business write, then call [Operation.MarkCompleted].
func (o *Operation) CompleteParams(resp *Response) *CompleteParams {
	return &CompleteParams{
		Scope:    o.record().Scope,
		Key:      o.record().Key,
		Token:    o.record().Token,
		Now:      o.now(),
		TTL:      o.ttl,
		Response: resp,
	}
}

// MarkCompleted tells the engine that the record was completed by the
// operation itself (for example inside its database transaction). The
// response written must be the one stored, or replays will differ from the
// first answer.
func (o *Operation) MarkCompleted() { o.setDisposition(DispositionCompleted) }

// Release tells the engine that nothing ran: the record is deleted instead of
// storing the response, so a retry runs the operation again.
func (o *Operation) Release() { o.setDisposition(DispositionRelease) }

// Abandon tells the engine that the outcome is unknown: nothing is stored
// or released; once the operation's code returns, the record is marked
// abandoned in the store (fenced by the owner token, one write after the
// lease renewals stopped) and stays processing until its lease runs out.
// Every retry then gets 409 outcome-unknown at once, with Retry-After the
// lease left, and [Config].OnUnknown decides what the first retry after
// the lease does. The gateway abandons after an upstream timeout or a
// connection cut after the request was sent; the middleware does when the
// handler panics after writing its status.
func (o *Operation) Abandon() {
	o.mu.Lock()
	o.disposition, o.note = DispositionAbandon, nil
	o.mu.Unlock()
}

// AbandonWith is [Operation.Abandon] with a note of why: the record's
// checkpoint becomes name and data (valid as [Operation.Checkpoint] takes
// them) in the same fenced write that marks the attempt abandoned, so the
// lease is not renewed and no other write is made. Whoever reads the
// record (an operator, a Resolver, the attempt that takes it over) learns
// why the outcome is unknown. The gateway notes an upstream timeout or a
// connection cut after the request was sent this way. An invalid name or
// data is an error, and changes nothing.
func (o *Operation) AbandonWith(name string, data []byte) error {
	if err := checkCheckpointName(name); err != nil {
		return err
	}
	if len(data) > MaxCheckpointData {
		return fmt.Errorf("retrysafe: checkpoint %q data is %d bytes, more than MaxCheckpointData (%d)", name, len(data), MaxCheckpointData)
	}
	o.mu.Lock()
	o.disposition, o.note = DispositionAbandon, &Checkpoint{Name: name, Data: bytes.Clone(data)}
	o.mu.Unlock()
	return nil
}

// choice returns the disposition and what AbandonWith recorded (nil if
// nothing), read together.
func (o *Operation) choice() (Disposition, *Checkpoint) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.disposition, o.note
}

// Checkpoint records durably how far the operation got: name says which
// step was reached ("charge-requested"), data holds the step's own state
// (the provider's reference, say), at most [MaxCheckpointData] bytes. It
// is one store write, fenced by the owner token, that also renews the
// lease; a later checkpoint replaces it. If the attempt dies, the attempt
// that takes the record over reads it with [Operation.Resumed] and can
// resume (call the provider again with the same derived key, look the
// reference up) instead of starting over; a Resolver reads it as
// Record.Checkpoint. Write it after a side effect was requested and before
// the next one.
//
// name is 1 to [MaxCheckpointName] printable ASCII bytes (space to '~').
// Names starting with "retrysafe-not-done" are the engine's own mark (see
// [Record.ResolvedNotDone]) and refused.
// The store keeps a copy of data. The error wraps [ErrLeaseLost] when the
// lease was lost (the operation's context is then cancelled too, as by a
// heartbeat that finds it lost), or is a store error: the checkpoint may
// then not have been recorded.
func (o *Operation) Checkpoint(ctx context.Context, name string, data []byte) error {
	if err := checkCheckpointName(name); err != nil {
		return err
	}
	if len(data) > MaxCheckpointData {
		return fmt.Errorf("retrysafe: checkpoint %q data is %d bytes, more than MaxCheckpointData (%d)", name, len(data), MaxCheckpointData)
	}
	if o.e == nil {
		return errors.New("retrysafe: Checkpoint of an Operation the engine did not make")
	}
	e, rec := o.e, o.rec
	err := e.call(ctx, "extend", func(ctx context.Context) error {
		return e.store.Extend(ctx, &ExtendParams{
			Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Now: e.cfg.Now(), Lease: e.cfg.Lease,
			Checkpoint: &Checkpoint{Name: name, Data: data},
		})
	})
	if errors.Is(err, ErrLeaseLost) && o.lose != nil {
		o.lose(ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("retrysafe: checkpoint %q: %w", name, err)
	}
	return nil
}

// checkCheckpointName returns an error unless name is a valid checkpoint
// name.
func checkCheckpointName(name string) error {
	if name == "" || len(name) > MaxCheckpointName {
		return fmt.Errorf("retrysafe: checkpoint name %q must be 1 to %d bytes", name, MaxCheckpointName)
	}
	if err := checkNotReserved(name); err != nil {
		return err
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < ' ' || c > '~' {
			return fmt.Errorf("retrysafe: checkpoint name %q holds byte %#02x: use printable ASCII", name, c)
		}
	}
	return nil
}

// Resumed returns the last checkpoint an earlier attempt recorded, when
// this attempt took the record over (Attempt() > 1) and one was: its
// name and data (a copy), and ok true. The first attempt, and a takeover
// of an attempt that recorded none, get ok false: start from the
// beginning.
func (o *Operation) Resumed() (name string, data []byte, ok bool) {
	rec := o.record()
	cp := unmarked(rec.Checkpoint) // through the completer's not-done mark
	if rec.Attempt <= 1 || cp == nil {
		return "", nil, false
	}
	return cp.Name, bytes.Clone(cp.Data), true
}

// Disposition returns what the engine will do with the record.
func (o *Operation) Disposition() Disposition {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.disposition
}

func (o *Operation) setDisposition(d Disposition) {
	o.mu.Lock()
	o.disposition = d
	o.mu.Unlock()
}

type operationKey struct{}

// OperationFromContext returns the operation carried by ctx, or nil.
func OperationFromContext(ctx context.Context) *Operation {
	op, _ := ctx.Value(operationKey{}).(*Operation)
	return op
}

// NewToken returns a random owner token (128 bits, hex).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
