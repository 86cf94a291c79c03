package mysql_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/mysql"
)

// TestMigrateRefusesPreReleaseTable: a table that a pre-release build
// migrated (records, then claim_procedure) is refused with an error that
// says to recreate it, and Migrate creates nothing.
func TestMigrateRefusesPreReleaseTable(t *testing.T) {
	t.Parallel()
	db := sharedDB(t)
	table := newTable(t)
	ctx := t.Context()
	versions := "`" + table + "_migrations`"
	for _, stmt := range []string{
		"CREATE TABLE " + versions + " (version INT NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL, applied_at_ns BIGINT NOT NULL)",
		"INSERT INTO " + versions + " VALUES (1, 'records', 0), (2, 'claim_procedure', 0)",
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
	if err == nil || !strings.Contains(err.Error(), "migration 1 (records)") || !strings.Contains(err.Error(), "must be recreated") {
		t.Fatalf("Migrate of a pre-release table = %v, want an error saying it must be recreated", err)
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
}
