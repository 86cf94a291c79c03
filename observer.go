package retrysafe

import (
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
	// OutcomeUnauthorized: Config.Scope could not establish the caller's
	// identity (401); nothing ran.
	OutcomeUnauthorized Outcome = "unauthorized"
	OutcomeTooLarge     Outcome = "too_large"   // request body over the limit (413)
	OutcomeStoreError   Outcome = "store_error" // store failed; fail-closed answer (503)
	OutcomeFailOpen     Outcome = "fail_open"   // store failed; executed unprotected
	OutcomeReleased     Outcome = "released"    // executed, then the key was released (nothing stored)
	OutcomeAbandoned    Outcome = "abandoned"   // executed with unknown outcome; record left to its lease
	OutcomeLeaseLost    Outcome = "lease_lost"  // executed, but another claimant took the record over
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
