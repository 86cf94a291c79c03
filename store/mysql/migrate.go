package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/migration"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// statementBreak separates the statements of one migration file: a line of
// its own. (The store's connections do not allow several statements in one
// query, and a procedure's body holds semicolons.)
const statementBreak = "\n-- ;\n"

// migrations returns the embedded migrations (migrations/NNNN_name.sql)
// in version order, checked by [migration.Load].
func migrations() ([]migration.Migration, error) {
	ms, err := migration.Load(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	return ms, nil
}

// LatestSchemaVersion returns the schema version that [Store.Migrate]
// brings a table to: the number of the last embedded migration.
// [Store.SchemaVersion] is the version a table is at.
func LatestSchemaVersion() int {
	ms, _ := migrations() // invalid files fail Migrate, which every test runs
	return migration.Latest(ms)
}

// migrateLockTimeout bounds the wait for another process's Migrate (in
// seconds, as GET_LOCK takes it).
const migrateLockTimeout = 60

// Migrate creates the records table, its indexes and the claim procedure,
// and applies any embedded migration the table does not have yet. Applied
// versions are kept in "<table>_migrations". When the table is already up
// to date it returns after one read and needs no DDL privileges.
//
// MySQL commits every DDL statement on its own, so migrations cannot share
// a transaction. Migrate is still safe to run concurrently from several
// processes: it holds a named lock (GET_LOCK, keyed by the database and
// the table) on one connection while it applies the missing migrations,
// and records each version right after its statements; every statement is
// written to be run again (CREATE TABLE IF NOT EXISTS, DROP PROCEDURE IF
// EXISTS before CREATE PROCEDURE), so a Migrate that died half way is
// finished by the next one.
//
// It needs the CREATE, INDEX, CREATE ROUTINE and ALTER ROUTINE privileges on
// the database; the store's statements later need SELECT, INSERT, UPDATE,
// DELETE and EXECUTE.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.open(); err != nil {
		return retrysafe.Unavailable("migrate", err)
	}
	ms, err := migrations()
	if err != nil {
		return err
	}
	latest := migration.Latest(ms)
	if v, err := s.schemaVersion(ctx, s.db); err == nil && v >= latest {
		return nil
	} else if err != nil && !isNoSuchTable(err) {
		return s.wrap(ctx, "migrate", err)
	}

	conn, err := s.db.Conn(ctx)
	if err != nil {
		return s.wrap(ctx, "migrate", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(CONCAT('retrysafe:', SHA1(CONCAT(DATABASE(), '.', ?))), ?)",
		s.cfg.Table, migrateLockTimeout).Scan(&got); err != nil {
		return s.wrap(ctx, "migrate", err)
	}
	if got.Int64 != 1 {
		return retrysafe.Unavailable("migrate", fmt.Errorf("mysql: another Migrate of table %s held the migration lock for %ds", s.cfg.Table, migrateLockTimeout))
	}
	defer func() {
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.ExecContext(unlockCtx, "DO RELEASE_LOCK(CONCAT('retrysafe:', SHA1(CONCAT(DATABASE(), '.', ?))))", s.cfg.Table); err != nil {
			// Closing the session releases its locks: drop the connection.
			_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
		}
	}()

	versions := quote(s.cfg.Table + "_migrations")
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+versions+` (
    version    INT          NOT NULL PRIMARY KEY,
    name       VARCHAR(255) NOT NULL,
    applied_at_ns BIGINT    NOT NULL
) ENGINE = InnoDB`); err != nil {
		return fmt.Errorf("mysql: migrate: create %s: %w", versions, s.wrap(ctx, "migrate", err))
	}
	current, err := s.schemaVersion(ctx, conn)
	if err != nil {
		return s.wrap(ctx, "migrate", err)
	}
	if current > latest {
		return fmt.Errorf("mysql: table %s is at schema version %d, newer than this build knows (%d)", s.cfg.Table, current, latest)
	}
	r := strings.NewReplacer(
		"{{records}}", quote(s.cfg.Table),
		"{{expires_index}}", quote(s.cfg.Table+"_expires_at_idx"),
		"{{lease_index}}", quote(s.cfg.Table+"_processing_lease_idx"),
		"{{state_check}}", quote(s.cfg.Table+"_state_check"),
		"{{claim_proc}}", quote(s.cfg.Table+"_claim"),
	)
	for _, m := range ms[current:] {
		for stmt := range strings.SplitSeq(r.Replace(m.SQL), statementBreak) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("mysql: migration %s: %w", m.File, s.wrap(ctx, "migrate", err))
			}
		}
		// applied_at_ns is informational: the client's clock is fine.
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+versions+" (version, name, applied_at_ns) VALUES (?, ?, ?)",
			m.Version, m.Name, time.Now().UnixNano()); err != nil {
			return s.wrap(ctx, "migrate", err)
		}
	}
	return nil
}

// SchemaVersion returns the schema version the store's table is at: the
// last migration applied to it, 0 when none was. [LatestSchemaVersion] is
// the version Migrate brings it to.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	v, err := s.schemaVersion(ctx, s.db)
	if isNoSuchTable(err) {
		return 0, nil
	}
	if err != nil {
		return 0, s.wrap(ctx, "migrate", err)
	}
	return v, nil
}

type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) schemaVersion(ctx context.Context, q rowQuerier) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM "+quote(s.cfg.Table+"_migrations")).Scan(&v)
	return v, err
}

// isNoSuchTable reports whether err says a table does not exist.
func isNoSuchTable(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == erNoSuchTable
}
