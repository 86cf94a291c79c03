package retrysafefiber

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v3"

	"github.com/retrysafe/retrysafe"
)

// The problem answers of the net/http middleware, word for word (the root
// package builds them with unexported helpers; TestProblemsMatchMiddleware
// holds these to them, in both error dialects).

// storeFullRetryAfter is the middleware's Retry-After of store-full.
const storeFullRetryAfter = 5 * time.Second

func problem(cfg *retrysafe.Config, slug, title string, status int, detail string) *retrysafe.Problem {
	p := &retrysafe.Problem{Type: cfg.ProblemBase + slug, Title: title, Status: status, Detail: detail}
	if cfg.ErrorDialect == retrysafe.DialectStripe {
		p.Error = stripeError(slug, detail)
	}
	return p
}

// stripeErrors are the stripe dialect's type and Stripe-Should-Retry of
// the problem types New answers with.
var stripeErrors = map[string][2]string{
	retrysafe.ProblemMissingKey:        {retrysafe.StripeIdempotencyError, "false"},
	retrysafe.ProblemInvalidKey:        {retrysafe.StripeIdempotencyError, "false"},
	retrysafe.ProblemMismatch:          {retrysafe.StripeIdempotencyError, "false"},
	retrysafe.ProblemEmptyScope:        {retrysafe.StripeIdempotencyError, "false"},
	retrysafe.ProblemInProgress:        {retrysafe.StripeIdempotencyError, "true"},
	retrysafe.ProblemOutcomeUnknown:    {retrysafe.StripeIdempotencyError, "false"},
	retrysafe.ProblemBodyTooLarge:      {retrysafe.StripeAPIError, "false"},
	retrysafe.ProblemStoreUnavailable:  {retrysafe.StripeAPIError, "true"},
	retrysafe.ProblemResponseNotStored: {retrysafe.StripeAPIError, "false"},
	retrysafe.ProblemStoreFull:         {retrysafe.StripeAPIError, "false"},
}

func stripeError(slug, message string) *retrysafe.StripeError {
	e, ok := stripeErrors[slug]
	if !ok {
		e = [2]string{retrysafe.StripeAPIError, ""}
	}
	return &retrysafe.StripeError{Type: e[0], Code: slug, Message: message, ShouldRetry: e[1]}
}

func problemMissingKey(cfg *retrysafe.Config) *retrysafe.Problem {
	return problem(cfg, retrysafe.ProblemMissingKey, "Idempotency-Key required", http.StatusBadRequest,
		"This endpoint requires an Idempotency-Key header: generate a unique value (a UUID) once per operation and send it on every retry.")
}

func problemKeyTwice(cfg *retrysafe.Config) *retrysafe.Problem {
	return problem(cfg, retrysafe.ProblemInvalidKey, "Invalid "+retrysafe.HeaderKey, http.StatusBadRequest,
		"Send exactly one "+retrysafe.HeaderKey+" header.")
}

func problemInvalidKey(cfg *retrysafe.Config, err error) *retrysafe.Problem {
	detail := err.Error()
	if ke, ok := err.(*retrysafe.KeyError); ok {
		detail = fmt.Sprintf("The %s header is invalid: %s. Use 1 to %d printable ASCII characters, such as a UUID.", retrysafe.HeaderKey, ke.Reason, retrysafe.MaxKeyLength)
	}
	return problem(cfg, retrysafe.ProblemInvalidKey, "Invalid "+retrysafe.HeaderKey, http.StatusBadRequest, detail)
}

func problemTooLarge(cfg *retrysafe.Config) *retrysafe.Problem {
	return problem(cfg, retrysafe.ProblemBodyTooLarge, "Request body too large", http.StatusRequestEntityTooLarge,
		fmt.Sprintf("The request body exceeds the limit of %d bytes; nothing was processed.", cfg.MaxBody))
}

func problemUnauthorized(err error) *retrysafe.Problem {
	return &retrysafe.Problem{Type: "about:blank", Title: "Unauthorized", Status: http.StatusUnauthorized,
		Detail: "The caller's identity could not be established: " + err.Error()}
}

func problemEmptyScope(cfg *retrysafe.Config) *retrysafe.Problem {
	source := cfg.ScopeSource
	if source == "" {
		source = "the credential this service identifies its callers by"
	}
	return problem(cfg, retrysafe.ProblemEmptyScope, "No caller identity for the Idempotency-Key", http.StatusBadRequest,
		fmt.Sprintf("Idempotency keys are kept per caller, and this request carries nothing that identifies its caller, so nothing was processed. "+
			"Send %s with the request. (If all such callers may share one key space, the operator can allow it: retrysafe serve --allow-empty-scope, a route's allow_empty_scope: true, or Config.RequireScope false in the library.)", source))
}

func problemMismatch(cfg *retrysafe.Config) *retrysafe.Problem {
	return problem(cfg, retrysafe.ProblemMismatch, "Idempotency-Key reused", http.StatusUnprocessableEntity,
		"This Idempotency-Key was already used with a different request (method, path, query or body). Use a new key for a new operation.")
}

func problemInProgress(cfg *retrysafe.Config, e *retrysafe.InProgressError) *retrysafe.Problem {
	if !e.OutcomeUnknown {
		return problem(cfg, retrysafe.ProblemInProgress, "Request in progress", http.StatusConflict,
			"A request with this Idempotency-Key is still being processed. Retry later with the same key to get its result.")
	}
	if e.Blocked {
		return problem(cfg, retrysafe.ProblemOutcomeUnknown, "Outcome of the first attempt unknown", http.StatusConflict,
			"The first attempt with this Idempotency-Key ended without a result: its outcome is unknown, and it may or may not have taken effect. "+
				"The key is held until the outcome is resolved (by the service or an operator); a retry with the same key will not run the operation again before that, and gets the stored result once there is one.")
	}
	until := e.LeaseUntil.Add(time.Second - 1).Truncate(time.Second).UTC().Format(time.RFC3339)
	return problem(cfg, retrysafe.ProblemOutcomeUnknown, "Outcome of the first attempt unknown", http.StatusConflict,
		fmt.Sprintf("The first attempt with this Idempotency-Key ended without a result: its outcome is unknown, and it may or may not have taken effect. "+
			"The key is held until its lease runs out at %s; after that, a retry with the same key runs the operation again if no result was stored by then. "+
			"Check the resource's state before retrying.", until))
}

func problemStoreFull(cfg *retrysafe.Config) *retrysafe.Problem {
	return problem(cfg, retrysafe.ProblemStoreFull, "Idempotency store full", http.StatusServiceUnavailable,
		"The request was not processed: the idempotency store has no room for new keys. Retry later with the same key.")
}

func problemStoreUnavailable(cfg *retrysafe.Config) *retrysafe.Problem {
	return problem(cfg, retrysafe.ProblemStoreUnavailable, "Idempotency store unavailable", http.StatusServiceUnavailable,
		"The request was not processed because its idempotency could not be guaranteed. Retry later with the same key.")
}

// notStored is the response stored in place of one that could not be
// kept: the operation ran, and never runs again for this key.
func notStored(cfg *retrysafe.Config, status int, why string) *retrysafe.Response {
	p := problem(cfg, retrysafe.ProblemResponseNotStored, "Response not stored", http.StatusBadGateway,
		fmt.Sprintf("The operation ran and answered %d, but %s, so it was not stored. It will not run again for this key; check the resource's state.", status, why))
	body, _ := json.Marshal(p)
	h := http.Header{"Content-Type": {retrysafe.ContentTypeProblem}, "Cache-Control": {"no-store"}}
	if p.Error != nil && p.Error.ShouldRetry != "" {
		h.Set(retrysafe.HeaderStripeShouldRetry, p.Error.ShouldRetry)
	}
	return &retrysafe.Response{Status: http.StatusBadGateway, Header: h, Body: append(body, '\n')}
}

// writeProblem answers p as application/problem+json, as
// retrysafe.WriteProblem does.
func writeProblem(c fiber.Ctx, p *retrysafe.Problem, retryAfter time.Duration) error {
	c.Set(fiber.HeaderContentType, retrysafe.ContentTypeProblem)
	c.Set(fiber.HeaderCacheControl, "no-store")
	if retryAfter > 0 {
		s := int((retryAfter + time.Second - 1) / time.Second)
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(max(s, 1)))
	}
	if p.Error != nil && p.Error.ShouldRetry != "" {
		c.Set(retrysafe.HeaderStripeShouldRetry, p.Error.ShouldRetry)
	}
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	c.Status(p.Status)
	return c.Send(append(body, '\n'))
}
