package otelenv

import (
	"slices"
	"strings"
	"testing"
)

// TestExporters: which exporters each environment asks for, and the values
// refused with the variable named.
func TestExporters(t *testing.T) {
	for name, tc := range map[string]struct {
		env     map[string]string
		want    []string
		wantErr string
	}{
		"nothing set":           {},
		"endpoint implies otlp": {env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: []string{"otlp"}},
		"traces protocol":       {env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, want: []string{"otlp"}},
		"explicit list":         {env: map[string]string{"OTEL_TRACES_EXPORTER": " OTLP , console"}, want: []string{"otlp", "console"}},
		"none":                  {env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		"disabled wins":         {env: map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}},
		"unknown exporter":      {env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER"},
		"none with an exporter": {env: map[string]string{"OTEL_TRACES_EXPORTER": "none,otlp"}, wantErr: "none cannot be combined"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, v := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
				t.Setenv(v, tc.env[v])
			}
			got, err := Exporters()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Exporters() = %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Exporters() = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
