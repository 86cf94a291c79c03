package postgres_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/postgres"
)

// functionsHash is the SHA-256 of functions.sql's statements (the file
// without its comment lines) as each schema version ships them. Migrate
// replaces the functions only when it applies a migration, so a change to
// a function must come with a new migration (and a new line here).
var functionsHash = map[int]string{
	1: "7967b3180a904e281c3848be4d17a2d78ecade79434f3ffa720a4080b00d5e4e",
}

func TestFunctionsNeedAMigration(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("functions.sql")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			h.Write([]byte(line))
		}
	}
	sum := h.Sum(nil)
	v := postgres.LatestSchemaVersion()
	if got := hex.EncodeToString(sum[:]); functionsHash[v] != got {
		t.Fatalf("functions.sql's statements (SHA-256 %s) are not the ones schema version %d shipped (%q): "+
			"add a migration, so that Migrate replaces the functions, and record the hash under its number", got, v, functionsHash[v])
	}
}

// TestMigrateRefusesPreReleaseTable: a table that a pre-release build
// migrated is refused with an error that says to recreate it, and Migrate
// changes nothing. "seven" is the oldest layout (seven migrations, the
// first named create_records); "two" is the one of the builds that had
// 0001_initial and 0002_unknown_outcomes, folded since into 0001_schema;
// "one" is the one of the builds before 0002, whose table lacks 0002's
// columns (and whose version row alone would say "up to date" had the
// folded migration kept the name initial).
func TestMigrateRefusesPreReleaseTable(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		rows string // the recorded migrations
		want string // in the error
	}{
		"seven": {"('retrysafe_records', 1, 'create_records'), ('retrysafe_records', 2, 'notify_flag'), ('retrysafe_records', 7, 'batch_by_kind')",
			"migration 1 (create_records)"},
		"two": {"('retrysafe_records', 1, 'initial'), ('retrysafe_records', 2, 'unknown_outcomes')", "migration 1 (initial)"},
		"one": {"('retrysafe_records', 1, 'initial')", "migration 1 (initial)"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := sharedPool(t)
			schema := newSchema(t)
			ctx := t.Context()
			versions := pgx.Identifier{schema, "retrysafe_migrations"}.Sanitize()
			for _, sql := range []string{
				"CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize(),
				"CREATE TABLE " + versions + " (table_name text NOT NULL, version integer NOT NULL, name text NOT NULL, " +
					"applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (table_name, version))",
				"INSERT INTO " + versions + " (table_name, version, name) VALUES " + tc.rows,
			} {
				if _, err := pool.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			s, err := postgres.New(pool, postgres.Config{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
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
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1", schema).Scan(&n); err != nil || n != 1 {
				t.Fatalf("tables in %s after the refused Migrate: %d, %v; want only the migrations table", schema, n, err)
			}
		})
	}
}

// TestMigrateFinishesAFailedMigrate: a Migrate that failed half way (here
// in functions.sql, after the table was created and its version recorded,
// because a function of the claim's signature with another result type is
// in the way) leaves nothing behind, and the next Migrate does it all: the
// table, its version, and the functions. It fails when the migrations and
// functions.sql are not one transaction.
func TestMigrateFinishesAFailedMigrate(t *testing.T) {
	t.Parallel()
	pool := sharedPool(t)
	schema := newSchema(t)
	ctx := t.Context()
	claimFn := pgx.Identifier{schema, "retrysafe_records_claim"}.Sanitize()
	for _, sql := range []string{
		"CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize(),
		"CREATE FUNCTION " + claimFn + "(text, text, text, text, bigint, bigint, text, boolean, text) RETURNS integer LANGUAGE sql AS 'SELECT 1'",
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	s, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "functions.sql") {
		t.Fatalf("Migrate with a function in the way = %v, want functions.sql's error", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1", schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("tables in %s after the failed Migrate: %d, %v; want none", schema, n, err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("SchemaVersion after the failed Migrate = %d, %v; want 0", v, err)
	}
	if _, err := pool.Exec(ctx, "DROP FUNCTION "+claimFn+"(text, text, text, text, bigint, bigint, text, boolean, text)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after a failed one: %v", err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != postgres.LatestSchemaVersion() {
		t.Fatalf("SchemaVersion after = %d, %v; want %d", v, err, postgres.LatestSchemaVersion())
	}
	if res := mustClaim(t, s, claimP("k", fpA, at(0))); !res.Claimed {
		t.Fatalf("claim after Migrate: %+v", res)
	}
}
