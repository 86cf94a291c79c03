package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/groupcommit"
)

// URL query parameters that [Open] reads (and removes before connecting).
const (
	URLParamSchema = "retrysafe_schema"
	URLParamTable  = "retrysafe_table"
)

// Store is a [retrysafe.Store] on PostgreSQL. It also implements
// [retrysafe.Pinger], [retrysafe.Sweeper], [retrysafe.Notifier] and
// [retrysafe.Admin]. A Store is safe for concurrent use, and any number of
// Stores in any number of processes may share one table: correctness comes
// from PostgreSQL's row locks and unique index alone.
type Store struct {
	pool     *pgxpool.Pool
	ownsPool bool
	cfg      Config
	table    string // quoted, schema-qualified
	claimFn  string // quoted, schema-qualified claim function
	batchFn  string // quoted, schema-qualified batch function
	sql      statements
	listener *listener
	// committer groups concurrent Claims, Completes, Releases and Extends
	// into one statement (batch.go).
	committer *groupcommit.Committer[*batchOp, batchResult]
}

// Compile-time checks of the interfaces Store implements.
var (
	_ retrysafe.Store    = (*Store)(nil)
	_ retrysafe.Pinger   = (*Store)(nil)
	_ retrysafe.Sweeper  = (*Store)(nil)
	_ retrysafe.Notifier = (*Store)(nil)
	_ retrysafe.Admin    = (*Store)(nil)
	_ io.Closer          = (*Store)(nil)
)

// querier is what the store's statements run on: a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// New returns a Store that runs its statements on pool. The caller keeps
// ownership of the pool ([Store.Close] does not close it) and runs
// [Store.Migrate] before first use.
//
// Statements run in the pool's default isolation level, which must be READ
// COMMITTED (PostgreSQL's default): Claim relies on INSERT … ON CONFLICT
// locking the latest committed row version.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: nil pool")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{
		pool:  pool,
		cfg:   cfg,
		table: quoted(cfg.Schema, cfg.Table),
	}
	s.claimFn = quoted(cfg.Schema, cfg.Table+"_claim")
	s.batchFn = quoted(cfg.Schema, cfg.Table+"_batch")
	s.sql = buildStatements(s.table, s.claimFn, s.batchFn)
	s.committer = groupcommit.New(groupcommit.Config{MaxBatch: cfg.MaxBatch, MaxInFlight: cfg.BatchesInFlight}, s.runBatch)
	s.listener = newListener(pool.Config().ConnConfig, cfg.NotifyChannel)
	return s, nil
}

// Open connects to the database at connString, a postgres:// URL or a
// keyword/value string as pgxpool.ParseConfig takes, runs [Store.Migrate],
// and returns a Store that owns its pool: [Store.Close] closes it.
//
// The pool's sessions use READ COMMITTED unless the connection string sets
// default_transaction_isolation.
//
// A URL may carry the query parameters retrysafe_schema and retrysafe_table
// (for the CLI's --store flag); they are removed before connecting and fill
// in Config.Schema and Config.Table when those are empty. A parameter that
// disagrees with a non-empty Config field is an error.
func Open(ctx context.Context, connString string, cfg Config) (*Store, error) {
	connString, err := takeURLParams(connString, &cfg)
	if err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	// Claim relies on READ COMMITTED; pin it unless the URL chose.
	if _, ok := pcfg.ConnConfig.RuntimeParams["default_transaction_isolation"]; !ok {
		pcfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, retrysafe.Unavailable("open", err)
	}
	s, err := New(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownsPool = true
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, tidyConnectError(err)
	}
	return s, nil
}

// takeURLParams moves the retrysafe_* query parameters of a URL into cfg.
func takeURLParams(connString string, cfg *Config) (string, error) {
	u, err := url.Parse(connString)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return connString, nil // keyword/value form: nothing to take
	}
	q := u.Query()
	for _, p := range []struct {
		name  string
		field *string
	}{{URLParamSchema, &cfg.Schema}, {URLParamTable, &cfg.Table}} {
		if !q.Has(p.name) {
			continue
		}
		v := q.Get(p.name)
		if *p.field != "" && *p.field != v {
			return "", fmt.Errorf("postgres: URL parameter %s=%q disagrees with Config (%q)", p.name, v, *p.field)
		}
		*p.field = v
		q.Del(p.name)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Pool returns the pool the store runs on.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Config returns the store's configuration with defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// Close stops the notification listener and, if the store was made by
// [Open], closes its pool. Subscriptions end after a last wake-up; their
// channels stay open but receive nothing more. Operations queued for a
// batch fail (with an error wrapping [retrysafe.ErrStoreUnavailable]); a
// batch already sent is waited for; later Claims, Completes, Releases and
// Extends fail. It implements [io.Closer] like the other stores; no step
// can fail, so the error is always nil.
func (s *Store) Close() error {
	s.committer.Close()
	s.listener.close()
	if s.ownsPool {
		s.pool.Close()
	}
	return nil
}

// Ping checks that the database answers. It implements [retrysafe.Pinger].
func (s *Store) Ping(ctx context.Context) error {
	return s.wrap(ctx, "ping", s.pool.Ping(ctx))
}

// wrap translates a driver error from operation op: context errors stay
// context errors (if ctx is done, whatever broke the call is reported as the
// context's error), anything else wraps [retrysafe.ErrStoreUnavailable].
func (s *Store) wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("postgres: %s: %w (%v)", op, ctxErr, err)
	}
	return retrysafe.Unavailable(op, tidyConnectError(err))
}
