package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	retrysafeotel "github.com/retrysafe/retrysafe/otel"
	"github.com/retrysafe/retrysafe/store/memory"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
)

var clientTraceparent = "00-" + clientTraceID + "-" + clientSpanID + "-01"

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func spansNamed(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func spansOfKind(spans []sdktrace.ReadOnlySpan, kind trace.SpanKind) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanKind() == kind {
			out = append(out, s)
		}
	}
	return out
}

func checkAttrs(t *testing.T, what string, s sdktrace.ReadOnlySpan, want map[attribute.Key]attribute.Value) {
	t.Helper()
	got := spanAttrs(s)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k].Emit(), v.Emit())
		}
	}
}

// TestTracing checks the gateway's spans for a request that a client
// traced, and for its retry: the server span continues the client's
// trace and carries the outcome; the store calls and the upstream call
// are its children; the upstream receives a traceparent naming the
// upstream span, in the client's trace; the retry is replayed without an
// upstream span; the log lines carry the trace id; no span holds the key.
func TestTracing(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	up := newUpstream(t)
	store := memory.New(memory.Config{})
	t.Cleanup(func() { store.Close() })
	var logs syncBuffer
	gw := startGateway(t, gateway.Config{
		Upstream: mustURL(t, up.URL), Store: store, Defaults: gateway.DefaultPolicy(),
		Routes:         []gateway.Route{{Pattern: "PATCH /payments/{id}", Policy: gateway.DefaultPolicy()}},
		TracerProvider: tp, StoreName: "memory",
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	key := "secret-" + newKey()

	first := send(t, gw.URL, "PATCH", "/payments/7", key, `{"amount":100}`, "traceparent", clientTraceparent, "Authorization", "Bearer tok")
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %s", first)
	}
	var spans []sdktrace.ReadOnlySpan
	eventually(t, 5*time.Second, "the server span", func() bool {
		spans = sr.Ended()
		return len(spansOfKind(spans, trace.SpanKindServer)) == 1
	})
	server := spansOfKind(spans, trace.SpanKindServer)[0]
	if server.Name() != "PATCH /payments/{id}" {
		t.Errorf("server span named %q, want PATCH /payments/{id}", server.Name())
	}
	if p := server.Parent(); p.TraceID().String() != clientTraceID || p.SpanID().String() != clientSpanID || !p.IsRemote() {
		t.Errorf("server span's parent %s/%s, want the client's span %s/%s", p.TraceID(), p.SpanID(), clientTraceID, clientSpanID)
	}
	checkAttrs(t, "server span", server, map[attribute.Key]attribute.Value{
		"http.request.method":            attribute.StringValue("PATCH"),
		"http.route":                     attribute.StringValue("/payments/{id}"),
		"http.response.status_code":      attribute.IntValue(201),
		"url.path":                       attribute.StringValue("/payments/7"),
		retrysafeotel.AttrOutcome:        attribute.StringValue("new"),
		retrysafeotel.AttrReplayed:       attribute.BoolValue(false),
		retrysafeotel.AttrAttempt:        attribute.IntValue(1),
		retrysafeotel.AttrStore:          attribute.StringValue("memory"),
		retrysafeotel.AttrKeyHash:        attribute.StringValue(retrysafeotel.KeyHash(scopehash.Sum("Bearer tok"), key)),
		retrysafeotel.AttrUpstreamResult: attribute.Value{}, // on the upstream span, not here
	})
	clients := spansOfKind(spans, trace.SpanKindClient)
	if len(clients) != 1 {
		t.Fatalf("%d client spans, want 1 (the upstream call)", len(clients))
	}
	upstream := clients[0]
	checkAttrs(t, "upstream span", upstream, map[attribute.Key]attribute.Value{
		"http.request.method":            attribute.StringValue("PATCH"),
		"http.response.status_code":      attribute.IntValue(201),
		"url.full":                       attribute.StringValue(up.URL + "/payments/7"),
		retrysafeotel.AttrUpstreamResult: attribute.StringValue("response"),
	})
	for _, s := range append([]sdktrace.ReadOnlySpan{upstream}, append(spansNamed(spans, "retrysafe.claim"), spansNamed(spans, "retrysafe.complete")...)...) {
		if s.Parent().SpanID() != server.SpanContext().SpanID() || s.SpanContext().TraceID() != server.SpanContext().TraceID() {
			t.Errorf("span %s is not a child of the server span", s.Name())
		}
	}
	if n, m := len(spansNamed(spans, "retrysafe.claim")), len(spansNamed(spans, "retrysafe.complete")); n != 1 || m != 1 {
		t.Errorf("%d claim and %d complete spans, want 1 each", n, m)
	}
	got := up.lastSeen().Header.Get("traceparent")
	want := fmt.Sprintf("00-%s-%s-01", clientTraceID, upstream.SpanContext().SpanID())
	if got != want {
		t.Errorf("upstream received traceparent %q, want %q (the client's trace, the upstream span)", got, want)
	}

	second := send(t, gw.URL, "PATCH", "/payments/7", key, `{"amount":100}`, "traceparent", clientTraceparent, "Authorization", "Bearer tok")
	if second.Header.Get(retrysafe.HeaderReplayed) != "true" || up.calls.Load() != 1 {
		t.Fatalf("the retry was not replayed: %s, %d upstream calls", second, up.calls.Load())
	}
	eventually(t, 5*time.Second, "the retry's server span", func() bool {
		spans = sr.Ended()
		return len(spansOfKind(spans, trace.SpanKindServer)) == 2
	})
	replay := spansOfKind(spans, trace.SpanKindServer)[1]
	checkAttrs(t, "replay's server span", replay, map[attribute.Key]attribute.Value{
		retrysafeotel.AttrOutcome:   attribute.StringValue("replayed"),
		retrysafeotel.AttrReplayed:  attribute.BoolValue(true),
		"http.response.status_code": attribute.IntValue(201),
	})
	if n := len(spansOfKind(spans, trace.SpanKindClient)); n != 1 {
		t.Errorf("%d upstream spans after the replay, want still 1", n)
	}

	var traced int
	for _, line := range logs.lines(t) {
		if line["msg"] == "request" {
			traced++
			if line["trace_id"] != clientTraceID || line["span_id"] == "" {
				t.Errorf("request log line without the client's trace id: %v", line)
			}
		}
	}
	if traced != 2 {
		t.Errorf("%d request log lines, want 2", traced)
	}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, key) || strings.Contains(v, "Bearer tok") || strings.Contains(v, "amount") {
				t.Errorf("span %s attribute %s = %q holds the key, a credential or the body", s.Name(), kv.Key, v)
			}
		}
		if strings.Contains(s.Status().Description, key) {
			t.Errorf("span %s status holds the key", s.Name())
		}
	}
}

// TestTracingUpstreamUnreachable checks the spans of a request the
// gateway could not deliver: the upstream span failed with not_sent, the
// server span answered 502 with an error status, the key was released.
func TestTracingUpstreamUnreachable(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	store := memory.New(memory.Config{})
	t.Cleanup(func() { store.Close() })
	gw := startGateway(t, gateway.Config{
		Upstream: mustURL(t, "http://"+freeAddr(t)), Store: store, Defaults: gateway.DefaultPolicy(),
		TracerProvider: tp,
	})
	if r := send(t, gw.URL, "POST", "/payments", newKey(), `{}`); r.Status != http.StatusBadGateway {
		t.Fatalf("status %s, want 502", r)
	}
	var spans []sdktrace.ReadOnlySpan
	eventually(t, 5*time.Second, "the server span", func() bool {
		spans = sr.Ended()
		return len(spansOfKind(spans, trace.SpanKindServer)) == 1
	})
	server := spansOfKind(spans, trace.SpanKindServer)[0]
	if server.Name() != "POST" || server.Status().Code != codes.Error || server.Parent().IsValid() {
		t.Errorf("server span %q status %v parent %v; want POST, Error, a root span", server.Name(), server.Status(), server.Parent())
	}
	checkAttrs(t, "server span", server, map[attribute.Key]attribute.Value{
		"http.response.status_code": attribute.IntValue(502),
		retrysafeotel.AttrOutcome:   attribute.StringValue("released"),
	})
	up := spansOfKind(spans, trace.SpanKindClient)
	if len(up) != 1 || up[0].Status().Code != codes.Error {
		t.Fatalf("upstream spans %v", up)
	}
	checkAttrs(t, "upstream span", up[0], map[attribute.Key]attribute.Value{
		retrysafeotel.AttrUpstreamResult: attribute.StringValue("not_sent"),
		"error.type":                     attribute.StringValue("*net.OpError"),
	})
	if n := len(spansNamed(spans, "retrysafe.release")); n != 1 {
		t.Errorf("%d release spans, want 1", n)
	}
}

// TestNoTracing checks the gateway without a TracerProvider: an incoming
// traceparent reaches the upstream as it came, and log lines have no
// trace id.
func TestNoTracing(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	store := memory.New(memory.Config{})
	t.Cleanup(func() { store.Close() })
	var logs syncBuffer
	gw := startGateway(t, gateway.Config{
		Upstream: mustURL(t, up.URL), Store: store, Defaults: gateway.DefaultPolicy(),
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if r := send(t, gw.URL, "POST", "/payments", newKey(), `{}`, "traceparent", clientTraceparent); r.Status != http.StatusCreated {
		t.Fatalf("status %s", r)
	}
	if got := up.lastSeen().Header.Get("traceparent"); got != clientTraceparent {
		t.Errorf("upstream received traceparent %q, want the client's %q", got, clientTraceparent)
	}
	for _, line := range logs.lines(t) {
		if _, ok := line["trace_id"]; ok {
			t.Errorf("log line with a trace id: %v", line)
		}
	}
}
