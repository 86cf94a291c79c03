// Package retrysafefiber makes Fiber v3 routes idempotent: [New] returns a
// fiber.Handler that runs the rest of the chain at most once per
// Idempotency-Key, stores its response and replays it, byte for byte, to
// every retry.
//
// It works on fiber.Ctx itself, with no net/http bridge: the request's
// method, path, query, headers and raw body come from fasthttp's request,
// and the answer is read from fasthttp's response once the chain has
// returned (a handler's returned error is rendered by the app's
// ErrorHandler first, so that what is stored is what the client gets). It
// runs each operation on the root package's transport-neutral
// [retrysafe.Executor], and answers as the net/http middleware does (the
// behaviour table in docs/guarantees.md): 400 missing-key or invalid-key,
// 400 empty-scope (Config.RequireScope), 413 body-too-large, 422
// key-reused (which Fiber's own idempotency middleware lacks: it replays
// the first answer to a different request), 409 request-in-progress or
// outcome-unknown with Retry-After, 503 store-unavailable or store-full,
// and the stored status, headers and body with Idempotent-Replayed: true.
//
// Handlers find the [retrysafe.Operation] in c.Context(). The operation is
// not cancelled when the client hangs up (fasthttp does not tell
// handlers), and its result is stored for the retry. A handler that panics
// releases the key (the retry runs again) and the panic goes on, to
// Fiber's recover middleware if there is one in front.
//
// Not supported here (they are the net/http middleware's): the Repeatable
// Requests headers, decoding a stored content coding for a retry that
// does not accept it (put compression in front of New), and the net/http
// fields of retrysafe.Config (Scope, Key, FingerprintPath; use
// [Config].Scope).
package retrysafefiber

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/httpmethod"
	"github.com/retrysafe/retrysafe/internal/scopehash"
)

// Config is the policy of [New].
type Config struct {
	// Config is the policy shared with the net/http middleware. Of it New
	// uses Store (required), Methods, RequireKey, TTL, Lease, InFlight,
	// WaitTimeout, MaxBody, MaxResponseBody, StoreTimeout, FailOpen,
	// StoreStatus, StoreHeader, RequireScope, ScopeSource, ErrorDialect,
	// IgnoreFields, RouteName, Now, Logger, Observer and ProblemBase, with
	// the same defaults. Its net/http fields Scope, Key and
	// FingerprintPath must be nil.
	retrysafe.Config
	// Scope returns the caller's identity for a request; records are
	// keyed by scope + key so tenants never share keys. Nil means the
	// SHA-256 of the Authorization header, as [retrysafe.ScopeFromHeaders]
	// ("Authorization"). Derive it from credentials the caller must hold.
	// An error is answered 401.
	Scope func(c fiber.Ctx) (string, error)
}

// New returns Fiber middleware that makes the protected methods of the
// routes behind it idempotent under cfg. The error names an invalid field.
func New(cfg Config) (fiber.Handler, error) {
	if cfg.Config.Scope != nil || cfg.Key != nil || cfg.FingerprintPath != nil {
		return nil, errors.New("retrysafefiber: Config.Config.Scope, Key and FingerprintPath take a *http.Request, which Fiber has not: set Config.Scope instead, and leave them nil")
	}
	c, err := cfg.Config.WithDefaults()
	if err != nil {
		return nil, err
	}
	x, err := retrysafe.NewExecutor(c)
	if err != nil {
		return nil, err
	}
	m := &middleware{cfg: &c, x: x, scope: cfg.Scope}
	if m.scope == nil {
		m.scope = authorizationScope
		if c.ScopeSource == "" {
			c.ScopeSource = "the Authorization header"
		}
	}
	return m.handle, nil
}

type middleware struct {
	cfg   *retrysafe.Config // with defaults
	x     *retrysafe.Executor
	scope func(fiber.Ctx) (string, error)
}

// authorizationScope is the default scope: the SHA-256 of the
// Authorization header's values, joined with "\n", or "" without one.
func authorizationScope(c fiber.Ctx) (string, error) {
	values := c.Request().Header.PeekAll(fiber.HeaderAuthorization)
	switch {
	case len(values) == 0:
		return "", nil
	case len(values) == 1:
		if len(values[0]) == 0 {
			return "", nil
		}
		return scopehash.Sum(values[0]), nil
	}
	joined := bytes.Join(values, []byte("\n"))
	if len(bytes.TrimLeft(joined, "\n")) == 0 {
		return "", nil
	}
	return scopehash.Sum(joined), nil
}

func (m *middleware) handle(c fiber.Ctx) error {
	cfg := m.cfg
	if !httpmethod.Protected(cfg.Methods, c.Method()) {
		return c.Next()
	}
	values := c.Request().Header.PeekAll(retrysafe.HeaderKey)
	if len(values) == 0 {
		if !cfg.RequireKey {
			return c.Next()
		}
		return m.refused(c, retrysafe.OutcomeMissingKey, problemMissingKey(cfg))
	}
	if len(values) > 1 {
		return m.refused(c, retrysafe.OutcomeInvalidKey, problemKeyTwice(cfg))
	}
	key, err := retrysafe.ParseKey(string(values[0]))
	if err != nil {
		return m.refused(c, retrysafe.OutcomeInvalidKey, problemInvalidKey(cfg, err))
	}
	body := c.Request().Body() // as sent: no content coding undone
	if int64(len(body)) > cfg.MaxBody {
		return m.refused(c, retrysafe.OutcomeTooLarge, problemTooLarge(cfg))
	}
	scope, err := m.scope(c)
	if err != nil {
		return m.refused(c, retrysafe.OutcomeUnauthorized, problemUnauthorized(err))
	}
	if scope == "" && cfg.RequireScope {
		return m.refused(c, retrysafe.OutcomeEmptyScope, problemEmptyScope(cfg))
	}
	uri := c.Request().URI()
	fp := retrysafe.Fingerprint(c.Method(), string(uri.PathOriginal()), string(uri.QueryString()), body, cfg.IgnoreFields)

	parent := c.Context()
	ran := false
	resp, replayed, err := m.x.Execute(parent, scope, key, fp, func(ctx context.Context) *retrysafe.Response {
		ran = true
		c.SetContext(ctx)
		defer c.SetContext(parent)
		return m.run(c)
	})
	switch {
	case replayed:
		replay(c, resp)
		return nil
	case ran:
		// The chain answered in c.Response(): stored, or not (the error
		// says why, and the Executor logged it), the client gets it.
		return nil
	}
	return m.refuse(c, err)
}

// run runs the rest of the chain for a claimed key and returns the answer
// to store, nil to release the key.
func (m *middleware) run(c fiber.Ctx) *retrysafe.Response {
	cfg := m.cfg
	if err := c.Next(); err != nil {
		// What Fiber's router does with a handler's error, done here so
		// that the answer the client gets is the one stored.
		if catch := c.App().ErrorHandler(c, err); catch != nil {
			_ = c.SendStatus(fiber.StatusInternalServerError)
		}
	}
	res := c.Response()
	status := res.StatusCode()
	if !cfg.StoreStatus(status) {
		return nil
	}
	body := res.Body() // reads a body stream in whole
	if int64(len(body)) > cfg.MaxResponseBody {
		return notStored(cfg, status, fmt.Sprintf("the response body exceeded the storage limit of %d bytes", cfg.MaxResponseBody))
	}
	// The body, and the values below, alias fasthttp's buffers, which
	// stay valid until the handler returns: the store copies what it
	// keeps during Execute (retrysafe.Store: "Complete copies what it
	// keeps of params.Response").
	return &retrysafe.Response{Status: status, Header: m.header(res), Body: body}
}

// header returns the response's headers that Config.StoreHeader keeps,
// under fasthttp's canonical names (unless the app disables normalizing).
func (m *middleware) header(res *fasthttp.Response) http.Header {
	header := make(http.Header)
	for k, v := range res.Header.All() {
		if name := string(k); m.cfg.StoreHeader(name) {
			header[name] = append(header[name], string(v))
		}
	}
	return header
}

// replay answers with a stored response.
func replay(c fiber.Ctx, resp *retrysafe.Response) {
	res := c.Response()
	res.Reset()
	res.SetStatusCode(resp.Status)
	for k, vs := range resp.Header {
		for _, v := range vs {
			res.Header.Add(k, v)
		}
	}
	res.Header.Set(retrysafe.HeaderReplayed, "true")
	res.SetBody(resp.Body)
}

// refuse answers a call that Execute refused with err.
func (m *middleware) refuse(c fiber.Ctx, err error) error {
	cfg := m.cfg
	var ip *retrysafe.InProgressError
	switch {
	case errors.Is(err, retrysafe.ErrMismatch):
		return writeProblem(c, problemMismatch(cfg), 0)
	case errors.As(err, &ip):
		return writeProblem(c, problemInProgress(cfg, ip), ip.RetryAfter)
	case errors.Is(err, retrysafe.ErrInvalidKey):
		return writeProblem(c, problemInvalidKey(cfg, err), 0)
	case errors.Is(err, retrysafe.ErrStoreFull):
		cfg.Logger.ErrorContext(c.Context(), "retrysafe: store full", "err", err)
		return writeProblem(c, problemStoreFull(cfg), storeFullRetryAfter)
	case c.Context().Err() != nil:
		return nil // the caller's context ended while we waited; nothing ran
	}
	cfg.Logger.ErrorContext(c.Context(), "retrysafe: store unavailable", "err", err)
	if cfg.FailOpen && errors.Is(err, retrysafe.ErrStoreUnavailable) {
		cfg.Observer.Outcome(retrysafe.OutcomeFailOpen, 0)
		return c.Next()
	}
	return writeProblem(c, problemStoreUnavailable(cfg), 2*time.Second)
}

// refused answers a request refused before Execute, and reports it to the
// Observer as the middleware does.
func (m *middleware) refused(c fiber.Ctx, o retrysafe.Outcome, p *retrysafe.Problem) error {
	m.cfg.Observer.Outcome(o, 0)
	return writeProblem(c, p, 0)
}
