package retrysafe

import (
	"context"
	"net/http"
	"time"
)

// Outcome classifies how the engine answered one protected request or Do call.
type Outcome string

// Outcomes reported to an [Observer].
const (
	OutcomeNew        Outcome = "new"         // claimed and executed
	OutcomeReplayed   Outcome = "replayed"    // stored result returned
	OutcomeConflict   Outcome = "conflict"    // original still in flight (409)
	OutcomeMismatch   Outcome = "mismatch"    // key reused with another request (422)
	OutcomeInvalidKey Outcome = "invalid_key" // malformed key (400)
	OutcomeMissingKey Outcome = "missing_key" // key required but absent (400)
	OutcomeEmptyScope Outcome = "empty_scope" // keyed request with an empty scope (400 empty-scope); nothing ran
	// OutcomeUnauthorized: Config.Scope could not establish the caller's
	// identity (401); nothing ran.
	OutcomeUnauthorized Outcome = "unauthorized"
	OutcomeTooLarge     Outcome = "too_large" // request body over the limit (413)
	// OutcomeBadRequestBody: the request body could not be read (bad
	// chunked framing, a body cut short); 400, nothing ran.
	OutcomeBadRequestBody Outcome = "bad_request_body"
	// OutcomeStoreFull: the store is out of room for new records (503,
	// never fail-open); nothing ran.
	OutcomeStoreFull  Outcome = "store_full"
	OutcomeStoreError Outcome = "store_error" // store failed; fail-closed answer (503)
	OutcomeFailOpen   Outcome = "fail_open"   // store failed; executed unprotected
	OutcomeReleased   Outcome = "released"    // executed, then the key was released (nothing stored)
	OutcomeAbandoned  Outcome = "abandoned"   // executed with unknown outcome; record left to its lease
	OutcomeLeaseLost  Outcome = "lease_lost"  // executed, but another claimant took the record over
	// OutcomeBlocked: the first attempt's outcome is unknown and the
	// policy does not re-run it (Config.OnUnknown block, or a Resolver
	// that kept it blocked); 409 outcome-unknown, nothing ran.
	OutcomeBlocked Outcome = "blocked"
	// OutcomeFirstSentExpired: a request whose Repeatability-First-Sent
	// was out of the window was refused (412); nothing ran.
	OutcomeFirstSentExpired Outcome = "first_sent_expired"
)

// Observer receives events for metrics. Implementations must be safe for
// concurrent use and fast: they run on the request path. The core never
// imports a metrics library; the gateway wires Prometheus through this
// interface.
type Observer interface {
	// Outcome is called once per protected request or Do call, with the
	// total time spent in the engine (including the handler).
	Outcome(o Outcome, d time.Duration)
	// StoreCall is called after every store operation ("claim", "get",
	// "extend", "complete", "release") with its latency and error (nil on
	// success; ErrLeaseLost and ErrNotFound count as answers, not failures).
	StoreCall(op string, d time.Duration, err error)
	// InFlight is called with +1 when an operation starts executing and -1
	// when it ends.
	InFlight(delta int)
}

// RequestObserver is an [Observer] that also learns which request each
// outcome belongs to. When the middleware's Observer implements it, the
// middleware calls RequestOutcome instead of Outcome for every protected
// request, once, on the request's goroutine and before its ServeHTTP
// returns (also when the handler panics), with the request as the
// middleware received it: its context carries what outer layers put there.
// This is the one account of what happened to a request, for metrics,
// request logs and traces alike. Do calls, which have no request, still
// get Outcome.
type RequestObserver interface {
	Observer
	RequestOutcome(r *http.Request, o Outcome, d time.Duration)
}

type nopObserver struct{}

func (nopObserver) Outcome(Outcome, time.Duration)         {}
func (nopObserver) StoreCall(string, time.Duration, error) {}
func (nopObserver) InFlight(int)                           {}

// Step names a step of the engine that a [Tracer] is told about.
type Step string

// Steps reported to a [Tracer].
const (
	// StepRequest is a protected request, in the middleware, from the
	// moment it is found protected to its answer.
	StepRequest Step = "request"
	// StepDo is one Do call (Do or Run).
	StepDo Step = "do"
	// StepClaim is a call of Store.Claim.
	StepClaim Step = "claim"
	// StepGet is a call of Store.Get, made while waiting for the original.
	StepGet Step = "get"
	// StepWait is a duplicate waiting (InFlightWait) for the original to
	// finish: it ends when the original's result can be replayed, when
	// the record was released and can be claimed, when the original's
	// outcome turns unknown (an outcome-unknown *InProgressError), or when
	// the wait times out.
	StepWait Step = "wait"
	// StepExtend is a call of Store.Extend: one renewal of the lease.
	StepExtend Step = "extend"
	// StepComplete is a call of Store.Complete (one per attempt).
	StepComplete Step = "complete"
	// StepRelease is a call of Store.Release (one per attempt).
	StepRelease Step = "release"
)

// StepInfo describes a step to a [Tracer]. Which fields are set depends
// on the step and on whether it starts or ends; the others are zero.
type StepInfo struct {
	Step Step

	// Request is the protected request (StepRequest).
	Request *http.Request
	// Scope and Key identify the record (StepClaim). A key may be a
	// secret (a tracer must never export it, nor the scope, as it is: a
	// hash of the two is safe).
	Scope, Key string

	// The fields below are set only when the step ends.

	// Duration is the time the step took.
	Duration time.Duration
	// Err is the error of the step: for a store call, as the store
	// returned it (ErrNotFound and ErrLeaseLost included); for StepWait,
	// what ended the wait (an *InProgressError when it timed out,
	// ErrMismatch, a store or context error), nil when the original's
	// record can be replayed or claimed again. Nil for StepRequest and
	// StepDo: Outcome tells how they ended.
	Err error
	// Outcome is how a StepRequest or StepDo ended; "" when the request
	// passed through unprotected, its client went away before anything
	// ran, or its handler panicked (the Observer was told the outcome
	// before the panic went on).
	Outcome Outcome
	// Claimed reports whether a StepClaim claimed the record for this
	// call.
	Claimed bool
	// State and Attempt describe the record a StepClaim or StepGet
	// found, or the completed record a StepWait ends with (State "" when
	// there is none).
	State   State
	Attempt int
}

// Tracer is an [Observer] that is also told when each step of the engine
// starts and ends, with the step's context, so that it can trace the
// steps: package github.com/retrysafe/retrysafe/otel makes OpenTelemetry
// spans of them. When Config.Observer (or DoConfig.Observer) implements
// Tracer, the engine calls StartStep before each step with the context
// the step would run with, runs the step with the context StartStep
// returns, and then calls EndStep with that context and what the step
// found. Every StartStep is followed by exactly one EndStep, also when a
// handler panics.
//
// The handler of a protected request and the function of a Do call run
// with a context derived from the one StartStep returned for their
// StepRequest or StepDo, and so do that request's store calls: a span
// put in it by StartStep is their parent. Store calls that renew the
// lease (StepExtend) run on another goroutine while the handler runs.
//
// Without a Tracer the engine calls neither method and allocates nothing
// for them. Implementations must be safe for concurrent use.
type Tracer interface {
	Observer
	StartStep(ctx context.Context, info StepInfo) context.Context
	EndStep(ctx context.Context, info StepInfo)
}
