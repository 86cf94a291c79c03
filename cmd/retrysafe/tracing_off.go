//go:build retrysafe_notracing

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/retrysafe/retrysafe/otel/otelenv"
)

// startTracing, in a binary built with -tags retrysafe_notracing (no
// OpenTelemetry SDK or exporters linked in), traces nothing. It refuses to
// start when the environment asks for an exporter, rather than run
// untraced while the operator expects spans.
func startTracing(context.Context, io.Writer, *slog.Logger) (*tracing, func(), error) {
	exporters, err := otelenv.Exporters()
	if err != nil {
		return nil, func() {}, err
	}
	if len(exporters) > 0 {
		return nil, func() {}, fmt.Errorf("the environment asks for the %s trace exporter, but this binary was built without tracing (-tags retrysafe_notracing)", strings.Join(exporters, ", "))
	}
	return nil, func() {}, nil
}
