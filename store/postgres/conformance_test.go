package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/postgres"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// TestConformance runs the shared store suite, each scenario in a schema of
// its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) retrysafe.Store { return newStore(t) })
}

// TestShared runs the two-instance suite: two stores on independent pools
// (as two processes would have) over one schema, 200 rounds.
func TestShared(t *testing.T) {
	t.Parallel()
	storetest.RunShared(t, func(t *testing.T) (a, b retrysafe.Store) {
		schema := newSchema(t)
		return newStoreOn(t, newPool(t, 8), schema), newStoreOn(t, newPool(t, 8), schema)
	})
}

// TestUnavailable runs the unreachable-store suite twice: a store whose
// pool was closed (Open, then Close), and a store whose pool points at a
// port nobody listens on, with a short connect timeout.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("closed", func(t *testing.T) {
		t.Parallel()
		storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
			schema := newSchema(t)
			s, err := postgres.Open(t.Context(), testURL(), postgres.Config{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			return s
		})
	})
	t.Run("dead port", func(t *testing.T) {
		t.Parallel()
		storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
			return deadStore(t)
		})
	})
}

// deadStore returns a store whose pool dials 127.0.0.1:1, where nothing
// listens, so every connection attempt is refused.
//
// Not a port that was just free: another test's server may take it in the
// meantime. Once, under load, the dial of such a port hung until its
// timeout instead of being refused: something listened there, most likely
// a redis-server of internal/redisserver, whose random ports (20000-49999
// with the cluster bus) overlap the ephemeral range. Port 1 is privileged
// and outside every range the tests take ports from.
func deadStore(t *testing.T) *postgres.Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.ConnectTimeout = time.Second
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
