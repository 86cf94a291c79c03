package retrysafe

import (
	"context"
	"errors"
)

// The second half of the engine, shared by the middleware and Do: what
// becomes of a refused claim, of a record whose operation returned, and of
// one whose operation panicked.

// refusal classifies an error of engine.acquire: ErrMismatch, a full
// store (ErrStoreFull, also when a store wrapped it as unavailable), an
// *InProgressError (returned, for its Retry-After), or anything else (a
// store failure, or the caller's context ending), reported as
// OutcomeStoreError. It is called only on the error path, so the
// errors.As target costs nothing on a request that was not refused.
func refusal(err error) (Outcome, *InProgressError) {
	if errors.Is(err, ErrMismatch) {
		return OutcomeMismatch, nil
	}
	if errors.Is(err, ErrStoreFull) {
		return OutcomeStoreFull, nil
	}
	var inProgress *InProgressError
	if errors.As(err, &inProgress) && inProgress.Blocked {
		return OutcomeBlocked, inProgress
	}
	if inProgress != nil {
		return OutcomeConflict, inProgress
	}
	return OutcomeStoreError, nil
}

// run runs fn for the record rec that this call claimed, then settles
// the record with what fn returned: the one execution path of the
// middleware, Do and [Executor]. fn gets the [Operation] (also in its
// context) and a context that is cancelled, with cause ErrLeaseLost, if
// the lease is lost; with detach it is also detached from ctx's
// cancellation (a client that hangs up does not cancel the operation),
// without it ctx's cancellation reaches fn. The lease is renewed while fn
// runs. Under DispositionComplete the response fn returns is stored (nil:
// the record is released), unless fn chose another disposition through
// the Operation. The record is settled on a context detached from ctx's
// cancellation, so a result fn returned is never lost to a cancellation.
// If fn panics the record is released and the panic goes on. run returns
// the outcome and the error of the settling write.
func (e *engine) run(ctx context.Context, rec *Record, detach bool, fn func(ctx context.Context, op *Operation) *Response) (Outcome, error) {
	c := e.cfg
	op := newOperation(rec, c.TTL, c.Now)
	op.e = e
	// base is ctx without its cancellation, for the renewals and the
	// settling write.
	base := context.WithoutCancel(ctx)
	parent := base
	if !detach {
		parent = ctx
	}
	fctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	fctx = context.WithValue(fctx, operationKey{}, op)
	op.lose = cancel
	hb := &op.hb
	e.startHeartbeat(hb, base, rec, cancel)
	c.Observer.InFlight(1)
	defer c.Observer.InFlight(-1)
	defer func() {
		if v := recover(); v != nil {
			hb.stop()
			e.releaseAfterPanic(base, rec)
			panic(v)
		}
	}()
	resp := fn(fctx, op)
	hb.stop()
	d, note := op.choice()
	return e.settle(base, rec, d, resp, note)
}

// settle ends the record rec after its operation's code returned with
// disposition d. The operation's own choice wins: DispositionCompleted
// writes nothing, DispositionAbandon marks the record abandoned and leaves
// it to its lease (a failure to write the mark is logged: the lease still
// runs out), DispositionRelease deletes it. Under DispositionComplete resp is stored,
// or, when resp is nil (a result that is not kept), the record is
// released. Under DispositionAbandon, a note (from Operation.AbandonWith)
// becomes the record's checkpoint in the same write. A fenced write that finds the lease taken over is reported as
// OutcomeLeaseLost; the write's error is returned for the caller to log or
// return.
func (e *engine) settle(ctx context.Context, rec *Record, d Disposition, resp *Response, note *Checkpoint) (Outcome, error) {
	outcome := OutcomeNew
	var err error
	switch {
	case d == DispositionCompleted:
	case d == DispositionAbandon:
		outcome = OutcomeAbandoned
		if aerr := e.abandon(ctx, rec, note); aerr != nil && !errors.Is(aerr, ErrLeaseLost) {
			e.cfg.Logger.WarnContext(ctx, "retrysafe: marking the attempt abandoned failed; retries learn its outcome is unknown once its lease has half run out", "err", aerr)
		} else if aerr != nil {
			outcome = OutcomeLeaseLost
		}
	case d == DispositionRelease || resp == nil:
		outcome, err = OutcomeReleased, e.release(ctx, rec)
	default:
		err = e.complete(ctx, rec, resp)
	}
	if errors.Is(err, ErrLeaseLost) {
		outcome = OutcomeLeaseLost
	}
	return outcome, err
}

// releaseAfterPanic releases rec after its operation's code panicked, as
// if the process had crashed before answering but without making a retry
// wait for the lease. The caller re-panics.
func (e *engine) releaseAfterPanic(ctx context.Context, rec *Record) {
	if err := e.release(ctx, rec); err != nil {
		e.cfg.Logger.ErrorContext(ctx, "retrysafe: release after panic failed; the key is blocked until its lease runs out", "err", err)
	}
}

// logNotStored logs why the result of an operation that ran was not kept.
func (e *engine) logNotStored(ctx context.Context, err error) {
	switch {
	case errors.Is(err, ErrLeaseLost):
		e.cfg.Logger.WarnContext(ctx, "retrysafe: result not stored: the lease was taken over by another request")
	case err != nil:
		e.cfg.Logger.ErrorContext(ctx, "retrysafe: result not stored; the key stays blocked until its lease runs out", "err", err)
	}
}
