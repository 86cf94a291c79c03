package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// openApp opens a caller's database (as an application would, with DSN),
// with a business table, and a Store on it through New.
func openApp(t *testing.T) (*sql.DB, *sqlite.Store) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "app.db"), sqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := sqlite.New(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return db, s
}

// placeOrder is a handler's work: the business write and the completion in
// one transaction, committed only if commit is true.
func placeOrder(ctx context.Context, db *sql.DB, s *sqlite.Store, p *retrysafe.ClaimParams, now time.Time, orderID string, commit bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES (?, ?)`, orderID, 4200); err != nil {
		return err
	}
	if err := s.CompleteTx(ctx, tx, completeParams(p, now, `{"order":"`+orderID+`"}`)); err != nil {
		return err
	}
	if !commit {
		return tx.Rollback()
	}
	return tx.Commit()
}

func countOrders(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCompleteTxCommit(t *testing.T) {
	t.Parallel()
	db, s := openApp(t)
	ctx := context.Background()
	p := claimParams("order-key", "fp", base)
	mustClaim(t, s, p)
	if err := placeOrder(ctx, db, s, p, base.Add(time.Second), "o-1", true); err != nil {
		t.Fatalf("placeOrder: %v", err)
	}
	if n := countOrders(t, db); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: base.Add(time.Second)})
	if err != nil || rec.State != retrysafe.StateCompleted || string(rec.Response.Body) != `{"order":"o-1"}` {
		t.Fatalf("record after commit: %+v, %v", rec, err)
	}
	// A retry replays; it does not run again.
	if res := mustClaim(t, s, claimParams("order-key", "fp", base.Add(time.Minute))); res.Claimed {
		t.Fatal("retry after a committed completion claimed the key again")
	}
}

func TestCompleteTxRollback(t *testing.T) {
	t.Parallel()
	for name, retry := range map[string]func(t *testing.T, s *sqlite.Store, p *retrysafe.ClaimParams) *retrysafe.ClaimParams{
		// The engine saw the error and released the record.
		"release": func(t *testing.T, s *sqlite.Store, p *retrysafe.ClaimParams) *retrysafe.ClaimParams {
			if err := s.Release(context.Background(), &retrysafe.ReleaseParams{Scope: p.Scope, Key: p.Key, Token: p.Token}); err != nil {
				t.Fatalf("Release: %v", err)
			}
			return claimParams(p.Key, p.Fingerprint, base.Add(time.Second))
		},
		// The process died: the lease runs out and a retry takes over.
		"takeover": func(t *testing.T, s *sqlite.Store, p *retrysafe.ClaimParams) *retrysafe.ClaimParams {
			return claimParams(p.Key, p.Fingerprint, base.Add(p.Lease))
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, s := openApp(t)
			ctx := context.Background()
			p := claimParams("order-key", "fp", base)
			mustClaim(t, s, p)
			if err := placeOrder(ctx, db, s, p, base, "o-1", false); err != nil {
				t.Fatalf("placeOrder (rolled back): %v", err)
			}
			if n := countOrders(t, db); n != 0 {
				t.Fatalf("%d orders after rollback, want 0", n)
			}
			rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: base})
			if err != nil || rec.State != retrysafe.StateProcessing || rec.Token != p.Token || rec.Response != nil {
				t.Fatalf("record after rollback: %+v, %v; want processing, owned by the first claimant", rec, err)
			}

			p2 := retry(t, s, p)
			res := mustClaim(t, s, p2)
			if !res.Claimed {
				t.Fatalf("retry after rollback did not claim: %+v", res.Record)
			}
			// The first owner is fenced out of the retry's record.
			if err := placeOrder(ctx, db, s, p, base.Add(p.Lease), "o-stale", true); !errors.Is(err, retrysafe.ErrLeaseLost) {
				t.Fatalf("stale owner's CompleteTx: %v, want ErrLeaseLost", err)
			}
			if err := placeOrder(ctx, db, s, p2, base.Add(p.Lease), "o-1", true); err != nil {
				t.Fatalf("retry's placeOrder: %v", err)
			}
			if n := countOrders(t, db); n != 1 {
				t.Fatalf("%d orders after the retry, want exactly 1", n)
			}
		})
	}
}

func TestCompleteTxErrors(t *testing.T) {
	t.Parallel()
	db, s := openApp(t)
	ctx := context.Background()
	if err := s.CompleteTx(ctx, nil, &retrysafe.CompleteParams{Now: base}); err == nil {
		t.Error("CompleteTx with a nil tx: no error")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	err = s.CompleteTx(ctx, tx, &retrysafe.CompleteParams{Scope: "tenant", Key: "absent", Token: "t", Now: base, TTL: time.Hour})
	if !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Errorf("CompleteTx of an absent record: %v, want ErrLeaseLost", err)
	}
}

func countRows(t *testing.T, db *sql.DB, query string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t) // Open migrated once
	ctx := context.Background()
	for i := range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate #%d: %v", i+2, err)
		}
	}
	if n := countRows(t, s.DB(), `SELECT COUNT(*) FROM retrysafe_records_migrations`); n != sqlite.LatestSchemaVersion() {
		t.Fatalf("%d version rows, want %d", n, sqlite.LatestSchemaVersion())
	}
	if v := countRows(t, s.DB(), `SELECT MAX(version) FROM retrysafe_records_migrations`); v != sqlite.LatestSchemaVersion() || v < 1 {
		t.Fatalf("schema version %d, want %d", v, sqlite.LatestSchemaVersion())
	}
}

// TestMigrateConcurrent: eight *sql.DB (as eight processes would) migrate a
// fresh file at once; all succeed and each migration is applied once.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "race.db")
	ctx := context.Background()
	const n = 8
	stores := make([]*sqlite.Store, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range n {
		ready.Add(1)
		done.Go(func() {
			ready.Done()
			<-start
			if i%2 == 0 {
				stores[i], errs[i] = sqlite.Open(ctx, path, sqlite.Config{})
				return
			}
			db, err := sql.Open("sqlite", sqlite.DSN(path, sqlite.Config{}))
			if err != nil {
				errs[i] = err
				return
			}
			t.Cleanup(func() { db.Close() })
			s, err := sqlite.New(db, sqlite.Config{})
			if err != nil {
				errs[i] = err
				return
			}
			stores[i], errs[i] = s, s.Migrate(ctx)
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d: %v", i, err)
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	if got := countRows(t, stores[0].DB(), `SELECT COUNT(*) FROM retrysafe_records_migrations`); got != sqlite.LatestSchemaVersion() {
		t.Fatalf("%d version rows, want %d", got, sqlite.LatestSchemaVersion())
	}
	// Every store works on the migrated file.
	for i, s := range stores {
		if _, err := s.Claim(ctx, claimParams(fmt.Sprint("k", i), "fp", base)); err != nil {
			t.Fatalf("store %d: Claim: %v", i, err)
		}
	}
}

// TestSweepBatches: 2500 expired records swept in batches of 1000 (three
// statements, the last partial); live and processing records stay.
func TestSweepBatches(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	db := s.DB()

	// Bulk-load expired completed records in one transaction (through the
	// store API each would be its own synced commit).
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2500)
INSERT INTO retrysafe_records (scope, idem_key, fingerprint, state, token, attempt,
	created_at, updated_at, lease_until, expires_at, status, headers, body)
SELECT 'tenant', 'old-' || i, 'fp', 'completed', 'tok', 1, ?1, ?1, ?1, ?2, 200, '{}', x'00' FROM n`,
		base.UnixNano(), base.Add(time.Hour).UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Survivors: one completed record still live, one processing record
	// whose lease ran out long ago (not the sweeper's business).
	live := claimParams("live", "fp", base)
	mustClaim(t, s, live)
	if err := s.Complete(ctx, completeParams(live, base.Add(2*time.Hour), "x")); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, claimParams("stuck", "fp", base))

	now := base.Add(2 * time.Hour) // old-* expired at base+1h; live expires at base+3h
	n, err := s.Sweep(ctx, &admin.SweepParams{Now: now, BatchSize: 1000})
	if err != nil || n != 2500 {
		t.Fatalf("Sweep = %d, %v; want 2500", n, err)
	}
	if left := countRows(t, db, `SELECT COUNT(*) FROM retrysafe_records`); left != 2 {
		t.Fatalf("%d records left, want 2 (live, stuck)", left)
	}
	if n, err := s.Sweep(ctx, &admin.SweepParams{Now: now}); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}
	// Exactly a multiple of the batch size ends too.
	n, err = s.Sweep(ctx, &admin.SweepParams{Now: base.Add(3 * time.Hour), BatchSize: 1})
	if err != nil || n != 1 {
		t.Fatalf("Sweep of the live record at expiry = %d, %v; want 1", n, err)
	}
}

// TestSchemaVersion: Store.SchemaVersion is the version the database is
// at (0 before Migrate), LatestSchemaVersion the one Migrate brings it to,
// and a database that records a migration this build does not have (a
// newer build's) is refused by both SchemaVersion and Migrate.
func TestSchemaVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "v.db"), sqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s, err := sqlite.New(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("SchemaVersion before Migrate = %d, %v; want 0", v, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	latest := sqlite.LatestSchemaVersion()
	if v, err := s.SchemaVersion(ctx); err != nil || v != latest || v < 1 {
		t.Fatalf("SchemaVersion after Migrate = %d, %v; want %d", v, err, latest)
	}
	if _, err := db.Exec(`INSERT INTO retrysafe_records_migrations (version, name, applied_at) VALUES (?, 'newer', 0)`, latest+1); err != nil {
		t.Fatal(err)
	}
	if v, err := s.SchemaVersion(ctx); err == nil || !strings.Contains(err.Error(), "(newer), which this build") {
		t.Fatalf("SchemaVersion of a database a newer build migrated = %d, %v; want an error naming the migration", v, err)
	}
	if err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "(newer), which this build") {
		t.Fatalf("Migrate of a database a newer build migrated = %v; want an error naming the migration", err)
	}
}

// TestMigrateRefusesPreReleaseDatabase: a database that a pre-release
// build migrated is refused with an error that says to recreate it, by
// Open as by Migrate, and nothing is applied. "three" is the oldest layout
// (three migrations, recorded by file name); "two" is the one of the
// builds that had 0001_initial and 0002_unknown_outcomes, folded since
// into 0001_schema; "one" is the one of the builds before 0002, whose
// table lacks 0002's columns (and whose version row alone would say "up to
// date" had the folded migration kept the name initial).
func TestMigrateRefusesPreReleaseDatabase(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		rows string // the recorded migrations
		want string // in the error
	}{
		"three": {"(1, '0001_records.sql', 0), (2, '0002_processing_lease_index.sql', 0), (3, '0003_route.sql', 0)",
			"records migration 1 (0001_records.sql), which this build"},
		"two": {"(1, 'initial', 0), (2, 'unknown_outcomes', 0)", "records migration 1 (initial), which this build"},
		"one": {"(1, 'initial', 0)", "records migration 1 (initial), which this build"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "old.db")
			db, err := sql.Open("sqlite", sqlite.DSN(path, sqlite.Config{}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			if _, err := db.Exec(`CREATE TABLE retrysafe_records_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL);
INSERT INTO retrysafe_records_migrations VALUES ` + tc.rows); err != nil {
				t.Fatal(err)
			}
			s, err := sqlite.New(db, sqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "must be recreated") {
				t.Fatalf("Migrate of a pre-release database = %v, want an error containing %q saying it must be recreated", err, tc.want)
			} else if errors.Is(err, retrysafe.ErrStoreUnavailable) {
				t.Fatalf("Migrate of a pre-release database = %v: not an outage", err)
			}
			if s, err := sqlite.Open(ctx, path, sqlite.Config{}); err == nil || !strings.Contains(err.Error(), tc.want) {
				if s != nil {
					_ = s.Close()
				}
				t.Fatalf("Open of a pre-release database = %v, want the same error", err)
			}
			if n := countRows(t, db, `SELECT COUNT(*) FROM sqlite_master WHERE name = 'retrysafe_records'`); n != 0 {
				t.Fatal("Migrate of a pre-release database created the records table")
			}
		})
	}
}

// TestMigrateFinishesAFailedMigrate: a Migrate that failed half way (here
// at 0001's second index, after the table was created, because an index
// of that name is in the way) leaves nothing behind, and the next Migrate
// does it all. It fails when the migrations do not run in one transaction.
func TestMigrateFinishesAFailedMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "failed.db"), sqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(`CREATE TABLE other (x INTEGER); CREATE INDEX retrysafe_records_processing_lease ON other (x)`); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.New(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "0001_schema.sql") {
		t.Fatalf("Migrate with an index in the way = %v, want 0001's error", err)
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM sqlite_master WHERE tbl_name IN ('retrysafe_records', 'retrysafe_records_migrations')`); n != 0 {
		t.Fatalf("%d of the store's tables and indexes after the failed Migrate, want none", n)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("SchemaVersion after the failed Migrate = %d, %v; want 0", v, err)
	}
	if _, err := db.Exec(`DROP INDEX retrysafe_records_processing_lease`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after a failed one: %v", err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != sqlite.LatestSchemaVersion() {
		t.Fatalf("SchemaVersion after = %d, %v; want %d", v, err, sqlite.LatestSchemaVersion())
	}
	mustClaim(t, s, claimParams("k", "fp", base))
}
