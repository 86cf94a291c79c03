package sdkenv_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	retrysafeotel "github.com/retrysafe/retrysafe/otel"
	"github.com/retrysafe/retrysafe/otel/sdkenv"
	"github.com/retrysafe/retrysafe/store/memory"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// otelVars are the variables the tests set; each test starts with all of
// them empty (which the SDK and this package read as unset).
var otelVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_PROPAGATORS",
	"OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_TRACES_SAMPLER",
}

// setenv clears the OTEL variables, then sets kv (name, value, …).
func setenv(t *testing.T, kv ...string) {
	t.Helper()
	for _, name := range otelVars {
		t.Setenv(name, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// TestOff checks the environments that leave tracing off: no provider,
// nothing started.
func TestOff(t *testing.T) {
	for name, env := range map[string][]string{
		"nothing set":     nil,
		"service only":    {"OTEL_SERVICE_NAME", "x", "OTEL_BSP_SCHEDULE_DELAY", "100"},
		"sdk disabled":    {"OTEL_SDK_DISABLED", "true", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"},
		"sdk disabled uc": {"OTEL_SDK_DISABLED", "TRUE", "OTEL_TRACES_EXPORTER", "otlp"},
		"exporter none":   {"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"},
	} {
		t.Run(name, func(t *testing.T) {
			setenv(t, env...)
			if sdkenv.Enabled() {
				t.Error("Enabled() = true")
			}
			p, err := sdkenv.NewTracerProvider(context.Background(), sdkenv.Options{})
			if p != nil || err != nil {
				t.Errorf("NewTracerProvider = %v, %v; want nil, nil", p, err)
			}
		})
	}
}

// TestErrors checks that values the package cannot use are refused with
// the variable's name.
func TestErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		env  []string
		want string
	}{
		"unknown exporter":   {[]string{"OTEL_TRACES_EXPORTER", "zipkin"}, `OTEL_TRACES_EXPORTER "zipkin"`},
		"none and otlp":      {[]string{"OTEL_TRACES_EXPORTER", "none,otlp"}, "none cannot be combined"},
		"http/json":          {[]string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, `OTEL_EXPORTER_OTLP_PROTOCOL "http/json"`},
		"traces protocol":    {[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "udp"}, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL "udp"`},
		"unknown propagator": {[]string{"OTEL_TRACES_EXPORTER", "console", "OTEL_PROPAGATORS", "tracecontext,b3"}, `unsupported propagator "b3"`},
	} {
		t.Run(name, func(t *testing.T) {
			setenv(t, tc.env...)
			p, err := sdkenv.NewTracerProvider(context.Background(), sdkenv.Options{Console: io.Discard})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewTracerProvider = %v, %v; want an error with %q", p, err, tc.want)
			}
			if p != nil {
				_ = p.Shutdown(context.Background())
			}
		})
	}
}

// collector is a fake OTLP trace receiver: it keeps the spans it is sent.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu       sync.Mutex
	requests int
	spans    []*tracepb.Span
	services []string // service.name of each resource
	paths    []string // HTTP request paths
}

func (c *collector) add(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				c.services = append(c.services, kv.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
}

// Export implements the OTLP/gRPC trace service.
func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// ServeHTTP implements OTLP/HTTP with protobuf bodies.
func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.paths = append(c.paths, r.URL.Path)
	c.mu.Unlock()
	c.add(&req)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *collector) byName(name string) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range c.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

func (c *collector) spanCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.spans)
}

const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
	secretKey   = "secret-key-5e1d"
)

// traceRequest sends one protected request, with a client's traceparent,
// through middleware traced by p.
func traceRequest(t *testing.T, p *sdkenv.Provider) {
	t.Helper()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { _ = store.Close() })
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store,
		Observer: retrysafeotel.NewObserver(retrysafeotel.Config{TracerProvider: p, Propagator: p.Propagator, Store: "memory"})})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	req := httptest.NewRequest("POST", "/pay", strings.NewReader(`{}`))
	req.Header.Set(retrysafe.HeaderKey, secretKey)
	req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("status %d", rec.Code)
	}
}

// checkExported checks what the collector received for traceRequest.
func checkExported(t *testing.T, c *collector, service string) {
	t.Helper()
	reqs := c.byName(retrysafeotel.SpanRequest)
	if len(reqs) != 1 {
		t.Fatalf("the collector got %d request spans, want 1 (%d spans in all)", len(reqs), c.spanCount())
	}
	r := reqs[0]
	if hex.EncodeToString(r.GetTraceId()) != clientTrace || hex.EncodeToString(r.GetParentSpanId()) != clientSpan {
		t.Errorf("request span in trace %x with parent %x; want the client's %s/%s", r.GetTraceId(), r.GetParentSpanId(), clientTrace, clientSpan)
	}
	var outcome string
	for _, kv := range r.GetAttributes() {
		if kv.GetKey() == string(retrysafeotel.AttrOutcome) {
			outcome = kv.GetValue().GetStringValue()
		}
		if strings.Contains(kv.GetValue().String(), secretKey) {
			t.Errorf("attribute %s carries the key", kv.GetKey())
		}
	}
	if outcome != "new" {
		t.Errorf("request span outcome %q, want new", outcome)
	}
	for _, name := range []string{"retrysafe.claim", "retrysafe.complete"} {
		spans := c.byName(name)
		if len(spans) != 1 || !bytes.Equal(spans[0].GetParentSpanId(), r.GetSpanId()) {
			t.Errorf("%d %s spans, want 1, a child of the request span", len(spans), name)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.services {
		if s != service {
			t.Errorf("service.name %q, want %q", s, service)
		}
	}
}

// TestOTLPHTTP exports over OTLP/HTTP (the default protocol) to a fake
// collector found through OTEL_EXPORTER_OTLP_ENDPOINT: Shutdown flushes
// the queued spans, and the SDK took the service name from
// OTEL_SERVICE_NAME.
func TestOTLPHTTP(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	setenv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL+"/base", "OTEL_SERVICE_NAME", "checkout-gateway")
	p, err := sdkenv.NewTracerProvider(context.Background(), sdkenv.Options{ServiceName: "retrysafe"})
	if err != nil || p == nil {
		t.Fatalf("NewTracerProvider = %v, %v", p, err)
	}
	if got := strings.Join(p.Exporters, ","); got != "otlp (http/protobuf)" {
		t.Errorf("exporters %q", got)
	}
	traceRequest(t, p)
	if n := c.spanCount(); n != 0 {
		t.Logf("%d spans exported before Shutdown", n) // the batcher waits 5s by default
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkExported(t, c, "checkout-gateway")
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, path := range c.paths {
		if path != "/base/v1/traces" {
			t.Errorf("exported to %s, want /base/v1/traces (the base endpoint + /v1/traces)", path)
		}
	}
}

// TestOTLPHTTPTracesEndpoint checks OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// (used as it is) and the batch processor's OTEL_BSP_SCHEDULE_DELAY: the
// spans arrive without a Shutdown, long before the default 5s delay.
func TestOTLPHTTPTracesEndpoint(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	setenv(t, "OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", srv.URL+"/custom/path",
		"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", "OTEL_BSP_SCHEDULE_DELAY", "10")
	p, err := sdkenv.NewTracerProvider(context.Background(), sdkenv.Options{ServiceName: "retrysafe"})
	if err != nil || p == nil {
		t.Fatalf("NewTracerProvider = %v, %v", p, err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	traceRequest(t, p)
	deadline := time.Now().Add(3 * time.Second)
	for c.spanCount() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	checkExported(t, c, "retrysafe")
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.paths) == 0 || c.paths[0] != "/custom/path" {
		t.Errorf("exported to %v, want /custom/path", c.paths)
	}
}

// TestOTLPGRPC exports over OTLP/gRPC to an in-process collector.
func TestOTLPGRPC(t *testing.T) {
	c := &collector{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	setenv(t, "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String(),
		"OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes,deployment.environment.name=test")
	p, err := sdkenv.NewTracerProvider(context.Background(), sdkenv.Options{ServiceName: "retrysafe"})
	if err != nil || p == nil {
		t.Fatalf("NewTracerProvider = %v, %v", p, err)
	}
	if got := strings.Join(p.Exporters, ","); got != "otlp (grpc)" {
		t.Errorf("exporters %q", got)
	}
	traceRequest(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	checkExported(t, c, "from-attributes")
}

// TestConsole checks the console exporter, alone and beside OTLP.
func TestConsole(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	setenv(t, "OTEL_TRACES_EXPORTER", "console, otlp", "OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	var out bytes.Buffer
	p, err := sdkenv.NewTracerProvider(context.Background(), sdkenv.Options{Console: &out})
	if err != nil || p == nil {
		t.Fatalf("NewTracerProvider = %v, %v", p, err)
	}
	if got := strings.Join(p.Exporters, ","); got != "console,otlp (http/protobuf)" {
		t.Errorf("exporters %q", got)
	}
	traceRequest(t, p)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"Name":"retrysafe.request"`) || strings.Contains(out.String(), secretKey) {
		t.Errorf("console output lacks the request span, or has the key:\n%s", out.String())
	}
	checkExported(t, c, "unknown_service:sdkenv.test")
}

// TestPropagator checks OTEL_PROPAGATORS.
func TestPropagator(t *testing.T) {
	for v, want := range map[string]string{
		"":                      "baggage,traceparent,tracestate",
		"tracecontext":          "traceparent,tracestate",
		"baggage":               "baggage",
		"none":                  "",
		"tracecontext, baggage": "baggage,traceparent,tracestate",
	} {
		setenv(t, "OTEL_PROPAGATORS", v)
		p, err := sdkenv.Propagator()
		if err != nil {
			t.Fatalf("OTEL_PROPAGATORS %q: %v", v, err)
		}
		fields := p.Fields()
		slices.Sort(fields)
		if got := strings.Join(fields, ","); got != want {
			t.Errorf("OTEL_PROPAGATORS %q: fields %q, want %q", v, got, want)
		}
	}
}
