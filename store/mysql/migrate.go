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

// proceduresSQL drops and creates the claim procedure; Migrate runs it
// with the last migration it applies.
//
//go:embed procedures.sql
var proceduresSQL string

// statementBreak separates the statements of one migration file (and of
// procedures.sql): a line of its own. (The store's connections do not
// allow several statements in one query, and a procedure's body holds
// semicolons.)
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

// Migrate creates the records table and its indexes, applies any embedded
// migration the table does not have yet, and then drops and creates the
// claim procedure of procedures.sql. Applied versions are kept in
// "<table>_migrations". When the table is already up to date it returns
// after one read and needs no DDL privileges. A table migrated by a
// pre-release build (before v0.1.0) is refused: recreate it.
//
// MySQL commits every DDL statement on its own, so migrations cannot share
// a transaction. Migrate is still safe to run concurrently from several
// processes: it holds a named lock (GET_LOCK, keyed by the database and
// the table) on one connection while it applies the missing migrations,
// and records each version right after its statements (the last one after
// procedures.sql too); every statement is written to be run again (CREATE
// TABLE IF NOT EXISTS, DROP PROCEDURE IF EXISTS before CREATE PROCEDURE),
// so a Migrate that died half way is finished by the next one. A change to
// procedures.sql ships with a new migration, so that Migrate runs it.
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
	if v, err := s.schemaVersion(ctx, s.db, ms); err == nil && v == latest {
		return nil
	} else if err != nil && !isNoSuchTable(err) {
		return err
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
	current, err := s.schemaVersion(ctx, conn, ms)
	if err != nil {
		return err
	}
	r := strings.NewReplacer(
		"{{records}}", quote(s.cfg.Table),
		"{{expires_index}}", quote(s.cfg.Table+"_expires_at_idx"),
		"{{lease_index}}", quote(s.cfg.Table+"_processing_lease_idx"),
		"{{state_check}}", quote(s.cfg.Table+"_state_check"),
		"{{claim_proc}}", quote(s.cfg.Table+"_claim"),
	)
	for _, m := range ms[current:] {
		sql := m.SQL
		if m.Version == latest {
			sql += statementBreak + proceduresSQL
		}
		for stmt := range strings.SplitSeq(r.Replace(sql), statementBreak) {
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
// the version Migrate brings it to. It returns an error for a table
// migrated by a pre-release build (see [Store.Migrate]).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	v, err := s.schemaVersion(ctx, s.db, ms)
	if isNoSuchTable(err) {
		return 0, nil
	}
	return v, err
}

// schemaVersion reads the migrations applied to the table and checks them
// against ms ([migration.Check]): a table migrated by another build is an
// error of its own, a failed read wraps [retrysafe.ErrStoreUnavailable]
// (and the driver's error, for isNoSuchTable).
func (s *Store) schemaVersion(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, ms []migration.Migration) (int, error) {
	applied, err := migration.ReadApplied(ctx, q, "SELECT version, name FROM "+quote(s.cfg.Table+"_migrations"))
	if err != nil {
		return 0, s.wrap(ctx, "migrate", err)
	}
	v, err := migration.Check(ms, applied)
	if err != nil {
		return 0, fmt.Errorf("mysql: table %s: %w", s.cfg.Table, err)
	}
	return v, nil
}

// isNoSuchTable reports whether err says a table does not exist.
func isNoSuchTable(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == erNoSuchTable
}
