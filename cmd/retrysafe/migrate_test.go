package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/store/mysql"
	"github.com/retrysafe/retrysafe/store/postgres"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

func migrateCmdForTest(open storeOpener) func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) error {
	return func(ctx context.Context, args []string, stdout, stderr *bytes.Buffer) error {
		return runMigrate(ctx, args, stdout, stderr, open)
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	for _, b := range cliBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			want := 0
			switch b.store.(type) {
			case *sqlite.Store:
				want = sqlite.LatestSchemaVersion()
			case *postgres.Store:
				want = postgres.LatestSchemaVersion()
			case *mysql.Store:
				want = mysql.LatestSchemaVersion()
			}
			for range 2 { // a second run finds nothing to do
				out, _, err := cliRun(t, b, migrateCmdForTest, "--store", b.url, "--json")
				if err != nil {
					t.Fatal(err)
				}
				var res struct {
					Version int    `json:"schemaVersion"`
					Note    string `json:"note"`
				}
				if err := json.Unmarshal([]byte(out), &res); err != nil {
					t.Fatalf("not JSON: %v\n%s", err, out)
				}
				if want == 0 {
					if !strings.Contains(res.Note, "nothing to migrate") {
						t.Errorf("a store without a schema: %s", out)
					}
				} else if res.Version != want || want < 1 {
					t.Errorf("schema version %d, want %d", res.Version, want)
				}
			}
			text, _, err := cliRun(t, b, migrateCmdForTest, "--store", b.url)
			if err != nil {
				t.Fatal(err)
			}
			wantText := "Schema up to date"
			if want == 0 {
				wantText = "nothing to migrate: the " + b.name + " store has no schema"
			}
			if !strings.Contains(text, wantText) {
				t.Errorf("output %q lacks %q", text, wantText)
			}
		})
	}
}

// TestMigrateRefusesUnknownMigrations: migrate of a database that records
// a migration this build does not have (a newer build's, or a pre-release
// one's) fails and says the database must be recreated.
func TestMigrateRefusesUnknownMigrations(t *testing.T) {
	t.Parallel()
	b := openCLIBackend(t, "sqlite", "sqlite:"+filepath.Join(t.TempDir(), "records.db"))
	newer := sqlite.LatestSchemaVersion() + 1
	if _, err := b.store.(*sqlite.Store).DB().Exec(
		`INSERT INTO retrysafe_records_migrations (version, name, applied_at) VALUES (?, 'newer', 0)`, newer); err != nil {
		t.Fatal(err)
	}
	_, _, err := cliRun(t, b, migrateCmdForTest, "--store", b.url, "--json")
	if err == nil || !strings.Contains(err.Error(), "(newer), which this build") || !strings.Contains(err.Error(), "must be recreated") {
		t.Fatalf("migrate of a database with an unknown migration: %v; want an error saying it must be recreated", err)
	}
}
