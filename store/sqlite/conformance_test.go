package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sqlite"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// TestConformance runs the shared store suite, one temp file per scenario.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) retrysafe.Store {
		s, _ := openStore(t)
		return s
	})
}

// TestConformanceNew runs the suite on a Store from New on a caller's
// *sql.DB opened with DSN and a custom table name that is an SQL keyword.
func TestConformanceNew(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) retrysafe.Store {
		db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "app.db"), sqlite.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		// "order" is an SQL keyword: the store quotes its names.
		s, err := sqlite.New(db, sqlite.Config{Table: "order"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestUnavailable: a Store on a closed *sql.DB fails every call with
// ErrStoreUnavailable.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
		s, _ := openStore(t)
		db := s.DB()
		broken, err := sqlite.New(db, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return broken
	})
}

// TestShared: two Stores on two independently opened *sql.DB on one file,
// as two processes would use it.
func TestShared(t *testing.T) {
	t.Parallel()
	storetest.RunShared(t, func(t *testing.T) (a, b retrysafe.Store) {
		s1, path := openStore(t)
		s2, err := sqlite.Open(context.Background(), path, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s2.Close() })
		return s1, s2
	})
}
