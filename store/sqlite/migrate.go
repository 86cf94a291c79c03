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
// it to.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v sql.NullInt64
	err := s.retry(ctx, "migrate", func() error {
		var exists int
		err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
			s.cfg.Table+"_migrations").Scan(&exists)
		if err != nil || exists == 0 {
			return err
		}
		return s.db.QueryRowContext(ctx, "SELECT MAX(version) FROM "+quoteIdent(s.cfg.Table+"_migrations")).Scan(&v)
	})
	if err != nil {
		return 0, err
	}
	return int(v.Int64), nil
}

// Migrate brings the schema up to date: it applies the embedded migrations
// (migrations/NNNN_*.sql) not yet recorded in the version table
// Config.Table+"_migrations". It is idempotent, and safe when several
// goroutines or processes migrate one database at once: the pending
// migrations and their version rows are applied in one BEGIN IMMEDIATE
// transaction (SQLite's DDL is transactional), so one migrator applies them
// and the others, after waiting for the write lock, find nothing to do. A
// database already at the current version is detected without taking the
// write lock.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	versions := quoteIdent(s.cfg.Table + "_migrations")
	latest := migration.Latest(ms)

	var current sql.NullInt64
	err = s.db.QueryRowContext(ctx, "SELECT MAX(version) FROM "+versions).Scan(&current)
	if err == nil && current.Int64 >= int64(latest) {
		return nil
	}
	return s.retry(ctx, "migrate", func() error {
		return s.immediate(ctx, func(conn *sql.Conn) error {
			_, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+versions+` (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
)`)
			if err != nil {
				return err
			}
			var current sql.NullInt64
			if err := conn.QueryRowContext(ctx, "SELECT MAX(version) FROM "+versions).Scan(&current); err != nil {
				return err
			}
			for _, m := range ms {
				if int64(m.Version) <= current.Int64 {
					continue
				}
				stmt := strings.NewReplacer("{{table}}", quoteIdent(s.cfg.Table), "{{prefix}}", s.cfg.Table).Replace(m.SQL)
				if _, err := conn.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("migration %s: %w", m.File, err)
				}
				// applied_at is informational: the store's clock is fine.
				_, err := conn.ExecContext(ctx, "INSERT INTO "+versions+" (version, name, applied_at) VALUES (?, ?, ?)",
					m.Version, m.File, time.Now().UnixNano())
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
}
