package gateway

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/retrysafe/retrysafe"
	retrysafeotel "github.com/retrysafe/retrysafe/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// tracing is the gateway's OpenTelemetry tracing; nil when
// Config.TracerProvider is nil.
type tracing struct {
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	observer *retrysafeotel.Observer // the middleware's Observer: store spans, request attributes, metrics
}

func newTracing(cfg *Config, metrics *Metrics) *tracing {
	if cfg.TracerProvider == nil {
		return nil
	}
	prop := cfg.Propagator
	if prop == nil {
		prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return &tracing{
		tracer: cfg.TracerProvider.Tracer(retrysafeotel.ScopeName),
		prop:   prop,
		observer: retrysafeotel.NewObserver(retrysafeotel.Config{
			TracerProvider:   cfg.TracerProvider,
			Propagator:       prop,
			Store:            cfg.StoreName,
			Next:             requestObserver{metrics},
			EnrichActiveSpan: true, // the server span is the request's span
		}),
	}
}

// startServer starts the server span of r, in the trace its traceparent
// names (if any). The span is named after the method and the route.
func (t *tracing) startServer(r *http.Request, rh *routeHandler) (context.Context, trace.Span) {
	ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, retrysafeotel.MethodAttrs(r.Method)...)
	method := attrs[0].Value.AsString()
	if method == "_OTHER" {
		method = "HTTP"
	}
	name := method
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	attrs = append(attrs, semconv.URLPath(r.URL.Path), semconv.URLScheme(scheme),
		semconv.NetworkProtocolVersion(protocolVersion(r)))
	if rh.pattern != "" {
		route := retrysafeotel.RoutePath(rh.pattern)
		attrs = append(attrs, semconv.HTTPRoute(route))
		name += " " + route
	}
	if host, port := hostPort(r.Host); host != "" {
		attrs = append(attrs, semconv.ServerAddress(host))
		if port > 0 {
			attrs = append(attrs, semconv.ServerPort(port))
		}
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// endServer ends the server span with the status answered (0: none, the
// client went away first).
func endServer(span trace.Span, info *requestInfo, status int) {
	if status != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	}
	if info.op != nil && info.op.Attempt() > 0 {
		span.SetAttributes(retrysafeotel.AttrAttempt.Int(info.op.Attempt()))
	}
	if status >= 500 {
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// startUpstream starts the client span of an upstream call and returns
// the request to send, carrying the span's context in its headers.
func (t *tracing) startUpstream(r *http.Request) (*http.Request, trace.Span) {
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, retrysafeotel.MethodAttrs(r.Method)...)
	name := attrs[0].Value.AsString()
	if name == "_OTHER" {
		name = "HTTP"
	}
	u := *r.URL
	u.RawQuery, u.ForceQuery, u.Fragment, u.User = "", false, "", nil // the query may hold secrets
	attrs = append(attrs, semconv.URLFull(u.String()))
	if host, port := hostPort(r.URL.Host); host != "" {
		if port == 0 && r.URL.Scheme == "https" {
			port = 443
		} else if port == 0 {
			port = 80
		}
		attrs = append(attrs, semconv.ServerAddress(host), semconv.ServerPort(port))
	}
	ctx, span := t.tracer.Start(r.Context(), name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	// A RoundTripper must not change the request it is given: the
	// headers go on a copy.
	out := r.Clone(ctx)
	t.prop.Inject(ctx, propagation.HeaderCarrier(out.Header))
	return out, span
}

// endUpstream ends an upstream call's span with its result.
func endUpstream(span trace.Span, resp *http.Response, err error, result string) {
	span.SetAttributes(retrysafeotel.AttrUpstreamResult.String(result))
	switch {
	case err != nil:
		class := retrysafeotel.ErrorType(err)
		if isTimeout(err) {
			class = "timeout"
		}
		span.SetAttributes(semconv.ErrorTypeKey.String(class))
		span.SetStatus(codes.Error, result)
	case resp != nil:
		span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
		if resp.StatusCode >= 400 {
			span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(resp.StatusCode)))
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
}

// protocolVersion is network.protocol.version: "1.1", "2", …
func protocolVersion(r *http.Request) string {
	if r.ProtoMinor == 0 && r.ProtoMajor > 1 {
		return strconv.Itoa(r.ProtoMajor)
	}
	return strconv.Itoa(r.ProtoMajor) + "." + strconv.Itoa(r.ProtoMinor)
}

// hostPort splits a Host header or URL host; port 0 when absent.
func hostPort(hostport string) (string, int) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return strings.Trim(hostport, "[]"), 0
	}
	port, _ := strconv.Atoi(p)
	return host, port
}

// observer returns the Observer of the middleware: the tracing's,
// which passes every event on to the metrics, or the metrics alone.
func (g *Gateway) observer() retrysafe.Observer {
	if g.tracing != nil {
		return g.tracing.observer
	}
	return requestObserver{g.metrics}
}
