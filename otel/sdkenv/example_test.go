package sdkenv_test

import (
	"context"
	"log"

	"github.com/retrysafe/retrysafe"
	retrysafeotel "github.com/retrysafe/retrysafe/otel"
	"github.com/retrysafe/retrysafe/otel/sdkenv"
	"github.com/retrysafe/retrysafe/store/memory"
)

// A program configured by its environment: with OTEL_EXPORTER_OTLP_ENDPOINT
// (or OTEL_TRACES_EXPORTER) set, it traces; without, p is nil, nothing
// runs and the middleware gets no Observer, so tracing costs nothing.
// Shut the provider down on exit to export the spans still queued.
func ExampleNewTracerProvider() {
	ctx := context.Background()
	p, err := sdkenv.NewTracerProvider(ctx, sdkenv.Options{ServiceName: "payments", ServiceVersion: "v1.2.3"})
	if err != nil {
		log.Fatal(err) // an OTEL_* variable has a value it cannot use
	}
	cfg := retrysafe.Config{Store: memory.New(memory.Config{})}
	if p != nil {
		defer func() { _ = p.Shutdown(context.WithoutCancel(ctx)) }()
		cfg.Observer = retrysafeotel.NewObserver(retrysafeotel.Config{
			TracerProvider: p, Propagator: p.Propagator, Store: "memory",
		})
	}
	mw, err := retrysafe.NewMiddleware(cfg)
	if err != nil {
		log.Fatal(err)
	}
	_ = mw // wrap the service's handler with it
}
