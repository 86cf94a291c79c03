package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/migration"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// functionsSQL creates or replaces the claim and batch functions; Migrate
// runs it after the migrations it applies.
//
//go:embed functions.sql
var functionsSQL string

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

// Migrate creates the schema (if missing), the records table and its
// indexes, and applies any embedded migration the table does not have yet,
// then (re)creates the claim and batch functions of functions.sql. Applied
// versions are kept in "<schema>".retrysafe_migrations, one row per table
// and version. A table migrated by a pre-release build (before v0.1.0) is
// refused: recreate it.
//
// Migrate is safe to run concurrently from several processes: one
// transaction applies every missing migration under a transaction-level
// advisory lock (pg_advisory_xact_lock) keyed by the schema, so one process
// applies them and the others then find them applied (a process whose
// transaction waited for the lock and trips over the other's catalog
// changes runs again in a new transaction). It keeps no state in the
// session, so it works behind a pooler in transaction mode. When the table
// is already up to date it returns after one read and needs no DDL
// privileges.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	latest := migration.Latest(ms)

	// Fast path: already migrated. An undefined schema or table just means
	// there is work to do.
	if v, err := s.schemaVersion(ctx, s.pool, ms); err == nil && v == latest {
		return nil
	} else if err != nil && !isUndefined(err) {
		return err
	}

	for attempt := 1; ; attempt++ {
		err := s.migrateTx(ctx, ms)
		if err == nil || attempt == migrateAttempts || !catalogConflict(err) || ctx.Err() != nil {
			return err
		}
		// Another process migrated while this transaction waited for the
		// lock; a new transaction sees its catalog changes.
	}
}

// migrateAttempts bounds the transactions of one Migrate call (see
// catalogConflict): each retry follows a commit of another migration of
// the schema, which happens once per table and version.
const migrateAttempts = 10

// migrateTx applies the missing migrations and functions.sql in one
// transaction that holds a transaction-level advisory lock keyed by the
// schema.
//
// The lock is a transaction-level one (pg_advisory_xact_lock) so that
// Migrate works behind a pooler in transaction mode, where a session lock
// would stay with a server session that the pooler hands to someone else.
// A transaction that waited for the lock may not have processed the
// catalog changes the previous holder committed (a backend takes them in
// at the start of a transaction and when it locks a relation, not when it
// acquires an advisory lock), so its CREATE SCHEMA IF NOT EXISTS or
// CREATE TABLE IF NOT EXISTS can fail with a duplicate key: Migrate then
// runs a new transaction, which finds the work done (catalogConflict).
func (s *Store) migrateTx(ctx context.Context, ms []migration.Migration) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return retrysafe.Unavailable("migrate", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", s.lockKey()); err != nil {
		return retrysafe.Unavailable("migrate", err)
	}

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
	current, err := s.schemaVersion(ctx, tx, ms)
	if err != nil || current == len(ms) {
		return err // or nothing to do: another process migrated meanwhile
	}
	r := strings.NewReplacer(
		"{{records}}", s.table,
		"{{schema}}", schema,
		"{{expires_index}}", pgx.Identifier{s.cfg.Table + "_expires_at_idx"}.Sanitize(),
		"{{lease_index}}", pgx.Identifier{s.cfg.Table + "_processing_lease_idx"}.Sanitize(),
		"{{claim_fn}}", s.claimFn,
		"{{batch_fn}}", s.batchFn,
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
	if _, err := tx.Exec(ctx, r.Replace(functionsSQL)); err != nil {
		return fmt.Errorf("postgres: functions.sql: %w", retrysafe.Unavailable("migrate", err))
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
//
// It returns an error for a table migrated by a pre-release build (see
// [Store.Migrate]).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	v, err := s.schemaVersion(ctx, s.pool, ms)
	if isUndefined(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return v, nil
}

// schemaVersion reads the migrations applied to the table and checks them
// against ms ([migration.Check]): a table migrated by another build is an
// error of its own, a failed read wraps [retrysafe.ErrStoreUnavailable]
// (and the driver's error, for isUndefined and catalogConflict).
func (s *Store) schemaVersion(ctx context.Context, q querier, ms []migration.Migration) (int, error) {
	rows, err := q.Query(ctx, "SELECT version, name FROM "+quoted(s.cfg.Schema, migrationsTable)+" WHERE table_name = $1",
		s.cfg.Table)
	if err != nil {
		return 0, retrysafe.Unavailable("migrate", err)
	}
	applied := map[int]string{}
	var (
		v    int32
		name string
	)
	if _, err := pgx.ForEachRow(rows, []any{&v, &name}, func() error { applied[int(v)] = name; return nil }); err != nil {
		return 0, retrysafe.Unavailable("migrate", err)
	}
	current, err := migration.Check(ms, applied)
	if err != nil {
		return 0, fmt.Errorf("postgres: table %s: %w", s.table, err)
	}
	return current, nil
}

// lockKey is the advisory lock that serialises migrations of one schema
// (they may create the schema and the shared migrations table).
func (s *Store) lockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("retrysafe/postgres/migrate\x00" + s.cfg.Schema))
	return int64(h.Sum64())
}

// catalogConflict reports whether err is what a migration transaction
// that waited for the lock gets from catalog entries another process
// committed meanwhile: a duplicate key in a catalog, an object that
// already exists, or a catalog tuple updated concurrently.
func catalogConflict(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "23505", "42P06", "42P07", "42710", "42723": // unique_violation, duplicate_schema/table/object/function
		return true
	case "XX000":
		return strings.Contains(pgErr.Message, "tuple concurrently updated")
	}
	return false
}

// isUndefined reports whether err says a schema or table does not exist.
func isUndefined(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000")
}
