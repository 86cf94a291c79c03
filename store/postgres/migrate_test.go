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
	1: "32748c2cab15cce5e65cce24b0ac0dc4ba3c7b7c69a925f052cef9d35db5dd61",
	2: "7967b3180a904e281c3848be4d17a2d78ecade79434f3ffa720a4080b00d5e4e",
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
// migrated (seven migrations, the first named create_records) is refused
// with an error that says to recreate it, and Migrate changes nothing.
func TestMigrateRefusesPreReleaseTable(t *testing.T) {
	t.Parallel()
	pool := sharedPool(t)
	schema := newSchema(t)
	ctx := t.Context()
	versions := pgx.Identifier{schema, "retrysafe_migrations"}.Sanitize()
	for _, sql := range []string{
		"CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize(),
		"CREATE TABLE " + versions + " (table_name text NOT NULL, version integer NOT NULL, name text NOT NULL, " +
			"applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (table_name, version))",
		"INSERT INTO " + versions + " (table_name, version, name) VALUES ('retrysafe_records', 1, 'create_records'), " +
			"('retrysafe_records', 2, 'notify_flag'), ('retrysafe_records', 7, 'batch_by_kind')",
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
	if err == nil || !strings.Contains(err.Error(), "migration 1 (create_records)") || !strings.Contains(err.Error(), "must be recreated") {
		t.Fatalf("Migrate of a pre-release table = %v, want an error saying it must be recreated", err)
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
}
