package retrysafelambda_test

import (
	"testing"

	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestModuleGraph: a function that requires the Lambda adapter gets
// aws-lambda-go and the root, never a store driver, the AWS SDK or
// OpenTelemetry.
func TestModuleGraph(t *testing.T) {
	t.Parallel()
	testenv.RequireNoModule(t, "github.com/aws/aws-sdk-go", "modernc.org/sqlite", "github.com/jackc/", "github.com/redis/",
		"github.com/go-sql-driver/", "go.opentelemetry.io/", "github.com/gin-gonic/", "github.com/gofiber/")
}
