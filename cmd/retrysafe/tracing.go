//go:build !retrysafe_notracing

package main

import (
	"context"
	"io"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
	"github.com/retrysafe/retrysafe/otel/sdkenv"
	"go.opentelemetry.io/otel"
)

// tracingShutdownTimeout bounds exporting the spans still queued when
// serve exits.
const tracingShutdownTimeout = 5 * time.Second

// startTracing returns the tracing the OTEL_* environment describes (see
// package sdkenv), or nil when tracing is off, and a function that flushes
// and stops it. The SDK's own errors and log lines go to logger, not to
// plain-text stderr.
func startTracing(ctx context.Context, console io.Writer, logger *slog.Logger) (*tracing, func(), error) {
	ctx = context.WithoutCancel(ctx) // the exporters outlive serve's context: they flush after it ends
	p, err := sdkenv.NewTracerProvider(ctx, sdkenv.Options{ServiceName: "retrysafe", ServiceVersion: serviceVersion(), Console: console})
	if err != nil || p == nil {
		return nil, func() {}, err
	}
	otel.SetLogger(logr.FromSlogHandler(logger.Handler()))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("tracing: export failed", "err", err)
	}))
	stop := func() {
		ctx, cancel := context.WithTimeout(ctx, tracingShutdownTimeout)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			logger.Warn("tracing: exporting the last spans failed", "err", err)
		}
	}
	return &tracing{Provider: p, Propagator: p.Propagator, Exporters: p.Exporters}, stop, nil
}

// serviceVersion is service.version in traces: the module version, or ""
// for a development build.
func serviceVersion() string {
	info, ok := debug.ReadBuildInfo()
	if info, ok = stamped(info, ok, buildVersion, buildRevision); !ok {
		return ""
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	return ""
}
