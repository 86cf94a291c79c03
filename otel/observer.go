package retrysafeotel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/httpmethod"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of retrysafe's spans: the name
// of the Tracer they are made with.
const ScopeName = "github.com/retrysafe/retrysafe/otel"

// Attribute keys of retrysafe's own span attributes. HTTP attributes use
// the OpenTelemetry semantic conventions' keys (http.request.method,
// http.route, error.type, db.system.name, …).
const (
	// AttrOutcome is how a protected request or Do call ended: one of
	// retrysafe.Outcome's values (new, replayed, conflict, mismatch, …).
	AttrOutcome attribute.Key = "retrysafe.outcome"
	// AttrReplayed is true when the answer was a stored result.
	AttrReplayed attribute.Key = "retrysafe.replayed"
	// AttrAttempt is the attempt of the record claimed or found: 1 for a
	// first execution, n after n-1 takeovers of expired leases.
	AttrAttempt attribute.Key = "retrysafe.attempt"
	// AttrStore names the store ("memory", "sqlite", "postgres", "redis",
	// or what Config.Store says).
	AttrStore attribute.Key = "retrysafe.store"
	// AttrKeyHash is the first 16 hex digits of the SHA-256 of the scope
	// and the idempotency key: equal for every retry of one operation,
	// never the key itself.
	AttrKeyHash attribute.Key = "retrysafe.key.hash"
	// AttrOperation is the store operation of a store span: claim, get,
	// extend, complete or release.
	AttrOperation attribute.Key = "retrysafe.store.operation"
	// AttrClaimed is true on a claim span that claimed the record.
	AttrClaimed attribute.Key = "retrysafe.claimed"
	// AttrRecordState is the state of the record a claim or get found:
	// processing or completed.
	AttrRecordState attribute.Key = "retrysafe.record.state"
	// AttrResult is what a store or wait span ended with: for a store
	// call ok, not_found, lease_lost or error; for a wait completed (the
	// original's result is replayed), claim_again (it was released or its
	// lease ran out), in_progress (the wait timed out), mismatch or error.
	AttrResult attribute.Key = "retrysafe.result"
	// AttrUpstreamResult is what became of the gateway's upstream call:
	// response (the upstream answered, any status), not_sent (nothing was
	// delivered; the key is released), unknown (the upstream may have
	// received the request; the key is kept until its lease ends) or
	// canceled (an unprotected request whose client went away).
	AttrUpstreamResult attribute.Key = "retrysafe.upstream.result"
)

// Span names.
const (
	// SpanRequest is the name of a protected request's span when the
	// Observer makes one (see Config.EnrichActiveSpan).
	SpanRequest = "retrysafe.request"
	// SpanDo is the name of a Do call's span.
	SpanDo = "retrysafe.do"
	// SpanWait is the name of the span of a duplicate waiting for the
	// original.
	SpanWait = "retrysafe.wait"
	// Store calls are named "retrysafe." and the operation:
	// retrysafe.claim, retrysafe.get, retrysafe.extend,
	// retrysafe.complete, retrysafe.release.
)

// Config configures an [Observer]. The zero Config traces with the global
// TracerProvider (otel.GetTracerProvider) and W3C Trace Context.
type Config struct {
	// TracerProvider makes the spans; nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator reads an incoming request's trace context (traceparent)
	// when its context carries no span; nil means W3C Trace Context and
	// Baggage.
	Propagator propagation.TextMapPropagator
	// Store names the store in the retrysafe.store attribute ("postgres",
	// "redis", "sqlite", "memory", …); "" leaves the attribute out. The
	// names postgres, redis, sqlite, mysql and dynamodb also set db.system.name on
	// store spans.
	Store string
	// Next receives every Observer event too, such as the gateway's
	// Prometheus metrics; nil means none. When it is a
	// retrysafe.RequestObserver, it gets RequestOutcome.
	Next retrysafe.Observer
	// EnrichActiveSpan puts a protected request's attributes on the span
	// active in the request's context (a server span that the caller
	// started, as the gateway does) instead of a span of its own. Store
	// spans are children of that span either way. With it, a request
	// whose context has no recording span gets no request attributes.
	EnrichActiveSpan bool
}

// Observer is a retrysafe.Tracer (and a retrysafe.RequestObserver) that
// traces the middleware and Do with OpenTelemetry spans. Give it to
// retrysafe.Config.Observer or retrysafe.DoConfig.Observer.
//
// A protected request gets a span, retrysafe.request, that continues the
// trace of its context, or else the one its traceparent header names. Its
// attributes say the outcome (retrysafe.outcome, retrysafe.replayed), the
// attempt, the store, a hash of the key (retrysafe.key.hash),
// http.request.method and http.route (from http.Request.Pattern, when a
// ServeMux routed the request before the middleware). A Do call gets a
// retrysafe.do span with the same retrysafe attributes. Each store call
// is a child span (retrysafe.claim, retrysafe.get, retrysafe.extend,
// retrysafe.complete, retrysafe.release) with its result, and a duplicate
// waiting for the original makes a retrysafe.wait span holding the gets
// it polled with. The handler or function runs with the request's (or
// Do call's) span in its context, so its own spans are its children.
//
// No span holds the key, the scope, a header or a body. A failed store
// call's span has status Error and error.type (a class such as
// store_unavailable or timeout, or the error's Go type), never the error
// message, which may quote the key.
type Observer struct {
	tracer     trace.Tracer
	prop       propagation.TextMapPropagator
	next       retrysafe.Observer
	nextReq    retrysafe.RequestObserver // next, when it wants requests
	store      []attribute.KeyValue      // retrysafe.store, on every span
	storeCalls []attribute.KeyValue      // store, plus db.system.name
	enrich     bool
}

var (
	_ retrysafe.Tracer          = (*Observer)(nil)
	_ retrysafe.RequestObserver = (*Observer)(nil)
)

// NewObserver returns an Observer for cfg.
func NewObserver(cfg Config) *Observer {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	prop := cfg.Propagator
	if prop == nil {
		prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	o := &Observer{
		tracer: tp.Tracer(ScopeName),
		prop:   prop,
		next:   cfg.Next,
		enrich: cfg.EnrichActiveSpan,
	}
	if o.next == nil {
		o.next = nopObserver{}
	}
	o.nextReq, _ = o.next.(retrysafe.RequestObserver)
	if cfg.Store != "" {
		o.store = []attribute.KeyValue{AttrStore.String(cfg.Store)}
	}
	o.storeCalls = o.store
	if db, ok := dbSystems[strings.ToLower(cfg.Store)]; ok {
		o.storeCalls = append(append([]attribute.KeyValue(nil), o.store...), db)
	}
	return o
}

var dbSystems = map[string]attribute.KeyValue{
	"postgres":   semconv.DBSystemNamePostgreSQL,
	"postgresql": semconv.DBSystemNamePostgreSQL,
	"redis":      semconv.DBSystemNameRedis,
	"sqlite":     semconv.DBSystemNameSQLite,
	"mysql":      semconv.DBSystemNameMySQL,
	"dynamodb":   semconv.DBSystemNameAWSDynamoDB,
}

// Outcome implements retrysafe.Observer: it passes the event to
// Config.Next (Do's span gets the outcome from EndStep).
func (o *Observer) Outcome(oc retrysafe.Outcome, d time.Duration) { o.next.Outcome(oc, d) }

// StoreCall implements retrysafe.Observer: it passes the event to
// Config.Next (store spans are made by StartStep and EndStep).
func (o *Observer) StoreCall(op string, d time.Duration, err error) { o.next.StoreCall(op, d, err) }

// InFlight implements retrysafe.Observer: it passes the event to
// Config.Next.
func (o *Observer) InFlight(delta int) { o.next.InFlight(delta) }

// RequestOutcome implements retrysafe.RequestObserver: it puts the
// outcome on the request's span and passes the event to Config.Next.
func (o *Observer) RequestOutcome(r *http.Request, oc retrysafe.Outcome, d time.Duration) {
	if rs, ok := r.Context().Value(requestKey{}).(*requestSpan); ok {
		rs.span.SetAttributes(outcomeAttrs(oc)...)
	}
	if o.nextReq != nil {
		o.nextReq.RequestOutcome(r, oc, d)
		return
	}
	o.next.Outcome(oc, d)
}

// requestSpan is the span of a protected request or Do call, in the
// context of its steps: a claim puts the attempt and the key's hash on it.
type requestSpan struct {
	span trace.Span
	own  bool // the Observer started it (and ends it)
}

type requestKey struct{}

// StartStep implements retrysafe.Tracer: it starts the step's span.
func (o *Observer) StartStep(ctx context.Context, info retrysafe.StepInfo) context.Context {
	switch info.Step {
	case retrysafe.StepRequest:
		return o.startRequest(ctx, info.Request)
	case retrysafe.StepDo:
		ctx, span := o.tracer.Start(ctx, SpanDo, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(o.store...))
		return context.WithValue(ctx, requestKey{}, &requestSpan{span: span, own: true})
	case retrysafe.StepWait:
		ctx, _ = o.tracer.Start(ctx, SpanWait, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(o.store...))
		return ctx
	}
	ctx, span := o.tracer.Start(ctx, "retrysafe."+string(info.Step), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(o.storeCalls...))
	if span.IsRecording() {
		span.SetAttributes(AttrOperation.String(string(info.Step)))
	}
	return ctx
}

// startRequest starts a protected request's span, or finds the active
// one (EnrichActiveSpan).
func (o *Observer) startRequest(ctx context.Context, r *http.Request) context.Context {
	if o.enrich {
		span := trace.SpanFromContext(ctx)
		if !span.IsRecording() {
			return ctx
		}
		span.SetAttributes(o.store...)
		return context.WithValue(ctx, requestKey{}, &requestSpan{span: span})
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = o.prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, o.store...)
	attrs = append(attrs, MethodAttrs(r.Method)...)
	ctx, span := o.tracer.Start(ctx, SpanRequest, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, requestKey{}, &requestSpan{span: span, own: true})
}

// EndStep implements retrysafe.Tracer: it puts what the step found on its
// span and ends it.
func (o *Observer) EndStep(ctx context.Context, info retrysafe.StepInfo) {
	switch info.Step {
	case retrysafe.StepRequest, retrysafe.StepDo:
		rs, ok := ctx.Value(requestKey{}).(*requestSpan)
		if !ok {
			return
		}
		if info.Outcome != "" {
			rs.span.SetAttributes(outcomeAttrs(info.Outcome)...)
			if rs.own && info.Outcome == retrysafe.OutcomeStoreError {
				rs.span.SetStatus(codes.Error, string(info.Outcome))
			}
		}
		if info.Request != nil && info.Request.Pattern != "" && rs.own {
			rs.span.SetAttributes(semconv.HTTPRoute(RoutePath(info.Request.Pattern)))
		}
		if rs.own {
			rs.span.End()
		}
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		span.End()
		return
	}
	switch info.Step {
	case retrysafe.StepWait:
		span.SetAttributes(AttrResult.String(waitResult(info)))
		if info.State != "" {
			span.SetAttributes(AttrAttempt.Int(info.Attempt))
		}
		if err := info.Err; err != nil && !errors.Is(err, retrysafe.ErrInProgress) && !errors.Is(err, retrysafe.ErrMismatch) {
			setError(span, err)
		}
	default:
		result := "ok"
		switch err := info.Err; {
		case err == nil:
		case errors.Is(err, retrysafe.ErrNotFound):
			result = "not_found"
		case errors.Is(err, retrysafe.ErrLeaseLost):
			result = "lease_lost"
		default:
			result = "error"
			setError(span, err)
		}
		span.SetAttributes(AttrResult.String(result))
		if info.State != "" {
			span.SetAttributes(AttrRecordState.String(string(info.State)), AttrAttempt.Int(info.Attempt))
		}
		if info.Step == retrysafe.StepClaim && info.Err == nil {
			span.SetAttributes(AttrClaimed.Bool(info.Claimed))
			if rs, ok := ctx.Value(requestKey{}).(*requestSpan); ok {
				rs.span.SetAttributes(AttrAttempt.Int(info.Attempt), AttrKeyHash.String(KeyHash(info.Scope, info.Key)))
			}
		}
	}
	span.End()
}

// waitResult names how a wait ended.
func waitResult(info retrysafe.StepInfo) string {
	switch err := info.Err; {
	case err == nil && info.State == retrysafe.StateCompleted:
		return "completed"
	case err == nil:
		return "claim_again"
	case errors.Is(err, retrysafe.ErrInProgress):
		return "in_progress"
	case errors.Is(err, retrysafe.ErrMismatch):
		return "mismatch"
	}
	return "error"
}

// setError marks span failed with err's class, never its message.
func setError(span trace.Span, err error) {
	class := ErrorType(err)
	span.SetStatus(codes.Error, class)
	span.SetAttributes(semconv.ErrorTypeKey.String(class))
}

// ErrorType classifies err for the error.type attribute without its
// message (which may quote a key or a value): timeout, canceled,
// store_unavailable, or err's Go type.
func ErrorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, retrysafe.ErrStoreUnavailable):
		return "store_unavailable"
	}
	return fmt.Sprintf("%T", err)
}

func outcomeAttrs(oc retrysafe.Outcome) []attribute.KeyValue {
	return []attribute.KeyValue{AttrOutcome.String(string(oc)), AttrReplayed.Bool(oc == retrysafe.OutcomeReplayed)}
}

// KeyHash returns the value of the retrysafe.key.hash attribute for a
// record: the first 16 hex digits of the SHA-256 of scope, a zero byte
// and key. Retries of one operation share it; it does not reveal the key.
func KeyHash(scope, key string) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// MethodAttrs returns the http.request.method attribute of method, as
// the semantic conventions want it: a known method in upper case, any
// other as _OTHER with http.request.method_original.
func MethodAttrs(method string) []attribute.KeyValue {
	m := httpmethod.Canonical(method)
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		if m == method {
			return []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(m)}
		}
		return []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(m), semconv.HTTPRequestMethodOriginal(method)}
	}
	return []attribute.KeyValue{semconv.HTTPRequestMethodKey.String("_OTHER"), semconv.HTTPRequestMethodOriginal(method)}
}

// RoutePath returns the path of a ServeMux pattern ("POST /orders/{id}"
// gives "/orders/{id}"; a host in the pattern is dropped), the form of
// http.route.
func RoutePath(pattern string) string {
	p := strings.TrimSpace(pattern)
	if i := strings.IndexAny(p, " \t"); i >= 0 {
		p = strings.TrimSpace(p[i+1:])
	}
	if i := strings.IndexByte(p, '/'); i > 0 {
		p = p[i:] // drop a host
	}
	return p
}

type nopObserver struct{}

func (nopObserver) Outcome(retrysafe.Outcome, time.Duration) {}
func (nopObserver) StoreCall(string, time.Duration, error)   {}
func (nopObserver) InFlight(int)                             {}
