package retrysafe

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrInvalidKey: the Idempotency-Key is malformed. Returned wrapped in a
	// *KeyError that says why.
	ErrInvalidKey = errors.New("retrysafe: invalid idempotency key")
	// ErrMismatch: the key was used before with a different request
	// fingerprint.
	ErrMismatch = errors.New("retrysafe: idempotency key reused with a different request")
	// ErrInProgress: the original request with this key is still being
	// processed. Returned wrapped in an *InProgressError.
	ErrInProgress = errors.New("retrysafe: request with this idempotency key is in progress")
	// ErrStoreUnavailable: the store could not be reached or failed. Stores
	// wrap backend errors with it.
	ErrStoreUnavailable = errors.New("retrysafe: store unavailable")
	// ErrNotFound: no live record exists for the key.
	ErrNotFound = errors.New("retrysafe: record not found")
	// ErrLeaseLost: a fenced call (Extend, Complete, Release) was made with a
	// token that no longer owns the record: the lease was taken over, the
	// record was released, or it never existed.
	ErrLeaseLost = errors.New("retrysafe: lease lost: record is owned by another claimant")
	// ErrStoreFull: the store is out of room for new records (Redis OOM
	// under noeviction, the memory store's MaxRecords). It is a capacity
	// error, not an outage: it does not match ErrStoreUnavailable, the
	// middleware answers 503 problem type store-full, and FailOpen never
	// applies to it. Stores wrap it with [Full].
	ErrStoreFull = errors.New("retrysafe: store full")
	// ErrResultNotStored is returned (wrapped, together with the function's
	// result) by Do when the function succeeded but its result could not be
	// stored: the effect happened once, but a duplicate arriving after the
	// lease runs out would run the function again.
	ErrResultNotStored = errors.New("retrysafe: operation ran but its result was not stored")
)

// errBodyTooLarge: the request body exceeds Config.MaxBody. The middleware
// answers 413; it never reaches a caller.
var errBodyTooLarge = errors.New("retrysafe: request body too large")

// KeyError describes why an Idempotency-Key is invalid. It matches
// ErrInvalidKey with errors.Is.
type KeyError struct {
	Reason string
}

// Error describes the invalid key.
func (e *KeyError) Error() string { return "retrysafe: invalid idempotency key: " + e.Reason }

// Is reports whether target is ErrInvalidKey.
func (e *KeyError) Is(target error) bool { return target == ErrInvalidKey }

// InProgressError is returned when the original request is still processing.
// It matches ErrInProgress with errors.Is.
//
// OutcomeUnknown tells a live owner from one that stopped: an owner that
// gives up marks its record abandoned (Record.Abandoned), and an owner
// renews its lease every Lease/3 while the operation runs, so a record
// whose last renewal (Record.UpdatedAt) is more than half its lease ago
// belongs to a first attempt that ended without a result (the gateway gave
// up on the upstream, or the process died). Its outcome is unknown: the
// key stays held until LeaseUntil, then a retry runs the operation again
// unless the record was completed in the meantime, or, under
// Config.OnUnknown block or a Resolver, until it is resolved (Blocked).
type InProgressError struct {
	// RetryAfter is a suggested delay before retrying: one second while
	// the owner is alive (it may finish any moment), the time left on the
	// lease (at least one second) when the outcome is unknown.
	RetryAfter time.Duration
	// LeaseUntil is when the owner's lease runs out; zero if unknown.
	LeaseUntil time.Time
	// Attempt is the record's attempt number (1 for the first claim).
	Attempt int
	// OutcomeUnknown reports that the owner stopped renewing its lease or
	// abandoned the attempt: it ended without a result and may or may not
	// have taken effect.
	OutcomeUnknown bool
	// Blocked reports that the outcome is unknown and the policy
	// (Config.OnUnknown block, or a Resolver) does not let a retry take
	// the record over when its lease runs out: the key stays held until
	// the record is resolved. RetryAfter is the lease left while it runs,
	// the lease length after.
	Blocked bool
}

// Error says the request is in progress (or that its outcome is unknown)
// and when to retry.
func (e *InProgressError) Error() string {
	if e.Blocked {
		return "retrysafe: the first attempt with this idempotency key ended without a result; its outcome is unknown and the key is held until it is resolved"
	}
	if e.OutcomeUnknown {
		return fmt.Sprintf("retrysafe: the first attempt with this idempotency key ended without a result; its outcome is unknown and the key is held until %s (retry after %s)",
			e.LeaseUntil.UTC().Format(time.RFC3339Nano), e.RetryAfter)
	}
	return fmt.Sprintf("retrysafe: request with this idempotency key is in progress (retry after %s)", e.RetryAfter)
}

// Is reports whether target is ErrInProgress.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// storeError wraps a backend failure; it matches ErrStoreUnavailable and
// unwraps to the backend's own error. Stores construct it with
// [Unavailable]; callers match it with errors.Is(err, ErrStoreUnavailable).
type storeError struct {
	Op  string // the store operation, e.g. "claim"
	Err error
}

// Error names the failed store operation and the backend error.
func (e *storeError) Error() string {
	return "retrysafe: store unavailable: " + e.Op + ": " + e.Err.Error()
}

// Unwrap returns the backend error.
func (e *storeError) Unwrap() error { return e.Err }

// Is reports whether target is ErrStoreUnavailable.
func (e *storeError) Is(target error) bool { return target == ErrStoreUnavailable }

// Unavailable wraps a backend error err from operation op (such as
// "claim") so that it matches ErrStoreUnavailable and unwraps to err; its
// message names op and err. Context cancellation and deadline errors are returned
// unchanged, so callers can tell a hung-up caller from a broken store.
func Unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrStoreUnavailable) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &storeError{Op: op, Err: err}
}

// fullError wraps a store's capacity failure; it matches ErrStoreFull (and
// not ErrStoreUnavailable) and unwraps to the backend's own error. Stores
// construct it with [Full].
type fullError struct {
	Op  string // the store operation, e.g. "claim"
	Err error
}

// Error names the store operation and the backend error.
func (e *fullError) Error() string {
	return "retrysafe: store full: " + e.Op + ": " + e.Err.Error()
}

// Unwrap returns the backend error.
func (e *fullError) Unwrap() error { return e.Err }

// Is reports whether target is ErrStoreFull.
func (e *fullError) Is(target error) bool { return target == ErrStoreFull }

// Full wraps a backend capacity error err from operation op (such as
// "claim") so that it matches ErrStoreFull, not ErrStoreUnavailable, and
// unwraps to err; its message names op and err.
func Full(op string, err error) error {
	if err == nil || errors.Is(err, ErrStoreFull) {
		return err
	}
	return &fullError{Op: op, Err: err}
}
