package retrysafe

// ErrorDialect is the shape of the problem answers retrysafe writes.
type ErrorDialect string

// Error dialects.
const (
	// DialectProblem writes RFC 9457 problem details only (the default).
	DialectProblem ErrorDialect = "problem"
	// DialectStripe adds, next to the problem members, the "error" member
	// that Stripe's API answers carry ({"type", "code", "message"}; see
	// [StripeError]) and a Stripe-Should-Retry header where retrying is
	// known to be right or wrong. Stripe's SDKs raise an error only for an
	// answer with an "error" member: stripe-node resolves any other JSON
	// answer, whatever its status, as a successful result.
	DialectStripe ErrorDialect = "stripe"
)

// StripeError is the "error" member of a problem in the stripe dialect.
type StripeError struct {
	// Type is StripeIdempotencyError or StripeAPIError.
	Type string `json:"type"`
	// Code is the problem type's slug, such as "key-reused" (the stable
	// name clients match on; see docs/problems.md).
	Code string `json:"code"`
	// Message is the problem's detail.
	Message string `json:"message"`
	// ShouldRetry is sent as the Stripe-Should-Retry header: "true",
	// "false", or "" for no header (the SDK then decides by the status).
	ShouldRetry string `json:"-"`
}

// stripeErrors are the type and Stripe-Should-Retry of the root's problem
// types. "true" only where nothing ran and the same request can succeed
// unchanged; "false" where a retry cannot help or needs a decision (an
// outcome that may have taken effect).
var stripeErrors = map[string][2]string{
	ProblemMissingKey:        {StripeIdempotencyError, "false"},
	ProblemInvalidKey:        {StripeIdempotencyError, "false"},
	ProblemMismatch:          {StripeIdempotencyError, "false"},
	ProblemEmptyScope:        {StripeIdempotencyError, "false"},
	ProblemInProgress:        {StripeIdempotencyError, "true"}, // a retry gets the original's result
	ProblemOutcomeUnknown:    {StripeIdempotencyError, "false"},
	ProblemBodyTooLarge:      {StripeAPIError, "false"},
	ProblemStoreUnavailable:  {StripeAPIError, "true"}, // nothing ran
	ProblemRequestTimeout:    {StripeAPIError, "true"}, // nothing ran, nothing kept
	ProblemResponseNotStored: {StripeAPIError, "false"},
	ProblemReplayUndecodable: {StripeAPIError, "false"},
	"bad-request-body":       {StripeAPIError, "true"},  // nothing ran
	"store-full":             {StripeAPIError, "false"}, // not an outage: retrying at once does not help
}

// stripeError returns the stripe dialect's error member for a problem of
// type slug. A slug it does not know is an api_error without
// Stripe-Should-Retry.
func stripeError(slug, message string) *StripeError {
	e, ok := stripeErrors[slug]
	if !ok {
		e = [2]string{StripeAPIError, ""}
	}
	return &StripeError{Type: e[0], Code: slug, Message: message, ShouldRetry: e[1]}
}
