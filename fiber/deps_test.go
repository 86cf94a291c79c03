package retrysafefiber_test

import (
	"testing"

	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestModuleGraph: a program that requires the Fiber adapter gets Fiber,
// fasthttp and the root, never another framework, a store driver or
// OpenTelemetry.
func TestModuleGraph(t *testing.T) {
	t.Parallel()
	testenv.RequireNoModule(t, "github.com/gin-gonic/", "github.com/labstack/", "github.com/go-chi/",
		"modernc.org/sqlite", "github.com/jackc/", "github.com/redis/", "github.com/go-sql-driver/", "go.opentelemetry.io/")
}
