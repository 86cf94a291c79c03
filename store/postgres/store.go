package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/groupcommit"
)

// URL query parameters that [Open] reads (and removes before connecting).
const (
	URLParamSchema = "retrysafe_schema"
	URLParamTable  = "retrysafe_table"
	// URLParamPoolMode sets [Config.PoolMode] (session or transaction).
	URLParamPoolMode = "retrysafe_pool_mode"
	// URLParamNotifyURL sets [Config.NotifyConnString]: a percent-encoded
	// postgres:// URL of a direct connection for LISTEN.
	URLParamNotifyURL = "retrysafe_notify_url"
	// URLParamNotifyPoll sets [Config.NotifyPollInterval] (a Go duration
	// such as 50ms).
	URLParamNotifyPoll = "retrysafe_notify_poll"
)

// Store is a [retrysafe.Store] on PostgreSQL. It also implements
// [admin.Pinger], [admin.Sweeper], [retrysafe.Notifier] and
// [admin.Admin]. A Store is safe for concurrent use, and any number of
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
	listener *listener // nil when Subscribe polls
	poller   *poller   // nil when Subscribe listens
	// committer groups concurrent Claims, Completes, Releases and Extends
	// into one statement (batch.go).
	committer *groupcommit.Committer[*batchOp, batchResult]
	alone     atomic.Int64 // operations batches left alone (BatchStats)
}

// Compile-time checks of the interfaces Store implements.
var (
	_ retrysafe.Store    = (*Store)(nil)
	_ admin.Pinger       = (*Store)(nil)
	_ admin.Sweeper      = (*Store)(nil)
	_ retrysafe.Notifier = (*Store)(nil)
	_ admin.Admin        = (*Store)(nil)
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
	if cfg.PoolMode == PoolModeTransaction && pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		return nil, errors.New("postgres: pool mode \"transaction\" needs a pool without named prepared statements: " +
			"set the pool's ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeCacheDescribe (or QueryExecModeExec), " +
			"or default_query_exec_mode=cache_describe in its connection string")
	}
	listenConfig := pool.Config().ConnConfig
	if cfg.NotifyConnString != "" {
		listenConfig, err = pgx.ParseConfig(cfg.NotifyConnString)
		if err != nil {
			return nil, fmt.Errorf("postgres: notify connection string: %w", err)
		}
	}
	s := &Store{
		pool:  pool,
		cfg:   cfg,
		table: quoted(cfg.Schema, cfg.Table),
	}
	s.claimFn = quoted(cfg.Schema, cfg.Table+"_claim")
	s.batchFn = quoted(cfg.Schema, cfg.Table+"_batch")
	s.sql = buildStatements(s.table, s.claimFn, s.batchFn)
	s.committer = groupcommit.New(groupcommit.Config{MaxBatch: cfg.MaxBatch, MaxInFlight: cfg.BatchesInFlight, Gather: true}, s.runBatch)
	if cfg.polls() {
		s.poller = newPoller(s)
	} else {
		s.listener = newListener(listenConfig, cfg.NotifyChannel)
	}
	return s, nil
}

// Open connects to the database at connString, a postgres:// URL or a
// keyword/value string as pgxpool.ParseConfig takes, runs [Store.Migrate],
// and returns a Store that owns its pool: [Store.Close] closes it.
//
// The pool's sessions use READ COMMITTED unless the connection string sets
// default_transaction_isolation. Behind a pooler (Config.PoolMode session
// or transaction) Open cannot send that startup parameter (PgBouncer
// rejects it); it checks instead, in one transaction, that the server's
// sessions default to READ COMMITTED, and fails otherwise, or when the
// pooler refuses the transaction (statement pooling). With PoolMode
// "transaction" and no default_query_exec_mode in the connection string,
// the pool uses pgx.QueryExecModeCacheDescribe: unnamed statements, whose
// parameter and result types pgx caches per client connection, so a
// statement is still one round trip and binary parameters (bytea) stay
// binary.
//
// A URL may carry the query parameters retrysafe_schema, retrysafe_table,
// retrysafe_pool_mode, retrysafe_notify_url and retrysafe_notify_poll (for
// the CLI's --store flag); they are removed before connecting and fill in
// the Config fields they name when those are empty. A parameter that
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
	if cfg.PoolMode == PoolModeDirect {
		// Claim relies on READ COMMITTED; pin it unless the URL chose.
		if _, ok := pcfg.ConnConfig.RuntimeParams["default_transaction_isolation"]; !ok {
			pcfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
		}
	}
	if cfg.PoolMode == PoolModeTransaction && !strings.Contains(connString, "default_query_exec_mode") {
		pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
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
	if cfg.PoolMode != PoolModeDirect {
		if err := s.checkPooler(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, pgbouncerHint(cfg, tidyConnectError(err))
	}
	return s, nil
}

// checkPooler runs one transaction through the pooler and checks that the
// server session it ran on defaults to READ COMMITTED. A pooler in
// statement mode refuses the transaction.
func (s *Store) checkPooler(ctx context.Context) error {
	var level string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&level)
	})
	if err != nil && strings.Contains(err.Error(), "statement pooling") {
		return fmt.Errorf("postgres: pool mode %q: the pooler refused a transaction (statement pooling is not supported): %w",
			s.cfg.PoolMode, s.wrap(ctx, "open", err))
	}
	if err != nil {
		return s.wrap(ctx, "open", err)
	}
	if level != "read committed" {
		return fmt.Errorf("postgres: pool mode %q: the server's sessions run transactions at %s; the store needs READ COMMITTED "+
			"(PostgreSQL's default; behind a pooler the store cannot set it per connection)", s.cfg.PoolMode, strings.ToUpper(level))
	}
	return nil
}

// pgbouncerHint adds a hint to err when PgBouncer refused the startup
// parameter that Open sends to PostgreSQL directly.
func pgbouncerHint(cfg Config, err error) error {
	if cfg.PoolMode == PoolModeDirect && strings.Contains(err.Error(), "unsupported startup parameter") {
		return fmt.Errorf("%w (behind PgBouncer, add %s=transaction or %s=session to the URL; see docs/postgres.md)",
			err, URLParamPoolMode, URLParamPoolMode)
	}
	return err
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
	}{{URLParamSchema, &cfg.Schema}, {URLParamTable, &cfg.Table}, {URLParamPoolMode, &cfg.PoolMode},
		{URLParamNotifyURL, &cfg.NotifyConnString}} {
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
	if q.Has(URLParamNotifyPoll) {
		v := q.Get(URLParamNotifyPoll)
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return "", fmt.Errorf("postgres: URL parameter %s=%q: want a positive duration such as 100ms", URLParamNotifyPoll, v)
		}
		if cfg.NotifyPollInterval != 0 && cfg.NotifyPollInterval != d {
			return "", fmt.Errorf("postgres: URL parameter %s=%q disagrees with Config (%s)", URLParamNotifyPoll, v, cfg.NotifyPollInterval)
		}
		cfg.NotifyPollInterval = d
		q.Del(URLParamNotifyPoll)
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
	if s.listener != nil {
		s.listener.close()
	}
	if s.poller != nil {
		s.poller.close()
	}
	if s.ownsPool {
		s.pool.Close()
	}
	return nil
}

// Ping checks that the database answers. It implements [admin.Pinger].
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
