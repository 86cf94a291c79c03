package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe"
)

// requestInfo collects what happened to one request, for its log line. It
// travels in the request context; the middleware runs the proxy on the
// request's own goroutine, so it needs no lock.
type requestInfo struct {
	route     *routeHandler
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

// Outcomes the gateway logs besides [retrysafe.Outcome]'s.
const (
	outcomeUnprotected = "unprotected" // method or route not protected
	outcomeNoKey       = "no_key"      // protected method without a key, key optional: passed through
	outcomeClientGone  = "client_gone" // the client went away before an answer
	outcomeOther       = "other"
)

// outcome classifies a request for the log. The engine reports the same
// outcomes to the metrics through the Observer; here they are derived from
// what the request went through, since the Observer carries no request.
func outcome(r *http.Request, rh *routeHandler, info *requestInfo, status int, h http.Header) string {
	if !rh.policy.protects(r.Method) {
		return outcomeUnprotected
	}
	hasKey := len(r.Header.Values(retrysafe.HeaderKey)) > 0
	if info.forwarded {
		switch {
		case info.op == nil && hasKey:
			return string(retrysafe.OutcomeFailOpen)
		case info.op == nil:
			return outcomeNoKey
		}
		switch info.op.Disposition() {
		case retrysafe.DispositionRelease:
			return string(retrysafe.OutcomeReleased)
		case retrysafe.DispositionAbandon:
			return string(retrysafe.OutcomeAbandoned)
		}
		if info.upstreamStatus != 0 && !rh.policy.stores(info.upstreamStatus) {
			return string(retrysafe.OutcomeReleased)
		}
		return string(retrysafe.OutcomeNew)
	}
	if h.Get(retrysafe.HeaderReplayed) == "true" {
		return string(retrysafe.OutcomeReplayed)
	}
	switch status {
	case 0:
		return outcomeClientGone
	case http.StatusConflict:
		return string(retrysafe.OutcomeConflict)
	case http.StatusUnprocessableEntity:
		return string(retrysafe.OutcomeMismatch)
	case http.StatusBadRequest:
		if hasKey {
			return string(retrysafe.OutcomeInvalidKey)
		}
		return string(retrysafe.OutcomeMissingKey)
	case http.StatusRequestEntityTooLarge:
		return string(retrysafe.OutcomeTooLarge)
	case http.StatusServiceUnavailable:
		return string(retrysafe.OutcomeStoreError)
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
	o := outcome(r, rh, info, sw.status, sw.Header())
	attrs := make([]slog.Attr, 0, 12)
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
	g.logger.LogAttrs(ctx, level, "request", attrs...)
}
