package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/postgres"
)

const defaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// testURL is the database the tests use: RETRYSAFE_POSTGRES_URL or the
// local default.
func testURL() string {
	if u := os.Getenv("RETRYSAFE_POSTGRES_URL"); u != "" {
		return u
	}
	return defaultURL
}

var shared struct {
	once sync.Once
	pool *pgxpool.Pool
	err  error
}

// TestMain closes the shared pool after all tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.pool != nil {
		shared.pool.Close()
	}
	os.Exit(code)
}

// unreachable skips the test, or fails it under CI=true.
func unreachable(t testing.TB, err error) {
	t.Helper()
	testenv.Unreachable(t, "PostgreSQL at "+testURL(), err)
}

// sharedPool returns the pool that most tests share (each in its own schema).
func sharedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	shared.once.Do(func() {
		cfg, err := pgxpool.ParseConfig(testURL())
		if err != nil {
			shared.err = err
			return
		}
		cfg.MaxConns = 16
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err == nil {
			err = pool.Ping(ctx)
		}
		if err != nil {
			if pool != nil {
				pool.Close()
			}
			shared.err = err
			return
		}
		shared.pool = pool
	})
	if shared.err != nil {
		unreachable(t, shared.err)
	}
	return shared.pool
}

// newPool returns a pool of its own, closed when the test ends.
func newPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	sharedPool(t) // skip early when the server is unreachable
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newSchema returns a fresh random schema name; the schema (once a store
// has migrated into it) is dropped when the test ends.
func newSchema(t testing.TB) string {
	t.Helper()
	pool := sharedPool(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "rstest_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// newStoreOn returns a migrated store on pool in schema, closed when the
// test ends.
func newStoreOn(t testing.TB, pool *pgxpool.Pool, schema string) *postgres.Store {
	t.Helper()
	s, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}

// newStore returns a migrated store in a schema of its own on the shared pool.
func newStore(t testing.TB) *postgres.Store {
	t.Helper()
	return newStoreOn(t, sharedPool(t), newSchema(t))
}

var base = time.Date(2031, time.March, 4, 5, 6, 7, 123456789, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

func keyN(prefix string, i int) string { return fmt.Sprintf("%s-%d", prefix, i) }
