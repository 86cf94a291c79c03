package mysql_test

import (
	"testing"

	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestModuleGraph: a program that uses only this store sees neither
// modernc (SQLite), pgx, nor go-redis in its module graph: every store with
// a heavy driver is a module of its own.
func TestModuleGraph(t *testing.T) {
	t.Parallel()
	testenv.RequireNoModule(t, "modernc.org/", "github.com/jackc/", "github.com/redis/", "github.com/prometheus/", "github.com/chromedp/")
}
