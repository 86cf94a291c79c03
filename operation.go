package retrysafe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	// DispositionAbandon leaves the record processing until its lease runs
	// out: the outcome is unknown (for example an upstream timed out after
	// the request was sent), so a retry must not run before the lease ends.
	DispositionAbandon
)

// Operation describes the idempotent operation in progress. Handlers behind
// the middleware, and functions run by [Do], find it in their context with
// [OperationFromContext].
type Operation struct {
	rec *Record // the claimed processing record (read-only): scope, key, token, fingerprint, attempt
	ttl time.Duration
	now func() time.Time

	mu          sync.Mutex
	disposition Disposition
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

// Abandon tells the engine that the outcome is unknown: the record stays
// processing until its lease runs out and is neither stored nor released.
func (o *Operation) Abandon() { o.setDisposition(DispositionAbandon) }

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
