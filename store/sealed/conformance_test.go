package sealed_test

import (
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/sealed"
	"github.com/retrysafe/retrysafe/store/sqlite"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// TestConformance runs the store suite on the wrapper over every store:
// sealing must not change what a store keeps or how it behaves.
func TestConformance(t *testing.T) {
	t.Parallel()
	ring := testRing(t, "k1", "k2")
	for _, name := range []string{"memory", "sqlite", "postgres", "redis"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) retrysafe.Store {
				return wrap(t, testenv.Stores[name](t), ring, sealed.Config{})
			})
		})
	}
}

// TestConformanceNoRing runs the suite on the wrapper without a key ring
// (how `retrysafe serve` runs without keys): it writes in the clear.
func TestConformanceNoRing(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) retrysafe.Store {
		return wrap(t, testenv.Memory(t), nil, sealed.Config{})
	})
}

// TestUnavailable: the wrapper passes store errors through unchanged.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	ring := testRing(t, "k1")
	storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
		db := testenv.SQLite(t).DB()
		broken, err := sqlite.New(db, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return wrap(t, broken, ring, sealed.Config{})
	})
}
