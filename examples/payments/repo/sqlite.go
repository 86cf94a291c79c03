package repo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// SQLiteOptions tune [OpenSQLite]. The zero value is the durable default.
type SQLiteOptions struct {
	// ProcessCrashSafeOnly sets synchronous=NORMAL instead of FULL: commits
	// no longer wait for the disk, and survive a crash or restart of the
	// process but not of the machine (a power loss may lose the last
	// commits, and with them completions, so a retry could run again).
	// Meant for tests that restart the service in process, on machines
	// where every fsync costs milliseconds.
	ProcessCrashSafeOnly bool
}

// OpenSQLite opens (creating if needed) the SQLite file at path, with the
// retrysafe store's table and the business tables side by side in it.
//
// The database is opened with the store's [sqlite.DSN] (WAL,
// synchronous=FULL, busy timeout, and BEGIN IMMEDIATE for every
// transaction), so [DB.InTx] transactions never fail a lock upgrade and the
// store's CompleteTx runs in them.
func OpenSQLite(ctx context.Context, path string, opts SQLiteOptions) (*DB, error) {
	cfg := sqlite.Config{}
	if opts.ProcessCrashSafeOnly {
		cfg.Synchronous = "NORMAL"
	}
	dsn := sqlite.DSN(path, cfg)
	sdb, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("repo: open %s: %w", path, err)
	}
	// One connection: SQLite admits one writer at a time, and the
	// business transactions and the store's own writes would otherwise wait
	// for each other in SQLite's sleeping busy handler. Queued on the pool
	// instead, they run back to back. No code here holds a transaction
	// while it waits for another connection, which this would deadlock.
	sdb.SetMaxOpenConns(1)
	st, err := sqlite.New(sdb, sqlite.Config{})
	if err == nil {
		err = st.Migrate(ctx)
	}
	if err != nil {
		sdb.Close()
		return nil, err
	}
	db := &DB{a: &sqliteAdapter{sqliteQuerier: sqliteQuerier{q: sdb}, db: sdb, st: st}, backend: "sqlite"}
	if err := db.migrate(ctx); err != nil {
		sdb.Close()
		return nil, err
	}
	return db, nil
}

type sqliteAdapter struct {
	sqliteQuerier
	db *sql.DB
	st *sqlite.Store
}

func (a *sqliteAdapter) begin(ctx context.Context) (txConn, error) {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &sqliteTx{sqliteQuerier: sqliteQuerier{q: tx}, tx: tx, st: a.st}, nil
}

func (a *sqliteAdapter) store() retrysafe.Store { return a.st }
func (a *sqliteAdapter) close()                 { _ = a.db.Close() }

type sqliteTx struct {
	sqliteQuerier
	tx *sql.Tx
	st *sqlite.Store
}

func (t *sqliteTx) complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	return t.st.CompleteTx(ctx, t.tx, p)
}
func (t *sqliteTx) checkpoint(ctx context.Context, p *retrysafe.ExtendParams) error {
	return t.st.CheckpointTx(ctx, t.tx, p)
}
func (t *sqliteTx) commit(context.Context) error   { return t.tx.Commit() }
func (t *sqliteTx) rollback(context.Context) error { return t.tx.Rollback() }

// sqlQuerier is what *sql.DB and *sql.Tx have in common.
type sqlQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type sqliteQuerier struct{ q sqlQuerier }

func (s sqliteQuerier) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, sqliteError(err)
	}
	return res.RowsAffected()
}

func (s sqliteQuerier) queryRow(ctx context.Context, query string, args ...any) row {
	return sqliteRow{s.q.QueryRowContext(ctx, query, args...)}
}

func (s sqliteQuerier) query(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := s.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, sqliteError(err)
	}
	return sqliteRows{r}, nil
}

type sqliteRow struct{ r *sql.Row }

func (r sqliteRow) Scan(dest ...any) error { return sqliteError(r.r.Scan(dest...)) }

type sqliteRows struct{ *sql.Rows }

func (r sqliteRows) Close() { _ = r.Rows.Close() }

// sqliteError translates "no rows" and constraint violations. The driver
// reports a unique violation as "UNIQUE constraint failed: …" (extended
// code SQLITE_CONSTRAINT_UNIQUE).
func sqliteError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return ErrNotFound
	case strings.Contains(err.Error(), "UNIQUE constraint failed"):
		return fmt.Errorf("%w: %v", ErrUnique, err)
	}
	return err
}
