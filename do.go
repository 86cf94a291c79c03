package retrysafe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// DoConfig is the policy of a [Doer]. Zero values mean the same defaults as
// [Config], except InFlight, which defaults to InFlightWait: a duplicate
// delivery waits for the original and returns its result.
type DoConfig struct {
	// Store holds the records. Required.
	Store Store
	// Scope separates key spaces, such as one per queue or consumer group.
	Scope string

	TTL          time.Duration
	Lease        time.Duration
	InFlight     InFlightMode
	WaitTimeout  time.Duration
	StoreTimeout time.Duration

	// OnUnknown, Resolver and ResolveTimeout are [Config]'s: what becomes
	// of a call that finds a first run whose outcome is unknown. A
	// Resolver that completes such a record returns the result encoded as
	// Do stores it ([ResultResponse]).
	OnUnknown      UnknownPolicy
	Resolver       Resolver
	ResolveTimeout time.Duration

	Now      func() time.Time
	Logger   *slog.Logger
	Observer Observer
}

// Permanent marks err as a permanent failure: Do stores it and every later
// call with the same key gets it back (as a *FailedError) without running
// the function again. Any error not marked permanent releases the key, so a
// redelivery runs the function again.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err was marked with [Permanent] (or is a
// replayed *FailedError).
func IsPermanent(err error) bool {
	var p *permanentError
	var f *FailedError
	return errors.As(err, &p) || errors.As(err, &f)
}

// FailedError is what Do returns for a key whose first run failed
// permanently: the stored message of the original error.
type FailedError struct {
	Message string
}

// Error returns the stored message of the original failure.
func (e *FailedError) Error() string { return e.Message }

// A permanent failure is stored as a response with the Content-Type
// failureType, the error's message as its body, and status 500 (so that
// operators' views count it as failed).
const failureType = "application/vnd.retrysafe.failure"

// failureResponse is how Do stores the permanent failure err.
func failureResponse(err error) *Response {
	return &Response{
		Status: http.StatusInternalServerError,
		Header: http.Header{"Content-Type": {failureType}},
		Body:   []byte(err.Error()),
	}
}

// isFailure reports whether resp is a stored permanent failure.
func isFailure(resp *Response) bool {
	return resp.Header.Get("Content-Type") == failureType
}

// Doer runs functions at most once per key under one validated
// [DoConfig]. Make one with [NewDoer] and use it with [Run] for every
// call; [Do] is the short form for a store with the default config. A
// Doer is safe for concurrent use.
type Doer struct {
	e     *engine
	cfg   Config
	scope string
}

// NewDoer validates cfg and returns a Doer for it.
func NewDoer(cfg DoConfig) (*Doer, error) {
	d := &Doer{scope: cfg.Scope}
	var err error
	if d.cfg, err = cfg.config(); err != nil {
		return nil, err
	}
	d.e = newEngine(&d.cfg)
	return d, nil
}

// Do runs fn at most once per key in store, with the default [DoConfig]
// (no scope, InFlightWait), as [Run] does with a Doer: see Run for the
// rules. For another config, or many calls, make a Doer with [NewDoer].
func Do[T any](ctx context.Context, store Store, key, fingerprint string, fn func(context.Context) (T, error)) (T, error) {
	d, err := NewDoer(DoConfig{Store: store})
	if err != nil {
		var zero T
		return zero, err
	}
	return Run(ctx, d, key, fingerprint, fn)
}

// Run runs fn at most once per key (within the Doer's scope) and returns its
// result to every call with that key until the record expires. It is the
// middleware's state machine for code that is not an HTTP handler: a queue
// consumer that may see a message twice, a webhook delivered again.
//
//   - A new key: fn runs with a lease renewed by heartbeat; its result is
//     encoded as JSON and stored; ctx carries the [Operation].
//   - A completed key: the stored result is decoded and returned; fn does
//     not run. A stored permanent failure is returned as *FailedError.
//   - The same key with another fingerprint: ErrMismatch.
//   - A key whose first run is still in progress: waits for it (up to
//     WaitTimeout) in the default wait mode, or returns *InProgressError.
//     A first run whose outcome is unknown (its owner stopped renewing the
//     lease, or the lease ran out during the wait) returns an
//     *InProgressError with OutcomeUnknown at once: a waiting call never
//     takes the key over, only a call made after the lease ran out does.
//   - A call after the lease of a first run whose outcome is unknown ran
//     out (its owner died, or called [Operation.Abandon]): by default it
//     takes the key over and runs fn again ([Operation.Attempt] 2;
//     [Operation.Resumed] returns the last [Operation.Checkpoint] of the
//     run before). With DoConfig.OnUnknown block it returns a blocked
//     *InProgressError instead, and a DoConfig.Resolver decides (re-run,
//     complete, keep blocked); [Doer.ResolveStranded] resolves such keys
//     in the background (a key it finds not done is left for the next
//     call, which runs fn as the next attempt without asking again).
//   - fn returns an error marked [Permanent]: stored and returned again.
//     Any other error releases the key: a redelivery runs fn again. A
//     failed attempt is never marked done.
//   - fn panics: the key is released and the panic continues.
//
// Context: fn runs with ctx, carrying the [Operation], so ctx's values,
// deadline and cancellation reach it: a consumer that shuts down (cancels
// ctx) cancels fn, and an fn that then returns ctx's error releases the
// key, so that the redelivery runs it again. Unlike the middleware's
// handler, fn is not detached from its caller: a queue consumer owns its
// work's lifetime, where an HTTP client does not. fn's context is also
// cancelled, with cause ErrLeaseLost, if the lease is lost to another
// claimant. Whatever fn returns is stored or released on a context
// detached from ctx's cancellation (bounded by StoreTimeout per call), so
// a result fn returned is not lost to a cancellation that came after it.
func Run[T any](ctx context.Context, d *Doer, key, fingerprint string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := checkKey(key); err != nil { // hash longer or binary message ids first
		return zero, err
	}
	e := d.e
	start := time.Now()
	outcome := OutcomeNew
	if e.tracer != nil {
		ctx = e.tracer.StartStep(ctx, StepInfo{Step: StepDo})
	}
	defer func() {
		d := time.Since(start)
		e.cfg.Observer.Outcome(outcome, d)
		if e.tracer != nil {
			e.tracer.EndStep(ctx, StepInfo{Step: StepDo, Outcome: outcome, Duration: d})
		}
	}()

	rec, claimed, err := e.acquire(ctx, d.scope, key, fingerprint)
	switch {
	case err != nil:
		outcome, _ = refusal(err)
		return zero, err
	case !claimed:
		outcome = OutcomeReplayed
		return decodeResult[T](rec.Response)
	}
	return runOnce(ctx, e, rec, fn, &outcome)
}

func runOnce[T any](ctx context.Context, e *engine, rec *Record, fn func(context.Context) (T, error), outcome *Outcome) (v T, err error) {
	var (
		d    Disposition
		merr error
	)
	*outcome = OutcomeReleased // if fn panics: run releases the record
	o, finishErr := e.run(ctx, rec, false, func(ctx context.Context, op *Operation) *Response {
		v, err = fn(ctx)
		d = op.Disposition()
		switch {
		case err != nil && !IsPermanent(err):
			return nil
		case err != nil:
			return failureResponse(err)
		}
		var resp *Response
		resp, merr = ResultResponse(v)
		return resp
	})
	*outcome = o
	stored := d == DispositionComplete && (err == nil && merr == nil || IsPermanent(err))
	switch {
	case merr != nil:
		return v, merr // the result could not be encoded: the key was released
	case d == DispositionCompleted || d == DispositionAbandon:
		return v, err
	case !stored && err != nil:
		// Released after a failure: the failure is the answer.
		if finishErr != nil {
			e.cfg.Logger.ErrorContext(ctx, "retrysafe: release failed; the key is blocked until its lease runs out", "err", finishErr)
		}
		return v, err
	case !stored:
		return v, finishErr // released on request
	case finishErr != nil:
		finishErr = fmt.Errorf("%w: %w", ErrResultNotStored, finishErr)
		if err != nil {
			return v, errors.Join(err, finishErr)
		}
		return v, finishErr
	}
	return v, err
}

// ResultResponse encodes v the way Do stores a successful result. Use it
// when fn completes its own record inside a transaction (a store's
// CompleteTx with Operation.CompleteParams, then Operation.MarkCompleted), so
// that later calls decode the same value.
func ResultResponse[T any](v T) (*Response, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("retrysafe: encoding the result: %w", err)
	}
	return &Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}, nil
}

func decodeResult[T any](resp *Response) (T, error) {
	var v T
	if isFailure(resp) {
		return v, &FailedError{Message: string(resp.Body)}
	}
	if err := json.Unmarshal(resp.Body, &v); err != nil {
		return v, fmt.Errorf("retrysafe: decoding the stored result: %w", err)
	}
	return v, nil
}

func (d *DoConfig) config() (Config, error) {
	inFlight := d.InFlight
	if inFlight == "" {
		inFlight = InFlightWait
	}
	c, err := Config{
		Store: d.Store, TTL: d.TTL, Lease: d.Lease, InFlight: inFlight,
		WaitTimeout: d.WaitTimeout, StoreTimeout: d.StoreTimeout,
		OnUnknown: d.OnUnknown, Resolver: d.Resolver, ResolveTimeout: d.ResolveTimeout,
		Now: d.Now, Logger: d.Logger, Observer: d.Observer,
	}.withDefaults()
	if err != nil {
		return c, fmt.Errorf("%w (in DoConfig)", err)
	}
	return c, nil
}
