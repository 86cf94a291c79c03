package retrysafe

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Instance is not set by retrysafe; it is here for completeness.
	Instance string `json:"instance,omitempty"`
	// Error is the extension member of the stripe dialect ([DialectStripe]);
	// nil in the default dialect.
	Error *StripeError `json:"error,omitempty"`
}

// Problem type slugs, appended to Config.ProblemBase to form the "type" URI,
// and the Stripe error types of the stripe dialect ([StripeError].Type).
// They are stable: clients may match on them.
const (
	ProblemMissingKey        = "missing-key"         // 400
	ProblemInvalidKey        = "invalid-key"         // 400
	ProblemEmptyScope        = "empty-scope"         // 400: a keyed request whose caller sent nothing that identifies it (Config.RequireScope); nothing ran
	ProblemMismatch          = "key-reused"          // 422
	ProblemInProgress        = "request-in-progress" // 409
	ProblemBodyTooLarge      = "body-too-large"      // 413
	ProblemStoreUnavailable  = "store-unavailable"   // 503
	ProblemResponseNotStored = "response-not-stored" // 502, replayed
	ProblemOutcomeUnknown    = "outcome-unknown"     // 409: the first attempt's outcome is unknown; the key is held until its lease ends
	ProblemReplayUndecodable = "replay-undecodable"  // 502: the stored coding is not accepted by the retry and cannot be decoded
	ProblemRequestTimeout    = "request-timeout"     // 408: the body did not arrive within the server's read timeout; nothing ran
	ProblemBadRequestBody    = "bad-request-body"    // 400: the body could not be read (bad framing, cut short); nothing ran
	ProblemStoreFull         = "store-full"          // 503: the store is out of room for new records; nothing ran, never fails open
	// ProblemFirstSentExpired (412): Repeatability-First-Sent is older
	// than the key's TTL (a record of the first attempt may be gone, so
	// the request cannot be told from a new one) or more than
	// FirstSentSkew in the future. Nothing runs.
	ProblemFirstSentExpired = "first-sent-expired"
	// ProblemFirstSentInvalid (400): Repeatability-First-Sent is not one
	// IMF-fixdate (Sun, 06 Nov 1994 08:49:37 GMT). Nothing runs.
	ProblemFirstSentInvalid = "first-sent-invalid"

	// StripeIdempotencyError is the type of refusals about the key or the
	// caller's scope: missing, invalid or reused keys, a key in use.
	StripeIdempotencyError = "idempotency_error"
	// StripeAPIError is the type of every other answer of retrysafe's own:
	// a store or upstream failure, a body over the limit.
	StripeAPIError = "api_error"
)

// WriteProblem writes p as application/problem+json. When retryAfter is
// positive a Retry-After header (whole seconds, at least 1) is added.
func WriteProblem(w http.ResponseWriter, p *Problem, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", ContentTypeProblem)
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfterSeconds(retryAfter)))
	}
	if p.Error != nil && p.Error.ShouldRetry != "" {
		h.Set(HeaderStripeShouldRetry, p.Error.ShouldRetry)
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func retryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

func (c *Config) problem(slug, title string, status int, detail string) *Problem {
	p := &Problem{Type: c.ProblemBase + slug, Title: title, Status: status, Detail: detail}
	if c.ErrorDialect == DialectStripe {
		p.Error = stripeError(slug, detail)
	}
	return p
}

// inProgressProblem is the 409 for a key whose record another request
// holds: still running, or (when the owner stopped renewing its lease) an
// attempt whose outcome is unknown.
func (c *Config) inProgressProblem(e *InProgressError) *Problem {
	if !e.OutcomeUnknown {
		return c.problem(ProblemInProgress, "Request in progress", http.StatusConflict,
			"A request with this Idempotency-Key is still being processed. Retry later with the same key to get its result.")
	}
	if e.Blocked {
		return c.problem(ProblemOutcomeUnknown, "Outcome of the first attempt unknown", http.StatusConflict,
			"The first attempt with this Idempotency-Key ended without a result: its outcome is unknown, and it may or may not have taken effect. "+
				"The key is held until the outcome is resolved (by the service or an operator); a retry with the same key will not run the operation again before that, and gets the stored result once there is one.")
	}
	// The lease end, rounded up to the second, as in Retry-After.
	until := e.LeaseUntil.Add(time.Second - 1).Truncate(time.Second).UTC().Format(time.RFC3339)
	return c.problem(ProblemOutcomeUnknown, "Outcome of the first attempt unknown", http.StatusConflict,
		fmt.Sprintf("The first attempt with this Idempotency-Key ended without a result: its outcome is unknown, and it may or may not have taken effect. "+
			"The key is held until its lease runs out at %s; after that, a retry with the same key runs the operation again if no result was stored by then. "+
			"Check the resource's state before retrying.", until))
}
