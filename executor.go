package retrysafe

import (
	"context"
	"fmt"
	"time"
)

// Executor runs keyed operations at most once under one validated
// [Config], without HTTP: the engine under the middleware and [Do], for
// adapters in other modules (a gRPC interceptor, say) that map their own
// transport onto a [Response] (status, metadata as Header, body). Of
// Config it uses Store, TTL, Lease, InFlight, WaitTimeout, StoreTimeout,
// OnUnknown, Resolver, ResolveTimeout, RouteName, Now, Logger and
// Observer; with a Resolver, [Executor.ResolveStranded] is its completer. Make one with [NewExecutor]; it is
// safe for concurrent use.
type Executor struct {
	e *engine
}

// NewExecutor validates cfg as [NewMiddleware] does and returns an
// Executor for it.
func NewExecutor(cfg Config) (*Executor, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Executor{e: newEngine(&c)}, nil
}

// Execute runs fn at most once for key within scope, for requests with
// this fingerprint (see [Fingerprint]), and answers every call with that
// key until the record expires:
//
//   - A new key (or a takeover after a lease ran out): fn runs and resp is
//     what it returned, replayed false. fn's context carries the
//     [Operation] and ctx's values, is detached from ctx's cancellation (a
//     client that hangs up does not cancel the operation, as in the
//     middleware) and is cancelled, with cause ErrLeaseLost, only if the
//     lease is lost. The response is stored for later calls; nil stores
//     nothing and releases the key, so that a retry runs fn again. fn may
//     choose otherwise through the Operation (Release, Abandon,
//     MarkCompleted). If fn panics, the key is released and the panic goes
//     on.
//   - A completed key: resp is the stored response (read-only), replayed
//     true; fn does not run.
//   - Otherwise err says why nothing ran: ErrMismatch (the key was used
//     with another fingerprint), an *InProgressError (the first call is
//     still running, or its outcome is unknown), a store error (matching
//     ErrStoreFull or ErrStoreUnavailable), ctx's error, or an invalid key
//     (ErrInvalidKey).
//
// When fn ran but its response could not be stored, resp is that response
// and err matches ErrResultNotStored: answer resp, and know that a retry
// after the lease may run fn again. Each call is reported to the Observer
// (Outcome).
func (x *Executor) Execute(ctx context.Context, scope, key, fingerprint string, fn func(ctx context.Context) *Response) (resp *Response, replayed bool, err error) {
	e := x.e
	start := time.Now()
	outcome := OutcomeReleased // if fn panics: run releases the record
	defer func() { e.cfg.Observer.Outcome(outcome, time.Since(start)) }()
	if err := checkKey(key); err != nil {
		outcome = OutcomeInvalidKey
		return nil, false, err
	}
	rec, claimed, err := e.acquire(ctx, scope, key, fingerprint)
	switch {
	case err != nil:
		outcome, _ = refusal(err)
		return nil, false, err
	case !claimed:
		outcome = OutcomeReplayed
		return rec.Response, true, nil
	}
	outcome, err = e.run(ctx, rec, true, func(ctx context.Context, _ *Operation) *Response {
		resp = fn(ctx)
		return resp
	})
	if err != nil {
		e.logNotStored(ctx, err)
		if resp != nil {
			err = fmt.Errorf("%w: %w", ErrResultNotStored, err)
		}
	}
	return resp, false, err
}
