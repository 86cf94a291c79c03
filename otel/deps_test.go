package retrysafeotel_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAPIOnly fails if package retrysafeotel depends on the OpenTelemetry
// SDK, an exporter or gRPC: a program that traces retrysafe (the gateway)
// must not link them through it. They belong in package sdkenv.
func TestAPIOnly(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 2 {
		t.Fatalf("go list -deps listed %q", deps)
	}
	for _, dep := range deps {
		for _, banned := range []string{"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "google.golang.org/grpc", "google.golang.org/protobuf"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("retrysafeotel depends on %s", dep)
			}
		}
	}
}
