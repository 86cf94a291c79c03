package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// slimTags leave the PostgreSQL, MySQL, Redis and DynamoDB drivers and the
// OpenTelemetry SDK and exporters out of the binary.
const slimTags = "retrysafe_nopostgres,retrysafe_nomysql,retrysafe_noredis,retrysafe_nodynamodb,retrysafe_notracing"

// TestSlimBuild: with the build tags retrysafe_nopostgres,
// retrysafe_nomysql, retrysafe_noredis and retrysafe_notracing the binary
// links neither pgx, go-sql-driver/mysql, go-redis nor the OpenTelemetry
// SDK, exporters and gRPC, still runs the demo and the SQLite store,
// answers a PostgreSQL, MySQL or Redis URL with a clear error, and refuses
// an OTLP exporter rather than run untraced.
func TestSlimBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-tags", slimTags, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := string(out)
	for _, gone := range []string{"github.com/jackc/pgx", "github.com/redis/go-redis", "github.com/go-sql-driver/mysql", "retrysafe/store/postgres", "retrysafe/store/redis", "retrysafe/store/mysql", "github.com/aws/aws-sdk-go-v2", "retrysafe/store/dynamodb",
		"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "google.golang.org/grpc", "retrysafe/otel/sdkenv"} {
		if strings.Contains(deps, gone) {
			t.Errorf("the slim build still imports %s", gone)
		}
	}
	if !strings.Contains(deps, "modernc.org/sqlite") {
		t.Errorf("the slim build lost SQLite:\n%s", deps)
	}

	bin := filepath.Join(t.TempDir(), "retrysafe")
	if out, err := exec.Command("go", "build", "-tags", slimTags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %s: %v\n%s", slimTags, err, out)
	}
	for store, want := range map[string]string{
		"postgres://postgres@127.0.0.1:5432/test": "PostgreSQL is not built into this binary (built with -tags retrysafe_nopostgres)",
		"redis://127.0.0.1:6379/0":                "Redis is not built into this binary (built with -tags retrysafe_noredis)",
		"mysql://root@127.0.0.1:3306/test":        "MySQL is not built into this binary (built with -tags retrysafe_nomysql)",
		"dynamodb://retrysafe?region=eu-west-1":   "DynamoDB is not built into this binary (built with -tags retrysafe_nodynamodb)",
	} {
		out, err := exec.Command(bin, "keys", "list", "--store", store).CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("keys list --store %s: %v\n%s\nwant %q", store, err, out, want)
		}
	}
	serve := exec.Command(bin, "serve", "--upstream", "http://127.0.0.1:1", "--store", "memory:")
	serve.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318")
	if out, err := serve.CombinedOutput(); err == nil || !strings.Contains(string(out), "built without tracing (-tags retrysafe_notracing)") {
		t.Errorf("serve with OTEL_EXPORTER_OTLP_ENDPOINT: %v\n%s\nwant a refusal naming retrysafe_notracing", err, out)
	}
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "slim.db")
	if out, err := exec.Command(bin, "migrate", "--create", "--store", sqlite).CombinedOutput(); err != nil || !strings.Contains(string(out), "Schema up to date") {
		t.Errorf("migrate on SQLite: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "demo").CombinedOutput(); err != nil || !strings.Contains(string(out), "invariant holds") {
		t.Errorf("demo: %v\n%s", err, out)
	}
}
