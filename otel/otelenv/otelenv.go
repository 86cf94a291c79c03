// Package otelenv reads which trace exporters the standard OTEL_*
// environment variables ask for. It imports no OpenTelemetry code, so a
// binary built without tracing (cmd/retrysafe with -tags
// retrysafe_notracing) can tell that tracing was asked for and refuse,
// by the same rule that package sdkenv starts the exporters by.
package otelenv

import (
	"fmt"
	"os"
	"strings"
)

// Exporters returns the trace exporters the environment asks for ("otlp",
// "console"); none when tracing is off: OTEL_SDK_DISABLED=true, or neither
// OTEL_TRACES_EXPORTER nor an OTLP endpoint or protocol variable is set.
// An error names a value it cannot use.
func Exporters() ([]string, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	v := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if v == "" {
		for _, name := range []string{
			"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
			"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		} {
			if strings.TrimSpace(os.Getenv(name)) != "" {
				return []string{"otlp"}, nil
			}
		}
		return nil, nil
	}
	var names []string
	none := false
	for _, n := range strings.Split(v, ",") {
		switch n = strings.ToLower(strings.TrimSpace(n)); n {
		case "":
		case "none":
			none = true
		case "otlp", "console":
			names = append(names, n)
		default:
			return nil, fmt.Errorf("OTEL_TRACES_EXPORTER %q: unsupported exporter %q (want otlp, console or none)", v, n)
		}
	}
	if none && len(names) > 0 {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER %q: none cannot be combined with an exporter", v)
	}
	return names, nil
}
