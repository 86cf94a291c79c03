package repo

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/postgres"
)

// OpenPostgres connects to the PostgreSQL database at url and keeps the
// business tables and the retrysafe records table in schema (created if
// missing; "public" when empty). The pool's search_path is set to schema so
// the portable SQL needs no qualification.
func OpenPostgres(ctx context.Context, url, schema string) (*DB, error) {
	if schema == "" {
		schema = "public"
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("repo: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("repo: connect: %w", err)
	}
	st, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err == nil {
		err = st.Migrate(ctx) // creates the schema too
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	db := &DB{a: &pgAdapter{pgQuerier: pgQuerier{q: pool}, pool: pool, st: st}, backend: "postgres"}
	if err := db.migrate(ctx); err != nil {
		st.Close()
		pool.Close()
		return nil, err
	}
	return db, nil
}

type pgAdapter struct {
	pgQuerier
	pool *pgxpool.Pool
	st   *postgres.Store
}

func (a *pgAdapter) begin(ctx context.Context) (txConn, error) {
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &pgTx{pgQuerier: pgQuerier{q: tx}, tx: tx, st: a.st}, nil
}

func (a *pgAdapter) store() retrysafe.Store { return a.st }

func (a *pgAdapter) close() {
	a.st.Close()
	a.pool.Close()
}

type pgTx struct {
	pgQuerier
	tx pgx.Tx
	st *postgres.Store
}

func (t *pgTx) complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	return t.st.CompleteTx(ctx, t.tx, p)
}
func (t *pgTx) checkpoint(ctx context.Context, p *retrysafe.ExtendParams) error {
	return t.st.CheckpointTx(ctx, t.tx, p)
}
func (t *pgTx) commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t *pgTx) rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

// pgxQuerier is what *pgxpool.Pool and pgx.Tx have in common.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type pgQuerier struct{ q pgxQuerier }

func (p pgQuerier) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := p.q.Exec(ctx, query, args...)
	if err != nil {
		return 0, pgError(err)
	}
	return tag.RowsAffected(), nil
}

func (p pgQuerier) queryRow(ctx context.Context, query string, args ...any) row {
	return pgRow{p.q.QueryRow(ctx, query, args...)}
}

func (p pgQuerier) query(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := p.q.Query(ctx, query, args...)
	if err != nil {
		return nil, pgError(err)
	}
	return pgRows{r}, nil
}

type pgRow struct{ r pgx.Row }

func (r pgRow) Scan(dest ...any) error { return pgError(r.r.Scan(dest...)) }

type pgRows struct{ pgx.Rows }

func (r pgRows) Err() error { return pgError(r.Rows.Err()) }

// pgError translates "no rows" and unique violations (SQLSTATE 23505).
func pgError(err error) error {
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNotFound
	case errors.As(err, &pe) && pe.Code == "23505":
		return fmt.Errorf("%w: %v", ErrUnique, err)
	}
	return err
}
