package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe"
	"go.opentelemetry.io/otel/trace"
)

// Results of an upstream call, for metrics and logs.
const (
	upstreamResponse = "response" // the upstream answered (any status)
	upstreamNotSent  = "not_sent" // nothing was delivered: the key is released
	upstreamUnknown  = "unknown"  // the upstream may have received it: the key is kept
	upstreamCanceled = "canceled" // an unprotected request whose client went away
)

// Problem type slugs of the gateway's own answers, appended to the problem
// base URI.
const (
	// ProblemUpstreamUnreachable (502): the request was not delivered to
	// the upstream; nothing ran and the key was released.
	ProblemUpstreamUnreachable = "upstream-unreachable"
	// ProblemOutcomeUnknown (502 or 504): the upstream may have received
	// the request but no complete answer came back; the key stays locked
	// until its lease runs out.
	ProblemOutcomeUnknown = "upstream-outcome-unknown"
)

// newTransport returns the Transport used to reach the upstream.
//
// It ignores proxy environment variables (the upstream is normally a
// neighbour), keeps many idle connections to the one upstream host, bounds
// connecting by dialTimeout and waiting for response headers by
// responseTimeout.
func newTransport(dialTimeout, responseTimeout time.Duration) *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   dialTimeout,
		ResponseHeaderTimeout: responseTimeout,
		ExpectContinueTimeout: time.Second,
	}
}

// newProxy configures the ReverseProxy in front of upstream.
func (g *Gateway) newProxy(upstream *url.URL, transport http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
			setAttempt(pr.Out, retrysafe.OperationFromContext(pr.In.Context()))
			hideReplayable(pr.Out)
		},
		Transport:    &timedTransport{next: transport, metrics: g.metrics, tracing: g.tracing},
		BufferPool:   &bufferPool{},
		ErrorHandler: g.proxyError,
		ErrorLog:     slog.NewLogLogger(g.logger.Handler(), slog.LevelWarn),
	}
}

// HeaderAttempt is the request header that tells the upstream which
// attempt at a key it is serving: 1 on the first run, N on the N-th after
// N-1 takeovers of an expired lease. An attempt above 1 means an earlier
// one may have had its effect: the upstream checks its own state (or the
// provider's, with a key derived from the record) before acting again.
const HeaderAttempt = "Idempotency-Attempt"

// setAttempt sets out's Idempotency-Attempt to the attempt of op, the
// protected request's claimed record. The header is the gateway's to
// write: whatever a client sent in it is dropped, and a request that is
// not protected (no op) carries none.
func setAttempt(out *http.Request, op *retrysafe.Operation) {
	out.Header.Del(HeaderAttempt)
	if op != nil && op.Attempt() > 0 {
		out.Header.Set(HeaderAttempt, strconv.Itoa(op.Attempt()))
	}
}

// bufferPool reuses the 32 KiB buffers the ReverseProxy copies response
// bodies with, instead of allocating one per request.
type bufferPool struct{ pool sync.Pool }

func (b *bufferPool) Get() []byte {
	if p, ok := b.pool.Get().(*[]byte); ok {
		return *p
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.pool.Put(&buf) }

// hideReplayable keeps net/http's Transport from resending a request.
//
// The Transport treats a request whose header map holds "Idempotency-Key"
// (or "X-Idempotency-Key") as replayable: after some failures on a reused
// connection — including a failed read of the response after the request
// was written — it silently sends the request again. The upstream would then
// run the operation twice behind the gateway's back. The key is forwarded
// with a lower-case field name instead; header names are case-insensitive
// in HTTP (and always lower case in HTTP/2), so the upstream sees the same
// header and value. Safe methods are left alone.
func hideReplayable(out *http.Request) {
	switch out.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return
	}
	for _, name := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		if v, ok := out.Header[name]; ok {
			delete(out.Header, name)
			out.Header[lowerASCII(name)] = v
		}
	}
}

func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// timedTransport measures upstream calls, and traces them when tracing
// is on.
type timedTransport struct {
	next    http.RoundTripper
	metrics *Metrics
	tracing *tracing // nil: no tracing
}

func (t *timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var span trace.Span
	if t.tracing != nil {
		r, span = t.tracing.startUpstream(r)
	}
	start := time.Now()
	resp, err := t.next.RoundTrip(r)
	d := time.Since(start)
	info := infoFrom(r.Context())
	result := upstreamResponse
	switch {
	case err == nil:
	case clientGone(r, err):
		result = upstreamCanceled
	case notDelivered(info, err):
		result = upstreamNotSent
	default:
		result = upstreamUnknown
	}
	t.metrics.upstream(result, d)
	if span != nil {
		endUpstream(span, resp, err, result)
	}
	if info != nil {
		info.upstreamDuration = d
		info.upstreamResult = result
		if resp != nil {
			info.upstreamStatus = resp.StatusCode
		}
	}
	return resp, err
}

// clientGone reports whether an unprotected request failed because its
// client went away (a protected request's context is not cancelled by the
// client).
func clientGone(r *http.Request, err error) bool {
	return retrysafe.OperationFromContext(r.Context()) == nil &&
		errors.Is(err, context.Canceled) && r.Context().Err() != nil
}

// notDelivered reports whether a failed upstream call provably sent
// nothing: the Transport never got a connection for it, or err itself
// proves it (see [nothingSent]).
func notDelivered(info *requestInfo, err error) bool {
	return nothingSent(err) || (info != nil && !info.gotConn.Load())
}

// nothingSent reports whether err proves that the request never reached
// the upstream, so that no part of the operation can have run:
//
//   - a failed dial: connection refused, no route, dial timeout, DNS failure
//     (*net.OpError with Op "dial", which wraps a *net.DNSError for a
//     lookup failure);
//   - a failed TLS handshake with the upstream (the HTTP request is only
//     written after it).
//
// Everything else — a timeout while waiting for the response, a connection
// reset or closed after the request was written, a cancelled context — may
// come after the upstream read the request, so its outcome is unknown.
func nothingSent(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var (
		certErr  *tls.CertificateVerificationError
		unknownA x509.UnknownAuthorityError
		hostErr  x509.HostnameError
		alertErr tls.AlertError
		recErr   tls.RecordHeaderError
	)
	return errors.As(err, &certErr) || errors.As(err, &unknownA) || errors.As(err, &hostErr) ||
		errors.As(err, &alertErr) || errors.As(err, &recErr)
}

// isTimeout reports whether err is a timeout.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// proxyError is the ReverseProxy's ErrorHandler: the upstream produced no
// response. If nothing was delivered the operation did not run: the key is
// released and the answer is 502, so a retry runs it. Otherwise the outcome
// is unknown: the record is left processing until its lease runs out (never
// released early, so no retry can run the operation again while the first
// attempt may still be executing upstream) and the answer is 504 for a
// timeout, 502 otherwise.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	op := retrysafe.OperationFromContext(r.Context())
	info := infoFrom(r.Context())
	if info != nil {
		info.upstreamErr = err
	}
	if clientGone(r, err) {
		g.logger.DebugContext(r.Context(), "client went away before the upstream answered", "err", err)
		w.WriteHeader(http.StatusBadGateway) // nobody reads it
		return
	}
	if notDelivered(info, err) {
		if op != nil {
			op.Release()
		}
		g.logger.WarnContext(r.Context(), "upstream unreachable; nothing was sent", "err", err)
		retrysafe.WriteProblem(w, g.problem(info, ProblemUpstreamUnreachable, "Upstream unreachable", http.StatusBadGateway,
			"The gateway could not deliver the request to the upstream service, so nothing was processed. Retry with the same Idempotency-Key.",
			"true"), time.Second)
		return
	}
	status, what, cause := http.StatusBadGateway, "the connection failed before a complete response arrived", causeCutAfterSend
	if isTimeout(err) {
		status, what, cause = http.StatusGatewayTimeout, "the upstream did not answer in time", causeTimeout
	}
	if r.Context().Err() != nil && errors.Is(context.Cause(r.Context()), retrysafe.ErrLeaseLost) {
		what = "another request took over this key's lease"
	}
	var detail string
	var retryAfter time.Duration
	if op != nil {
		g.abandon(op, cause, err)
		rh := g.def
		if info != nil && info.route != nil {
			rh = info.route
		}
		retryAfter = rh.lease
		after := "Retry with the same key after that: if the first attempt stored no result, the operation runs again."
		switch {
		case rh.policy.ResolveURL != nil:
			after = "After that, a retry with the same key first asks the service whether the operation happened: if it did, its answer is replayed; if it did not, it runs again; if the service cannot tell, the key stays blocked."
		case rh.policy.OnUnknown == retrysafe.OnUnknownBlock:
			after = "It never runs again on its own: retries with the same key get 409 until an operator resolves the key."
		}
		detail = fmt.Sprintf("The upstream service may have received the request, but %s, so its outcome is unknown. "+
			"The Idempotency-Key stays locked for up to %s (its lease) so that the operation never runs twice at once; "+
			"until then a retry gets 409. %s",
			what, rh.lease, after)
	} else {
		detail = fmt.Sprintf("The upstream service may have received the request, but %s, so its outcome is unknown.", what)
	}
	g.logger.WarnContext(r.Context(), "upstream outcome unknown", "err", err, "status", status)
	// Stripe-Should-Retry false: an automatic retry only meets 409 while
	// the lease holds, and after it may run the operation a second time;
	// the caller has to decide.
	retrysafe.WriteProblem(w, g.problem(info, ProblemOutcomeUnknown, "Outcome unknown", status, detail, "false"), retryAfter)
}

// problem returns one of the gateway's own problem answers in the error
// dialect of the request's route; shouldRetry is its Stripe-Should-Retry
// in the stripe dialect.
func (g *Gateway) problem(info *requestInfo, slug, title string, status int, detail, shouldRetry string) *retrysafe.Problem {
	p := &retrysafe.Problem{Type: g.problemBase + slug, Title: title, Status: status, Detail: detail}
	rh := g.def
	if info != nil && info.route != nil {
		rh = info.route
	}
	if rh.policy.ErrorDialect == retrysafe.DialectStripe {
		p.Error = &retrysafe.StripeError{Type: retrysafe.StripeAPIError, Code: slug, Message: detail, ShouldRetry: shouldRetry}
	}
	return p
}
