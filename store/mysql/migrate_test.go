package mysql_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/mysql"
)

// TestMigrateRefusesPreReleaseTable: a table that a pre-release build
// migrated is refused with an error that says to recreate it, and Migrate
// creates nothing. "old" is the oldest layout (records, then
// claim_procedure); "three" is the one of the builds that had 0002
// (unknown outcomes) and 0003 (group commit), folded since into 0001.
func TestMigrateRefusesPreReleaseTable(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		rows string // the recorded migrations
		want string // in the error
	}{
		"old":   {"(1, 'records', 0), (2, 'claim_procedure', 0)", "migration 1 (records)"},
		"three": {"(1, 'initial', 0), (2, 'unknown_outcomes', 0), (3, 'group_commit', 0)", "migration 1 (initial)"},
		// The first v0.1.0 layout, before the unknown-outcome columns:
		// it recorded migration 1 under the name the folded one had.
		"one": {"(1, 'initial', 0)", "migration 1 (initial)"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := sharedDB(t)
			table := newTable(t)
			ctx := t.Context()
			versions := "`" + table + "_migrations`"
			for _, stmt := range []string{
				"CREATE TABLE " + versions + " (version INT NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL, applied_at_ns BIGINT NOT NULL)",
				"INSERT INTO " + versions + " VALUES " + tc.rows,
			} {
				if _, err := db.ExecContext(ctx, stmt); err != nil {
					t.Fatal(err)
				}
			}
			s, err := mysql.New(db, mysql.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Migrate(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "must be recreated") {
				t.Fatalf("Migrate of a pre-release table = %v, want an error containing %q saying it must be recreated", err, tc.want)
			}
			if errors.Is(err, retrysafe.ErrStoreUnavailable) {
				t.Fatalf("Migrate of a pre-release table = %v: not an outage", err)
			}
			if _, err := s.SchemaVersion(ctx); err == nil || !strings.Contains(err.Error(), "must be recreated") {
				t.Fatalf("SchemaVersion of a pre-release table = %v, want the same error", err)
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
				table).Scan(&n); err != nil || n != 0 {
				t.Fatalf("records tables after the refused Migrate: %d, %v; want none", n, err)
			}
		})
	}
}

// TestMigrateFinishesADiedMigrate: a Migrate that died after creating the
// table (and the claim procedure), before it recorded version 1, is
// finished by the next one: the table keeps its record, and claims run
// the procedures.
func TestMigrateFinishesADiedMigrate(t *testing.T) {
	t.Parallel()
	db := sharedDB(t)
	table := newTable(t)
	ctx := t.Context()
	v1, err := os.ReadFile("migrations/0001_schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	q := func(name string) string { return "`" + name + "`" }
	for _, stmt := range []string{
		strings.NewReplacer("{{records}}", q(table), "{{expires_index}}", q(table+"_expires_at_idx"),
			"{{lease_index}}", q(table+"_processing_lease_idx"), "{{state_check}}", q(table+"_state_check")).Replace(string(v1)),
		"CREATE TABLE " + q(table+"_migrations") + " (version INT NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL, applied_at_ns BIGINT NOT NULL) ENGINE = InnoDB",
		"INSERT INTO " + q(table) + " (scope, idem_key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, route)" +
			" VALUES ('" + scope + "', 'old', 'fp-a', 'processing', 'tok', 1, 1, 1, 2, 'POST /x')",
		"CREATE PROCEDURE " + q(table+"_claim") + "(IN a INT) SELECT a",
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	s, err := mysql.New(db, mysql.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if v, err := s.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("SchemaVersion before = %d, %v; want 0", v, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after a died one: %v", err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != mysql.LatestSchemaVersion() {
		t.Fatalf("SchemaVersion after = %d, %v; want %d", v, err, mysql.LatestSchemaVersion())
	}
	rec := getRec(t, s, "old", at(0))
	if rec == nil || rec.Token != "tok" || rec.Route != "POST /x" || rec.Abandoned || rec.Checkpoint != nil {
		t.Fatalf("record after Migrate: %+v", rec)
	}
	c := claimP("old", fpA, at(0))
	c.NoTakeover = true
	if res := mustClaim(t, s, c); res.Claimed {
		t.Fatal("NoTakeover claim of the expired record took it over")
	}
	if res := mustClaim(t, s, claimP("new", fpA, at(0))); !res.Claimed {
		t.Fatalf("claim of a new key after Migrate: %+v", res)
	}
}
