package retrysafelambda

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/scopehash"
)

// APIGateway wraps a handler of API Gateway REST API proxy events so
// that a protected request (POST or PATCH, Config.Methods) runs at most
// once per key and every retry gets the stored response, with
// Idempotent-Replayed: true, as the HTTP middleware answers.
//
//   - The key is the Idempotency-Key header (any case; a bare token or a
//     Structured-Field string, as retrysafe.ParseKey reads it), or the
//     request body's member at Config.Key. Without one the request runs
//     unprotected, or gets 400 missing-key under Config.RequireKey; an
//     invalid key gets 400 invalid-key.
//   - The scope is Config.Scope and the SHA-256 of the Authorization
//     header, so that callers never share keys.
//   - The fingerprint covers the method, path, query and body (or the
//     body's members in Config.Validate): another request with the key
//     gets 422 key-reused.
//   - A duplicate of a request still running waits for its response
//     (Config.InFlight), or gets 409 request-in-progress with Retry-After;
//     409 outcome-unknown when the first attempt's outcome is unknown. A
//     failing store gets 503 store-unavailable (store-full). These answers
//     are application/problem+json (docs/problems.md).
//   - Every response the handler returns is stored (Config.StoreStatus
//     chooses). A handler error follows Config.Permanent and is returned
//     as the invocation's error (API Gateway answers 502).
func APIGateway(cfg Config, fn func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error)) (func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error), error) {
	w, err := newWrapper(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		q := url.Values(req.MultiValueQueryStringParameters)
		if len(q) == 0 && len(req.QueryStringParameters) > 0 {
			q = url.Values{}
			for k, v := range req.QueryStringParameters {
				q.Set(k, v)
			}
		}
		hr := httpRequest{
			method: req.HTTPMethod, path: req.Path, query: q.Encode(),
			header: func(name string) []string { return headerValues(req.Headers, req.MultiValueHeaders, name) },
			body:   req.Body, base64: req.IsBase64Encoded,
		}
		var resp events.APIGatewayProxyResponse
		problem, replayed, err := serveHTTP(ctx, w, hr, &resp, func(ctx context.Context) (events.APIGatewayProxyResponse, error) {
			r, err := fn(ctx, req)
			return r, err
		}, func(r events.APIGatewayProxyResponse) int { return r.StatusCode })
		switch {
		case err != nil:
			return resp, err
		case problem != nil:
			return events.APIGatewayProxyResponse{StatusCode: problem.status, Headers: problem.headers, Body: problem.body}, nil
		case replayed:
			resp.Headers = withReplayed(resp.Headers)
		}
		return resp, nil
	}, nil
}

// HTTPAPI is [APIGateway] for API Gateway HTTP API events (payload format
// 2.0, also Lambda function URLs): the same rules, with the method, path
// and query of the 2.0 event.
func HTTPAPI(cfg Config, fn func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)) (func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), error) {
	w, err := newWrapper(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		hr := httpRequest{
			method: req.RequestContext.HTTP.Method, path: req.RawPath, query: req.RawQueryString,
			header: func(name string) []string { return headerValues(req.Headers, nil, name) },
			body:   req.Body, base64: req.IsBase64Encoded,
		}
		var resp events.APIGatewayV2HTTPResponse
		problem, replayed, err := serveHTTP(ctx, w, hr, &resp, func(ctx context.Context) (events.APIGatewayV2HTTPResponse, error) {
			return fn(ctx, req)
		}, func(r events.APIGatewayV2HTTPResponse) int { return r.StatusCode })
		switch {
		case err != nil:
			return resp, err
		case problem != nil:
			return events.APIGatewayV2HTTPResponse{StatusCode: problem.status, Headers: problem.headers, Body: problem.body}, nil
		case replayed:
			resp.Headers = withReplayed(resp.Headers)
		}
		return resp, nil
	}, nil
}

// httpRequest is what the wrapper reads of an API Gateway request.
type httpRequest struct {
	method, path, query string
	header              func(name string) []string
	body                string
	base64              bool
}

// problemAnswer is a problem response of the wrapper's own.
type problemAnswer struct {
	status  int
	headers map[string]string
	body    string
}

// serveHTTP runs one API Gateway request: it answers *resp (fn's response
// or the stored one, replayed), a problem of its own, or fn's error.
func serveHTTP[R any](ctx context.Context, w *wrapper, r httpRequest, resp *R, fn func(context.Context) (R, error), status func(R) int) (*problemAnswer, bool, error) {
	if !w.methods[asciiUpper(r.method)] {
		v, err := fn(ctx)
		*resp = v
		return nil, false, err
	}
	body := []byte(r.body)
	if r.base64 {
		b, err := base64.StdEncoding.DecodeString(r.body)
		if err != nil {
			return w.problem(retrysafe.ProblemBadRequestBody, "Bad request body", http.StatusBadRequest, "The request body is not valid base64.", 0), false, nil
		}
		body = b
	}

	var key string
	var ok bool
	if w.key != nil {
		k, found, err := w.eventKey(body)
		if err != nil {
			return w.keyProblem(err), false, nil
		}
		key, ok = k, found
	} else if values := r.header(retrysafe.HeaderKey); len(values) > 0 {
		if len(values) > 1 {
			return w.keyProblem(&retrysafe.KeyError{Reason: "send exactly one Idempotency-Key header"}), false, nil
		}
		k, err := retrysafe.ParseKey(values[0])
		if err != nil {
			return w.keyProblem(err), false, nil
		}
		key, ok = k, true
	}
	if !ok {
		if w.cfg.RequireKey {
			return w.problem(retrysafe.ProblemMissingKey, "Idempotency key required", http.StatusBadRequest,
				"This endpoint requires an idempotency key and the request carries none. Send it, the same on every retry.", 0), false, nil
		}
		v, err := fn(ctx)
		*resp = v
		return nil, false, err
	}

	scope := w.cfg.Scope
	if auth := r.header("Authorization"); len(auth) > 0 {
		scope += "/" + scopehash.Sum(strings.Join(auth, "\n"))
	}
	fp, err := w.payloadFingerprint("http", r.method, r.path, r.query, body)
	if err != nil {
		return w.problem(retrysafe.ProblemBadRequestBody, "Bad request body", http.StatusBadRequest, "The request body is not JSON, and this endpoint validates members of it.", 0), false, nil
	}
	v, replayed, err := run(ctx, w, scope, key, fp, func(ctx context.Context) (R, error) {
		v, err := fn(ctx)
		if err == nil && w.cfg.StoreStatus != nil && !w.cfg.StoreStatus(status(v)) {
			if op := retrysafe.OperationFromContext(ctx); op != nil {
				op.Release()
			}
		}
		return v, err
	})
	*resp = v
	if err == nil {
		return nil, replayed, nil
	}
	if p := w.refusal(err); p != nil {
		return p, false, nil
	}
	return nil, false, err
}

// refusal is the problem answer for an error of the wrapper's (nothing
// ran), or nil for the handler's own error.
func (w *wrapper) refusal(err error) *problemAnswer {
	var ip *retrysafe.InProgressError
	switch {
	case errors.Is(err, retrysafe.ErrMismatch):
		return w.problem(retrysafe.ProblemMismatch, "Idempotency key reused", http.StatusUnprocessableEntity,
			"This idempotency key was used with a different request. Use a new key for a new request.", 0)
	case errors.As(err, &ip) && ip.OutcomeUnknown:
		return w.problem(retrysafe.ProblemOutcomeUnknown, "Outcome unknown", http.StatusConflict,
			"The first attempt with this idempotency key ended without a result; it may or may not have taken effect. Retry later with the same key.", ip.RetryAfter)
	case errors.As(err, &ip):
		return w.problem(retrysafe.ProblemInProgress, "Request in progress", http.StatusConflict,
			"A request with this idempotency key is still being processed. Retry later with the same key to get its result.", ip.RetryAfter)
	case errors.Is(err, retrysafe.ErrInvalidKey):
		return w.keyProblem(err)
	case errors.Is(err, retrysafe.ErrStoreFull):
		return w.problem(retrysafe.ProblemStoreFull, "Store full", http.StatusServiceUnavailable,
			"The idempotency store has no room for new records; nothing ran.", time.Second)
	case errors.Is(err, retrysafe.ErrStoreUnavailable):
		return w.problem(retrysafe.ProblemStoreUnavailable, "Store unavailable", http.StatusServiceUnavailable,
			"The idempotency store could not be reached; nothing ran. Retry with the same key.", time.Second)
	}
	return nil
}

func (w *wrapper) keyProblem(err error) *problemAnswer {
	detail := "The idempotency key is invalid."
	var ke *retrysafe.KeyError
	if errors.As(err, &ke) {
		detail = "The idempotency key is invalid: " + ke.Reason + "."
	}
	return w.problem(retrysafe.ProblemInvalidKey, "Invalid idempotency key", http.StatusBadRequest, detail, 0)
}

func (w *wrapper) problem(slug, title string, status int, detail string, retryAfter time.Duration) *problemAnswer {
	body, _ := json.Marshal(&retrysafe.Problem{Type: retrysafe.DefaultProblemBase + slug, Title: title, Status: status, Detail: detail})
	h := map[string]string{"Content-Type": retrysafe.ContentTypeProblem, "Cache-Control": "no-store"}
	if retryAfter > 0 {
		h["Retry-After"] = strconv.Itoa(max(int((retryAfter+time.Second-1)/time.Second), 1))
	}
	return &problemAnswer{status: status, headers: h, body: string(body)}
}

// headerValues returns the values of the header name, matched in any
// case, from an event's multi-value header map or, when it has none, its
// single-value map (API Gateway fills both with the same headers). Names
// that differ only in case count together, their values sorted so that
// the answer does not depend on map order.
func headerValues(single map[string]string, multi map[string][]string, name string) []string {
	var out []string
	for k, v := range multi {
		if strings.EqualFold(k, name) {
			out = append(out, v...)
		}
	}
	if len(out) == 0 {
		for k, v := range single {
			if strings.EqualFold(k, name) {
				out = append(out, v)
			}
		}
	}
	if len(out) > 1 {
		slices.Sort(out)
	}
	return out
}

// withReplayed returns a copy of h with Idempotent-Replayed: true.
func withReplayed(h map[string]string) map[string]string {
	out := make(map[string]string, len(h)+1)
	for k, v := range h {
		out[k] = v
	}
	out[retrysafe.HeaderReplayed] = "true"
	return out
}
