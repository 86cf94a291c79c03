package retrysafegin_test

import (
	"testing"

	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestModuleGraph: a program that requires the Gin adapter gets Gin and
// the root, never another framework, a store driver or OpenTelemetry.
func TestModuleGraph(t *testing.T) {
	t.Parallel()
	testenv.RequireNoModule(t, "github.com/gofiber/", "github.com/valyala/fasthttp", "github.com/labstack/", "github.com/go-chi/",
		"modernc.org/sqlite", "github.com/jackc/", "github.com/redis/", "github.com/go-sql-driver/", "go.opentelemetry.io/")
}
