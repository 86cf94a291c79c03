package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe/internal/migration"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations returns the embedded migrations (migrations/NNNN_name.sql)
// in version order, checked by [migration.Load]. Their SQL holds the
// {{table}} and {{prefix}} placeholders.
func migrations() ([]migration.Migration, error) {
	ms, err := migration.Load(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return ms, nil
}

// LatestSchemaVersion returns the schema version that [Store.Migrate]
// brings a database to: the number of the last embedded migration.
// [Store.SchemaVersion] is the version a database is at.
func LatestSchemaVersion() int {
	ms, _ := migrations() // invalid files fail Migrate, which every test runs
	return migration.Latest(ms)
}

// SchemaVersion returns the schema version the store's database is at:
// the last migration applied to it, 0 when none was (the version table
// may not exist yet). [LatestSchemaVersion] is the version Migrate brings
// it to. It returns an error for a database migrated by a pre-release
// build (see [Store.Migrate]).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	var applied map[int]string
	err = s.retry(ctx, "migrate", func() error {
		var exists int
		err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
			s.cfg.Table+"_migrations").Scan(&exists)
		if err != nil || exists == 0 {
			return err
		}
		applied, err = s.applied(ctx, s.db)
		return err
	})
	if err != nil {
		return 0, err
	}
	return s.check(ms, applied)
}

// Migrate brings the schema up to date: it applies the embedded migrations
// (migrations/NNNN_*.sql) not yet recorded in the version table
// Config.Table+"_migrations". It is idempotent, and safe when several
// goroutines or processes migrate one database at once: the pending
// migrations and their version rows are applied in one BEGIN IMMEDIATE
// transaction (SQLite's DDL is transactional), so one migrator applies them
// and the others, after waiting for the write lock, find nothing to do. A
// database already at the current version is detected without taking the
// write lock. A database migrated by a pre-release build (before v0.1.0)
// is refused: recreate it.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	versions := quoteIdent(s.cfg.Table + "_migrations")
	latest := migration.Latest(ms)

	if applied, err := s.applied(ctx, s.db); err == nil {
		current, err := s.check(ms, applied)
		if err != nil || current == latest {
			return err
		}
	}
	var refused error
	err = s.retry(ctx, "migrate", func() error {
		return s.immediate(ctx, func(conn *sql.Conn) error {
			_, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+versions+` (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
)`)
			if err != nil {
				return err
			}
			applied, err := s.applied(ctx, conn)
			if err != nil {
				return err
			}
			current, err := s.check(ms, applied)
			if err != nil {
				refused = err
				return err
			}
			for _, m := range ms[current:] {
				stmt := strings.NewReplacer("{{table}}", quoteIdent(s.cfg.Table), "{{prefix}}", s.cfg.Table).Replace(m.SQL)
				if _, err := conn.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("migration %s: %w", m.File, err)
				}
				// applied_at is informational: the store's clock is fine.
				_, err := conn.ExecContext(ctx, "INSERT INTO "+versions+" (version, name, applied_at) VALUES (?, ?, ?)",
					m.Version, m.Name, time.Now().UnixNano())
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
	if refused != nil {
		return refused
	}
	return err
}

// applied returns the migrations the version table records.
func (s *Store) applied(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}) (map[int]string, error) {
	return migration.ReadApplied(ctx, q, "SELECT version, name FROM "+quoteIdent(s.cfg.Table+"_migrations"))
}

// check returns the version applied migrations bring the database to,
// or an error when a migration is not one of ms ([migration.Check]).
func (s *Store) check(ms []migration.Migration, applied map[int]string) (int, error) {
	v, err := migration.Check(ms, applied)
	if err != nil {
		return 0, fmt.Errorf("sqlite: table %s: %w", s.cfg.Table, err)
	}
	return v, nil
}
