package retrysafeotel_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/retrysafe/retrysafe"
	retrysafeotel "github.com/retrysafe/retrysafe/otel"
	"github.com/retrysafe/retrysafe/store/memory"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Trace the middleware: give it an Observer. Here the spans go to an
// in-memory exporter; a service would use an OTLP exporter (see package
// sdkenv). The first request runs (claim, complete); its retry is
// replayed.
func ExampleNewObserver() {
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	store := memory.New(memory.Config{})
	defer store.Close()
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{
		Store: store,
		// Next: metrics, if any, still get every event.
		Observer: retrysafeotel.NewObserver(retrysafeotel.Config{TracerProvider: tp, Store: "memory"}),
	})
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	for range 2 {
		req := httptest.NewRequest("POST", "/payments", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Idempotency-Key", "3f1c0e6a")
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}

	for _, s := range exporter.GetSpans() {
		line := s.Name
		for _, kv := range s.Attributes {
			switch kv.Key {
			case retrysafeotel.AttrOutcome, retrysafeotel.AttrClaimed, retrysafeotel.AttrResult:
				line += " " + string(kv.Key) + "=" + kv.Value.Emit()
			}
		}
		fmt.Println(line, "trace", s.SpanContext.TraceID())
	}
	// Output:
	// retrysafe.claim retrysafe.result=ok retrysafe.claimed=true trace 4bf92f3577b34da6a3ce929d0e0e4736
	// retrysafe.complete retrysafe.result=ok trace 4bf92f3577b34da6a3ce929d0e0e4736
	// retrysafe.request retrysafe.outcome=new trace 4bf92f3577b34da6a3ce929d0e0e4736
	// retrysafe.claim retrysafe.result=ok retrysafe.claimed=false trace 4bf92f3577b34da6a3ce929d0e0e4736
	// retrysafe.request retrysafe.outcome=replayed trace 4bf92f3577b34da6a3ce929d0e0e4736
}
