//go:build retrysafe_notracing

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// startTracing, in a binary built with -tags retrysafe_notracing (no
// OpenTelemetry SDK or exporters linked in), traces nothing. It refuses to
// start when the environment asks for an exporter, rather than run
// untraced while the operator expects spans.
func startTracing(context.Context, io.Writer, *slog.Logger) (*tracing, func(), error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, func() {}, nil
	}
	for _, name := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if v := os.Getenv(name); v != "" && !(name == "OTEL_TRACES_EXPORTER" && strings.EqualFold(v, "none")) {
			return nil, func() {}, fmt.Errorf("%s is set, but this binary was built without tracing (-tags retrysafe_notracing)", name)
		}
	}
	return nil, func() {}, nil
}
