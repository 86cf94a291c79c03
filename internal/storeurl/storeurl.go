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
//
// SQLite accepts the query parameters retrysafe_table (sqlite:app.db?retrysafe_table=idem)
// and synchronous (full, the default, or normal: see sqlite.Config.Synchronous).
// SQLite, PostgreSQL and MySQL stores apply their migrations when opened.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/mysql"
	"github.com/retrysafe/retrysafe/store/postgres"
	"github.com/retrysafe/retrysafe/store/redis"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// Default is the store used when none is given.
const Default = "sqlite:retrysafe.db"

// Accepted lists the accepted URL forms, for help texts and errors.
const Accepted = "memory:, sqlite:PATH, postgres://…, postgresql://…, redis://…, rediss://…, redis+cluster://HOST:PORT[,HOST:PORT…] or mysql://…"

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

// Options are settings that apply to every kind of store.
type Options struct {
	// ProcessingRetention is how long a processing record whose lease ran
	// out is kept: the memory store's janitor and the Redis store's key
	// expiry use it (SQLite and PostgreSQL take it from each sweep's
	// SweepParams). Zero means retrysafe.DefaultProcessingRetention.
	ProcessingRetention time.Duration
}

// Open opens the store rawURL names ("" means [Default]) with zero
// [Options]. The returned function closes it. The store is returned as its
// concrete type, so the optional interfaces (retrysafe.Pinger, Sweeper,
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
		path, cfg, err := sqlitePath(rest)
		if err != nil {
			return nil, nil, fmt.Errorf("store %q: %w", Redact(rawURL), err)
		}
		s, err := sqlite.Open(ctx, path, cfg)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	case "postgres", "postgresql":
		s, err := postgres.Open(ctx, rawURL, postgres.Config{})
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	case "mysql":
		s, err := mysql.Open(ctx, rawURL, mysql.Config{})
		if err != nil {
			return nil, nil, fmt.Errorf("store %q: %w", Redact(rawURL), err)
		}
		return s, s.Close, nil
	case "redis", "rediss", "redis+cluster", "rediss+cluster":
		u, cfg, err := redisURL(rawURL, opts.ProcessingRetention)
		if err != nil {
			return nil, nil, err
		}
		s, err := redis.Open(ctx, u, cfg)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	}
	return nil, nil, fmt.Errorf("store %q: unknown scheme %q; use %s", Redact(rawURL), scheme, Accepted)
}

// sqlitePath splits the part after "sqlite:" into a file path and the
// store's configuration.
func sqlitePath(rest string) (path string, cfg sqlite.Config, err error) {
	if p, q, ok := strings.Cut(rest, "?"); ok {
		rest = p
		vals, err := url.ParseQuery(q)
		if err != nil {
			return "", cfg, fmt.Errorf("query: %w", err)
		}
		for k := range vals {
			if k != ParamTable && k != ParamSynchronous {
				return "", cfg, fmt.Errorf("unknown parameter %q (only %s and %s)", k, ParamTable, ParamSynchronous)
			}
		}
		cfg.Table = vals.Get(ParamTable)
		cfg.Synchronous = vals.Get(ParamSynchronous)
	}
	if after, ok := strings.CutPrefix(rest, "//"); ok {
		rest = after // sqlite://rel.db is relative; sqlite:///abs.db is absolute
	}
	if rest == "" {
		return "", cfg, errors.New("empty path; write sqlite:retrysafe.db or sqlite:/var/lib/retrysafe.db")
	}
	return rest, cfg, nil
}

// redisURL removes the parameters of storeurl (retrysafe_prefix,
// retrysafe_wait_replicas, retrysafe_wait_timeout), which go-redis would
// reject, and returns them as the store's configuration. It works on the
// query alone, so the comma-separated hosts of a cluster URL pass through.
func redisURL(raw string, retention time.Duration) (string, redis.Config, error) {
	cfg := redis.Config{ProcessingRetention: retention}
	base, query, ok := strings.Cut(raw, "?")
	if !ok {
		return raw, cfg, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", cfg, fmt.Errorf("store %q: query: %w", Redact(raw), err)
	}
	if q.Has(ParamPrefix) {
		cfg.Prefix = q.Get(ParamPrefix)
		q.Del(ParamPrefix)
	}
	if q.Has(ParamWaitReplicas) {
		n, err := strconv.Atoi(q.Get(ParamWaitReplicas))
		if err != nil || n < 0 {
			return "", cfg, fmt.Errorf("store %q: %s must be a number of replicas, not %q", Redact(raw), ParamWaitReplicas, q.Get(ParamWaitReplicas))
		}
		cfg.WaitReplicas = n
		q.Del(ParamWaitReplicas)
	}
	if q.Has(ParamWaitTimeout) {
		d, err := time.ParseDuration(q.Get(ParamWaitTimeout))
		if err != nil || d <= 0 {
			return "", cfg, fmt.Errorf("store %q: %s must be a positive duration such as 100ms, not %q", Redact(raw), ParamWaitTimeout, q.Get(ParamWaitTimeout))
		}
		cfg.WaitTimeout = d
		q.Del(ParamWaitTimeout)
	}
	if len(q) == 0 {
		return base, cfg, nil
	}
	return base + "?" + q.Encode(), cfg, nil
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
func Sweep(ctx context.Context, s retrysafe.Store, params *retrysafe.SweepParams) (int, error) {
	sw, ok := s.(retrysafe.Sweeper)
	if !ok {
		return 0, ErrNotSupported
	}
	return sw.Sweep(ctx, params)
}
