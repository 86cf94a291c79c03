package main

import (
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracing is what serve hands the gateway when tracing is on.
type tracing struct {
	Provider   trace.TracerProvider
	Propagator propagation.TextMapPropagator
	// Exporters describes the exporters, such as "otlp (grpc)", for the
	// start line.
	Exporters []string
}

// storeName is the kind of store a --store URL names, for traces.
func storeName(rawURL string) string {
	scheme, _, _ := strings.Cut(rawURL, ":")
	switch s := strings.ToLower(scheme); s {
	case "postgres", "postgresql":
		return "postgres"
	case "redis", "rediss":
		return "redis"
	case "", "sqlite":
		return "sqlite"
	default:
		return s
	}
}
