// Package storeurl opens a retrysafe store from the URL given to the CLI's
// --store flag:
//
//	memory:                      in-process memory (lost on exit; one instance only)
//	sqlite:PATH                  SQLite file at PATH, relative or absolute (the default
//	                             is sqlite:retrysafe.db); also sqlite://PATH and
//	                             sqlite:///ABSOLUTE/PATH
//	postgres://user@host/db      PostgreSQL (postgresql:// too); any libpq URL parameter,
//	                             plus retrysafe_schema and retrysafe_table; behind
//	                             PgBouncer add retrysafe_pool_mode=transaction (or
//	                             session), and optionally retrysafe_notify_url and
//	                             retrysafe_notify_poll (docs/postgres.md)
//	redis://host:6379/0          Redis (rediss:// for TLS); go-redis URL parameters,
//	                             plus retrysafe_prefix, retrysafe_wait_replicas and
//	                             retrysafe_wait_timeout
//	redis+cluster://HOST:PORT[,HOST:PORT…][?options]
//	                             Redis Cluster from seed nodes (rediss+cluster:// for
//	                             TLS); go-redis cluster URL parameters, plus
//	                             retrysafe_prefix
//	                             plus retrysafe_prefix
//	mysql://user:pw@host:3306/db MySQL 8 or MariaDB 10.11; go-sql-driver/mysql DSN
//	                             parameters (tls, timeout, …), plus retrysafe_table
//	dynamodb://TABLE?region=R[&endpoint=URL]
//	                             Amazon DynamoDB (docs/dynamodb.md); credentials from
//	                             the AWS SDK's default chain, never from the URL
//
// SQLite accepts the query parameters retrysafe_table (sqlite:app.db?retrysafe_table=idem)
// and synchronous (full, the default, or normal: see sqlite.Config.Synchronous).
// SQLite, PostgreSQL and MySQL stores apply their migrations when opened.
//
// A binary that needs neither PostgreSQL, MySQL, Redis nor DynamoDB builds faster
// and smaller without their drivers: the build tags retrysafe_nopostgres,
// retrysafe_nomysql, retrysafe_noredis and retrysafe_nodynamodb leave them out (such a binary answers their URLs with
// [ErrNotBuiltIn]). The memory and SQLite stores are always built in.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/store/memory"
)

// Default is the store used when none is given.
const Default = "sqlite:retrysafe.db"

// Accepted lists the accepted URL forms, for help texts and errors.
const Accepted = "memory:, sqlite:PATH, postgres://…, postgresql://…, redis://…, rediss://…, redis+cluster://HOST:PORT[,HOST:PORT…], mysql://… or dynamodb://TABLE?region=…"

// Query parameters understood by storeurl itself.
const (
	ParamTable = "retrysafe_table" // sqlite (postgres handles its own)
	// ParamSynchronous selects the SQLite synchronous setting (full or normal).
	ParamSynchronous = "synchronous"
	ParamPrefix      = "retrysafe_prefix" // redis
	// ParamWaitReplicas sets redis.Config.WaitReplicas: a claim is
	// forwarded only after that many replicas acknowledged it (WAIT).
	ParamWaitReplicas = "retrysafe_wait_replicas"
	// ParamWaitTimeout sets redis.Config.WaitTimeout (a Go duration).
	ParamWaitTimeout = "retrysafe_wait_timeout"
)

// ErrNotSupported is returned by [Migrate] and [Sweep] for a store that has
// no such operation.
var ErrNotSupported = errors.New("not supported by this store")

// ErrNotBuiltIn is returned by [Open] for a store whose driver this binary
// was built without (build tags retrysafe_nopostgres, retrysafe_noredis).
var ErrNotBuiltIn = errors.New("not built into this binary")

// Options are settings that apply to every kind of store.
type Options struct {
	// ProcessingRetention is how long a processing record whose lease ran
	// out is kept: the memory store's janitor and the Redis store's key
	// expiry use it (SQLite and PostgreSQL take it from each sweep's
	// SweepParams). Zero means admin.DefaultProcessingRetention.
	ProcessingRetention time.Duration
	// MustExist refuses to create a store: a SQLite file that does not
	// exist is an error wrapping fs.ErrNotExist, instead of a new, empty
	// database. Commands that only read or tidy records set it, so that a
	// mistyped path is reported rather than created. (PostgreSQL and
	// Redis databases are never created by Open.)
	MustExist bool
}

// Open opens the store rawURL names ("" means [Default]) with zero
// [Options]. The returned function closes it. The store is returned as its
// concrete type, so the optional interfaces (admin.Pinger, Sweeper,
// Notifier, Admin) are found by type assertion.
func Open(ctx context.Context, rawURL string) (retrysafe.Store, func() error, error) {
	return OpenWith(ctx, rawURL, Options{})
}

// OpenWith is [Open] with options.
func OpenWith(ctx context.Context, rawURL string, opts Options) (retrysafe.Store, func() error, error) {
	if opts.ProcessingRetention < 0 {
		return nil, nil, fmt.Errorf("negative processing retention %s", opts.ProcessingRetention)
	}
	if rawURL == "" {
		rawURL = Default
	}
	scheme, rest, ok := strings.Cut(rawURL, ":")
	if !ok || scheme == "" {
		return nil, nil, fmt.Errorf("store %q has no scheme; use %s (for a file, sqlite:%s)", Redact(rawURL), Accepted, rawURL)
	}
	switch strings.ToLower(scheme) {
	case "memory":
		if rest != "" && rest != "//" {
			return nil, nil, fmt.Errorf("store %q: write the memory store as memory: (it takes no path)", Redact(rawURL))
		}
		s := memory.New(memory.Config{ProcessingRetention: opts.ProcessingRetention})
		return s, s.Close, nil
	case "sqlite", "sqlite3":
		return openSQLite(ctx, rawURL, rest, opts)
	case "postgres", "postgresql":
		return openPostgres(ctx, rawURL)
	case "mysql":
		return openMySQL(ctx, rawURL)
	case "redis", "rediss", "redis+cluster", "rediss+cluster":
		return openRedis(ctx, rawURL, opts)
	case "dynamodb":
		return openDynamoDB(ctx, rawURL, opts)
	}
	return nil, nil, fmt.Errorf("store %q: unknown scheme %q; use %s", Redact(rawURL), scheme, Accepted)
}

// RouteDriverLogs sends the log lines that store drivers print on their
// own to l's handler, so that a process logging JSON prints nothing else on
// stderr. Only go-redis prints by itself (connection-pool failures, through
// one logger per process); pgx and the SQLite driver log nothing unless
// given a logger. Call it once, before opening stores.
func RouteDriverLogs(l *slog.Logger) {
	routeRedisLogs(l)
}

// Redact returns rawURL with any password replaced by "xxxxx", for logs and
// error messages.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		return rawURL
	}
	return u.Redacted()
}

// Migrate applies the store's schema migrations. It returns
// [ErrNotSupported] for a store without migrations (memory, Redis).
func Migrate(ctx context.Context, s retrysafe.Store) error {
	m, ok := s.(interface{ Migrate(context.Context) error })
	if !ok {
		return ErrNotSupported
	}
	return m.Migrate(ctx)
}

// Sweep deletes expired records once and returns how many. It returns
// [ErrNotSupported] for a store without a sweeper (Redis expires records
// itself).
func Sweep(ctx context.Context, s retrysafe.Store, params *admin.SweepParams) (int, error) {
	sw, ok := retrysafe.As[admin.Sweeper](s)
	if !ok {
		return 0, ErrNotSupported
	}
	return sw.Sweep(ctx, params)
}
