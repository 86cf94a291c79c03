// Package testenv gives tests outside the store packages isolated stores on
// the real servers of the machine: its own SQLite file, PostgreSQL schema or
// Redis key prefix per test. A server that cannot be reached skips the test
// locally and fails it when CI=true.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/postgres"
	"github.com/retrysafe/retrysafe/store/redis"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// Default addresses of the machine's servers.
const (
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultRedisAddr   = "127.0.0.1:6379"
)

// PostgresURL is RETRYSAFE_POSTGRES_URL or the local default.
func PostgresURL() string { return env("RETRYSAFE_POSTGRES_URL", DefaultPostgresURL) }

// RedisAddr is RETRYSAFE_REDIS_ADDR or the local default.
func RedisAddr() string { return env("RETRYSAFE_REDIS_ADDR", DefaultRedisAddr) }

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

// Memory returns a fresh memory store closed at the end of the test.
func Memory(t testing.TB) *memory.Store {
	s := memory.New(memory.Config{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// SQLitePath returns a path for a new SQLite file in the test's temp dir.
func SQLitePath(t testing.TB) string { return filepath.Join(t.TempDir(), "retrysafe.db") }

// SQLite returns a store on a new SQLite file.
func SQLite(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), SQLitePath(t), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// PostgresSchemaURL creates a fresh schema, dropped at the end of the test,
// and returns a URL that selects it for the postgres store (the
// retrysafe_schema parameter) together with the schema's name.
func PostgresSchemaURL(t testing.TB) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		Unreachable(t, "PostgreSQL at "+PostgresURL(), err)
	}
	defer conn.Close(ctx)
	schema := Name("rs_test_")
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, PostgresURL()); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			_ = c.Close(ctx)
		}
	})
	u, err := url.Parse(PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("retrysafe_schema", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// PostgresPool returns a new pool, closed at the end of the test.
func PostgresPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, PostgresURL())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		Unreachable(t, "PostgreSQL at "+PostgresURL(), err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Postgres returns a migrated store in a fresh schema on its own pool.
func Postgres(t testing.TB) *postgres.Store {
	t.Helper()
	_, schema := PostgresSchemaURL(t)
	s, err := postgres.New(PostgresPool(t), postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// RedisURL returns a redis:// URL for the test server, after checking that
// it answers.
func RedisURL(t testing.TB) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", RedisAddr(), 2*time.Second)
	if err != nil {
		Unreachable(t, "Redis at "+RedisAddr(), err)
	}
	_ = c.Close()
	return "redis://" + RedisAddr() + "/0"
}

// RedisClient returns a client of the test server, closed at the end.
func RedisClient(t testing.TB) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: RedisAddr(), DialTimeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		Unreachable(t, "Redis at "+RedisAddr(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// RedisPrefix returns a fresh key prefix whose keys are deleted at the end.
func RedisPrefix(t testing.TB) string {
	t.Helper()
	prefix := Name("rs_test_") + ":"
	t.Cleanup(func() {
		c := goredis.NewClient(&goredis.Options{Addr: RedisAddr()})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			_ = c.Del(ctx, iter.Val()).Err()
		}
	})
	return prefix
}

// Redis returns a store with a fresh key prefix on its own client.
func Redis(t testing.TB) *redis.Store {
	t.Helper()
	s, err := redis.New(RedisClient(t), redis.Config{Prefix: RedisPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Stores lists a constructor for every store, for tests that run against
// all of them.
var Stores = map[string]func(t testing.TB) retrysafe.Store{
	"memory":   func(t testing.TB) retrysafe.Store { return Memory(t) },
	"sqlite":   func(t testing.TB) retrysafe.Store { return SQLite(t) },
	"postgres": func(t testing.TB) retrysafe.Store { return Postgres(t) },
	"redis":    func(t testing.TB) retrysafe.Store { return Redis(t) },
}
