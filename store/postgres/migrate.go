package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/migration"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations returns the embedded migrations (migrations/NNNN_name.sql)
// in version order, checked by [migration.Load].
func migrations() ([]migration.Migration, error) {
	ms, err := migration.Load(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
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

// Migrate creates the schema (if missing), the records table and its index,
// and applies any embedded migration the table does not have yet. Applied
// versions are kept in "<schema>".retrysafe_migrations, one row per table
// and version.
//
// Migrate is safe to run concurrently from several processes: it holds a
// session advisory lock (pg_advisory_lock) keyed by the schema around one
// transaction that applies every missing migration, so one process applies
// them and the others then find them applied. (A transaction-level
// pg_advisory_xact_lock is not enough here: see the comment in the code.) When the table is already up
// to date it returns after one read and needs no DDL privileges.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	latest := migration.Latest(ms)

	// Fast path: already migrated. An undefined schema or table just means
	// there is work to do.
	if v, err := s.schemaVersion(ctx, s.pool); err == nil && v >= latest {
		return nil
	} else if err != nil && !isUndefined(err) {
		return retrysafe.Unavailable("migrate", err)
	}

	// The session-level advisory lock is taken before the transaction
	// begins, not with pg_advisory_xact_lock inside it: a backend that
	// waited on an advisory lock has not yet processed the catalog changes
	// the previous holder committed, and would fail to CREATE SCHEMA IF NOT
	// EXISTS with a duplicate key. BEGIN processes them.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return retrysafe.Unavailable("migrate", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", s.lockKey()); err != nil {
		return retrysafe.Unavailable("migrate", err)
	}
	defer func() {
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(unlockCtx, "SELECT pg_advisory_unlock($1)", s.lockKey()); err != nil {
			// Closing the session releases its locks; the pool drops it.
			_ = conn.Conn().Close(unlockCtx)
		}
	}()

	tx, err := conn.Begin(ctx)
	if err != nil {
		return retrysafe.Unavailable("migrate", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	schema := pgx.Identifier{s.cfg.Schema}.Sanitize()
	versions := quoted(s.cfg.Schema, migrationsTable)
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
		return fmt.Errorf("postgres: migrate: create schema: %w", retrysafe.Unavailable("migrate", err))
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+versions+` (
    table_name text NOT NULL,
    version    integer NOT NULL,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, version)
)`); err != nil {
		return fmt.Errorf("postgres: migrate: create %s: %w", versions, retrysafe.Unavailable("migrate", err))
	}
	current, err := s.schemaVersion(ctx, tx)
	if err != nil {
		return retrysafe.Unavailable("migrate", err)
	}
	if current > latest {
		return fmt.Errorf("postgres: table %s is at schema version %d, newer than this build knows (%d)", s.table, current, latest)
	}
	r := strings.NewReplacer(
		"{{records}}", s.table,
		"{{schema}}", schema,
		"{{expires_index}}", pgx.Identifier{s.cfg.Table + "_expires_at_idx"}.Sanitize(),
		"{{lease_index}}", pgx.Identifier{s.cfg.Table + "_processing_lease_idx"}.Sanitize(),
		"{{claim_fn}}", s.claimFn,
		"{{batch_fn}}", s.batchFn,
		"{{take}}", takeSQL,
	)
	for _, m := range ms[current:] {
		if _, err := tx.Exec(ctx, r.Replace(m.SQL)); err != nil {
			return fmt.Errorf("postgres: migration %s: %w", m.File, retrysafe.Unavailable("migrate", err))
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+versions+" (table_name, version, name) VALUES ($1, $2, $3)",
			s.cfg.Table, m.Version, m.Name); err != nil {
			return retrysafe.Unavailable("migrate", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return retrysafe.Unavailable("migrate", err)
	}
	return nil
}

// SchemaVersion returns the schema version the store's table is at: the
// last migration applied to it, 0 when none was (the schema or the
// migrations table may not exist yet). [LatestSchemaVersion] is the
// version Migrate brings it to.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	v, err := s.schemaVersion(ctx, s.pool)
	if isUndefined(err) {
		return 0, nil
	}
	if err != nil {
		return 0, retrysafe.Unavailable("migrate", err)
	}
	return v, nil
}

func (s *Store) schemaVersion(ctx context.Context, q querier) (int, error) {
	var v int
	err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+quoted(s.cfg.Schema, migrationsTable)+" WHERE table_name = $1",
		s.cfg.Table).Scan(&v)
	return v, err
}

// lockKey is the advisory lock that serialises migrations of one schema
// (they may create the schema and the shared migrations table).
func (s *Store) lockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("retrysafe/postgres/migrate\x00" + s.cfg.Schema))
	return int64(h.Sum64())
}

// isUndefined reports whether err says a schema or table does not exist.
func isUndefined(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000")
}
