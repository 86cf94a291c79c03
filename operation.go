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

// init sets up a zero Operation (one embedded in a larger allocation).
func (o *Operation) init(rec *Record, ttl time.Duration, now func() time.Time) {
	if now == nil {
		now = time.Now
	}
	o.rec, o.ttl, o.now = rec, ttl, now
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

// operationContext is context.WithoutCancel(parent) carrying op, in one
// value that can be embedded: context.WithValue(context.WithoutCancel(parent),
// operationKey{}, op). It is never cancelled and has no deadline.
type operationContext struct {
	parent context.Context
	op     *Operation
}

func (*operationContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*operationContext) Done() <-chan struct{}       { return nil }
func (*operationContext) Err() error                  { return nil }

func (c *operationContext) Value(key any) any {
	if key == (operationKey{}) {
		return c.op
	}
	return c.parent.Value(key)
}

func (c *operationContext) String() string { return "retrysafe.operationContext" }

// OperationFromContext returns the operation carried by ctx, or nil.
func OperationFromContext(ctx context.Context) *Operation {
	op, _ := ctx.Value(operationKey{}).(*Operation)
	return op
}

// NewToken returns a random owner token (128 bits, hex).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	var h [32]byte
	hex.Encode(h[:], b[:])
	return string(h[:])
}

// tokensPerBatch is how many owner tokens newBatchedToken makes at once.
const tokensPerBatch = 8

// tokenBatch holds tokens made together: one crypto/rand read and one
// string for tokensPerBatch of them.
type tokenBatch struct {
	s    string // tokensPerBatch tokens of 32 hex digits, back to back
	next int    // tokens of s handed out
	// spare is a token handed out for a claim that did not win (a
	// replay, a conflict), given back for the next claim: it was never
	// stored nor shown to anyone, so it is as unpredictable as a new one,
	// and reusing it spares a replay the cost of a token.
	spare string
}

var tokenBatches = sync.Pool{New: func() any { return new(tokenBatch) }}

// newBatchedToken returns a token as NewToken does (128 bits from
// crypto/rand, hex), cut from a batch: the random read and the string
// allocation are shared by tokensPerBatch tokens. A token keeps its
// batch's 256 bytes alive while it is referenced (a processing record
// holds it; the memory store copies it into a completed record).
func newBatchedToken() string {
	b := tokenBatches.Get().(*tokenBatch)
	t := b.take()
	tokenBatches.Put(b)
	return t
}

// take returns b's spare token, or else the next token of its batch,
// making a new batch when it has none left.
func (b *tokenBatch) take() string {
	if t := b.spare; t != "" {
		b.spare = ""
		return t
	}
	if b.s == "" || b.next == tokensPerBatch {
		var raw [16 * tokensPerBatch]byte
		_, _ = rand.Read(raw[:])
		var h [32 * tokensPerBatch]byte
		hex.Encode(h[:], raw[:])
		b.s, b.next = string(h[:]), 0
	}
	t := b.s[32*b.next : 32*b.next+32]
	b.next++
	return t
}
