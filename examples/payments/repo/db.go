package repo

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/retrysafe/retrysafe"
)

//go:embed schema.sql
var schema string

// querier is what an adapter provides for one connection or transaction:
// statements with $n placeholders. Adapters translate "no rows" into
// [ErrNotFound] and unique violations into [ErrUnique].
type querier interface {
	exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	queryRow(ctx context.Context, query string, args ...any) row
	query(ctx context.Context, query string, args ...any) (rows, error)
}

type row interface {
	Scan(dest ...any) error
}

type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// txConn is an adapter's transaction.
type txConn interface {
	querier
	// complete completes an idempotency record in this transaction with
	// the store's CompleteTx.
	complete(ctx context.Context, params *retrysafe.CompleteParams) error
	// checkpoint records an idempotency record's checkpoint in this
	// transaction with the store's CheckpointTx.
	checkpoint(ctx context.Context, params *retrysafe.ExtendParams) error
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
}

// adapter is one backend: SQLite through database/sql, or PostgreSQL
// through pgx.
type adapter interface {
	querier
	begin(ctx context.Context) (txConn, error)
	store() retrysafe.Store
	close()
}

// DB is the payments database and the idempotency store that lives in it.
// It is safe for concurrent use.
type DB struct {
	a       adapter
	backend string
}

// Store returns the retrysafe store in the same database, for the
// middleware.
func (db *DB) Store() retrysafe.Store { return db.a.store() }

// Backend names the database: "sqlite" or "postgres".
func (db *DB) Backend() string { return db.backend }

// Close closes the database.
func (db *DB) Close() { db.a.close() }

// migrate creates the business tables (the store migrates its own).
func (db *DB) migrate(ctx context.Context) error {
	if _, err := db.a.exec(ctx, schema); err != nil {
		return fmt.Errorf("repo: migrate: %w", err)
	}
	return nil
}

// InTx runs fn in a transaction and commits it when fn returns nil; any
// error rolls it back. Keep fn short and free of network calls: on SQLite
// the transaction holds the database's write lock.
func (db *DB) InTx(ctx context.Context, fn func(tx *Tx) error) (err error) {
	c, err := db.a.begin(ctx)
	if err != nil {
		return fmt.Errorf("repo: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = c.rollback(context.WithoutCancel(ctx))
		}
	}()
	if err = fn(&Tx{Reader: Reader{q: c}, c: c}); err != nil {
		return err
	}
	if err = c.commit(ctx); err != nil {
		return fmt.Errorf("repo: commit: %w", err)
	}
	return nil
}

// Read returns a Reader outside any transaction, for queries.
func (db *DB) Read() Reader { return Reader{q: db.a} }

// Tx is a transaction: reads, writes that enforce the business rules, and
// the idempotency completion.
type Tx struct {
	Reader
	c txConn
}

// Complete completes the operation's idempotency record in this
// transaction (the store's CompleteTx), so the business write and the
// stored answer commit together. After the commit, call the operation's
// MarkCompleted.
func (tx *Tx) Complete(ctx context.Context, params *retrysafe.CompleteParams) error {
	if err := tx.c.complete(ctx, params); err != nil {
		return fmt.Errorf("repo: complete idempotency record: %w", err)
	}
	return nil
}

// Checkpoint records a checkpoint of the operation's idempotency record in
// this transaction (the store's CheckpointTx, fenced by params.Token), so a
// step's business write and the checkpoint that says it was made commit, or
// roll back, together.
func (tx *Tx) Checkpoint(ctx context.Context, params *retrysafe.ExtendParams) error {
	if err := tx.c.checkpoint(ctx, params); err != nil {
		return fmt.Errorf("repo: checkpoint idempotency record: %w", err)
	}
	return nil
}

// Reader runs queries.
type Reader struct {
	q querier
}

// IsNotFound reports whether err means no row ([ErrNotFound]).
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
