package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe"
	"go.opentelemetry.io/otel/trace"
)

// requestInfo collects what happened to one request, for its log line. It
// travels in the request context; the middleware runs the proxy on the
// request's own goroutine, so it needs no lock.
type requestInfo struct {
	route     *routeHandler
	req       *http.Request        // the request as it came: the resolve URL gets its headers
	outcome   retrysafe.Outcome    // the middleware's account; "" when it gave none
	forwarded bool                 // the request reached the proxy
	op        *retrysafe.Operation // non-nil when it ran as a claimed operation

	gotConn atomic.Bool // the Transport got a connection for the request

	upstreamStatus   int
	upstreamResult   string
	upstreamDuration time.Duration
	upstreamErr      error
}

type infoKey struct{}

func infoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(infoKey{}).(*requestInfo)
	return info
}

// statusWriter records the status sent to the client. It passes everything
// else through (Flush, Hijack and deadlines via Unwrap and
// http.ResponseController), so streaming and upgrades of unprotected
// requests keep working.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Flush sends buffered data to the client, for streaming responses.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Outcomes the gateway logs for requests the middleware did not account
// for, besides [retrysafe.Outcome]'s.
const (
	outcomeUnprotected = "unprotected" // method or route not protected
	outcomeNoKey       = "no_key"      // protected method without a key, key optional: passed through
	outcomeClientGone  = "client_gone" // the client went away before an answer
	outcomeOther       = "other"
)

// requestObserver gives the metrics each protected request's outcome and
// records it in the request's requestInfo for its log line, so that the
// log and the metrics read the same account.
type requestObserver struct{ *Metrics }

// RequestOutcome implements [retrysafe.RequestObserver].
func (o requestObserver) RequestOutcome(r *http.Request, oc retrysafe.Outcome, d time.Duration) {
	if info := infoFrom(r.Context()); info != nil {
		info.outcome = oc
	}
	o.Outcome(oc, d)
}

// logOutcome is the outcome logged for a request: the middleware's when it
// reported one, else what the gateway saw.
func logOutcome(r *http.Request, rh *routeHandler, info *requestInfo, status int) string {
	switch {
	case info.outcome != "":
		return string(info.outcome)
	case !rh.policy.protects(r.Method):
		return outcomeUnprotected
	case info.forwarded:
		return outcomeNoKey
	case status == 0:
		return outcomeClientGone
	}
	return outcomeOther
}

// logRequest writes one line per request: at info level for protected
// methods, at debug level for the others. It never logs the key's value,
// headers or bodies.
func (g *Gateway) logRequest(r *http.Request, rh *routeHandler, info *requestInfo, sw *statusWriter, d time.Duration) {
	level := slog.LevelInfo
	if !rh.policy.protects(r.Method) {
		level = slog.LevelDebug
	}
	ctx := r.Context()
	if !g.logger.Enabled(ctx, level) {
		return
	}
	o := logOutcome(r, rh, info, sw.status)
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs,
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
	)
	if rh.pattern != "" {
		attrs = append(attrs, slog.String("route", rh.pattern))
	}
	attrs = append(attrs,
		slog.Int("status", sw.status),
		slog.String("outcome", o),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
	)
	if info.op != nil && info.op.Attempt() > 1 {
		attrs = append(attrs, slog.Int("attempt", info.op.Attempt()))
	}
	if info.upstreamResult != "" {
		attrs = append(attrs,
			slog.String("upstream", info.upstreamResult),
			slog.Float64("upstream_ms", float64(info.upstreamDuration.Microseconds())/1000),
		)
		if info.upstreamStatus != 0 {
			attrs = append(attrs, slog.Int("upstream_status", info.upstreamStatus))
		}
	}
	if info.upstreamErr != nil {
		attrs = append(attrs, slog.String("upstream_error", info.upstreamErr.Error()))
	}
	if g.tracing != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
		}
	}
	g.logger.LogAttrs(ctx, level, "request", attrs...)
}
