package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one numbered schema change.
type migration struct {
	version int
	name    string
	sql     string // with the {{table}} and {{prefix}} placeholders
}

// migrations returns the embedded migrations in version order. File names
// are NNNN_name.sql; versions must be unique.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("sqlite: bad migration file name %q", name)
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", name))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("sqlite: duplicate migration version %d", ms[i].version)
		}
	}
	return ms, nil
}

// LatestSchemaVersion returns the schema version that [Store.Migrate]
// brings a database to: the number of the last embedded migration.
// [Store.SchemaVersion] is the version a database is at.
func LatestSchemaVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
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
	latest := ms[len(ms)-1].version

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
				if int64(m.version) <= current.Int64 {
					continue
				}
				stmt := strings.NewReplacer("{{table}}", quoteIdent(s.cfg.Table), "{{prefix}}", s.cfg.Table).Replace(m.sql)
				if _, err := conn.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("migration %s: %w", m.name, err)
				}
				// applied_at is informational: the store's clock is fine.
				_, err := conn.ExecContext(ctx, "INSERT INTO "+versions+" (version, name, applied_at) VALUES (?, ?, ?)",
					m.version, m.name, time.Now().UnixNano())
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
}
