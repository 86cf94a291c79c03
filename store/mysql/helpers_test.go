package mysql_test

import (
	"context"
	"database/sql"
	"os"
	"sync"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/mysql"
)

var shared struct {
	once sync.Once
	db   *sql.DB
	err  error
}

// TestMain closes the shared database after all tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.db != nil {
		shared.db.Close()
	}
	os.Exit(code)
}

// unreachable skips the test, or fails it under CI=true.
func unreachable(t testing.TB, err error) {
	t.Helper()
	testenv.Unreachable(t, "MySQL/MariaDB at "+testenv.MySQLURL(), err)
}

// openDB opens a *sql.DB on the test server with up to n connections.
func openDB(t testing.TB, n int) (*sql.DB, error) {
	t.Helper()
	dc, _, err := mysql.ParseURL(testenv.MySQLURL())
	if err != nil {
		t.Fatal(err)
	}
	connector, err := driver.NewConnector(dc)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	return db, nil
}

// sharedDB returns the *sql.DB most tests share (each with a table of its
// own).
func sharedDB(t testing.TB) *sql.DB {
	t.Helper()
	shared.once.Do(func() {
		db, _ := openDB(t, 16)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			shared.err = err
			return
		}
		shared.db = db
	})
	if shared.err != nil {
		unreachable(t, shared.err)
	}
	return shared.db
}

// newDB returns a *sql.DB of its own, closed when the test ends.
func newDB(t testing.TB, n int) *sql.DB {
	t.Helper()
	sharedDB(t) // skip early when the server is unreachable
	db, _ := openDB(t, n)
	t.Cleanup(func() { db.Close() })
	return db
}

// newTable returns a fresh random table name; the table, its migrations
// table and its procedure are dropped when the test ends.
func newTable(t testing.TB) string {
	t.Helper()
	db := sharedDB(t)
	name := testenv.Name("rstest_")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, stmt := range testenv.MySQLDropStatements(name) {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	return name
}

// newStoreOn returns a migrated store on db with table, closed when the
// test ends.
func newStoreOn(t testing.TB, db *sql.DB, table string) *mysql.Store {
	t.Helper()
	s, err := mysql.New(db, mysql.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}

// newStore returns a migrated store with a table of its own on the shared
// database.
func newStore(t testing.TB) *mysql.Store {
	t.Helper()
	return newStoreOn(t, sharedDB(t), newTable(t))
}

var base = time.Date(2031, time.March, 4, 5, 6, 7, 123456789, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

const (
	scope = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	fpA   = "fp-a"
	lease = 30 * time.Second
	ttl   = 24 * time.Hour
)

func claimP(key, fp string, now time.Time) *retrysafe.ClaimParams {
	return &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: fp, Token: retrysafe.NewToken(), Now: now, Lease: lease}
}

func mustClaim(t testing.TB, s retrysafe.Store, p *retrysafe.ClaimParams) *retrysafe.ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), p)
	if err != nil {
		t.Fatalf("Claim(%q): %v", p.Key, err)
	}
	return res
}

// mustComplete claims key (fingerprint fpA, at(0)) and completes it with
// a 201 whose body is body.
func mustComplete(t testing.TB, s retrysafe.Store, key, body string) {
	t.Helper()
	rec := mustClaim(t, s, claimP(key, fpA, at(0))).Record
	if err := s.Complete(context.Background(), &retrysafe.CompleteParams{Scope: scope, Key: key, Token: rec.Token, Now: at(0), TTL: ttl,
		Response: &retrysafe.Response{Status: 201, Body: []byte(body)}}); err != nil {
		t.Fatal(err)
	}
}
