package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestStoreName(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"":                       "sqlite",
		"sqlite:retrysafe.db":    "sqlite",
		"memory:":                "memory",
		"postgresql://u@h/db":    "postgres",
		"POSTGRES://u@h/db":      "postgres",
		"rediss://h:6379/0":      "redis",
		"redis+cluster://h:7000": "redis+cluster",
	} {
		if got := storeName(url); got != want {
			t.Errorf("storeName(%q) = %q, want %q", url, got, want)
		}
	}
}

// otelEnv clears the OTEL variables serve reads, then sets kv.
func otelEnv(t *testing.T, kv ...string) {
	for _, name := range []string{
		"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
		"OTEL_PROPAGATORS", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_TRACES_SAMPLER",
	} {
		t.Setenv(name, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// serveInProcess runs serve with args in the test process until stop is
// called; stop returns its exit status and stderr.
func serveInProcess(t *testing.T, args ...string) (proxyURL string, stop func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--log-format", "json"}, args...), pw, &stderr)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for proxyURL == "" && sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok {
			proxyURL = strings.TrimSuffix(strings.Fields(rest)[0], ",")
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if proxyURL == "" {
		cancel()
		t.Fatalf("no address printed (exit status %d); stderr:\n%s", <-code, &stderr)
	}
	return proxyURL, func() (int, string) {
		cancel()
		select {
		case c := <-code:
			return c, stderr.String()
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not return after its context was cancelled")
			return 0, ""
		}
	}
}

// TestServeTracingOff checks that without OTEL variables serve installs
// no TracerProvider: startTracing returns none, the start line says
// tracing off, and a client's traceparent reaches the upstream as it came.
func TestServeTracingOff(t *testing.T) {
	otelEnv(t)
	p, stop, err := startTracing(context.Background(), io.Discard, nil)
	if p != nil || err != nil {
		t.Fatalf("startTracing = %v, %v; want no provider", p, err)
	}
	stop()

	var seen sync.Map
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store("traceparent", r.Header.Get("traceparent"))
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	proxyURL, stopServe := serveInProcess(t, "--upstream", up.URL, "--store", "memory:")
	sendTraced(t, proxyURL+"/payments")
	code, stderr := stopServe()
	if code != 0 || !strings.Contains(stderr, `"tracing":"off"`) {
		t.Errorf("exit status %d; stderr lacks tracing off:\n%s", code, stderr)
	}
	if got, _ := seen.Load("traceparent"); got != clientTraceparent {
		t.Errorf("upstream received traceparent %q, want the client's %q", got, clientTraceparent)
	}
}

const clientTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func sendTraced(t *testing.T, url string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"amount":1}`))
	req.Header.Set(retrysafe.HeaderKey, "secret-key-for-tracing")
	req.Header.Set("Authorization", testCredential)
	req.Header.Set("traceparent", clientTraceparent)
	resp, err := testenv.HTTPClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// TestServeTracingOTLP runs serve with OTEL_EXPORTER_OTLP_ENDPOINT naming
// a fake collector: the spans of a request arrive there when serve exits
// (the batcher's delay is the default 5s: only the shutdown's flush can
// have sent them), in the client's trace, and the upstream received a
// traceparent in that trace.
func TestServeTracingOTLP(t *testing.T) {
	var mu sync.Mutex
	var spans []*tracepb.Span
	var services []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					services = append(services, kv.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				spans = append(spans, ss.GetSpans()...)
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	defer collector.Close()
	otelEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)

	var seen sync.Map
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store("traceparent", r.Header.Get("traceparent"))
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	proxyURL, stopServe := serveInProcess(t, "--upstream", up.URL, "--store", "memory:")
	sendTraced(t, proxyURL+"/payments")
	mu.Lock()
	early := len(spans)
	mu.Unlock()
	code, stderr := stopServe()
	if code != 0 || !strings.Contains(stderr, `"tracing":"otlp (http/protobuf)"`) {
		t.Errorf("exit status %d; stderr lacks the tracing exporter:\n%s", code, stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if early != 0 {
		t.Logf("%d spans exported before the shutdown", early)
	}
	var server, upstream *tracepb.Span
	for _, s := range spans {
		switch s.GetKind() {
		case tracepb.Span_SPAN_KIND_SERVER:
			server = s
		case tracepb.Span_SPAN_KIND_CLIENT:
			upstream = s
		}
	}
	if server == nil || upstream == nil {
		t.Fatalf("the collector got %d spans, without a server and an upstream span", len(spans))
	}
	if hex.EncodeToString(server.GetTraceId()) != "4bf92f3577b34da6a3ce929d0e0e4736" || hex.EncodeToString(server.GetParentSpanId()) != "00f067aa0ba902b7" {
		t.Errorf("server span in trace %x under %x, want the client's", server.GetTraceId(), server.GetParentSpanId())
	}
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + hex.EncodeToString(upstream.GetSpanId()) + "-01"
	if got, _ := seen.Load("traceparent"); got != want {
		t.Errorf("upstream received traceparent %q, want %q", got, want)
	}
	for _, s := range services {
		if s != "retrysafe" {
			t.Errorf("service.name %q, want retrysafe", s)
		}
	}
	if strings.Contains(stderr, "secret-key-for-tracing") {
		t.Error("the key was logged")
	}
}
