// Package testenv holds the rules every test that talks to a real server
// follows: where the machine's servers are (PostgresURL, RedisAddr, MySQLURL), fresh
// names for isolation (Name, SQLitePath), and what happens when a server
// cannot be reached: the test is skipped locally and fails when CI=true
// (Unreachable).
//
// It imports only the standard library and the root module, so that every
// module of the repository can use it without pulling a driver. Stores of
// every backend for tests that run against all of them are in
// github.com/retrysafe/retrysafe/internal/e2e/stores.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/store/memory"
)

// Default addresses of the machine's servers.
const (
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultRedisAddr   = "127.0.0.1:6379"
	// DefaultPgBouncerURL is the PgBouncer that .ci/run starts from
	// .ci/pgbouncer.ini (transaction pooling in front of PostgreSQL).
	DefaultPgBouncerURL = "postgres://postgres@127.0.0.1:6432/test?sslmode=disable"
	DefaultMySQLURL     = "mysql://root@127.0.0.1:3306/test"
	// DefaultDynamoDBEndpoint is the dynalite that .ci/run starts
	// (store/dynamodb/dynalite).
	DefaultDynamoDBEndpoint = "http://127.0.0.1:8000"
)

// PostgresURL is RETRYSAFE_POSTGRES_URL or the local default.
func PostgresURL() string { return env("RETRYSAFE_POSTGRES_URL", DefaultPostgresURL) }

// PgBouncerURL is RETRYSAFE_PGBOUNCER_URL or the local default: PgBouncer
// in transaction mode in front of the database of [PostgresURL]. The same
// PgBouncer serves that database under other pooling modes as
// "<database>_session", "<database>_statement" and
// "<database>_serializable" (.ci/pgbouncer.ini).
func PgBouncerURL() string { return env("RETRYSAFE_PGBOUNCER_URL", DefaultPgBouncerURL) }

// RedisAddr is RETRYSAFE_REDIS_ADDR or the local default.
func RedisAddr() string { return env("RETRYSAFE_REDIS_ADDR", DefaultRedisAddr) }

// MySQLURL is RETRYSAFE_MYSQL_URL or the local default (the MariaDB or
// MySQL server's test database), as a mysql:// URL.
func MySQLURL() string { return env("RETRYSAFE_MYSQL_URL", DefaultMySQLURL) }

// DynamoDBEndpoint is RETRYSAFE_DYNAMODB_ENDPOINT or the local default: a
// DynamoDB API (dynalite, DynamoDB Local, or a real region's endpoint).
func DynamoDBEndpoint() string { return env("RETRYSAFE_DYNAMODB_ENDPOINT", DefaultDynamoDBEndpoint) }

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Unreachable skips t, or fails it when CI=true: in CI a missing service is
// a failure, never a skip.
func Unreachable(t testing.TB, service string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is unreachable (CI=true, so this fails instead of skipping): %v", service, err)
	}
	t.Skipf("%s is unreachable, skipping: %v", service, err)
}

// Name returns a random identifier with the given prefix, usable as a
// PostgreSQL schema, a Redis key prefix or a queue name.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// MySQLDropStatements returns the statements that drop everything a
// store/mysql Migrate creates for table: the table, its migrations table
// and its claim procedure (the indexes go with the table).
func MySQLDropStatements(table string) []string {
	return []string{
		"DROP TABLE IF EXISTS `" + table + "`",
		"DROP TABLE IF EXISTS `" + table + "_migrations`",
		"DROP PROCEDURE IF EXISTS `" + table + "_claim`",
	}
}

// Memory returns a fresh memory store closed at the end of the test.
func Memory(t testing.TB) *memory.Store {
	s := memory.New(memory.Config{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// SQLitePath returns a path for a new SQLite file in the test's temp dir.
func SQLitePath(t testing.TB) string { return filepath.Join(t.TempDir(), "retrysafe.db") }

// RequireNoModule fails t if the module graph of the package under test
// (ModuleGraph) holds a module whose path starts with one of prefixes.
func RequireNoModule(t testing.TB, prefixes ...string) {
	t.Helper()
	graph := ModuleGraph(t)
	if len(graph) == 0 {
		t.Fatal("GOWORK=off go list -m all listed no module")
	}
	for _, m := range graph {
		for _, p := range prefixes {
			if strings.HasPrefix(m, p) {
				t.Errorf("module graph of %s holds %s (every program that requires it would see it)", graph[0], m)
			}
		}
	}
}

// HTTPClient is the client for tests' requests. Its transport is its own:
// httptest.Server.Close closes http.DefaultTransport's idle connections,
// which fails a request that a parallel test is just sending through that
// transport ("http: CloseIdleConnections called").
var HTTPClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
