// Package sdkenv builds an OpenTelemetry SDK TracerProvider from the
// standard OTEL_* environment variables, for programs such as
// `retrysafe serve` that are configured by their environment.
//
// Tracing is on when OTEL_TRACES_EXPORTER names an exporter, or when it
// is unset and an OTLP endpoint or protocol variable is set
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
// OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL). It is
// off — [NewTracerProvider] returns nil, and nothing is started — when
// none of them is set, when OTEL_TRACES_EXPORTER is "none", and when
// OTEL_SDK_DISABLED is "true".
//
// This package reads:
//
//   - OTEL_SDK_DISABLED: "true" turns tracing off.
//   - OTEL_TRACES_EXPORTER: a comma-separated list of otlp, console
//     (spans as JSON on Options.Console) and none.
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL:
//     http/protobuf (the default) or grpc.
//   - OTEL_PROPAGATORS: a comma-separated list of tracecontext, baggage and
//     none (default tracecontext,baggage); see [Propagator].
//
// The SDK and the exporters read the rest themselves: the OTLP exporters
// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT, _COMPRESSION,
// _CERTIFICATE, _CLIENT_KEY, _CLIENT_CERTIFICATE and _INSECURE (grpc); the
// batch span processor OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_EXPORT_TIMEOUT,
// OTEL_BSP_MAX_QUEUE_SIZE and OTEL_BSP_MAX_EXPORT_BATCH_SIZE; the sampler
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG; span limits
// OTEL_SPAN_*_LIMIT; the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES.
package sdkenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/retrysafe/retrysafe/otel/otelenv"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// Options are the program's own settings; the environment overrides none
// of them except ServiceName.
type Options struct {
	// ServiceName is service.name when neither OTEL_SERVICE_NAME nor
	// OTEL_RESOURCE_ATTRIBUTES names the service; "" means
	// unknown_service:<executable name>, as the SDK says.
	ServiceName string
	// ServiceVersion is service.version ("" leaves it out, unless
	// OTEL_RESOURCE_ATTRIBUTES sets it).
	ServiceVersion string
	// Console receives the spans of the console exporter; nil means
	// os.Stdout.
	Console io.Writer
}

// Provider is the SDK TracerProvider that the environment describes.
// Shut it down when the program exits: Shutdown exports the spans still
// queued and stops the exporters.
type Provider struct {
	*sdktrace.TracerProvider
	// Exporters describes the exporters, such as "otlp (grpc)" and
	// "console", for a log line.
	Exporters []string
	// Propagator is the propagator OTEL_PROPAGATORS names.
	Propagator propagation.TextMapPropagator
}

// Enabled reports whether the environment turns tracing on (see the
// package documentation). It does not check the values further.
func Enabled() bool {
	exporters, _ := otelenv.Exporters()
	return len(exporters) > 0
}

// NewTracerProvider returns the TracerProvider the environment describes
// (see the package documentation), with a batch span processor per
// exporter. It returns nil, and starts nothing, when tracing is off; an
// error names the variable whose value it cannot use.
func NewTracerProvider(ctx context.Context, opts Options) (*Provider, error) {
	names, err := otelenv.Exporters()
	if err != nil || len(names) == 0 {
		return nil, err
	}
	prop, err := Propagator()
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, opts)
	if err != nil {
		return nil, err
	}
	p := &Provider{Propagator: prop}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	var exporters []sdktrace.SpanExporter
	for _, name := range names {
		exp, desc, err := newExporter(ctx, name, opts)
		if err != nil {
			for _, e := range exporters {
				_ = e.Shutdown(ctx)
			}
			return nil, err
		}
		exporters = append(exporters, exp)
		p.Exporters = append(p.Exporters, desc)
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exp)) // reads OTEL_BSP_*
	}
	p.TracerProvider = sdktrace.NewTracerProvider(tpOpts...)
	return p, nil
}

// newExporter makes the exporter name and describes it.
func newExporter(ctx context.Context, name string, opts Options) (sdktrace.SpanExporter, string, error) {
	if name == "console" {
		w := opts.Console
		if w == nil {
			w = os.Stdout
		}
		exp, err := stdouttrace.New(stdouttrace.WithWriter(w))
		return exp, "console", err
	}
	protoVar := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	proto := strings.TrimSpace(os.Getenv(protoVar))
	if proto == "" {
		protoVar = "OTEL_EXPORTER_OTLP_PROTOCOL"
		proto = strings.TrimSpace(os.Getenv(protoVar))
	}
	switch proto {
	case "", "http/protobuf":
		exp, err := otlptracehttp.New(ctx) // reads OTEL_EXPORTER_OTLP_* itself
		if err != nil {
			return nil, "", fmt.Errorf("OTLP/HTTP trace exporter: %w", err)
		}
		return exp, "otlp (http/protobuf)", nil
	case "grpc":
		exp, err := otlptracegrpc.New(ctx) // reads OTEL_EXPORTER_OTLP_* itself
		if err != nil {
			return nil, "", fmt.Errorf("OTLP/gRPC trace exporter: %w", err)
		}
		return exp, "otlp (grpc)", nil
	}
	return nil, "", fmt.Errorf("%s %q: want http/protobuf or grpc (http/json is not supported)", protoVar, proto)
}

// newResource describes the program: service.name and service.version
// from opts, overridden by OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME,
// and the SDK's own attributes.
func newResource(ctx context.Context, opts Options) (*resource.Resource, error) {
	name := opts.ServiceName
	if name == "" {
		exe, _ := os.Executable()
		name = "unknown_service:" + filepath.Base(exe)
	}
	attrs := resource.WithAttributes(semconv.ServiceName(name))
	if opts.ServiceVersion != "" {
		attrs = resource.WithAttributes(semconv.ServiceName(name), semconv.ServiceVersion(opts.ServiceVersion))
	}
	res, err := resource.New(ctx, attrs, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil { // a malformed OTEL_RESOURCE_ATTRIBUTES
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return res, nil
}

// Propagator returns the propagator OTEL_PROPAGATORS names: a
// comma-separated list of tracecontext (W3C traceparent and tracestate),
// baggage (W3C baggage) and none. Unset means tracecontext,baggage.
// Other propagators (b3, jaeger, …) are not supported: an error says so.
func Propagator() (propagation.TextMapPropagator, error) {
	v := strings.TrimSpace(os.Getenv("OTEL_PROPAGATORS"))
	if v == "" {
		return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}), nil
	}
	var props []propagation.TextMapPropagator
	for _, n := range strings.Split(v, ",") {
		switch n = strings.ToLower(strings.TrimSpace(n)); n {
		case "", "none":
		case "tracecontext":
			props = append(props, propagation.TraceContext{})
		case "baggage":
			props = append(props, propagation.Baggage{})
		default:
			return nil, fmt.Errorf("OTEL_PROPAGATORS %q: unsupported propagator %q (want tracecontext, baggage or none)", v, n)
		}
	}
	return propagation.NewCompositeTextMapPropagator(props...), nil
}
