package dynamodb_test

import (
	"testing"

	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestModuleGraph: a program that uses only this store sees no other
// store's driver in its module graph.
func TestModuleGraph(t *testing.T) {
	t.Parallel()
	testenv.RequireNoModule(t, "modernc.org/", "github.com/jackc/", "github.com/redis/", "github.com/go-sql-driver/", "github.com/prometheus/", "github.com/chromedp/")
}
