package retrysafe

import (
	"context"
	"net/http"
	"time"
)

// State is the lifecycle state of a [Record].
type State string

const (
	// StateProcessing means a claimant owns the record: it holds a lease
	// (Record.LeaseUntil) and the owner token, and the operation is running.
	StateProcessing State = "processing"
	// StateCompleted means the operation produced a result, stored in
	// Record.Response, which is replayed until Record.ExpiresAt.
	StateCompleted State = "completed"
)

// Response is a stored result: for HTTP an answer's status, headers and body;
// for [Do] the function's encoded result.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Clone returns a deep copy of r (nil for nil).
func (r *Response) Clone() *Response {
	if r == nil {
		return nil
	}
	c := &Response{Status: r.Status, Header: r.Header.Clone()}
	if r.Body != nil {
		c.Body = append([]byte{}, r.Body...)
	}
	return c
}

// Record is one idempotency record, identified by Scope and Key.
//
// Records that a store returns are read-only: they may be shared with the
// store and with other callers (the memory store hands out the records it
// holds), so callers must not modify a returned Record or its Response. A
// store never modifies a record after returning it.
type Record struct {
	Scope       string
	Key         string
	Fingerprint string
	State       State
	// Token is the owner token of the current (or last) claimant. Stores
	// return it so the claimant can fence its later calls; callers must not
	// expose it.
	Token   string
	Attempt int // 1 on first claim, +1 on each takeover of an expired lease
	// Route names what handled the request (ClaimParams.Route of the
	// current claim): for operators. Empty when none was given, and on
	// records stored before stores kept it.
	Route string

	CreatedAt  time.Time
	UpdatedAt  time.Time
	LeaseUntil time.Time // meaningful while processing
	ExpiresAt  time.Time // meaningful once completed

	// Abandoned reports that the owner gave up without a result
	// ([ExtendParams].Abandon): the attempt's outcome is unknown, whatever
	// the lease says. A takeover and Complete clear it.
	Abandoned bool
	// Checkpoint is the last progress an owner of this record recorded
	// ([ExtendParams].Checkpoint). It is kept across takeovers, so that a
	// later owner can resume instead of starting over, and by Complete;
	// nil when none was recorded.
	Checkpoint *Checkpoint

	Response *Response // nil unless State is StateCompleted
}

// MaxCheckpointData is the largest Checkpoint.Data the engine writes, in
// bytes: it refuses a larger one before calling the store. A store must
// accept [CheckpointStoreLimit] bytes, which leaves room for a wrapper's
// own overhead (store/sealed encrypts the data).
const MaxCheckpointData = 64 << 10

// CheckpointStoreLimit is the largest Checkpoint.Data every store must
// accept, in bytes: [MaxCheckpointData] plus 1 KiB for wrappers (store/sealed
// adds a key id, a nonce and a tag). A MySQL column for it must be a
// MEDIUMBLOB: a BLOB holds 65,535 bytes.
const CheckpointStoreLimit = MaxCheckpointData + 1<<10

// Checkpoint is a durable note of how far an operation got, written by
// its owner (fenced by its token) between side effects: "charge
// requested", with the provider's reference as Data, say. A later owner
// reads it and resumes.
type Checkpoint struct {
	// Name says which step was reached: 1 to 64 printable ASCII bytes.
	Name string
	// Data is the step's own state, at most MaxCheckpointData bytes; it
	// may be empty.
	Data []byte
	// At is when it was recorded (the ExtendParams.Now of the write).
	At time.Time
}

// Clone returns a deep copy of rec (nil for nil).
func (rec *Record) Clone() *Record {
	if rec == nil {
		return nil
	}
	c := *rec
	c.Response = rec.Response.Clone()
	c.Checkpoint = rec.Checkpoint.Clone()
	return &c
}

// Clone returns a deep copy of cp (nil for nil).
func (cp *Checkpoint) Clone() *Checkpoint {
	if cp == nil {
		return nil
	}
	c := *cp
	if cp.Data != nil {
		c.Data = append([]byte{}, cp.Data...)
	}
	return &c
}

// Status is a record's state as operators see it, from [Record.Status]:
// the operator page, `retrysafe keys` and the counts of
// [github.com/retrysafe/retrysafe/admin.Stats] all use it.
type Status string

// The statuses a record can have at a time; every record has exactly one.
const (
	StatusProcessing Status = "processing" // claimed, its owner's lease live
	StatusUnknown    Status = "unknown"    // processing, lease ran out: the outcome is unknown
	StatusCompleted  Status = "completed"  // a stored result, replayed until ExpiresAt
	StatusFailed     Status = "failed"     // completed with a stored status of 400 or more
	StatusExpired    Status = "expired"    // completed, past ExpiresAt (absent), not swept yet
)

// Status returns the record's status at now. An expired record is
// expired whatever its stored status; a failed one replays like any
// result.
func (rec *Record) Status(now time.Time) Status {
	switch {
	case rec.LeaseExpired(now), rec.State == StateProcessing && rec.Abandoned:
		return StatusUnknown
	case rec.State == StateProcessing:
		return StatusProcessing
	case rec.Expired(now):
		return StatusExpired
	case rec.Response != nil && rec.Response.Status >= 400:
		return StatusFailed
	}
	return StatusCompleted
}

// LeaseExpired reports whether a processing record's lease has run out at now.
func (rec *Record) LeaseExpired(now time.Time) bool {
	return rec.State == StateProcessing && !now.Before(rec.LeaseUntil)
}

// Expired reports whether a completed record's result has expired at now
// (ExpiresAt <= now). An expired record counts as absent: Get does not
// return it and Claim replaces it, whether or not it has been swept.
func (rec *Record) Expired(now time.Time) bool {
	return rec.State == StateCompleted && !now.Before(rec.ExpiresAt)
}

// ClaimParams are the arguments of [Store.Claim].
type ClaimParams struct {
	Scope       string
	Key         string
	Fingerprint string
	// Token is the new owner token (random, generated by the caller with
	// [NewToken]). It becomes the record's token if the claim succeeds.
	Token string
	Now   time.Time
	// Lease is how long the claim holds before another claimant may take
	// it over: LeaseUntil = Now + Lease.
	Lease time.Duration
	// Route names what handles the request, such as the gateway's route
	// pattern "POST /payments" (Config.RouteName); it may be empty. The
	// store keeps it as Record.Route: a successful claim (new, or a
	// takeover) sets it, Complete keeps it. It plays no part in the
	// claim's decision.
	Route string
	// NoTakeover: a processing record whose lease has run out is not taken
	// over; it is returned with Claimed=false, unchanged (the block and
	// resolver policies for unknown outcomes, [Config].OnUnknown).
	NoTakeover bool
	// TakeoverToken, when not empty, allows the takeover of a processing
	// record whose lease has run out only if the record's Token equals it:
	// a resolver decided to re-run that attempt, and a record taken over
	// by someone else meanwhile is returned unclaimed instead.
	TakeoverToken string
}

// ProcessingRecord returns the record a successful claim with p leaves:
// p's scope, key, fingerprint and token, [StateProcessing], and the given
// attempt (1 for a new record, one more on a takeover of an expired lease)
// and times, as the store keeps them (a takeover keeps the creation time of
// the record it takes over; UpdatedAt is p.Now and LeaseUntil p.Now +
// p.Lease). Stores use it to build [ClaimResult.Record] without reading the
// row back.
func (p *ClaimParams) ProcessingRecord(attempt int, createdAt, updatedAt, leaseUntil time.Time) *Record {
	return &Record{
		Scope:       p.Scope,
		Key:         p.Key,
		Fingerprint: p.Fingerprint,
		State:       StateProcessing,
		Token:       p.Token,
		Attempt:     attempt,
		Route:       p.Route,
		CreatedAt:   createdAt,
		UpdatedAt:   updatedAt,
		LeaseUntil:  leaseUntil,
	}
}

// ClaimResult is what [Store.Claim] returns. Like the record it holds, it
// is read-only and may be shared with other callers.
type ClaimResult struct {
	// Claimed is true when the caller now owns the record (new, replaced an
	// expired completed record, or took over an expired lease).
	Claimed bool
	// Record is the record as it stands after the call: the caller's new
	// processing record when Claimed, otherwise the existing one that blocked
	// the claim (processing with a live lease, completed and unexpired, or
	// processing with an expired lease but a different fingerprint).
	Record *Record
}

// GetParams are the arguments of [Store.Get].
type GetParams struct {
	Scope string
	Key   string
	Now   time.Time
}

// ExtendParams are the arguments of [Store.Extend].
type ExtendParams struct {
	Scope string
	Key   string
	Token string
	Now   time.Time
	Lease time.Duration // new LeaseUntil = Now + Lease (not with Abandon)
	// Abandon marks the outcome of the owner's attempt unknown
	// (Record.Abandoned = true) and leaves LeaseUntil as it is: the owner
	// gives up without a result (an upstream timeout, a cut after the
	// request was sent, a panic after the status).
	Abandon bool
	// Checkpoint, when not nil, becomes Record.Checkpoint (replacing an
	// earlier one) in the same atomic, fenced write; the store keeps a
	// copy of it, with At set to Now.
	Checkpoint *Checkpoint
}

// CompleteParams are the arguments of [Store.Complete].
type CompleteParams struct {
	Scope string
	Key   string
	Token string
	Now   time.Time
	TTL   time.Duration // ExpiresAt = Now + TTL
	// Response is the result to store. It is the store's to copy: a
	// store that keeps it, or any part of it (its header map, a value
	// slice, its body), copies that before Complete returns, and keeps
	// nothing the caller handed it. That is the one copy of a response:
	// the middleware hands over its capture of the handler's answer (the
	// header map the handler wrote, the body buffer) without copying it,
	// and writes the client from the same capture afterwards.
	Response *Response
}

// ReleaseParams are the arguments of [Store.Release].
type ReleaseParams struct {
	Scope string
	Key   string
	Token string
}

// Store persists idempotency records. Implementations must be safe for
// concurrent use by many goroutines and, for shared backends, by many
// processes; correctness comes from the store's atomic operations alone.
//
// Every implementation must pass the conformance suite in store/storetest.
// The rules it checks:
//
//   - Claim is atomic: insert-if-absent in one step, never check-then-insert.
//     Among concurrent claims of one absent key exactly one wins.
//   - Claim succeeds (Claimed=true) when the key is absent, when the record is
//     completed and ExpiresAt <= Now (expiry is enforced on read), or when the
//     record is processing, LeaseUntil <= Now and its fingerprint equals the
//     claimant's (takeover: new token, Attempt+1, CreatedAt and Checkpoint
//     kept, Abandoned cleared), unless params.NoTakeover is set or
//     params.TakeoverToken is set and differs from the record's Token (then
//     no takeover; NoTakeover wins over a matching TakeoverToken). Otherwise
//     it returns the existing record with Claimed=false and changes nothing.
//     NoTakeover and TakeoverToken change nothing about absent keys and
//     expired results. A new record has no Checkpoint and is not Abandoned.
//   - Extend, Complete and Release are fenced by the owner token: they succeed
//     only on a processing record whose token equals params.Token, and return
//     [ErrLeaseLost] otherwise (including when the record is absent).
//     Extend and Complete do not check the lease: an owner whose lease ran out
//     but was not taken over may still finish, abandoned or not.
//   - Extend sets UpdatedAt to params.Now and LeaseUntil to Now + Lease; with
//     params.Abandon it sets Abandoned and leaves LeaseUntil as it is (Lease
//     ignored); with params.Checkpoint it stores a copy of it as
//     Record.Checkpoint, At = Now, replacing the earlier one (Data up to
//     [CheckpointStoreLimit] bytes, any byte values, empty included), all in one
//     atomic write. An Extend without a checkpoint keeps the one stored.
//     Complete clears Abandoned and keeps Checkpoint. Every read (Get, the
//     record Claim returns, Admin) carries both.
//   - Get returns [ErrNotFound] for an absent key or a completed record with
//     ExpiresAt <= Now.
//   - Time comes from params.Now, never from the store's clock.
//   - Failures to reach the backend are returned wrapping
//     [ErrStoreUnavailable]; context errors are returned as they are (or
//     wrapping the context's error).
//   - Returned records, responses and claim results are read-only: the
//     caller may keep them but must not modify them (the memory store
//     hands every replay of a record the same ClaimResult), and the store
//     never modifies one after returning it (a change stores a new record).
//     Complete copies what it keeps of params.Response.
//   - Complete is atomic for readers: a concurrent Get sees either the
//     processing record or the whole completed one, never a part.
//   - Complete keeps Token, Attempt, Fingerprint, Route and CreatedAt, and
//     sets UpdatedAt to params.Now. A successful claim stores
//     params.Route as Record.Route (for operators; it decides nothing).
type Store interface {
	Claim(ctx context.Context, params *ClaimParams) (*ClaimResult, error)
	Get(ctx context.Context, params *GetParams) (*Record, error)
	Extend(ctx context.Context, params *ExtendParams) error
	Complete(ctx context.Context, params *CompleteParams) error
	Release(ctx context.Context, params *ReleaseParams) error
}

// As finds the optional ability T of s (such as [Notifier], or the
// Admin and Sweeper of [github.com/retrysafe/retrysafe/admin]): s itself
// when it implements T, else the first store down its chain of wrappers
// that does. A wrapper (such as store/sealed)
// is a Store with a method Unwrap() Store returning the store it wraps; it
// implements only the abilities it must change and lets As find the
// others below it. Callers look abilities up with As rather than a type
// assertion, so that a wrapped store keeps them.
func As[T any](s Store) (T, bool) {
	for range 16 { // wrappers do not nest deeper; a cycle must not hang
		if v, ok := s.(T); ok {
			return v, true
		}
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	var zero T
	return zero, false
}

// NonBlocking is implemented by stores whose calls never wait for I/O or
// for another process, such as the in-memory store: each call returns after
// a bounded amount of local work. The engine then runs their calls without
// a Config.StoreTimeout deadline, which could never fire. A store that can
// block (on a network, a disk, or a lock that another process holds) must
// not implement it, or must return false.
type NonBlocking interface {
	NonBlocking() bool
}

// Notifier is implemented by stores that can signal a change of one record
// (completion or release), so a waiting duplicate need not poll.
//
// Subscribe returns a channel that receives a value (non-blocking sends, so
// at least one value after any change that happens after Subscribe returned)
// and a function that ends the subscription. Notifications are a hint: a
// waiter must re-read the record and keep a fallback poll, because a
// notification may be missed.
//
// ctx bounds the call to Subscribe only (setting the subscription up, which
// may wait for the backend). If ctx ends before Subscribe returns, it
// returns an error and leaves no subscription behind. Once it has returned,
// the subscription lasts until the returned function is called, whatever
// becomes of ctx: the caller must call it (it may be called more than
// once). Closing the store ends every subscription after a last value. The
// channel is never closed. (The engine's wait mode bounds Subscribe by its
// wait deadline and always calls the function when it stops waiting.)
//
// The stores in this module share one registry of subscribers
// (internal/waiters), and store/storetest checks this contract.
type Notifier interface {
	Subscribe(ctx context.Context, scope, key string) (<-chan struct{}, func(), error)
}
